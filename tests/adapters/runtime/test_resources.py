"""Measured resource use and cost (issue 13): the process-group sampler against real processes,
its peak/mean arithmetic on scripted samples, NVML skipped cleanly (and used, through a scripted
NVML), install sizes, the cost arithmetic and the cost criterion."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from adapters.runtime.resources import (
    EXTERNAL_NOTE, Accumulator, GroupSample, Nvml, ResourceSampler, combine_repeats, folder_bytes,
    install_bytes, install_facts, read_group, venv_root, with_output_tokens,
)
from harness.app.cli.summary import resource_table
from harness.app.run.engine_turns import engine_cost
from harness.scoring import PRESETS, parse_weights, recommend
from results.hardware import (
    GiB, HardwareProfile, PROFILES, cost_per_million_tokens, named_profile, profile_from_manifest, run_price,
)
from results.schema import EngineFacts, EngineResult, EngineStatus, Interval, ResourceUse, RunSummary

from tests.helpers import CPU_ONLY, make_records, ok_entry, write_run

MiB = 1024**2

# A process group: the leader spawns a child holding 200 MiB of written (resident) memory and a
# child that sleeps, and prints "ready" once the memory is touched.
GROUP_LEADER = r"""
import subprocess, sys, time
hog = subprocess.Popen([sys.executable, "-c",
    "import sys, time\nb = b'\\x01' * (200 * 1024 * 1024)\nprint('held', flush=True)\ntime.sleep(120)"],
    stdout=subprocess.PIPE, text=True)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
