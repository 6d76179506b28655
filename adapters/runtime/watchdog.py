"""A watchdog per engine process group: the engine dies with the harness, whatever kills it.

``python -m adapters.runtime.watchdog HARNESS_PID PGID LEADER_START GRACE_S [RECORD]`` (or the file by
path) is started by :meth:`adapters.runtime.process.ServerProcess.start` right after the engine's
``Popen``, as a child of the harness in a session of its own (so neither the engine's SIGSTOP
nor a signal to the harness's group or terminal reaches it). Every :data:`POLL_S` it checks:

- ``os.getppid() != HARNESS_PID``: the harness is gone (SIGKILL, the OOM killer, a crash:
  whatever killed it, its children were re-parented). A re-parented watchdog can never see its
  old parent's pid again, so there is no pid-reuse race. It thaws the group (SIGCONT: a frozen
  engine only acts on SIGTERM once continued), SIGTERMs it, waits ``GRACE_S`` seconds, SIGKILLs
  what is left, removes the registry ``RECORD`` (:mod:`adapters.runtime.leftovers`) and exits 0;
- the group has no live member (the harness stopped it, or it crashed): exits 0.

Why not only ``prctl(PR_SET_PDEATHSIG)`` in the engine: it fires when the *thread* that forked
the child exits, and engines are started from short-lived worker threads
(``harness/app/trial/startup.py``); a parent's pid seen by a separate process does not have that flaw.

Group members are read from ``/proc/<pid>/stat`` (field 5: process group; field 22: start time
in clock ticks since boot, ``proc(5)``). Only members started at or after ``LEADER_START`` (the
engine leader's start, in the same ticks) count, so a reused group id is never signalled. The
imports are kept to os, signal, sys and time: it starts in tens of milliseconds and stays small.
Linux only (``/proc``).
"""

import os
import signal
import sys
import time

POLL_S = 0.2
USAGE = "usage: python -m adapters.runtime.watchdog HARNESS_PID PGID LEADER_START GRACE_S [RECORD]"


def proc_stat(pid):
    """``(state, pgrp, start_ticks)`` of ``pid`` from ``/proc/<pid>/stat``, or None when it is gone.

    ``state`` is the one-letter state (``Z`` = zombie, ``T`` = stopped); ``start_ticks`` is the
    start time in clock ticks since boot (``proc(5)``, field 22).
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    rest = data[data.rfind(b")") + 2:].split()  # the command name may hold spaces and ')'
    try:
        return rest[0].decode(), int(rest[2]), int(rest[19])
    except (IndexError, ValueError):
        return None


def group_pids(pgid, min_start=0):
    """Pids of the live (non-zombie) processes in group ``pgid`` started at/after ``min_start`` ticks.

    The leader (pid == pgid) is checked first: while it lives, the answer is ``[pgid]`` without a
    scan. Otherwise ``killpg(pgid, 0)`` failing means the group is empty, and only then is /proc
    scanned (the leader died but workers or grandchildren may be left).
    """
    st = proc_stat(pgid)
    if st is not None and st[0] != "Z" and st[1] == pgid and st[2] >= min_start:
        return [pgid]
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass  # someone else's group of that id: the scan below filters by start time
    return scan_group(pgid, min_start)


def scan_group(pgid, min_start=0):
    """Every live (non-zombie) pid in group ``pgid`` started at/after ``min_start`` ticks (full /proc scan)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = proc_stat(int(name))
        if st is not None and st[1] == pgid and st[0] != "Z" and st[2] >= min_start:
            out.append(int(name))
    return out


def signal_group(pgid, pids, sig):
    """Send ``sig`` to the whole group when its members are ours (``pids`` non-empty)."""
    if not pids:
        return
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def terminate_group(pgid, min_start, grace_s, poll_s=0.05):
    """Thaw (SIGCONT), SIGTERM, wait up to ``grace_s`` seconds, SIGKILL, then wait (5 s at most)
    until the group has no live member. Returns the pids that had to be SIGKILLed."""
    pids = scan_group(pgid, min_start)
    signal_group(pgid, pids, signal.SIGCONT)
    signal_group(pgid, pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        time.sleep(poll_s)
        pids = scan_group(pgid, min_start)
    killed = list(pids)
    deadline = time.monotonic() + 5.0
    while pids and time.monotonic() < deadline:
        signal_group(pgid, pids, signal.SIGKILL)
        time.sleep(poll_s)
        pids = scan_group(pgid, min_start)
    return killed


def _say(message):
    print(f"[bench watchdog {time.strftime('%H:%M:%S')}] {message}", flush=True)


def watch(harness_pid, pgid, leader_start, grace_s, record=None, poll_s=POLL_S):
    """The watchdog loop (see the module docstring). Returns when the group is gone."""
    while True:
        if os.getppid() != harness_pid:
            _say(f"bench (pid {harness_pid}) is gone: stopping engine group {pgid} "
                 f"(SIGCONT, SIGTERM, SIGKILL after {grace_s:g} s)")
            killed = terminate_group(pgid, leader_start, grace_s)
            if killed:
                _say(f"SIGKILLed {len(killed)} process(es) that outlived the {grace_s:g} s grace: {killed}")
            if record:
                try:
                    os.unlink(record)
                except OSError:
                    pass
            return
        if not group_pids(pgid, leader_start):
            return
        time.sleep(poll_s)


def main(argv):
    if len(argv) not in (4, 5):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        harness_pid, pgid, leader_start = int(argv[0]), int(argv[1]), int(argv[2])
        grace_s = float(argv[3])
    except ValueError:
        print(f"bad argument in {argv!r}: {USAGE}", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)  # only the harness's death or the group's end stop it
    watch(harness_pid, pgid, leader_start, grace_s, argv[4] if len(argv) == 5 else None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
