"""Engine start-up (harness/app/trial/startup.py) with real child processes (the fake lifecycle
server): engines start together, each is frozen (every process of its group stopped) once
healthy, a taken engine is thawed and answers again, a failed start is raised at its turn with
the log tail, Ctrl-C during the start stops everything, nothing survives close(); one slot is
the sequential start through the same path, and a start never overlaps a turn."""

from __future__ import annotations

import _thread
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from rich.console import Console

from adapters.base import EngineError, LaunchConfig
from adapters.runtime.process import group_members
from harness.app.trial.startup import EngineStarter, StartItem, parallel_start_fits, start_slots

from tests.adapters.runtime.test_process import FakeAdapter


class Named(FakeAdapter):
    def __init__(self, name: str, *extra: str) -> None:
        super().__init__(*extra)
        self.name = name


def cfg(tmp_path: Path, timeout: float = 10.0) -> LaunchConfig:
    return LaunchConfig(model_dir=tmp_path, run_dir=tmp_path / "run", threads=1, startup_timeout_s=timeout)


def start(tmp_path: Path, engines: list[tuple[str, FakeAdapter]], slots: int | None = None,
          timeout: float = 10.0) -> EngineStarter:
    items = [StartItem(name, adapter, cfg(tmp_path, timeout)) for name, adapter in engines]
    return EngineStarter(Console(file=open("/dev/null", "w")), items, slots or len(items))


def group_of(url: str) -> list[psutil.Process]:
    port = int(url.rsplit(":", 1)[1])
    for c in psutil.net_connections(kind="tcp"):
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
            return group_members(psutil.Process(c.pid).pid) or [psutil.Process(c.pid)]
    raise AssertionError(f"nothing listens on {url}")


def statuses(starter: EngineStarter, name: str) -> set[str]:
    ep, _ = starter._ready[name]
    return {p.status() for p in group_of(ep.base_url)}


def health(url: str) -> int:
    with urllib.request.urlopen(url + "/health", timeout=2) as r:
        return r.status


def test_engines_start_together_frozen_until_taken(tmp_path):
    a, b = Named("a", "--children", "1", "--delay", "0.5"), Named("b", "--delay", "0.5")
    starter = start(tmp_path, [("a", a), ("b", b)])
    t0 = time.monotonic()
    starter.begin()
    starter.wait()
    # together: both waited their 0.5 s delay at the same time, not one after the other
    assert time.monotonic() - t0 < 0.5 + 0.5 + 3.0
    try:
        assert starter.holds("a") and starter.holds("b")
        # every process of each group (server and grandchild) is stopped: no CPU while waiting
        assert statuses(starter, "a") == {psutil.STATUS_STOPPED}
        assert statuses(starter, "b") == {psutil.STATUS_STOPPED}
        ep_b = starter._ready["b"][0]
        with starter.take("a") as (ep, startup_s):
            assert startup_s >= 0.5
            assert health(ep.base_url) == 200
            assert psutil.STATUS_STOPPED not in {p.status() for p in group_of(ep.base_url)}
            assert statuses(starter, "b") == {psutil.STATUS_STOPPED}  # b still frozen during a's turn
            url_a = ep.base_url
        assert not starter.holds("a")
        with pytest.raises(OSError):
            health(url_a)  # a was stopped at the end of its turn
    finally:
        starter.close()
    # close() stops b although it was frozen (SIGCONT before SIGTERM): nothing survives
    with pytest.raises(OSError):
        health(ep_b.base_url)


def test_failed_start_is_raised_at_its_turn_with_the_log_tail(tmp_path):
    starter = start(tmp_path, [("ok", Named("ok")), ("bad", Named("bad", "--mode", "exit_early"))])
    starter.begin()
    starter.wait()
    try:
        assert starter.holds("bad")
        with pytest.raises(EngineError, match="exited with code 3 during start-up") as ei:
            with starter.take("bad"):
                pass
        assert "could not allocate the KV cache" in ei.value.log_tail
        with starter.take("ok") as (ep, _):
            assert health(ep.base_url) == 200
    finally:
        starter.close()


def test_engine_that_died_while_frozen_fails_its_turn(tmp_path):
    starter = start(tmp_path, [("x", Named("x")), ("y", Named("y"))])
    starter.begin()
    starter.wait()
    try:
        procs = group_of(starter._ready["x"][0].base_url)
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=5)
        with pytest.raises(EngineError, match="while it waited for its turn"):
            with starter.take("x"):
                pass
    finally:
        starter.close()


