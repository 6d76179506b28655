"""Nothing outlives the harness (issue 16), with real child processes.

A stand-in harness (tests/fake_servers/orphan_harness.py) starts fake engine servers through
ServerProcess and is SIGKILLed during start-up, with engines frozen, and while serving: each
group's watchdog (adapters/runtime/watchdog.py) must stop every process of it (grandchildren and a
SIGTERM-ignoring server included). With the watchdog killed too, the registry
(adapters/runtime/leftovers.py) lets a later bench find and remove the group (the library,
``bench engines cleanup`` and the launch path); a live harness's group is never touched.
Every wait is a deadline poll; BENCH_STATE_DIR is a per-test folder (tests/conftest.py).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from rich.console import Console
from typer.testing import CliRunner

from adapters.runtime import leftovers
from adapters.runtime.process import group_members
from adapters.runtime.watchdog import proc_stat, scan_group
from harness.app.cli import app
from harness.app.trial.startup import EngineStarter, StartItem

from tests.adapters.runtime.test_process import FakeAdapter, assert_gone, make

HARNESS = Path(__file__).parents[2] / "fake_servers" / "orphan_harness.py"
DEADLINE_S = 10.0


def alive(pid: int) -> bool:
    """True while ``pid`` is a live (non-zombie) process."""
    st = proc_stat(pid)
    return st is not None and st[0] != "Z"


def wait_until(cond, timeout: float = DEADLINE_S, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout:.0f} s")
        time.sleep(0.05)


_started_groups: list[int] = []


@pytest.fixture(autouse=True)
def _no_survivors():
    """Safety net for a failing test on a shared machine: SIGKILL what its groups left behind."""
    yield
    while _started_groups:
        pgid = _started_groups.pop()
        if scan_group(pgid):
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.killpg(pgid, sig)
                except ProcessLookupError:
                    pass


def launch_harness(tmp_path: Path, scenario: str) -> tuple[subprocess.Popen, dict]:
    """Start the stand-in harness and wait for its INFO file (the scenario's state reached)."""
    info = tmp_path / "info.json"
    proc = subprocess.Popen([sys.executable, str(HARNESS), str(info), scenario], stdin=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        wait_until(lambda: info.exists() or proc.poll() is not None, timeout=30, what="the harness's ready file")
    except AssertionError:
        proc.kill()
        raise
    if not info.exists():
        raise AssertionError(f"the stand-in harness exited {proc.returncode}: {proc.stderr.read().decode()}")
    data = json.loads(info.read_text())
    _started_groups.extend(data["pgids"])
    return proc, data


def sigkill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stderr.close()


def group_statuses(pgid: int) -> set[str]:
    return {p.status() for p in group_members(pgid)}


def assert_all_gone(info: dict) -> None:
    """Within the deadline: no member of any group alive, every watchdog exited, every record removed."""
    wait_until(lambda: not any(alive(p) for p in info["pids"] + info["watchdogs"])
               and not any(group_members(g) for g in info["pgids"]),
               what="no live process of the engine groups")
    wait_until(lambda: not any(Path(r).exists() for r in info["records"]), what="the records removed")


def test_killed_during_startup_takes_the_starting_engine_with_it(tmp_path):
    proc, info = launch_harness(tmp_path, "startup")
    assert len(info["pids"]) == 3  # the server and its 2 grandchildren, not healthy yet
    sigkill(proc)
    assert_all_gone(info)
    assert "bench (pid" in (tmp_path / "logs" / "starting.log").read_text()  # the watchdog said what it did


def test_killed_with_engines_frozen_thaws_and_stops_them(tmp_path):
    proc, info = launch_harness(tmp_path, "frozen")
    assert len(info["pids"]) == 5
    assert {s for g in info["pgids"] for s in group_statuses(g)} == {psutil.STATUS_STOPPED}
    sigkill(proc)
    assert_all_gone(info)  # the SIGTERM-ignoring one was SIGKILLed after its 1 s grace
    assert "SIGKILLed 1 process(es)" in (tmp_path / "logs" / "stubborn.log").read_text()


def test_killed_mid_measurement_stops_the_serving_engine(tmp_path):
    proc, info = launch_harness(tmp_path, "serving")
    # it served after the thread that started it had exited: a thread's exit kills nothing
    assert all(alive(p) for p in info["pids"]) and len(info["pids"]) == 2
    sigkill(proc)
    assert_all_gone(info)


def orphaned_group(tmp_path: Path) -> dict:
    """A dead harness whose watchdog died too: the group lives on, recorded in the registry."""
    proc, info = launch_harness(tmp_path, "idle")
    os.kill(info["watchdogs"][0], signal.SIGKILL)
    wait_until(lambda: not alive(info["watchdogs"][0]), what="the watchdog killed")
    sigkill(proc)
    assert all(alive(p) for p in info["pids"])
    return info


def test_harness_and_watchdog_killed_leftover_found_and_removed(tmp_path):
    info = orphaned_group(tmp_path)
    found = leftovers.find_leftovers()
    assert [(lo.engine, lo.pgid, set(lo.pids)) for lo in found] == [("idle", info["pgids"][0], set(info["pids"]))]
    lo = found[0]
    assert lo.rss_bytes > 1_000_000 and lo.log_path == str(tmp_path / "logs" / "idle.log") and not lo.removed
    assert lo.describe().startswith(f"found a leftover idle server of a dead bench run (pid {lo.pgid} and 1 more, "
                                    f"group {lo.pgid}, ")
    done = leftovers.clean_leftovers(grace_s=2.0)
    assert [(d.pgid, d.removed) for d in done] == [(lo.pgid, True)]
    assert not any(alive(p) for p in info["pids"]) and group_members(lo.pgid) == []
    assert list(leftovers.state_dir().iterdir()) == []
    assert leftovers.find_leftovers() == [] and leftovers.clean_leftovers() == []


def test_bench_engines_cleanup_lists_then_removes(tmp_path):
    info = orphaned_group(tmp_path)
    pgid = info["pgids"][0]
    res = CliRunner().invoke(app, ["engines", "cleanup", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert f"found a leftover idle server of a dead bench run (pid {pgid} and 1 more, group {pgid}," in res.output
    assert "1 leftover engine server(s) of dead bench runs" in res.output and "without --dry-run" in res.output
    assert all(alive(p) for p in info["pids"])  # a dry run stops nothing
    res = CliRunner().invoke(app, ["engines", "cleanup"])
    assert res.exit_code == 0, res.output
    assert f"removed a leftover idle server of a dead bench run (pid {pgid} and 1 more" in res.output
    assert f"log {tmp_path / 'logs' / 'idle.log'}" in res.output.replace("\n", "")
    assert "1 leftover engine server(s) of dead bench runs removed" in res.output
    assert not any(alive(p) for p in info["pids"])
    res = CliRunner().invoke(app, ["engines", "cleanup"])
    assert res.exit_code == 0 and "0 leftover engine server(s)" in res.output


def test_a_run_removes_leftovers_before_it_starts_engines(tmp_path):
    info = orphaned_group(tmp_path)
    out = io.StringIO()
    cfg_run = leftovers.state_dir()  # the launch path reads the same registry
    starter = EngineStarter(Console(file=out, width=300), [StartItem("fake", FakeAdapter(), _cfg(tmp_path))], 1)
    try:
        starter.begin()
        starter.wait()
    finally:
        starter.close()
    assert f"removed a leftover idle server of a dead bench run (pid {info['pgids'][0]} and 1 more" in out.getvalue()
    assert not any(alive(p) for p in info["pids"])
    assert list(cfg_run.iterdir()) == []  # the new engine's record is gone with it


def test_bench_engines_check_removes_leftovers_first(tmp_path, monkeypatch):
    info = orphaned_group(tmp_path)
    import harness.app.core.model as model
    import harness.app.trial.equivalence_check as equivalence

    monkeypatch.setattr(model, "resolve_model", lambda m: tmp_path)
    monkeypatch.setattr(equivalence, "check_equivalence", lambda *a, **k: {"reference": "own", "prompts": [],
                                                                           "engines": {}})
    res = CliRunner().invoke(app, ["engines", "check", "--engines", "own", "--run-dir", str(tmp_path / "check")])
    assert res.exit_code == 0, res.output
    assert f"removed a leftover idle server of a dead bench run (pid {info['pgids'][0]}" in res.output
    assert not any(alive(p) for p in info["pids"])


def _cfg(tmp_path: Path):
    from adapters.base import LaunchConfig

    return LaunchConfig(model_dir=tmp_path, run_dir=tmp_path / "run", threads=1, startup_timeout_s=10)


def test_a_live_harness_group_is_never_touched(tmp_path):
    sp = make(tmp_path, "--children", "1")
    with sp:  # the harness is this test process, alive
        rec = sp.record_path
        assert rec is not None and rec.exists()
        data = json.loads(rec.read_text())
        assert data["harness_pid"] == os.getpid() and data["pgid"] == sp.pgid and data["engine"] == "fake"
        assert data["watchdog_pid"] == sp.watchdog.pid and data["log_path"] == str(sp.log_path)
        assert leftovers.find_leftovers() == []
        assert leftovers.clean_leftovers() == []
        assert rec.exists() and len(group_members(sp.pgid)) == 2
        assert group_statuses(sp.pgid) != {psutil.STATUS_STOPPED}
    assert not rec.exists()
    assert_gone(sp)


def test_watchdog_is_the_harness_child_in_a_session_of_its_own_and_ends_with_stop(tmp_path):
    sp = make(tmp_path)
    with sp:
        wd = sp.watchdog.pid
        assert psutil.Process(wd).ppid() == os.getpid()
        assert os.getsid(wd) == wd and os.getpgid(wd) not in (sp.pgid, os.getpgid(0))
        sp.pause()  # freezing the engine's group leaves its watchdog running
        assert psutil.Process(wd).status() != psutil.STATUS_STOPPED
        sp.resume()
        watchdog = sp.watchdog
    assert sp.watchdog is None and watchdog.returncode is not None  # ended and reaped by stop()
    assert_gone(sp)


def test_watchdog_exits_by_itself_when_its_group_is_gone(tmp_path):
    sp = make(tmp_path)
    sp.start()
    try:
        wd = sp.watchdog
        os.killpg(sp.pgid, signal.SIGKILL)
        sp.proc.wait(timeout=10)
        wait_until(lambda: wd.poll() is not None, what="the watchdog's exit")
        assert wd.returncode == 0
    finally:
        sp.stop()


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)


def _record(pgid: int, *, leader_start: int, harness_start: int | None = None) -> leftovers.GroupRecord:
    """A record of this process's making, edited to describe another harness/group."""
    rec = leftovers.new_record("ghost", pgid, ["ghost"], Path("/nowhere/ghost.log"))
    return rec.model_copy(update={"leader_start_ticks": leader_start,
                                  "harness_start_ticks": rec.harness_start_ticks - 1 if harness_start is None
                                  else harness_start})


def test_a_reused_group_id_is_never_signalled(tmp_path):
    """The recorded leader pid now belongs to a process started at another time: not ours."""
    other = _sleeper()
    try:
        ticks = leftovers.start_ticks(other.pid)
        path = leftovers.write_record(_record(other.pid, leader_start=ticks - 100))  # dead harness (pid reused)
        assert leftovers.find_leftovers() == []
        assert leftovers.clean_leftovers(grace_s=0.5) == []
        assert other.poll() is None and alive(other.pid)
        assert not path.exists()  # a stale record is dropped
    finally:
        other.kill()
        other.wait()


def test_a_dead_harness_record_of_a_live_pid_started_at_another_time_is_dead(tmp_path):
    """harness_alive compares start times, not only pids: a reused harness pid does not protect."""
    rec = leftovers.new_record("ghost", 1, ["ghost"], Path("/x.log"))
    assert leftovers.harness_alive(rec)
    assert not leftovers.harness_alive(rec.model_copy(update={"harness_start_ticks": rec.harness_start_ticks + 1}))
    assert not leftovers.harness_alive(rec.model_copy(update={"boot_id": "another-boot"}))


def test_stale_and_unreadable_records_are_dropped(tmp_path):
    gone = _sleeper()
    gone.kill()
    gone.wait()
    ticks = leftovers.start_ticks(os.getpid())
    stale = leftovers.write_record(_record(gone.pid, leader_start=ticks))
    bad = leftovers.state_dir() / "999-999.json"
    bad.write_bytes(b"\xff not json")
    assert leftovers.read_records()[1] == [bad]
    assert leftovers.find_leftovers() == []
    assert leftovers.clean_leftovers() == []
    assert not stale.exists() and not bad.exists()


def test_state_dir_convention(monkeypatch, tmp_path):
    monkeypatch.setenv("BENCH_STATE_DIR", str(tmp_path / "s"))
    assert leftovers.state_dir() == tmp_path / "s"
    monkeypatch.delenv("BENCH_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert leftovers.state_dir() == tmp_path / "xdg" / "llm-serve-bench" / "live"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert leftovers.state_dir() == tmp_path / "home" / ".local" / "state" / "llm-serve-bench" / "live"


def test_unwritable_state_dir_warns_once_and_the_engine_still_starts(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("BENCH_STATE_DIR", str(blocker / "live"))  # under a file: cannot be created
    sp = make(tmp_path)
    with sp:
        assert sp.record_path is None and sp.watchdog is not None
    err = capsys.readouterr().err
    assert err.count("warning: cannot record engine groups in") == 1 and "set BENCH_STATE_DIR" in err
    assert_gone(sp)


def test_format_bytes():
    assert leftovers.format_bytes(2_149_000_000) == "2.1 GB"
    assert leftovers.format_bytes(45_200_000) == "45 MB"


@pytest.mark.parametrize("argv", [[], ["1", "2", "3"], ["x", "2", "3", "1.0"]])
def test_watchdog_rejects_bad_arguments_with_one_line(argv):
    res = subprocess.run([sys.executable, "-m", "adapters.runtime.watchdog", *argv], capture_output=True, text=True,
                         timeout=30, cwd=Path(__file__).resolve().parents[3])
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "usage: python -m adapters.runtime.watchdog" in res.stderr
