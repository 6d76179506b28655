"""Parallel start-up (harness/startup.py) with real child processes (the fake lifecycle server):
engines start together, each is frozen (every process of its group stopped) once healthy, a
taken engine is thawed and answers again, a failed start is raised at its turn with the log
tail, Ctrl-C during the start stops everything, and nothing survives close()."""

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
from adapters.process import group_members
from harness.app.startup import ParallelStarter, parallel_start_fits

from test_adapter_process import FakeAdapter


class Named(FakeAdapter):
    def __init__(self, name: str, *extra: str) -> None:
        super().__init__(*extra)
        self.name = name


def cfg(tmp_path: Path, timeout: float = 10.0) -> LaunchConfig:
    return LaunchConfig(model_dir=tmp_path, run_dir=tmp_path / "run", threads=1, startup_timeout_s=timeout)


def group_of(url: str) -> list[psutil.Process]:
    port = int(url.rsplit(":", 1)[1])
    for c in psutil.net_connections(kind="tcp"):
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
            return group_members(psutil.Process(c.pid).pid) or [psutil.Process(c.pid)]
    raise AssertionError(f"nothing listens on {url}")


def statuses(starter: ParallelStarter, name: str) -> set[str]:
    ep, _ = starter._ready[name]
    return {p.status() for p in group_of(ep.base_url)}


def health(url: str) -> int:
    with urllib.request.urlopen(url + "/health", timeout=2) as r:
        return r.status


def test_engines_start_together_frozen_until_taken(tmp_path):
    starter = ParallelStarter(Console(file=open("/dev/null", "w")))
    a, b = Named("a", "--children", "1", "--delay", "0.5"), Named("b", "--delay", "0.5")
    t0 = time.monotonic()
    starter.start([("a", a, cfg(tmp_path)), ("b", b, cfg(tmp_path))])
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
    starter = ParallelStarter(Console(file=open("/dev/null", "w")))
    starter.start([("ok", Named("ok"), cfg(tmp_path)), ("bad", Named("bad", "--mode", "exit_early"), cfg(tmp_path))])
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
    starter = ParallelStarter(Console(file=open("/dev/null", "w")))
    starter.start([("x", Named("x"), cfg(tmp_path)), ("y", Named("y"), cfg(tmp_path))])
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
    starter = ParallelStarter(Console(file=open("/dev/null", "w")))
    quick, slow = Named("quick"), Named("slow", "--mode", "never_healthy")
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
        starter.start([("quick", quick, cfg(tmp_path, timeout=60)), ("slow", slow, cfg(tmp_path, timeout=60))])
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
    from harness.app.orchestrator import Orchestrator, RunConfig
    from workloads.errors import WorkloadError

    fakes = {"own": Named("own", "--delay", "0.3"), "transformers": Named("transformers", "--delay", "0.3")}
    monkeypatch.setattr(registry, "get_adapter", lambda n: fakes[n])
    began: list[bool] = []
    real_begin = ParallelStarter.begin
    monkeypatch.setattr(ParallelStarter, "begin", lambda self, items: (began.append(True), real_begin(self, items))[1])

    def bad_workload(self, tokenizer):
        time.sleep(0.5)  # the engines are starting meanwhile
        raise WorkloadError("line 3: num_sessions must be >= 1")

    monkeypatch.setattr(Orchestrator, "_workload", bad_workload)
    before = {c.pid for c in psutil.Process().children(recursive=True)}
    cfg = RunConfig(engines=["own", "transformers"], output_dir=tmp_path, run_id="bad", calibrate=False, report=False)
    with pytest.raises(WorkloadError, match="num_sessions"):
        Orchestrator(cfg, Console(file=open("/dev/null", "w"))).run()
    assert began == [True]
    assert not (tmp_path / "bad").exists()  # nothing measured: no half-written run folder
    leftover = [c for c in psutil.Process().children(recursive=True)
                if c.pid not in before and c.status() != psutil.STATUS_ZOMBIE]
    assert leftover == []


def test_parallel_start_only_on_a_cpu_machine_and_only_when_asked(tmp_path, monkeypatch):
    from harness.app.orchestrator import Orchestrator, RunConfig

    runnable = [(Named("a"), {}, None), (Named("b"), {}, None)]
    launches = {"a": cfg(tmp_path), "b": cfg(tmp_path)}
    quiet = Console(file=open("/dev/null", "w"))
    monkeypatch.setenv("BENCH_HARDWARE", "nvidia")  # GPU engines each claim most of the device memory
    assert Orchestrator(RunConfig(engines=["all"]), quiet)._parallel_start(runnable, launches) is None
    monkeypatch.setenv("BENCH_HARDWARE", "cpu")
    assert Orchestrator(RunConfig(engines=["all"], parallel_start=False), quiet)._parallel_start(runnable, launches) is None
    assert Orchestrator(RunConfig(engines=["all"]), quiet)._parallel_start(runnable[:1], launches) is None  # one engine
    starter = Orchestrator(RunConfig(engines=["all"]), quiet)._parallel_start(runnable, launches)
    try:
        starter.wait()
        assert starter.holds("a") and starter.holds("b")
    finally:
        starter.close()