assert hog.stdout.readline().strip() == "held"
print("ready", flush=True)
time.sleep(120)
"""


@pytest.fixture
def process_group():
    leader = subprocess.Popen([sys.executable, "-c", GROUP_LEADER], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        assert leader.stdout.readline().strip() == "ready"
        yield leader.pid  # start_new_session: the leader's pid is the group id
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait(timeout=10)


def test_sampler_measures_a_real_process_group(process_group: int) -> None:
    sampler = ResourceSampler(process_group, interval_s=0.05, gpu=False)
    sampler.start()
    deadline = time.monotonic() + 10
    while len(sampler._acc.samples) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    use = sampler.stop()
    assert use.samples >= 5  # the first, at least three from the thread, the last
    assert use.processes_max == 3  # leader, memory hog, sleeper
    # the 200 MiB the hog wrote are resident in the group, plus three small interpreters
    assert 200 * MiB <= use.peak_rss_bytes < 200 * MiB + 150 * MiB
    assert use.peak_pss_bytes is not None and 200 * MiB <= use.peak_pss_bytes <= use.peak_rss_bytes
    assert use.mean_rss_bytes <= use.peak_rss_bytes
    assert use.mean_cpu_percent is not None and 0 <= use.mean_cpu_percent <= 100 * use.cpu_cores + 1
    assert use.interval_s == 0.05 and use.sampler_ms_mean is not None
    assert use.gpu_note == "" and use.peak_gpu_memory_bytes is None  # NVML not asked for
    cheap = read_group(process_group, pss=False)  # RSS and CPU only: no page-table walk
    assert cheap.pss_bytes is None and not cheap.pss_read and cheap.rss_bytes >= 200 * MiB and cheap.processes == 3


def test_read_group_of_an_empty_group_reads_nothing() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait(timeout=10)
    sample = read_group(proc.pid)
    assert sample.processes == 0 and sample.rss_bytes == 0


def _sample(t: float, rss_mib: int, pss_mib: int | None, cpu: dict[int, float]) -> GroupSample:
    return GroupSample(t_s=t, rss_bytes=rss_mib * MiB, pss_bytes=None if pss_mib is None else pss_mib * MiB,
                       cpu_s=cpu, cost_s=0.002)


def test_accumulator_peak_and_mean_on_scripted_samples() -> None:
    acc = Accumulator(interval_s=0.5, cpu_cores=4)
    # pid 1 busy 0.5 s per 0.5 s (100 %), pid 2 idle, then pid 3 appears having used 0.25 s
    acc.add(_sample(10.0, 100, 80, {1: 2.0, 2: 1.0}))
    acc.add(_sample(10.5, 300, 200, {1: 2.5, 2: 1.0}))
    acc.add(_sample(11.0, 200, 150, {1: 3.0, 2: 1.0, 3: 0.25}))
    acc.add(_sample(12.0, 200, 170, {1: 3.25, 2: 1.25}))  # a 1 s gap: 0.5 s CPU over 1 s
    use = acc.result()
    assert use.samples == 4 and use.duration_s == 2.0
    assert use.peak_rss_bytes == 300 * MiB and use.mean_rss_bytes == 200 * MiB
    assert use.peak_pss_bytes == 200 * MiB and use.mean_pss_bytes == 150 * MiB
    # CPU: (0.5 + 0.75 + 0.5) s over 2.0 s = 87.5 %; the busiest interval: 0.75 s in 0.5 s = 150 %
    assert use.mean_cpu_percent == 87.5 and use.peak_cpu_percent == 150.0
    assert use.cpu_cores == 4 and use.processes_max == 3 and use.sampler_ms_mean == 2.0
    assert use.peak_gpu_memory_bytes is None and use.gpu_energy_j is None
    # a sample that skipped PSS (read every few samples) leaves the PSS figures alone
    skipped = _sample(12.5, 260, None, {1: 3.5})
    skipped.pss_read = False
    acc.add(skipped)
    assert acc.result().peak_pss_bytes == 200 * MiB and acc.result().mean_pss_bytes == 150 * MiB
    assert acc.result().peak_rss_bytes == 300 * MiB and acc.result().mean_rss_bytes == 212 * MiB
    # one process whose PSS could not be read: no PSS, RSS still known
    acc.add(_sample(13.0, 250, None, {1: 3.5}))
    assert acc.result().peak_pss_bytes is None and acc.result().peak_rss_bytes == 300 * MiB


def test_pss_is_read_every_nth_sample_and_at_both_ends() -> None:
    asked: list[bool] = []

    def reader(pgid: int, pss: bool) -> GroupSample:
        asked.append(pss)
        sample = _sample(float(len(asked)), 10, 5 if pss else None, {1: 0.0})
        sample.pss_read = pss  # as read_group marks a sample that skipped PSS
        return sample

    sampler = ResourceSampler(9, interval_s=0.001, pss_every=3, reader=reader, gpu=False)
    sampler.start()
    deadline = time.monotonic() + 10
    while len(asked) < 8 and time.monotonic() < deadline:
        time.sleep(0.005)
    use = sampler.stop()
    assert asked[:-1] == [i % 3 == 0 for i in range(len(asked) - 1)] and asked[-1] is True
    assert use.peak_pss_bytes == 5 * MiB and use.samples == len(asked)


def test_repeats_combine_as_peak_over_repeats_and_mean_of_means() -> None:
    a = ResourceUse(samples=10, peak_rss_bytes=300, mean_rss_bytes=200, mean_cpu_percent=90.0, peak_cpu_percent=120.0,
                    cpu_cores=2, gpu_energy_j=30.0)
    b = ResourceUse(samples=6, peak_rss_bytes=500, mean_rss_bytes=100, mean_cpu_percent=70.0, peak_cpu_percent=100.0,
                    cpu_cores=2, gpu_energy_j=10.0)
    both = combine_repeats([with_output_tokens(a, 300), with_output_tokens(b, 100)])
    assert both.peak_rss_bytes == 500 and both.mean_rss_bytes == 150
    assert both.mean_cpu_percent == 80.0 and both.peak_cpu_percent == 120.0 and both.samples == 16
    assert both.gpu_energy_j == 40.0 and both.energy_per_output_token_j == pytest.approx(0.1)  # (0.1 + 0.1) / 2
    assert [r.peak_rss_bytes for r in both.repeats] == [300, 500]
    assert combine_repeats([a]) is a and combine_repeats([]) is None


def test_external_endpoint_is_not_measured() -> None:
    with ResourceSampler(None) as sampler:
        pass
    assert sampler.result.note == EXTERNAL_NOTE == "not measured (external endpoint)"
    assert sampler.result.samples == 0 and sampler.result.peak_rss_bytes is None


def test_a_failing_reading_ends_sampling_with_the_reason() -> None:
    calls = []

    def reader(pgid: int, pss: bool) -> GroupSample:
        calls.append(pgid)
        if len(calls) > 1:
            raise PermissionError("denied")
        return _sample(1.0, 10, 10, {7: 0.0})

    sampler = ResourceSampler(42, interval_s=0.01, reader=reader, gpu=False)
    sampler.start()
    deadline = time.monotonic() + 10
    while len(calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    use = sampler.stop()
    assert use.samples == 1 and use.peak_rss_bytes == 10 * MiB
    assert use.note == "sampling stopped after 1 samples: PermissionError: denied"


# -- NVML ----------------------------------------------------------------------------------

def test_nvml_skipped_when_pynvml_is_missing(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml → ImportError
    session, reason = Nvml.open()
    assert session is None
    assert reason == "no NVIDIA driver / NVML: the nvidia-ml-py package (pynvml) is not installed"


class _NVMLError(Exception):
    pass


def test_nvml_skipped_when_nvml_init_fails(monkeypatch) -> None:
    fake = types.ModuleType("pynvml")

    def init() -> None:
        raise _NVMLError("NVML Shared Library Not Found")

    fake.nvmlInit = init
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert Nvml.open() == (None, "no NVIDIA driver / NVML: NVML Shared Library Not Found")
    # the sampler still measures CPU and memory, and says why GPU fields are empty
    sampler = ResourceSampler(5, reader=lambda pgid, pss: _sample(time.monotonic(), 1, 1, {5: 0.0}), interval_s=60)
    with sampler:
        pass
    assert sampler.result.samples == 2 and sampler.result.peak_gpu_memory_bytes is None
    assert sampler.result.gpu_note == "no NVIDIA driver / NVML: NVML Shared Library Not Found"


def _fake_nvml(energy_mj: list[list[float]], group_pid: int) -> types.ModuleType:
    """Two devices; the group's process runs on device 1 with 3 GiB; each energy read advances."""
    fake = types.ModuleType("pynvml")
    reads = {0: iter(energy_mj[0]), 1: iter(energy_mj[1])}
    fake.nvmlInit = lambda: None
    fake.nvmlShutdown = lambda: None
    fake.nvmlDeviceGetCount = lambda: 2
    fake.nvmlDeviceGetHandleByIndex = lambda i: i
    fake.nvmlDeviceGetTotalEnergyConsumption = lambda h: next(reads[h])
    procs = {0: [types.SimpleNamespace(pid=999, usedGpuMemory=1 * GiB)],
             1: [types.SimpleNamespace(pid=group_pid, usedGpuMemory=3 * GiB)]}
    fake.nvmlDeviceGetComputeRunningProcesses = lambda h: procs[h]
    fake.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=10 * GiB)
    fake.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=40 if h == 0 else 80)
    return fake


