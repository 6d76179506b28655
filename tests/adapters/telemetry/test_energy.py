"""adapters/telemetry/energy.py: the source chosen per device kind, RAPL's wrap-around, NVML's counter and
power beside it, the idle draw; every figure against a scripted counter."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from adapters.telemetry.energy import (RAPL_ROOT_ENV, RaplZone, choose_source, measure_idle, open_meter, rapl_zones,
                             wrapped_delta)
from adapters.runtime.resources import ResourceSampler, GroupSample, with_output_tokens
from results.schema import EnergySource

MAX_RANGE = 262_143_328_850  # µJ: a real package's max_energy_range_uj


def rapl_tree(root: Path, package_uj: int = 1_000_000, dram_uj: int = 500_000) -> Path:
    """A powercap tree: intel-rapl:0 (package-0) with its dram and core subzones, an mmio twin
    and the control-type folder (neither counted)."""
    def zone(name: str, label: str, uj: int) -> None:
        d = root / name
        d.mkdir(parents=True)
        (d / "name").write_text(label + "\n")
        (d / "energy_uj").write_text(f"{uj}\n")
        (d / "max_energy_range_uj").write_text(f"{MAX_RANGE}\n")

    zone("intel-rapl:0", "package-0", package_uj)
    zone("intel-rapl:0:0", "dram", dram_uj)
    zone("intel-rapl:0:1", "core", 7)  # inside the package's figure: never added to it
    zone("intel-rapl-mmio:0", "package-0", 9)  # a second view of the same package
    (root / "intel-rapl").mkdir()
    return root


def write(root: Path, zone: str, uj: int) -> None:
    (root / zone / "energy_uj").write_text(f"{uj}\n")


class Clock:
    """perf_counter_ns stand-in: each call returns the next of ``times_s`` (in ns)."""

    def __init__(self, *times_s: float) -> None:
        self.times = iter(times_s)

    def __call__(self) -> int:
        return int(next(self.times) * 1e9)


def test_wrap_around_of_the_counter() -> None:
    assert wrapped_delta(100, 350, MAX_RANGE) == 250
    assert wrapped_delta(MAX_RANGE - 1_000, 4_000, MAX_RANGE) == 5_000  # wrapped once between readings


def test_rapl_zones_are_package_and_dram_only(tmp_path: Path) -> None:
    zones, reason = rapl_zones(rapl_tree(tmp_path))
    assert reason == "" and [z.describe() for z in zones] == ["intel-rapl:0 (package-0)", "intel-rapl:0:0 (dram)"]
    assert zones[0].max_range_uj == MAX_RANGE


def test_no_rapl_tree_gives_the_reason_and_no_source(tmp_path: Path) -> None:
    source = choose_source(root=tmp_path / "missing", gpu=False)
    assert source.kind == "none" and not source.measured
    assert source.reason == f"no RAPL: no intel-rapl package zone under {tmp_path / 'missing'}"
    assert source.line() == (f"energy: not readable on this machine (no RAPL: no intel-rapl package zone under "
                             f"{tmp_path / 'missing'}): stored as null")


def test_unreadable_counter_says_permission_denied(tmp_path: Path, monkeypatch) -> None:
    rapl_tree(tmp_path)

    def denied(self: RaplZone) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(RaplZone, "read_uj", denied)
    source = choose_source(root=tmp_path, gpu=False)
    assert source.kind == "none"
    assert source.reason.startswith(f"RAPL present but {tmp_path / 'intel-rapl:0' / 'energy_uj'} is not readable: "
                                    "permission denied (root only since CVE-2020-8694")


def test_rapl_root_from_the_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(RAPL_ROOT_ENV, str(rapl_tree(tmp_path)))
    source = choose_source(gpu=False)
    assert source.kind == "rapl" and source.root == str(tmp_path)
    assert source.zones == ["intel-rapl:0 (package-0)", "intel-rapl:0:0 (dram)"]


def test_rapl_meter_sums_package_and_dram_across_a_wrap(tmp_path: Path) -> None:
    root = rapl_tree(tmp_path, package_uj=MAX_RANGE - 2_000_000, dram_uj=10_000_000)
    source = EnergySource(kind="rapl", root=str(root), idle_watts=2.0)
    meter = open_meter(source, clock=Clock(0.0, 1.0, 2.0))
    meter.sample()  # t = 0
    write(root, "intel-rapl:0", MAX_RANGE - 1_000_000)  # +1 J
    write(root, "intel-rapl:0:0", 10_500_000)  # +0.5 J
    meter.sample()  # t = 1
    write(root, "intel-rapl:0", 3_000_000)  # wrapped: +1 J to the top, +3 J past it
    write(root, "intel-rapl:0:0", 11_000_000)  # +0.5 J
    meter.sample()  # t = 2
    got = meter.result()
    assert got.source == "rapl" and got.energy_j == pytest.approx(6.0) and got.duration_s == pytest.approx(2.0)
    assert got.series == [(0, 0.0), (1_000_000_000, 1.5), (2_000_000_000, 6.0)]
    assert got.above_idle_j == pytest.approx(6.0 - 2.0 * 2.0)


def _nvml(energy_mj: list[float], power_mw: float = 250_000.0) -> tuple[types.SimpleNamespace, list[int], str]:
    reads = iter(energy_mj)
    stub = types.SimpleNamespace(nvmlDeviceGetTotalEnergyConsumption=lambda h: next(reads),
                                 nvmlDeviceGetPowerUsage=lambda h: power_mw)
    return stub, [0], ""  # type: ignore[return-value]


def test_nvml_is_chosen_over_rapl_on_a_gpu(tmp_path: Path) -> None:
    source = choose_source(root=rapl_tree(tmp_path), nvml=lambda: _nvml([0.0]))
    assert source.kind == "nvml" and source.zones == ["GPU 0"]


def test_no_gpu_and_no_rapl_name_both_reasons(tmp_path: Path) -> None:
    source = choose_source(root=tmp_path, nvml=lambda: (None, [], "no NVIDIA driver / NVML: not installed"))
    assert source.reason == f"no RAPL: no intel-rapl package zone under {tmp_path}; no NVIDIA driver / NVML: not installed"


def test_nvml_meter_counter_with_sampled_power_beside_it() -> None:
    # 1_000 J -> 1_250 J over 1 s, reading 250 W of power at each sample: the two agree
    session = _nvml([1_000_000.0, 1_000_000.0, 1_125_000.0, 1_250_000.0])
    meter = open_meter(EnergySource(kind="nvml", zones=["GPU 0"]), nvml=lambda: session, clock=Clock(0.0, 0.5, 1.0))
    for _ in range(3):
        meter.sample()
    got = meter.result()
    assert got.energy_j == pytest.approx(250.0) and got.sampled_watts == pytest.approx(250.0)
    assert got.sampled_watts * got.duration_s == pytest.approx(got.energy_j)


def test_idle_draw_measured_before_the_run(tmp_path: Path) -> None:
    root = rapl_tree(tmp_path, package_uj=0, dram_uj=0)
    values = iter(range(1, 100))

    def sleep(s: float) -> None:  # 0.5 s of 12 W in the package: 6 J per step
        step = next(values)
        write(root, "intel-rapl:0", 6_000_000 * step)

    clock = Clock(*[0.5 * i for i in range(7)])
    source = measure_idle(EnergySource(kind="rapl", root=str(root)), 3.0, sleep=sleep, clock=clock)
    assert source.idle_watts == pytest.approx(12.0) and source.idle_s == pytest.approx(3.0)
    assert "idle 12.0 W over 3 s" in source.line()


def test_idle_of_no_source_is_none() -> None:
    none = EnergySource(kind="none", reason="no RAPL")
    assert measure_idle(none, sleep=lambda s: None) == none


def test_sampler_stores_the_phase_energy_and_joules_per_token(tmp_path: Path) -> None:
    root = rapl_tree(tmp_path, package_uj=0, dram_uj=0)
    source = EnergySource(kind="rapl", root=str(root), idle_watts=1.0)
    meter = open_meter(source, clock=Clock(0.0, 4.0))
    times = iter([0.0, 4.0])

    def reader(pgid: int, pss: bool) -> GroupSample:
        t = next(times)
        if t:  # 40 J in the package, 4 J in DRAM over the phase
            write(root, "intel-rapl:0", 40_000_000)
            write(root, "intel-rapl:0:0", 4_000_000)
        return GroupSample(t, 1, 1, {5: 0.0})

    sampler = ResourceSampler(5, reader=reader, interval_s=60, gpu=False, energy=source, meter=meter)
    with sampler:
        pass
    use = with_output_tokens(sampler.result, 88)
    assert use.energy.energy_j == pytest.approx(44.0) and use.energy.above_idle_j == pytest.approx(40.0)
    assert use.energy_per_output_token_j == pytest.approx(0.5)


def test_sampler_without_a_source_stores_null_with_the_reason() -> None:
    source = EnergySource(kind="none", reason="no RAPL: no intel-rapl package zone under /sys/class/powercap")
    sampler = ResourceSampler(5, reader=lambda pgid, pss: GroupSample(0.0, 1, 1, {5: 0.0}), interval_s=60, gpu=False,
                              energy=source)
    with sampler:
        pass
    use = with_output_tokens(sampler.result, 100)
    assert use.energy.energy_j is None and use.energy.reason == source.reason
    assert use.energy_per_output_token_j is None and use.gpu_energy_j is None
    dumped = use.model_dump(mode="json")
    assert dumped["energy"]["energy_j"] is None and dumped["energy_per_output_token_j"] is None
