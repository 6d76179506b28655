"""The run-folder builders of tests/helpers.py give exactly the numbers they are asked for."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import OWN_CAPS, make_records, ok_entry, write_run


def test_builder_gives_exact_percentiles(tmp_path: Path) -> None:
    recs = make_records("own", 8, ttft_ms=100.0, tpot_ms=20.0, out_tokens=5)
    run = write_run(tmp_path, "r1", {"own": ok_entry(recs, OWN_CAPS)}, recs)
    m = run.summary["engines"]["own"]["metrics"]
    assert m["ttft_ms"]["p99"] == 100.0
    assert m["tpot_ms"]["p99"] == 20.0
    assert len(run.records_for("own")) == 8