def test_ctrl_c_during_parallel_start_stops_everything(tmp_path):
    quick, slow = Named("quick"), Named("slow", "--mode", "never_healthy")
    starter = start(tmp_path, [("quick", quick), ("slow", slow)], timeout=60)
    seen: list[str] = []

    def interrupt_when_quick_is_up():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not starter._ready:
            time.sleep(0.02)
        seen.extend(ep.base_url for ep, _ in starter._ready.values())
        _thread.interrupt_main()

    before = {c.pid for c in psutil.Process().children(recursive=True)}
    threading.Thread(target=interrupt_when_quick_is_up, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        starter.begin()
        starter.wait()
    assert time.monotonic() - t0 < 20  # the never-healthy start was abandoned, not waited out
    assert seen and not starter.holds("quick") and not starter.holds("slow")
    with pytest.raises(OSError):
        health(seen[0])
    # no process started by this test is left
    leftover = [c for c in psutil.Process().children(recursive=True)
                if c.pid not in before and c.status() != psutil.STATUS_ZOMBIE]
    assert leftover == []


def test_parallel_start_fits_memory_rule():
    gib = 2**30
    assert parallel_start_fits(2, available_bytes=7 * gib)  # 2 × 2 + 3 headroom
    assert not parallel_start_fits(2, available_bytes=7 * gib - 1)
    assert parallel_start_fits(7, available_bytes=17 * gib)  # all CPU engines on a 24 GiB machine
    assert not parallel_start_fits(7, available_bytes=16 * gib)


def test_bad_workload_after_the_engines_began_starting_stops_them_and_removes_the_run(tmp_path, monkeypatch):
    import adapters.registry as registry
    from harness.app.settings.run import EngineSettings, MeasureSettings, OutputSettings, RunSettings
    from harness.app.run.orchestrator import Orchestrator
    from workloads.errors import WorkloadError

    fakes = {"own": Named("own", "--delay", "0.3"), "transformers": Named("transformers", "--delay", "0.3")}
    monkeypatch.setattr(registry, "get_adapter", lambda n, hardware=None: fakes[n])
    began: list[bool] = []
    real_begin = EngineStarter.begin
    monkeypatch.setattr(EngineStarter, "begin", lambda self: (began.append(self.slots), real_begin(self))[1])

    def bad_workload(self, tokenizer):
        time.sleep(0.5)  # the engines are starting meanwhile
        raise WorkloadError("line 3: num_sessions must be >= 1")

    monkeypatch.setattr(Orchestrator, "_workload", bad_workload)
    before = {c.pid for c in psutil.Process().children(recursive=True)}
    cfg = RunSettings(engine=EngineSettings(names=["own", "transformers"]), measure=MeasureSettings(calibrate=False),
                      output=OutputSettings(output_dir=tmp_path, run_id="bad", report=False))
    with pytest.raises(WorkloadError, match="num_sessions"):
        Orchestrator(cfg, Console(file=open("/dev/null", "w"))).run()
    assert began == [2]  # both engines began starting before the workload was built
    assert not (tmp_path / "bad").exists()  # nothing measured: no half-written run folder
    leftover = [c for c in psutil.Process().children(recursive=True)
                if c.pid not in before and c.status() != psutil.STATUS_ZOMBIE]
    assert leftover == []


def test_start_slots_parallel_only_on_a_cpu_machine_when_asked_and_as_memory_allows():
    gib = 2**30
    assert start_slots(7, parallel=True, hardware_kind="cpu", available_bytes=17 * gib) == 7
    assert start_slots(7, parallel=True, hardware_kind="cpu", available_bytes=10 * gib) == 3  # 3 × 2 + 3 ≤ 10
    assert start_slots(7, parallel=True, hardware_kind="cpu", available_bytes=4 * gib) == 1
    # GPU engines each claim most of the device memory: one after another
    assert start_slots(7, parallel=True, hardware_kind="nvidia", available_bytes=100 * gib) == 1
    assert start_slots(7, parallel=False, hardware_kind="cpu", available_bytes=100 * gib) == 1
    assert start_slots(1, parallel=True, hardware_kind="cpu", available_bytes=100 * gib) == 1


def test_one_slot_is_the_sequential_start_each_engine_at_its_turn(tmp_path):
    a, b = Named("a", "--delay", "0.2"), Named("b", "--delay", "0.2")
    starter = start(tmp_path, [("a", a), ("b", b)], slots=1)
    try:
        starter.begin()
        starter.wait()
        assert starter.holds("a") and not starter.holds("b")  # only the first engine started
        with starter.take("a") as (ep_a, _):
            assert health(ep_a.base_url) == 200
            assert not starter.holds("b")  # b does not start during a's turn
        with starter.take("b") as (ep_b, startup_s):
            assert startup_s >= 0.2 and health(ep_b.base_url) == 200
        assert not starter.parallel("a") and not starter.parallel("b")
    finally:
        starter.close()


def test_with_fewer_slots_than_engines_the_next_start_finishes_before_a_turn_begins(tmp_path):
    engines = [(n, Named(n, "--delay", "0.3")) for n in ("a", "b", "c")]
    starter = start(tmp_path, engines, slots=2)
    try:
        starter.begin()
        with starter.take("a") as (ep, _):
            assert starter.holds("b") and not starter.holds("c")  # a in use + b frozen = 2 slots
            assert starter.parallel("a") and starter.parallel("b")
        with starter.take("b") as (ep_b, _):
            # c was started when b's turn came, and was ready (frozen) before b was thawed
            assert starter.holds("c") and statuses(starter, "c") == {psutil.STATUS_STOPPED}
            assert health(ep_b.base_url) == 200
        with starter.take("c") as (ep_c, _):
            assert health(ep_c.base_url) == 200
    finally:
        starter.close()


def test_a_kept_engine_is_frozen_between_turns_and_stopped_on_release(tmp_path):
    starter = start(tmp_path, [("x", Named("x")), ("y", Named("y"))])
    starter.begin()
    try:
        assert starter.fits_all
        with starter.take("x", keep=True) as (ep, _):
            assert health(ep.base_url) == 200
            pids = {p.pid for p in group_of(ep.base_url)}
        assert statuses(starter, "x") == {psutil.STATUS_STOPPED}  # frozen, held for its next turn
        with starter.take("x", keep=True) as (again, _):
            assert again.base_url == ep.base_url and {p.pid for p in group_of(again.base_url)} == pids
            assert health(again.base_url) == 200
        starter.release("x")
        assert not starter.holds("x")
        assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)
        with starter.take("y") as (other, _):  # a turn without keep stops the engine after it, as before
            assert health(other.base_url) == 200
        assert not starter.holds("y")
    finally:
        starter.close()
