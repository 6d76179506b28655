"""Lifecycle of server engines with real child processes (tests/fake_servers/lifecycle_server.py):
start → health → stop, health timeout with the log tail, exit during start-up, crash mid-run,
Ctrl-C inside the with-block and during start-up, SIGTERM ignored → SIGKILL. After each, no
process of the server's group survives and the port is free again."""

from __future__ import annotations

import _thread
import json
import os
import sys
import signal
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from adapters.base import Capabilities, EngineError, LaunchConfig, ProbeResult
from adapters.runtime.process import ServerProcess, find_free_port, group_members, port_is_free
from adapters.runtime.server import LaunchPlan, ServerAdapter, thread_env

FAKE = Path(__file__).parents[2] / "fake_servers" / "lifecycle_server.py"


def fake_cmd(port: int, *extra: str) -> list[str]:
    return [sys.executable, str(FAKE), "--port", str(port), *extra]


def make(tmp_path: Path, *extra: str, timeout: float = 10.0, grace: float = 3.0) -> ServerProcess:
    port = find_free_port()
    return ServerProcess(fake_cmd(port, *extra), log_path=tmp_path / "logs" / "fake.log", port=port,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, startup_timeout_s=timeout,
                         stop_grace_s=grace, name="fake")


def assert_gone(sp: ServerProcess, children: list[int] = ()) -> None:
    """No live process of the group, the child itself reaped, the grandchildren dead, the port free."""
    assert sp.pgid is not None
    assert group_members(sp.pgid) == []
    assert sp.proc.returncode is not None
    for pid in children:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert port_is_free(sp.port)


def grandchildren(sp: ServerProcess) -> list[int]:
    return [c.pid for c in psutil.Process(sp.pid).children(recursive=True)]


def test_find_free_port_is_bindable():
    port = find_free_port()
    assert 1024 <= port <= 65535
    assert port_is_free(port)


def test_start_health_stop_kills_the_whole_group(tmp_path):
    sp = make(tmp_path, "--children", "2")
    with sp:
        kids = grandchildren(sp)
        assert len(kids) == 2
        # the grandchildren are in the server's own process group, not ours
        assert sp.pgid == sp.pid != os.getpgid(0)
        assert {os.getpgid(k) for k in kids} == {sp.pgid}
        with urllib.request.urlopen(sp.base_url + "/v1/models") as r:
            assert json.loads(r.read())["data"][0]["id"] == "fake-model"
        assert sp.startup_s is not None and sp.startup_s >= 0
    assert_gone(sp, kids)
    log = (tmp_path / "logs" / "fake.log").read_text()
    assert log.startswith("$ ") and "mode=ok OMP_NUM_THREADS=1" in log


def test_health_timeout_raises_with_log_tail(tmp_path):
    sp = make(tmp_path, "--mode", "never_healthy", "--children", "1", timeout=1.5)
    with pytest.raises(EngineError) as ei:
        with sp:
            pytest.fail("must not become healthy")
    err = ei.value
    assert "not healthy after 2 s" in str(err) and "fake.log" in str(err)
    assert "loading weights shard" in err.log_tail
    assert len(err.log_tail.splitlines()) <= 40
    assert_gone(sp)


def test_exit_during_startup_reports_code_and_log(tmp_path):
    sp = make(tmp_path, "--mode", "exit_early")
    with pytest.raises(EngineError) as ei:
        with sp:
            pass
    assert "exited with code 3 during start-up" in str(ei.value)
    assert "could not allocate the KV cache" in ei.value.log_tail
    assert_gone(sp)


def test_crash_mid_run_raises_on_exit_and_cleans_up(tmp_path):
    sp = make(tmp_path, "--children", "1")
    with pytest.raises(EngineError) as ei:
        with sp:
            kids = grandchildren(sp)
            with pytest.raises(Exception):
                urllib.request.urlopen(sp.base_url + "/crash", timeout=5)
            sp.proc.wait(timeout=5)
            with pytest.raises(EngineError, match="exited unexpectedly with code 1"):
                sp.check_alive()
    assert "crashed mid-run" in str(ei.value)
    assert "segfault in the fake attention kernel" in ei.value.log_tail
    assert_gone(sp, kids)  # the orphaned grandchild was killed with the group


