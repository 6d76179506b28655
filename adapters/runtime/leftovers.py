"""A registry of live engine process groups, so a later ``bench`` can remove a dead run's leftovers.

:meth:`adapters.runtime.process.ServerProcess.start` writes one small JSON record per engine group
(:class:`GroupRecord`) into :func:`state_dir` and :meth:`~adapters.runtime.process.ServerProcess.stop`
removes it. The engine's watchdog (:mod:`adapters.runtime.watchdog`) stops the group when the harness
dies; the registry is the second line of defence, for when the watchdog died too (one
``kill -9`` of the whole session, the OOM killer picking both).

:func:`find_leftovers` returns the groups whose harness is dead (its pid is gone, or now belongs
to a process that started at another time) and that still have live members;
:func:`clean_leftovers` thaws, terminates and kills them and removes their records (and drops
records of groups with no live member). A record of a live harness is never touched.

Process identity uses the start time in clock ticks since boot (``/proc/<pid>/stat`` field 22,
exact) together with the boot id (``/proc/sys/kernel/random/boot_id``); psutil's
``create_time`` (Unix seconds, derived from a boot time that can move by a second) is recorded
for people reading the file. A reused group id is never signalled: when the recorded leader pid
lives with another start time, the group is not ours; otherwise only members started at or
after the recorded leader count.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import psutil
from pydantic import BaseModel, ValidationError

from adapters.runtime.watchdog import proc_stat, scan_group, terminate_group

STATE_ENV = "BENCH_STATE_DIR"
RECORD_VERSION = 1


def state_dir() -> Path:
    """Where live-group records go: ``$BENCH_STATE_DIR``, else ``$XDG_STATE_HOME/llm-serve-bench/live``,
    else ``~/.local/state/llm-serve-bench/live`` (the XDG Base Directory default for state)."""
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "llm-serve-bench" / "live"


def boot_id() -> str:
    """This boot's id (``/proc/sys/kernel/random/boot_id``; "" where there is none)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, or None when it is gone."""
    st = proc_stat(pid)
    return st[2] if st is not None else None


class GroupRecord(BaseModel):
    """One live engine group. Times: ``*_create_time`` and ``started_at`` in Unix seconds,
    ``*_start_ticks`` in clock ticks since boot ``boot_id``."""

    version: int = RECORD_VERSION
    engine: str
    harness_pid: int
    harness_create_time: float
    harness_start_ticks: int
    boot_id: str
    pgid: int
    leader_pid: int
    leader_create_time: float
    leader_start_ticks: int
    watchdog_pid: int | None = None
    cmd: list[str]
    log_path: str
    started_at: float


def new_record(engine: str, leader_pid: int, cmd: list[str], log_path: Path, watchdog_pid: int | None = None) -> GroupRecord:
    """The record of a group just started by this process (the harness); the leader leads it."""
    me = os.getpid()
    try:
        leader_ct = psutil.Process(leader_pid).create_time()
    except psutil.Error:
        leader_ct = time.time()
    return GroupRecord(engine=engine, harness_pid=me, harness_create_time=psutil.Process(me).create_time(),
                       harness_start_ticks=start_ticks(me) or 0, boot_id=boot_id(), pgid=leader_pid,
                       leader_pid=leader_pid, leader_create_time=leader_ct,
                       leader_start_ticks=start_ticks(leader_pid) or 0, watchdog_pid=watchdog_pid, cmd=list(cmd),
                       log_path=str(log_path), started_at=time.time())


def record_path(harness_pid: int, pgid: int, directory: Path | None = None) -> Path:
    """``<state dir>/<harness pid>-<pgid>.json``."""
    return (directory or state_dir()) / f"{harness_pid}-{pgid}.json"