def test_nvml_measures_the_groups_gpu_memory_utilisation_and_energy(monkeypatch) -> None:
    # device 0 (another process) used 50 J, device 1 (the group's) 120 J between start and stop
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([[1_000.0, 51_000.0], [5_000.0, 125_000.0]], group_pid=5))
    clock = iter([0.0, 0.5])
    sampler = ResourceSampler(5, reader=lambda pgid, pss: _sample(next(clock), 1, 1, {5: 0.0}), interval_s=60)
    with sampler:
        pass
    use = with_output_tokens(sampler.result, 600)
    assert use.peak_gpu_memory_bytes == 3 * GiB and use.mean_gpu_util_percent == 80.0  # device 1 only
    assert use.gpu_energy_j == 120.0 and use.energy_per_output_token_j == pytest.approx(0.2)
    assert use.gpu_note == ""


# -- install size --------------------------------------------------------------------------

def _fake_venv(root: Path) -> Path:
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True)
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")  # 16 bytes
    (venv / "bin" / "python").symlink_to(sys.executable)  # a link: not counted
    (site / "pkg.py").write_bytes(b"x" * 1000)
    os.link(site / "pkg.py", site / "pkg_again.py")  # a hard link: counted once
    return venv


def test_install_size_walks_the_venv_once_until_it_changes(tmp_path: Path) -> None:
    venv = _fake_venv(tmp_path)
    site = venv / "lib" / "python3.11" / "site-packages"
    os.utime(site, ns=(1, 1))  # an old install: any later change of the folder moves its mtime
    cache = tmp_path / "cache" / "sizes.json"
    assert venv_root(venv / "bin" / "python") == venv and venv_root("/usr/bin/python3") is None
    assert folder_bytes(venv) == 16 + 1000
    assert install_bytes(venv, cache) == 1016
    assert json.loads(cache.read_text())[str(venv.absolute())]["bytes"] == 1016
    (site / "pkg.py").write_bytes(b"y" * 5000)  # the folder itself is unchanged: the cached size stands
    assert install_bytes(venv, cache) == 1016
    (site / "new_pkg.py").write_bytes(b"z" * 100)  # an install adds a file: walked again
    assert install_bytes(venv, cache) == 16 + 5000 + 100
    cache.write_text("{not json")  # a damaged cache costs a walk, never an error
    assert install_bytes(venv, cache) == 5116


