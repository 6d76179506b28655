"""End to end, as a user meets it: `bench run --engine all --workload agentic`, scaled down.

Runs every engine available on a fresh clone (the own engine and the transformers baseline at
least; heavy engines have no environment here and must be listed as skipped with a reason),
then checks the run folder: summary, manifest, records, report files, and the recommendation.
"""

from __future__ import annotations

import json

import psutil
import pytest
from typer.testing import CliRunner

from harness.app.cli import app

pytestmark = pytest.mark.slow


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_run_all_agentic_end_to_end(tmp_path, monkeypatch):
    # no engine environments: heavy engines must be skipped with their reason, not measured
    monkeypatch.setenv("BENCH_ENGINES_DIR", str(tmp_path / "engines"))
    before = _children()
    res = CliRunner().invoke(app, [
        "run", "--engine", "all", "--workload", "agentic", "--num-requests", "6", "--warmup", "1",
        "--slo", "ttft_p99=60000", "-o", str(tmp_path), "--run-id", "e2e", "--threads", "1",
        "--request-rate", "0.5",  # the agentic workload's own rate: one load point (the ladder: test_e2e_ladder)
        # the feature probes took 66 of this test's 110 s and nothing here reads them: bench run's probes are
        # tested in tests/harness/loadgen/test_features.py
        "--no-feature-probes",
    ])
    assert res.exit_code == 0, res.output
    run = tmp_path / "e2e"
    summary = json.loads((run / "summary.json").read_text())
    engines = summary["engines"]
    for name in ("own", "transformers"):
        assert engines[name]["status"] == "ok", engines[name]
        m = engines[name]["metrics"]
        assert m["requests_completed"] == 6 and m["requests_failed"] == 0
        assert m["ttft_ms"]["p50"] > 0 and m["output_throughput"] > 0
    for name in ("vllm", "sglang", "tensorrt_llm", "deepspeed"):
        assert engines[name]["status"] == "skipped" and engines[name]["reason"], engines[name]
        assert engines[name]["metrics"] == {}
    # on a CPU, DeepSpeed is not part of the default install, and the reason says why
    assert "generate underneath" in engines["deepspeed"]["reason"]
    # greedy equivalence across engines is reported (not fatal)
    eq = summary["equivalence"]
    assert eq["reference"] == "transformers" and "own" in eq["engines"]
    assert 0.0 <= eq["engines"]["own"]["token_agreement"] <= 1.0

    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["workload"]["kind"] == "agentic" and manifest["workload"]["seed"] == 0
    assert "scale" in manifest["workload"] and manifest["client_calibration"]["max_rate_rps"] > 0
    assert set(manifest["engines"]) >= {"own", "transformers"}
    # both started at once, frozen until their turn (harness/startup.py)
    assert "Starting 2 engines in parallel" in res.output
    assert all(manifest["engines"][n]["startup_parallel"] for n in ("own", "transformers"))

    records = [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines()]
    measured = [r for r in records if r["phase"] == "measured"]
    assert len(measured) == 12
    # agentic turns of one session arrive in order and later turns see longer prompts
    own = sorted((r for r in measured if r["engine"] == "own"), key=lambda r: (r["session_id"], r["turn_id"]))
    by_session: dict[str, list[dict]] = {}
    for r in own:
        by_session.setdefault(r["session_id"], []).append(r)
    multi = [turns for turns in by_session.values() if len(turns) > 1]
    assert multi, "the scaled-down agentic run should still contain a multi-turn session"
    for turns in multi:
        assert turns[1]["input_tokens_server"] > turns[0]["input_tokens_server"]
        assert turns[1]["send_ns"] >= turns[0]["end_ns"]

    md = (run / "report.md").read_text()
    html = (run / "report.html").read_text()
    assert "own" in md and "transformers" in md and "<html" in html.lower()
    assert "Recommendation" in res.output and "Deciding constraint:" in res.output
    assert "report.html" in res.output
    # no server process survives the run
    leftover = {p for p in _children() - before if psutil.pid_exists(p)}
    assert not leftover, f"processes left behind: {leftover}"
