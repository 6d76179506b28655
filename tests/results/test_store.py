"""The run store (results.store): every record of the records file reaches the OS at once, fsync runs
off the event loop; a manifest that is not a file is damage, named as such."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import results.store as store
from results.schema import RequestRecord
from results.store import ResultsError, RunWriter, load_run, read_records

from tests.helpers import CPU_ONLY, make_records, ok_entry, write_run


def record(i: int) -> RequestRecord:
    return RequestRecord(request_id=f"r{i}", engine="e", workload="w", scheduled_ns=i, send_ns=i, success=True)


def test_records_are_readable_at_once_and_fsynced_off_the_caller(tmp_path, monkeypatch) -> None:
    calls: list[str] = []
    real = os.fsync
    monkeypatch.setattr(store.os, "fsync", lambda fd: (calls.append(threading.current_thread().name), real(fd))[1])
    writer = RunWriter(tmp_path / "run", "run", "w")
    for i in range(200):
        writer.add_record(record(i))
        if i == 0:  # another reader (a later `bench results`, a killed harness's successor) sees it now
            assert [r.request_id for r in read_records(tmp_path / "run" / "requests.jsonl")] == ["r0"]
    assert "MainThread" not in calls  # the caller (the event loop) never waits for the disk
    writer.close()
    assert len(read_records(tmp_path / "run" / "requests.jsonl")) == 200
    assert calls and calls[-1] == "MainThread"  # the last fsync, at close
    assert calls.count("requests-fsync") <= 2  # at most one per second of appends, not one per record


def test_recounts_are_stored_beside_the_records_which_are_never_rewritten(tmp_path) -> None:
    from results.recounts import RECOUNTS_FILE, recount_of

    writer = RunWriter(tmp_path / "run", "run", "w")
    for i in range(3):
        writer.add_record(record(i))
    before = (tmp_path / "run" / "requests.jsonl").read_bytes()
    counted = record(1).model_copy(update={"input_tokens_retok": 7, "output_tokens_retok": 5})
    writer.add_recounts([recount_of(counted)])
    writer.add_record(record(3))
    writer.close()
    after = (tmp_path / "run" / "requests.jsonl").read_bytes()
    assert after.startswith(before)  # appended to, never rewritten
    assert (tmp_path / "run" / RECOUNTS_FILE).read_text().count("\n") == 1
    stored = read_records(tmp_path / "run" / "requests.jsonl")
    assert [(r.request_id, r.input_tokens_retok, r.output_tokens_retok) for r in stored] == [
        ("r0", None, None), ("r1", 7, 5), ("r2", None, None), ("r3", None, None)]


def test_a_damaged_recount_line_loses_no_record(tmp_path) -> None:
    from results.recounts import RECOUNTS_FILE, recount_of

    writer = RunWriter(tmp_path / "run", "run", "w")
    writer.add_record(record(0))
    writer.add_recounts([recount_of(record(0).model_copy(update={"output_tokens_retok": 3}))])
    writer.close()
    with open(tmp_path / "run" / RECOUNTS_FILE, "a") as fh:
        fh.write('{"engine": "e", "request_id": "r0", "pha')  # a kill mid-write
    stored = read_records(tmp_path / "run" / "requests.jsonl")
    assert [(r.request_id, r.output_tokens_retok) for r in stored] == [("r0", 3)]


def test_a_manifest_that_is_a_folder_is_damage_not_an_empty_manifest(tmp_path: Path) -> None:
    records = make_records("own", 4, ttft_ms=50.0, tpot_ms=10.0)
    run = write_run(tmp_path, "r", {"own": ok_entry(records, CPU_ONLY)}, records)
    (run.run_dir / "manifest.json").unlink()
    (run.run_dir / "manifest.json").mkdir()
    with pytest.raises(ResultsError, match="manifest.json is not a file; the run folder is damaged"):
        load_run(run.run_dir)


def test_a_run_not_found_names_each_place_looked_in_once(tmp_path, monkeypatch) -> None:
    """Issue 39's review: `bench results show /abs/x` said "looked for /abs/x and /abs/x" (an
    absolute reference joined to --output-dir is itself), and `-o .` "x and x"."""
    import pytest

    from results.store import ResultsError, resolve_run

    monkeypatch.chdir(tmp_path)
    nope = tmp_path / "nope"
    for ref, out, places in ((str(nope), "results", str(nope)), ("x", ".", "x"), ("./x", ".", "x"),
                             ("x", "runs", "x and runs/x")):
        with pytest.raises(ResultsError) as err:
            resolve_run(ref, out)
        assert str(err.value) == f"no run {ref!r} (looked for {places}); see `bench results list`"