def test_keyboard_interrupt_inside_with_block(tmp_path):
    sp = make(tmp_path, "--children", "1")
    with pytest.raises(KeyboardInterrupt):
        with sp:
            kids = grandchildren(sp)
            raise KeyboardInterrupt
    assert_gone(sp, kids)


def test_keyboard_interrupt_during_startup(tmp_path):
    sp = make(tmp_path, "--mode", "never_healthy", timeout=30)
    # interrupt_main() is a no-op while SIGINT is ignored (pytest started as a background job)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.8, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            with sp:
                pass
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert_gone(sp)


def test_sigterm_ignored_is_killed_after_grace(tmp_path):
    sp = make(tmp_path, "--mode", "ignore_sigterm", grace=0.5)
    with sp:
        pass
    assert sp.proc.returncode == -9  # SIGKILL after the grace period
    assert_gone(sp)


def test_missing_executable_is_an_engine_error(tmp_path):
    sp = ServerProcess(["/nonexistent/engine-binary"], log_path=tmp_path / "x.log", port=find_free_port(), name="ghost")
    with pytest.raises(EngineError, match="ghost: could not start"):
        with sp:
            pass


class FakeAdapter(ServerAdapter):
    """A ServerAdapter over the fake server, to test the shared launch path."""

    name = "fake"
    display_name = "fake engine"
    capabilities = Capabilities(hardware=("cpu",))

    def __init__(self, *extra: str) -> None:
        self.extra = extra

    def probe(self) -> ProbeResult:
        return ProbeResult(True, "fake", version="9.9")

    def build_command(self, config: LaunchConfig, port: int) -> LaunchPlan:
        env = {**thread_env(config.threads), "FAKE_API_KEY": "s3cr3t"}
        return LaunchPlan(cmd=fake_cmd(port, *self.extra), env=env, model_name="fake-model", display_name=self.display_name,
                          metrics_path="/metrics")


def test_adapter_launch_yields_endpoint_and_records_config(tmp_path):
    cfg = LaunchConfig(model_dir=tmp_path, run_dir=tmp_path / "run", threads=1, startup_timeout_s=10)
    with FakeAdapter().launch(cfg) as ep:
        port = ep.effective_config["port"]
        assert ep.base_url == f"http://127.0.0.1:{port}"
        assert ep.log_path == tmp_path / "run" / "logs" / "fake.log"
        assert ep.metrics_url == ep.base_url + "/metrics"
        eff = ep.effective_config
        assert eff["threads"] == 1 and eff["env"]["OMP_NUM_THREADS"] == "1"
        assert eff["env"]["FAKE_API_KEY"] == "<redacted>"
        assert "s3cr3t" not in json.dumps(eff)
        assert eff["command"].endswith(f"--port {port}") and eff["version"] == "9.9"
    assert port_is_free(port)


def test_adapter_launch_startup_failure_is_engine_error(tmp_path):
    cfg = LaunchConfig(model_dir=tmp_path, run_dir=tmp_path / "run", threads=1, startup_timeout_s=10)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(EngineError, match="exited with code 3"):
        with FakeAdapter("--mode", "exit_early").launch(cfg):
            pass
    after = {p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}
    assert after <= before


def test_wait_healthy_uses_injected_clock(tmp_path):
    """Timeout logic with a controlled clock: no wall-clock threshold."""
    sp = make(tmp_path, "--mode", "never_healthy", timeout=100.0)
    sp.start()
    try:
        now = [0.0]
        sleeps: list[float] = []

        def fake_sleep(s: float) -> None:
            sleeps.append(s)
            now[0] += 30.0

        with pytest.raises(EngineError, match="not healthy after 100 s"):
            sp.wait_healthy(clock=lambda: now[0], sleep=fake_sleep)
        assert len(sleeps) == 4  # 0, 30, 60, 90 checked; 120 > 100 raises
        assert sleeps[0] == 0.05 and sleeps[1] == pytest.approx(0.075)
    finally:
        sp.stop()
    assert_gone(sp)
