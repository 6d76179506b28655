"""Fixes from a new user's walkthrough of the reliability / fair-comparison / results-as-data work."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from harness.app.cli import app
from harness.metrics import compute_metrics
from harness.metrics.failures import _percent
from results.schema import RequestRecord
from results.store import ResultsError, load_run
from workloads.errors import WorkloadError
from workloads.options import parse_options

try:
    from tests.test_scorer_helpers import CPU_ONLY, make_records, ok_entry, write_run
except ImportError:  # tests/ is not a package
    from test_scorer_helpers import CPU_ONLY, make_records, ok_entry, write_run

S = 1_000_000_000
FIX = Path(__file__).parent / "fixtures" / "imports"


def _sent(i: int, at_s: float, phase: str) -> RequestRecord:
    t = int(at_s * S)
    return RequestRecord(request_id=f"r{i}", engine="e", workload="random", phase=phase, scheduled_ns=t, send_ns=t,
                         first_token_ns=t + S // 100, last_token_ns=t + S // 50, end_ns=t + S // 50,
                         chunk_times_ns=[t + S // 100, t + S // 50], output_tokens_server=2, success=True)


def test_a_warmup_window_slice_is_judged_against_its_own_schedule() -> None:
    # the run offers 20 req/s; the slice after a 1 s warm-up window happens to be denser (24 req/s)
    # and the client sent every request exactly on schedule: it kept up
    records = [_sent(i, i * 0.05, "warmup_window") for i in range(20)]
    records += [_sent(20 + i, 1.0 + i / 24, "measured") for i in range(49)]
    m = compute_metrics(records, offered_rate=20.0)
    assert m.achieved_rate == pytest.approx(24.0) and m.offered_rate == 20.0
    assert m.rate_valid is True
    late = [r.model_copy(update={"send_ns": r.scheduled_ns + int(k * 0.01 * S)})
            for k, r in enumerate(records) if r.phase == "measured"]
    assert compute_metrics(records[:20] + late, offered_rate=20.0).rate_valid is False  # fell behind its schedule


@pytest.mark.parametrize("start,end,needle", [(1e-300, 1e300, "--ramp-up-start-rps must be >= 0.001"),
                                               (1.0, 2e6, "--ramp-up-end-rps must be <= 1,000,000")])
def test_an_extreme_ramp_is_refused_before_anything_starts(start, end, needle) -> None:
    with pytest.raises(WorkloadError, match=needle):
        parse_options(name="random", ramp_up_strategy="exponential", ramp_up_start_rps=start, ramp_up_end_rps=end)


def test_a_manifest_that_is_a_folder_is_damage_not_an_empty_manifest(tmp_path: Path) -> None:
    records = make_records("own", 4, ttft_ms=50.0, tpot_ms=10.0)
    run = write_run(tmp_path, "r", {"own": ok_entry(records, CPU_ONLY)}, records)
    (run.run_dir / "manifest.json").unlink()
    (run.run_dir / "manifest.json").mkdir()
    with pytest.raises(ResultsError, match="manifest.json is not a file; the run folder is damaged"):
        load_run(run.run_dir)


def test_summary_csv_leaves_bounds_empty_where_no_interval_was_formed(tmp_path: Path) -> None:
    from results.export import write_summary_csv

    records = make_records("own", 4, ttft_ms=50.0, tpot_ms=10.0)
    run = write_run(tmp_path, "r", {"own": ok_entry(records, CPU_ONLY)}, records)
    row = pd.read_csv(write_summary_csv(run.run_dir, run.summary)).iloc[0]
    assert row["request_throughput"] > 0  # a rate of one repeat: a value, no interval
    assert pd.isna(row["request_throughput_low"]) and pd.isna(row["request_throughput_high"])


def test_only_an_imported_run_left_is_said_so(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    res = CliRunner().invoke(app, ["import", str(FIX / "vllm_detailed.json"), "--from", "vllm", "-o", str(out),
                                   "--run-id", "imp", "--workload", "random", "--input-len", "64", "--output-len", "4"])
    assert res.exit_code == 0, res.output
    rec = CliRunner().invoke(app, ["recommend", str(out / "imp"), "--json", "--max-failure-rate", "0.3"])
    data = json.loads(rec.stdout[rec.stdout.index("{"):])
    assert data["winner"] is None
    assert data["deciding_constraint"].startswith(
        "no production engine survives the hard constraints; only vllm-bench-serve (imported: another client's "
        "measurement) does, and it is never the recommendation")


def test_a_share_just_above_its_bound_never_reads_as_equal() -> None:
    assert (_percent(0.25, 0.2499), _percent(0.2499, 0.25)) == ("25.00%", "24.99%")
    assert (_percent(0.9, 0.05), _percent(0.1, None)) == ("90%", "10%")
