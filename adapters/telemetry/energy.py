"""Energy counters: one source per device kind, chosen once per run, read around every measured phase.

:func:`choose_source` picks, before any engine starts:

- **NVML** on NVIDIA GPUs: ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded,
  Volta and newer; the counter :class:`adapters.runtime.resources.Nvml` already reads), summed over the
  devices, with ``nvmlDeviceGetPowerUsage`` (mW) sampled beside it as a cross-check;
- **RAPL** on CPUs (Linux powercap, ``<root>/intel-rapl:N/energy_uj`` in µJ): every package
  zone (``name`` ``package-N``) and its ``dram`` subzone, where ``energy_uj`` is readable (root
  only since CVE-2020-8694). The counter wraps at ``max_energy_range_uj``; each reading's
  increase is taken as ``now − before``, or ``max_energy_range_uj − before + now`` after a wrap
  (the convention of Kepler, Scaphandre and powerstat), so it is read at every sample (0.5 s):
  a package at 200 W wraps its 262 kJ range in about 20 minutes. The root is
  ``/sys/class/powercap``, or ``$BENCH_RAPL_ROOT`` (tests point it at a fake tree);
- **none** otherwise, with the reason ("no RAPL: no intel-rapl zone under /sys/class/powercap",
  "permission denied …"): the figures are then None, never 0 and never a TDP guess (CodeCarbon
  falls back to a constant, codecarbon#239).

:func:`measure_idle` reads the chosen counter for a few seconds while nothing runs: the idle
draw (W) each point's above-idle figure subtracts. :func:`open_meter` opens one phase's
:class:`Meter`; :class:`adapters.runtime.resources.ResourceSampler` calls :meth:`Meter.sample` at each of
its samples and :meth:`Meter.result` at the end.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from results.schema.energy import EnergySource, PhaseEnergy

RAPL_ROOT_ENV = "BENCH_RAPL_ROOT"
DEFAULT_RAPL_ROOT = "/sys/class/powercap"
IDLE_S = 3.0  # seconds of idle draw measured before the run
_ZONE = re.compile(r"^intel-rapl:\d+(:\d+)?$")  # not intel-rapl-mmio (a second view of the same package)


def rapl_root() -> Path:
    """``$BENCH_RAPL_ROOT``, else ``/sys/class/powercap``."""
    return Path(os.environ.get(RAPL_ROOT_ENV) or DEFAULT_RAPL_ROOT)


def wrapped_delta(before: int, now: int, max_range: int) -> int:
    """µJ between two readings of a counter that wraps to 0 past ``max_range`` (µJ): ``now −
    before``, or ``max_range − before + now`` when it wrapped (at most once between readings)."""
    return now - before if now >= before else max_range - before + now


@dataclass(frozen=True)
class RaplZone:
    """One powercap zone: its folder, ``name`` (``package-0``, ``dram``) and counter range (µJ)."""

    path: Path
    name: str
    max_range_uj: int

    def read_uj(self) -> int:
        """``energy_uj`` (µJ); raises OSError (PermissionError when root-only)."""
        return int((self.path / "energy_uj").read_text().strip())

    def describe(self) -> str:
        return f"{self.path.name} ({self.name})"


def rapl_zones(root: Path | None = None) -> tuple[list[RaplZone], str]:
    """The package and DRAM zones under ``root`` (default :func:`rapl_root`) whose counter reads,
    or ``([], reason)``."""
    root = root or rapl_root()
    try:
        entries = sorted(p for p in root.iterdir() if _ZONE.match(p.name))
    except OSError:
        entries = []
    zones = []
    for path in entries:
        try:
            name = (path / "name").read_text().strip()
            if name.startswith("package") or name == "dram":
                zones.append(RaplZone(path, name, int((path / "max_energy_range_uj").read_text().strip())))
        except (OSError, ValueError):
            continue
    if not zones:
        return [], f"no RAPL: no intel-rapl package zone under {root}"
    for zone in zones:
        try:
            zone.read_uj()
        except PermissionError:
            return [], (f"RAPL present but {zone.path / 'energy_uj'} is not readable: permission denied (root only "
                        "since CVE-2020-8694; sudo chmod o+r it to allow)")
        except (OSError, ValueError) as exc:
            return [], f"RAPL present but {zone.path / 'energy_uj'} cannot be read: {exc}"
    return zones, ""


class Meter(Protocol):
    """One phase's energy reading: ``sample()`` at each of the sampler's samples, ``result()`` once."""

    def sample(self) -> None: ...

    def result(self) -> PhaseEnergy: ...


@dataclass
class _Counter:
    """What every meter shares: the series of (perf_counter_ns, J since start), the idle draw and
    why reading stopped. ``read`` returns J since the last call (wrap-corrected)."""

    source: str
    read: Callable[[], float]
    idle_watts: float | None
    clock: Callable[[], int] = time.perf_counter_ns
    power: Callable[[], float | None] | None = None
    series: list[tuple[int, float]] = field(default_factory=list)
    watts: list[float] = field(default_factory=list)
    total_j: float = 0.0
    error: str = ""

    def sample(self) -> None:
        if self.error:
            return
        try:
            self.total_j += self.read()
            if self.power is not None and (w := self.power()) is not None:
                self.watts.append(w)
        except Exception as exc:  # a failed reading ends this phase's energy, never the run
            self.error = f"energy reading failed: {type(exc).__name__}: {exc}"
            return
        self.series.append((self.clock(), self.total_j))

    def result(self) -> PhaseEnergy:
        if self.error or len(self.series) < 2:
            return PhaseEnergy(source=self.source, reason=self.error or "fewer than 2 readings")  # type: ignore[arg-type]
        duration = (self.series[-1][0] - self.series[0][0]) / 1e9
        first = self.series[0][1]
        return PhaseEnergy(source=self.source, energy_j=round(self.total_j - first, 6), duration_s=round(duration, 6),  # type: ignore[arg-type]
                           idle_watts=self.idle_watts,
                           sampled_watts=round(sum(self.watts) / len(self.watts), 3) if self.watts else None,
                           series=[(t, round(j - first, 6)) for t, j in self.series])


class RaplReader:
    """J since the previous call, summed over ``zones`` (each delta wrap-corrected)."""

    def __init__(self, zones: list[RaplZone]) -> None:
        self.zones = zones
        self.last = [z.read_uj() for z in zones]

    def __call__(self) -> float:
        now = [z.read_uj() for z in self.zones]
        uj = sum(wrapped_delta(b, n, z.max_range_uj) for z, b, n in zip(self.zones, self.last, now))
        self.last = now
        return uj / 1e6


class NvmlReader:
    """J since the previous call over NVML ``handles`` (``nvmlDeviceGetTotalEnergyConsumption``,
    mJ); :meth:`power_w` sums ``nvmlDeviceGetPowerUsage`` (mW) into W. ``nvml``: the ``pynvml``
    module, or a stub with those two functions."""

    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        self.nvml, self.handles = nvml, handles
        self.last = self._mj()

    def _mj(self) -> list[float]:
        return [float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self.handles]

    def __call__(self) -> float:
        now = self._mj()
        mj = sum(n - b for b, n in zip(self.last, now))
        self.last = now
        return mj / 1000.0

    def power_w(self) -> float | None:
        try:
            return sum(float(self.nvml.nvmlDeviceGetPowerUsage(h)) for h in self.handles) / 1000.0
        except Exception:  # power readings unsupported: the counter still stands
            return None


def _nvml_session() -> tuple[Any, list[Any], str]:
    """(pynvml, handles, "") with every device's energy counter readable, or (None, [], reason)."""
    from adapters.runtime.resources import Nvml

    session, reason = Nvml.open()
    if session is None:
        return None, [], reason
    if None in session.energy_start_mj:
        session.close()
        return None, [], "NVML reads no total-energy counter on this GPU (older than Volta?)"
    return session.nvml, session.handles, ""