def test_install_facts_per_kind_of_engine(tmp_path: Path) -> None:
    venv = _fake_venv(tmp_path)
    cache = tmp_path / "sizes.json"
    facts = install_facts({"argv": [str(venv / "bin" / "python"), "-m", "engine"]}, cache)
    assert facts == {"install_bytes": 1016, "install_dir": str(venv)}
    assert install_facts({"base_url": "http://remote:8000", "engine": "openai"}, cache) == {
        "install_bytes": None, "install_note": "not applicable (external endpoint)"}
    outside = install_facts({"argv": ["/usr/bin/trtllm-serve"]}, cache)
    assert outside["install_bytes"] is None and "not inside a virtual environment" in outside["install_note"]
    harness = venv_root(sys.executable)
    if harness is not None:  # the harness's own venv (the own engine runs in it)
        own = install_facts({"argv": [sys.executable, "-m", "own_engine"]}, cache)
        assert own["install_dir"] == str(harness) and own["install_bytes"] > 0
        assert own["install_note"].startswith("the harness's own virtual environment")


# -- cost ----------------------------------------------------------------------------------

def test_cost_per_million_output_tokens_is_exact() -> None:
    assert round(cost_per_million_tokens(2.0, 100.0), 2) == 5.56  # $2.00/h at 100 tok/s
    assert cost_per_million_tokens(2.0, 100.0) == pytest.approx(2.0 / 360_000 * 1e6)
    assert cost_per_million_tokens(None, 100.0) is None and cost_per_million_tokens(2.0, 0.0) is None
    cost = engine_cost((2.0, "test"), 100.0, Interval(point=100.0, low=80.0, high=125.0, n=3))
    assert cost.usd_per_1m_output_tokens == pytest.approx(5.5556, abs=1e-4)
    assert cost.low == pytest.approx(2.0 / (125 * 3600) * 1e6) and cost.high == pytest.approx(2.0 / (80 * 3600) * 1e6)
    assert engine_cost(None, 100.0, None) is None and engine_cost((2.0, "x"), None, None) is None


def test_prices_in_profiles_and_manifests() -> None:
    h100 = named_profile("H100-80GB")
    assert h100.price_per_hour == 3.99 and "lambda.ai" in h100.price_source
    assert named_profile("H100-80GB", num_devices=2).deployment_price_per_hour == pytest.approx(7.98)
    assert PROFILES["L4-24GB"].price_per_hour is None  # no price read: --price-per-hour
    cpu = named_profile("CPU")
    cores = len(os.sched_getaffinity(0))
    assert cpu.price_per_hour == pytest.approx(cores * 0.0335) and cpu.price_source.startswith("assumed")
    with pytest.raises(ValueError, match="positive number"):
        h100.with_price(0)
    stored = {**h100.with_devices(2).with_price(1.5).to_dict()}
    assert run_price(stored) == (3.0, "--price-per-hour x 2 devices")
    assert profile_from_manifest(stored).price_per_hour == 1.5
    old = {k: v for k, v in stored.items() if not k.startswith("price")}  # a run from before prices
    assert run_price(old) is None and profile_from_manifest(old).price_per_hour is None


def _cheap_and_fast_run(tmp_path: Path):
    # fast: 8x lower TTFT, 10 tokens a request; cheap: 18 tokens a request, about 1.6x the output throughput
    r_fast = make_records("fast", 12, ttft_ms=50.0, tpot_ms=5.0, out_tokens=10)
    r_cheap = make_records("cheap", 12, ttft_ms=400.0, tpot_ms=5.0, out_tokens=18)
    engines = {"fast": ok_entry(r_fast, CPU_ONLY), "cheap": ok_entry(r_cheap, CPU_ONLY)}
    return write_run(tmp_path, "r1", engines, r_fast + r_cheap)


