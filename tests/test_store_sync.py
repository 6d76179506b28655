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


def test_replace_records_keeps_appending_after_the_rewrite(tmp_path) -> None:
    writer = RunWriter(tmp_path / "run", "run", "w")
    for i in range(3):
        writer.add_record(record(i))
    writer.replace_records([record(1).model_copy(update={"success": False})])
    writer.add_record(record(3))
    writer.close()
    stored = read_records(tmp_path / "run" / "requests.jsonl")
    assert [(r.request_id, r.success) for r in stored] == [("r0", True), ("r1", False), ("r2", True), ("r3", True)]