def choose_source(*, root: Path | None = None, nvml: Callable[[], tuple[Any, list[Any], str]] | None = None,
                  gpu: bool = True) -> EnergySource:
    """The run's :class:`EnergySource`: NVML when ``gpu`` and NVML reads every device's energy
    counter, else RAPL when its zones read, else none with both reasons. ``nvml``: the session
    opener (tests pass a stub; default :class:`adapters.runtime.resources.Nvml`)."""
    reasons = []
    if gpu:
        module, handles, why = (nvml or _nvml_session)()
        if module is not None:
            return EnergySource(kind="nvml", zones=[f"GPU {i}" for i in range(len(handles))])
        reasons.append(why)
    zones, why = rapl_zones(root)
    if zones:
        return EnergySource(kind="rapl", zones=[z.describe() for z in zones], root=str(root or rapl_root()))
    return EnergySource(kind="none", reason="; ".join([why, *reasons]))


def open_meter(source: EnergySource | None, *, nvml: Callable[[], tuple[Any, list[Any], str]] | None = None,
               clock: Callable[[], int] = time.perf_counter_ns) -> _Counter | None:
    """A fresh meter for one phase of ``source`` (None for no source, or ``kind`` none: nothing to
    read). A counter that no longer reads gives a meter whose result says why."""
    if source is None or not source.measured:
        return None
    try:
        if source.kind == "rapl":
            zones, why = rapl_zones(Path(source.root) if source.root else None)
            if not zones:
                raise OSError(why)
            return _Counter("rapl", RaplReader(zones), source.idle_watts, clock)
        module, handles, why = (nvml or _nvml_session)()
        if module is None:
            raise OSError(why)
        reader = NvmlReader(module, handles)
        return _Counter("nvml", reader, source.idle_watts, clock, power=reader.power_w)
    except OSError as exc:
        return _Counter(source.kind, lambda: 0.0, None, clock, error=f"energy source lost: {exc}")


def measure_idle(source: EnergySource, seconds: float = IDLE_S, *, sleep: Callable[[float], None] = time.sleep,
                 nvml: Callable[[], tuple[Any, list[Any], str]] | None = None,
                 clock: Callable[[], int] = time.perf_counter_ns) -> EnergySource:
    """``source`` with ``idle_watts``: its counter over ``seconds`` of nothing running (W), read
    twice a second; unchanged for no source or when the counter fails."""
    meter = open_meter(source, nvml=nvml, clock=clock)
    if meter is None:
        return source
    meter.sample()
    steps = max(1, round(seconds / 0.5))
    for _ in range(steps):
        sleep(seconds / steps)
        meter.sample()
    got = meter.result()
    if got.energy_j is None or not got.duration_s:
        return source.model_copy(update={"reason": got.reason})
    return source.model_copy(update={"idle_watts": round(got.energy_j / got.duration_s, 3),
                                     "idle_s": round(got.duration_s, 3)})
