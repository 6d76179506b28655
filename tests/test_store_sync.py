"""The records file: every record reaches the OS at once, fsync runs off the event loop."""

from __future__ import annotations

import os
import threading

import results.store as store
from results.schema import RequestRecord
from results.store import RunWriter, read_records


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