def test_cost_criterion_ranks_the_cheaper_engine_first(tmp_path: Path) -> None:
    run = _cheap_and_fast_run(tmp_path)
    target = HardwareProfile("CPU", "cpu", 64 * GiB).with_price(2.0)
    latency_first = recommend([run], hardware=target, preset="latency")
    assert [r.engine for r in latency_first.ranking] == ["fast", "cheap"]
    assert latency_first.weights["cost"] == 0.0  # every existing preset: cost weighs 0
    assert all(preset["cost"] == 0.0 for name, preset in PRESETS.items() if name != "cost")
    only_cost = parse_weights("throughput=0,latency=0,hardware_fit=0,complexity=0,cost=1")
    rec = recommend([run], hardware=target, preset="latency", weights=only_cost)
    assert [r.engine for r in rec.ranking] == ["cheap", "fast"]
    cheap, fast = rec.ranking
    tps = cheap.metrics["output_throughput"]
    assert cheap.metrics["cost_per_1m_output_tokens"] == pytest.approx(2.0 / (tps * 3600) * 1e6)
    assert fast.components["cost"] == pytest.approx(cheap.metrics["cost_per_1m_output_tokens"]
                                                    / fast.metrics["cost_per_1m_output_tokens"], abs=1e-6)
    assert cheap.components["cost"] == 1.0
    note = next(n for n in rec.notes if n.startswith("cost per 1M output tokens"))
    assert "$2/device-hour (--price-per-hour)" in note and "cheap $" in note
    assert [r.engine for r in recommend([run], hardware=target, preset="cost").ranking] == ["cheap", "fast"]


def test_no_price_gives_no_cost_score(tmp_path: Path) -> None:
    run = _cheap_and_fast_run(tmp_path)
    unpriced = HardwareProfile("my-box", "cpu", 64 * GiB)  # a target without a price
    rec = recommend([run], hardware=unpriced, preset="cost")
    assert len(rec.ranking) == 2
    assert all(r.components["cost"] == 0.0 and "cost_per_1m_output_tokens" not in r.metrics for r in rec.ranking)
    assert ("cost not scored: no price per device-hour for my-box (pass --price-per-hour); every engine's cost "
            "score is 0") in rec.notes


def test_report_resource_cells() -> None:
    from reports.context import _resource_cells

    use = ResourceUse(samples=90, peak_rss_bytes=2322845696, peak_pss_bytes=2266452992, mean_cpu_percent=59.9,
                      peak_cpu_percent=102.67, cpu_cores=2, peak_gpu_memory_bytes=3 * GiB, mean_gpu_util_percent=80.0,
                      energy_per_output_token_j=0.2)
    entry = EngineResult(status=EngineStatus.OK, resources=use, startup_s=19.4,
                         cost=engine_cost((0.067, "assumed"), 27.6214, Interval(point=27.6, low=25.0, high=30.0, n=2)))
    cells = _resource_cells(entry, EngineFacts(install_bytes=1904274769))
    assert cells == {"rss": "2.2 GiB", "pss": "2.1 GiB", "cpu": "60% (30% of 2 cores)", "cpu_peak": "103%",
                     "gpu_mem": "3.0 GiB", "gpu_util": "80%", "j_tok": "0.2", "install": "1.8 GiB", "healthy": "19.4",
                     "usd": "$0.674 [0.620–0.744]"}
    external = EngineResult(status=EngineStatus.OK, resources=ResourceUse(note=EXTERNAL_NOTE))
    cells = _resource_cells(external, EngineFacts(install_bytes=None, install_note="not applicable (external endpoint)"))
    assert cells["rss"] == EXTERNAL_NOTE and cells["install"] == "not applicable (external endpoint)"
    assert _resource_cells(EngineResult(status=EngineStatus.OK), EngineFacts())["rss"] == "not recorded"  # an older run


def test_console_resource_table_shows_use_and_cost() -> None:
    use = ResourceUse(samples=8, peak_rss_bytes=3 * GiB // 2, peak_pss_bytes=GiB, mean_cpu_percent=96.0,
                      peak_cpu_percent=101.0, cpu_cores=2)
    cost = engine_cost((0.067, "assumed"), 12.5, None)
    summary = RunSummary(run_id="r", engines={
        "own": EngineResult(status=EngineStatus.OK, metrics={"requests_completed": 4, "output_throughput": 12.5},
                            resources=use, cost=cost, startup_s=3.2),
        "openai": EngineResult(status=EngineStatus.OK, metrics={"requests_completed": 4},
                               resources=ResourceUse(note=EXTERNAL_NOTE)),
        "trt": EngineResult(status=EngineStatus.SKIPPED, reason="needs a GPU"),
    })
    table = resource_table(summary)
    rows = [[col._cells[i] for col in table.columns] for i in range(2)]
    assert rows[0] == ["own", "1.5 GiB", "1.0 GiB", "96% (48% of 2)", "101%", "–", "3.2", "$1.49"]
    assert rows[1][:2] == ["openai", EXTERNAL_NOTE] and rows[1][-1] == "–"
    assert "$0.067/h, assumed" in str(table.title)
    assert resource_table(RunSummary(run_id="r")) is None