def write_record(rec: GroupRecord, directory: Path | None = None) -> Path:
    """Write ``rec`` atomically (a temporary file, then rename); return its path.

    Raises OSError when the state directory cannot be created or written.
    """
    path = record_path(rec.harness_pid, rec.pgid, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(rec.model_dump_json())
    os.replace(tmp, path)
    return path


def remove_record(path: Path | None) -> None:
    """Delete a record file (already gone is fine)."""
    if path is not None:
        try:
            Path(path).unlink()
        except OSError:
            pass


def read_records(directory: Path | None = None) -> tuple[list[tuple[Path, GroupRecord]], list[Path]]:
    """``([(path, record)], [unreadable paths])`` of every ``*.json`` record in the state dir."""
    d = directory or state_dir()
    good: list[tuple[Path, GroupRecord]] = []
    bad: list[Path] = []
    try:
        paths = sorted(d.glob("*.json"))
    except OSError:
        return [], []
    for path in paths:
        try:
            good.append((path, GroupRecord.model_validate_json(path.read_bytes())))
        except (OSError, ValueError, ValidationError):
            bad.append(path)
    return good, bad


def harness_alive(rec: GroupRecord) -> bool:
    """True when the record's harness still runs: same boot, its pid alive with the same start."""
    if rec.boot_id != boot_id():
        return False
    return start_ticks(rec.harness_pid) == rec.harness_start_ticks


def live_members(rec: GroupRecord) -> list[int]:
    """Pids of the record's group still alive (not zombies), [] when the group id is not ours."""
    if rec.boot_id != boot_id():
        return []  # a reboot ended every process of that record
    leader = start_ticks(rec.leader_pid)
    if leader is not None and leader != rec.leader_start_ticks:
        return []  # the leader's pid (= the group id) belongs to another process now
    return scan_group(rec.pgid, rec.leader_start_ticks)


@dataclass(frozen=True)
class Leftover:
    """A group of a dead bench run. ``rss_bytes``: resident memory of its members (bytes);
    ``removed``: True once :func:`clean_leftovers` ended it."""

    engine: str
    pgid: int
    pids: tuple[int, ...]
    rss_bytes: int
    log_path: str
    harness_pid: int
    record: Path
    min_start: int  # the recorded leader's start (ticks since boot): members started earlier are not ours
    removed: bool = False

    def describe(self) -> str:
        """One line for the console, e.g. ``removed a leftover vllm server of a dead bench run
        (pid 123 and 2 more, group 123, 2.1 GB): log /run/logs/vllm.log`` (``found`` before removal)."""
        verb = "removed" if self.removed else "found"
        main = self.pgid if self.pgid in self.pids else self.pids[0]
        more = f" and {len(self.pids) - 1} more" if len(self.pids) > 1 else ""
        return (f"{verb} a leftover {self.engine} server of a dead bench run (pid {main}{more}, group {self.pgid}, "
                f"{format_bytes(self.rss_bytes)}): log {self.log_path}")


def format_bytes(n: int) -> str:
    """Decimal units as ``ps``/``top`` users read them: ``2.1 GB`` (10^9 bytes), ``45 MB`` (10^6)."""
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _rss(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            continue
    return total


def find_leftovers(directory: Path | None = None) -> list[Leftover]:
    """Groups recorded in the state dir whose harness is dead and that still have live members."""
    out = []
    for path, rec in read_records(directory)[0]:
        if harness_alive(rec):
            continue
        pids = live_members(rec)
        if pids:
            out.append(Leftover(rec.engine, rec.pgid, tuple(sorted(pids)), _rss(pids), rec.log_path, rec.harness_pid,
                                path, rec.leader_start_ticks))
    return out


def clean_leftovers(directory: Path | None = None, *, dry_run: bool = False, grace_s: float = 5.0) -> list[Leftover]:
    """End every leftover group (SIGCONT, SIGTERM, ``grace_s`` seconds, SIGKILL) and remove its
    record; drop the records of dead harnesses whose group has no live member and unreadable
    records. Returns the leftovers found (``removed`` True unless ``dry_run``, which changes
    nothing). Records of live harnesses are never touched."""
    d = directory or state_dir()
    found = find_leftovers(d)
    if dry_run:
        return found
    done = []
    for lo in found:
        terminate_group(lo.pgid, lo.min_start, grace_s)
        remove_record(lo.record)
        done.append(replace(lo, removed=True))
    records, bad = read_records(d)
    for path, rec in records:
        if not harness_alive(rec) and not live_members(rec):
            remove_record(path)
    for path in bad:
        remove_record(path)
    return done


__all__ = ["GroupRecord", "Leftover", "STATE_ENV", "clean_leftovers", "find_leftovers", "new_record",
           "read_records", "remove_record", "state_dir", "write_record"]
