"""Killed runs stay usable and damaged run folders give one line, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.app.cli import app
from harness.app.run.rebuild import rebuild
from results.store import RUNNING_FILE, ResultsError, UnsummarisedRun, list_runs, load_run, run_state

from tests.helpers import CPU_ONLY, make_records, ok_entry, write_run

ROOT = Path(__file__).resolve().parents[2]

KILLED_WRITER = """
import os, signal, sys
sys.path.insert(0, {root!r})
from results.store import RunWriter
from tests.helpers import make_records
writer = RunWriter({run_dir!r}, "killed", "chat")
for record in make_records("own", 6, ttft_ms=40.0, tpot_ms=10.0, fail=1):
    writer.add_record(record)
os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does: no summary, no clean-up
"""


def killed_run(tmp_path: Path) -> Path:
    """A run folder whose writer was SIGKILLed after 6 measured records (a real process)."""
    run_dir = tmp_path / "killed"
    code = KILLED_WRITER.format(root=str(ROOT), run_dir=str(run_dir))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()
    return run_dir


def test_a_killed_run_is_listed_summarised_and_never_ranked(tmp_path: Path) -> None:
    run_dir = killed_run(tmp_path)
    assert not (run_dir / "summary.json").exists() and (run_dir / RUNNING_FILE).is_file()
    assert run_state(run_dir) == "killed"
    assert list_runs(tmp_path) == [run_dir]
    with pytest.raises(UnsummarisedRun, match="bench results rebuild"):
        load_run(run_dir)

    res = CliRunner().invoke(app, ["results", "show", "killed", "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "the run was killed before it summarised own" in res.output
    entry = json.loads((run_dir / "summary.json").read_text())["engines"]["own"]
    assert entry["status"] == "failed"
    assert entry["reason"].startswith("the run was killed while this engine was measured")
    assert "from its 6 stored measured requests" in entry["reason"]
    assert (entry["metrics"]["requests_completed"], entry["metrics"]["requests_failed"]) == (5, 1)
    assert entry["metrics"]["ttft_ms"]["p50"] == pytest.approx(40.0)

    again = CliRunner().invoke(app, ["results", "rebuild", str(run_dir)])
    assert again.exit_code == 0 and "nothing to do" in again.output
    rec = CliRunner().invoke(app, ["recommend", str(run_dir)])
    assert rec.exit_code == 1 and "Traceback" not in rec.output  # no engine to rank: a failed one never is


def test_rebuild_adds_only_the_engine_in_progress(tmp_path: Path) -> None:
    done = make_records("sglang", 8, ttft_ms=50.0, tpot_ms=10.0)
    partial = make_records("vllm", 3, ttft_ms=70.0, tpot_ms=12.0)
    run = write_run(tmp_path, "mid", {"sglang": ok_entry(done, CPU_ONLY)}, done + partial)
    before = json.loads((run.run_dir / "summary.json").read_text())["engines"]["sglang"]
    summary, names = rebuild(run.run_dir)
    assert names == ["vllm"]
    kept = summary.engines["sglang"].model_dump(mode="json")
    assert {k: kept[k] for k in before} == before
    assert summary.engines["vllm"].metrics.requests_completed == 3
    assert rebuild(run.run_dir)[1] == []


def test_a_run_still_being_written_is_not_rebuilt(tmp_path: Path) -> None:
    run_dir = killed_run(tmp_path)
    import psutil

    me = {"pid": os.getpid(), "started": psutil.Process().create_time()}
    (run_dir / RUNNING_FILE).write_text(json.dumps(me))
    assert run_state(run_dir) == "running"
    with pytest.raises(ResultsError, match="still being written"):
        rebuild(run_dir)
    (run_dir / RUNNING_FILE).write_text(json.dumps({**me, "started": me["started"] - 1000}))  # a reused pid
    assert run_state(run_dir) == "killed"


def _damage(d: Path, how: str) -> None:
    summary, requests = d / "summary.json", d / "requests.jsonl"
    if how == "summary not UTF-8":
        summary.write_bytes(b"\xff\xfe{}")
    elif how == "requests not UTF-8":
        requests.write_bytes(b"\xff\n" + requests.read_bytes())
    elif how == "engines as a list":
        summary.write_text(json.dumps({**json.loads(summary.read_text()), "engines": [1, 2]}))
    elif how == "metrics as a string":
        summary.write_text(json.dumps({**json.loads(summary.read_text()),
                                       "engines": {"own": {"status": "ok", "metrics": "fast"}}}))
    elif how == "requests as a folder":
        requests.unlink()
        requests.mkdir()
    elif how == "summary as a folder":
        summary.unlink()
        summary.mkdir()
    elif how == "manifest as a list":
        (d / "manifest.json").write_text("[1]")


DAMAGE = {
    "summary not UTF-8": "summary.json: not UTF-8 text",
    "requests not UTF-8": "requests.jsonl: not UTF-8 text",
    "engines as a list": "summary.json: field engines: Input should be a valid dictionary",
    "metrics as a string": "summary.json: field engines.own.metrics",
    "requests as a folder": "requests.jsonl: cannot be read (Is a directory)",
    "summary as a folder": "summary.json is not a file",
    "manifest as a list": "is not a JSON object",
}


@pytest.mark.parametrize("how", list(DAMAGE))
def test_a_damaged_run_folder_gives_one_line_naming_the_file(tmp_path: Path, how: str) -> None:
    records = make_records("own", 4, ttft_ms=50.0, tpot_ms=10.0)
    good = write_run(tmp_path, "good", {"own": ok_entry(records, CPU_ONLY)}, records)
    bad = tmp_path / "bad"
    shutil.copytree(good.run_dir, bad)
    _damage(bad, how)
    for args in (["results", "show", str(bad)], ["recommend", str(bad)], ["report", str(bad)]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert "Traceback" not in res.output and DAMAGE[how] in res.output, (args, res.output)
    listed = CliRunner().invoke(app, ["results", "list", "-o", str(tmp_path)])
    assert listed.exit_code == 0, listed.output
    assert "own (ok)" in listed.output  # one damaged folder does not hide the others
    assert "│ bad " in listed.output and "unreadable" in listed.output  # the damaged one is listed as such