def test_bench_recommend_weights_cost_and_price_per_hour(tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from harness.app.cli.report import recommend_cmd

    app = typer.Typer()
    app.command("recommend")(recommend_cmd)
    app.command("other")(lambda: None)  # two commands: "recommend" stays a subcommand
    run = _cheap_and_fast_run(tmp_path)
    base = ["recommend", str(run.run_dir), "--hardware", "CPU", "--json"]
    balanced = json.loads(CliRunner().invoke(app, base).stdout)
    assert [r["engine"] for r in balanced["ranking"]] == ["fast", "cheap"]  # cost weighs 0
    res = CliRunner().invoke(app, [*base, "--weights", "cost=1", "--price-per-hour", "2"])
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)
    assert [r["engine"] for r in rec["ranking"]] == ["cheap", "fast"]  # the cheaper engine first
    assert rec["hardware"]["price_per_hour"] == 2.0 and rec["hardware"]["price_source"] == "--price-per-hour"
    cheap = rec["ranking"][0]["metrics"]
    assert cheap["cost_per_1m_output_tokens"] == pytest.approx(2.0 / (cheap["output_throughput"] * 3600) * 1e6)
    bad = CliRunner().invoke(app, [*base, "--price-per-hour", "-1"])
    assert bad.exit_code == 2
    assert "--price-per-hour is USD per device-hour, a number > 0 (e.g. 2.5), got -1" in bad.output
    assert "Traceback" not in bad.output


def test_bench_run_records_resources_install_size_and_cost(process_group: int, tmp_path: Path, monkeypatch) -> None:
    """Through ``bench run``: an engine whose endpoint names a real process group (the 200 MiB
    group) and an external endpoint, both served by the null server."""
    from contextlib import contextmanager

    from typer.testing import CliRunner

    import adapters.registry as registry
    from adapters.base import Capabilities, Endpoint, ProbeResult
    from harness.app.cli import app
    from harness.loadgen.nullserver import null_server

    class GroupEngine:
        name = "own"
        capabilities = Capabilities(hardware=("cpu",))

        def probe(self) -> ProbeResult:
            return ProbeResult(True, "fake", "0")

        @contextmanager
        def launch(self, config):
            yield Endpoint(base_url=url, model_name="null", display_name="group fake", pgid=process_group,
                           effective_config={"argv": [sys.executable, "-m", "fake_engine"]})

    real_get = registry.get_adapter
    monkeypatch.setattr(registry, "get_adapter", lambda n, hardware=None: GroupEngine() if n == "own" else real_get(n, hardware))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with null_server() as url:
        res = CliRunner().invoke(app, ["run", "--engine", "own,openai", "--base-url", url, "--workload", "random",
                                       "--num-requests", "5", "--input-len", "8", "--output-len", "3", "--warmup", "0",
                                       "--no-calibration", "--no-equivalence", "--price-per-hour", "2",
                                       "--request-rate", "inf", "-o", str(tmp_path), "--run-id", "res"])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "res" / "summary.json").read_text())
    manifest = json.loads((tmp_path / "res" / "manifest.json").read_text())
    own, external = summary["engines"]["own"], summary["engines"]["openai"]
    assert own["resources"]["samples"] >= 2 and own["resources"]["processes_max"] == 3
    assert own["resources"]["peak_rss_bytes"] >= 200 * MiB
    assert external["resources"]["note"] == EXTERNAL_NOTE and external["resources"]["samples"] == 0
    tps = own["metrics"]["output_throughput"]
    assert own["cost"]["usd_per_hour"] == 2.0 and own["cost"]["price_source"] == "--price-per-hour"
    assert own["cost"]["usd_per_1m_output_tokens"] == pytest.approx(2.0 / (tps * 3600) * 1e6)
    assert manifest["hardware"]["price_per_hour"] == 2.0
    harness_venv = venv_root(sys.executable)
    if harness_venv is not None:
        assert manifest["engines"]["own"]["install_dir"] == str(harness_venv)
        assert manifest["engines"]["own"]["install_bytes"] > 0
    assert manifest["engines"]["openai"]["install_note"] == "not applicable (external endpoint)"
    assert "Resources while measured; cost at $2/h, --price-per-hour" in res.output
    report = (tmp_path / "res" / "report.md").read_text()
    assert "## Resource use and cost" in report and "not measured (external endpoint)" in report
