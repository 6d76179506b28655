"""``bench results show latest`` / ``results list``: newest by the run's creation time, not its name."""

from __future__ import annotations

import json
import os
from pathlib import Path

from typer.testing import CliRunner

from harness.app.cli import app
from results.store import created_at, list_runs

from tests.helpers import CPU_ONLY, make_records, ok_entry, write_run


def _run(root: Path, run_id: str, created: str | None) -> Path:
    recs = make_records("own", 2, ttft_ms=10.0, tpot_ms=2.0)
    run = write_run(root, run_id, {"own": ok_entry(recs, CPU_ONLY)}, recs)
    if created is not None:
        manifest = json.loads((run.run_dir / "manifest.json").read_text())
        manifest["created_at"] = created
        (run.run_dir / "manifest.json").write_text(json.dumps(manifest))
    return run.run_dir


def test_latest_is_the_newest_run_whatever_its_name(tmp_path: Path) -> None:
    _run(tmp_path, "zz-before", "2026-11-01T10:00:00+0000")  # sorts first by name, but is older
    _run(tmp_path, "aa-after", "2026-12-01T09:00:00+0000")
    assert [p.name for p in list_runs(tmp_path)] == ["aa-after", "zz-before"]
    res = CliRunner().invoke(app, ["results", "show", "latest", "-o", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["run_id"] == "aa-after"


def test_without_a_recorded_time_the_files_modification_time_decides(tmp_path: Path) -> None:
    old = _run(tmp_path, "zz-old", None)
    new = _run(tmp_path, "aa-new", "not a time")  # damaged: falls back too
    for run, stamp in ((old, 1_700_000_000), (new, 1_800_000_000)):
        for f in run.iterdir():
            os.utime(f, (stamp, stamp))
    (old / "manifest.json").unlink()
    assert created_at(old) == 1_700_000_000 and created_at(new) == 1_800_000_000
    assert [p.name for p in list_runs(tmp_path)] == ["aa-new", "zz-old"]
