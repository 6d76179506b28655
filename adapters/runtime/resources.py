"""What an engine uses while it is measured: memory and CPU of its process group, GPU via NVML.

:class:`ResourceSampler` is a thread in the harness process (never a task on the client's event
loop) that, from :meth:`~ResourceSampler.start` to :meth:`~ResourceSampler.stop`, reads every
process of the engine's process group (:func:`adapters.runtime.process.group_members`, the group
:class:`adapters.runtime.process.ServerProcess` starts the server in) every ``interval_s`` (0.5 s) with
psutil:

- memory: RSS summed over the group (bytes; a page shared by several processes counts once per
  process, so a forked server is over-counted) and PSS summed over the group (each shared page
  split between its sharers, read from ``/proc/<pid>/smaps_rollup`` by psutil's
  ``memory_full_info``: the group's real footprint; None where it cannot be read). PSS costs the
  kernel a walk of the process's page tables (about 50 ms for a 2 GiB torch server, against
  0.1 ms for RSS), so it is read every ``pss_every``-th sample (every 2 s) and at the start and
  end, RSS at every sample;
- CPU: user + system CPU seconds of the group's processes between two samples per wall second
  between them, in % of one core (a process first seen in a sample counts with all its CPU
  time: it started after the sample before);
- on NVIDIA (``nvidia-ml-py``'s ``pynvml``): GPU memory of the group's processes
  (``nvmlDeviceGetComputeRunningProcesses``; the devices' used memory where NVML lists none of
  them), device utilisation (``nvmlDeviceGetUtilizationRates``) and energy, the delta of
  ``nvmlDeviceGetTotalEnergyConsumption`` (mJ, Volta and newer) over the phase. Without the
  package or a driver the GPU fields stay None with the reason ("no NVIDIA driver / NVML: …").

:class:`Accumulator` holds the arithmetic (peak and mean), fed samples by the thread or a test.
:func:`install_facts` records the size on disk of the virtual environment an engine runs from.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import psutil

from adapters.runtime.process import group_members
from results.schema import ResourceUse
from results.schema.energy import EnergySource, PhaseEnergy

INTERVAL_S = 0.5
PSS_EVERY = 4  # PSS every 4th sample (2 s): a smaps_rollup read walks the page tables (see above)
EXTERNAL_NOTE = "not measured (external endpoint)"
NO_NVML = "no NVIDIA driver / NVML"


@dataclass
class GroupSample:
    """One reading of a process group at ``t_s`` (s, monotonic).

    ``cpu_s``: pid → user + system CPU seconds so far; ``rss_bytes`` / ``pss_bytes``: summed
    over the group (``pss_bytes`` None when any process's PSS could not be read, or when
    ``pss_read`` is False: not read in this sample);
    ``gpu_memory_bytes`` / ``gpu_util_percent``: None without NVML; ``cost_s``: how long the
    reading took (s)."""

    t_s: float
    rss_bytes: int
    pss_bytes: int | None
    cpu_s: dict[int, float]
    gpu_memory_bytes: int | None = None
    gpu_util_percent: float | None = None
    cost_s: float = 0.0
    pss_read: bool = True

    @property
    def processes(self) -> int:
        return len(self.cpu_s)


def read_group(pgid: int, pss: bool = True, clock: Callable[[], float] = time.monotonic) -> GroupSample:
    """Read every live process of group ``pgid`` (processes that exit mid-read are skipped);
    ``pss`` False skips the (costly) PSS reading."""
    start = clock()
    rss, pss_sum, cpu = 0, 0, {}
    pss_known = pss
    for proc in group_members(pgid):
        try:
            with proc.oneshot():
                times = proc.cpu_times()
                memory = proc.memory_info()
                if pss_known:
                    try:
                        pss_sum += proc.memory_full_info().pss
                    except psutil.AccessDenied:
                        pss_known = False
            rss += memory.rss
            cpu[proc.pid] = times.user + times.system
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    now = clock()
    return GroupSample(now, rss, pss_sum if pss_known else None, cpu, cost_s=now - start, pss_read=pss)


class Accumulator:
    """Peak and mean over samples: memory over the samples, CPU over the intervals between
    consecutive samples (mean = all CPU seconds / all wall seconds; peak = the busiest interval)."""

    def __init__(self, interval_s: float = INTERVAL_S, cpu_cores: int | None = None) -> None:
        self.interval_s = interval_s
        self.cpu_cores = cpu_cores if cpu_cores is not None else _cores()
        self.samples: list[GroupSample] = []
        self._cpu_s = 0.0
        self._wall_s = 0.0
        self._cpu_peak: float | None = None

    def add(self, sample: GroupSample) -> None:
        """One sample, in time order."""
        if self.samples:
            prev = self.samples[-1]
            dt = sample.t_s - prev.t_s
            if dt > 0:
                used = sum(max(0.0, cpu - prev.cpu_s.get(pid, 0.0)) for pid, cpu in sample.cpu_s.items())
                self._cpu_s += used
                self._wall_s += dt
                rate = 100.0 * used / dt
                self._cpu_peak = rate if self._cpu_peak is None else max(self._cpu_peak, rate)
        self.samples.append(sample)

    def result(self, *, gpu_energy_j: float | None = None, gpu_note: str = "", note: str = "") -> ResourceUse:
        """The :class:`~results.schema.ResourceUse` of the samples so far."""
        samples = self.samples
        if not samples:
            return ResourceUse(interval_s=self.interval_s, cpu_cores=self.cpu_cores, gpu_note=gpu_note,
                               note=note or "no sample taken")
        pss = [s.pss_bytes for s in samples if s.pss_read]
        gpu_mem = [s.gpu_memory_bytes for s in samples if s.gpu_memory_bytes is not None]
        gpu_util = [s.gpu_util_percent for s in samples if s.gpu_util_percent is not None]
        return ResourceUse(
            interval_s=self.interval_s,
            samples=len(samples),
            duration_s=round(samples[-1].t_s - samples[0].t_s, 3),
            peak_rss_bytes=max(s.rss_bytes for s in samples),
            mean_rss_bytes=round(sum(s.rss_bytes for s in samples) / len(samples)),
            peak_pss_bytes=None if None in pss or not pss else max(pss),  # type: ignore[type-var]
            mean_pss_bytes=None if None in pss or not pss else round(sum(pss) / len(pss)),  # type: ignore[arg-type]
            mean_cpu_percent=round(100.0 * self._cpu_s / self._wall_s, 2) if self._wall_s > 0 else None,
            peak_cpu_percent=None if self._cpu_peak is None else round(self._cpu_peak, 2),
            cpu_cores=self.cpu_cores,
            processes_max=max(s.processes for s in samples),
            sampler_ms_mean=round(1000.0 * sum(s.cost_s for s in samples) / len(samples), 3),
            peak_gpu_memory_bytes=max(gpu_mem) if gpu_mem else None,
            mean_gpu_memory_bytes=round(sum(gpu_mem) / len(gpu_mem)) if gpu_mem else None,
            mean_gpu_util_percent=round(sum(gpu_util) / len(gpu_util), 2) if gpu_util else None,
            peak_gpu_util_percent=max(gpu_util) if gpu_util else None,
            gpu_energy_j=None if gpu_energy_j is None else round(gpu_energy_j, 3),
            gpu_note=gpu_note,
            note=note,
        )


def _cores() -> int:
    """The cores this process may run on (its affinity; ``os.cpu_count()`` where there is none)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@dataclass
class Nvml:
    """An open NVML session over every device (``pynvml``); :meth:`open` says why there is none."""

    nvml: Any
    handles: list[Any]
    energy_start_mj: list[float | None] = field(default_factory=list)
    group_devices: set[int] = field(default_factory=set)  # indices where a group process was seen

    @property
    def device_wide(self) -> bool:
        """NVML listed none of the group's processes in any sample: the numbers are device-wide."""
        return not self.group_devices

    @classmethod
    def open(cls) -> "tuple[Nvml | None, str]":
        """``(session, "")``, or ``(None, reason)`` when ``pynvml`` is missing, ``nvmlInit``
        fails (no driver) or no device is listed."""
        try:
            import pynvml
        except ImportError:
            return None, f"{NO_NVML}: the nvidia-ml-py package (pynvml) is not installed"
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # pynvml.NVMLError and friends: no driver, no library
            return None, f"{NO_NVML}: {exc or type(exc).__name__}"
        try:
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception as exc:
            _shutdown(pynvml)
            return None, f"{NO_NVML}: {exc or type(exc).__name__}"
        if not handles:
            _shutdown(pynvml)
            return None, f"{NO_NVML}: NVML lists no GPU"
        session = cls(pynvml, handles)
        session.energy_start_mj = session._energy()
        return session, ""

    def _energy(self) -> list[float | None]:
        out: list[float | None] = []
        for handle in self.handles:
            try:
                out.append(float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(handle)))
            except Exception:  # older than Volta, or not supported
                out.append(None)
        return out

    def sample(self, pids: Iterable[int]) -> tuple[int | None, float | None]:
        """GPU memory (bytes) of ``pids`` over the devices, and the mean utilisation (%) of the
        devices they run on; device-wide used memory and utilisation when NVML lists none."""
        wanted = set(pids)
        used, seen = 0, set()
        for index, handle in enumerate(self.handles):
            try:
                procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except Exception:
                procs = []
            for proc in procs:
                if proc.pid in wanted and isinstance(proc.usedGpuMemory, int):
                    used += proc.usedGpuMemory
                    seen.add(index)
        self.group_devices |= seen
        devices = sorted(seen) or list(range(len(self.handles)))
        if not seen:
            used = sum(int(self.nvml.nvmlDeviceGetMemoryInfo(self.handles[i]).used) for i in devices)
        utils = [float(self.nvml.nvmlDeviceGetUtilizationRates(self.handles[i]).gpu) for i in devices]
        return used, (sum(utils) / len(utils) if utils else None)

    def energy_j(self) -> float | None:
        """Joules the group's devices (all, when none was seen) used since :meth:`open`."""
        end = self._energy()
        devices = sorted(self.group_devices) or range(len(self.handles))
        deltas = [end[i] - self.energy_start_mj[i] for i in devices
                  if end[i] is not None and self.energy_start_mj[i] is not None]
        return sum(deltas) / 1000.0 if deltas else None

    def close(self) -> None:
        _shutdown(self.nvml)


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:
        pass


class ResourceSampler:
    """Samples process group ``pgid`` in a background thread between :meth:`start` and
    :meth:`stop` (also a context manager; ``result`` holds the outcome after it).

    ``pgid`` None (an external endpoint) measures nothing: the result says so. PSS is read every
    ``pss_every``-th sample and at both ends. ``reader`` (``(pgid, pss) → GroupSample``) and
    ``gpu`` (NVML on/off) are for tests; a reading that raises ends the sampling with the reason
    in the result's note, never the run. ``meter``: the phase's energy meter
    (:func:`adapters.telemetry.energy.open_meter`), read at every sample into the result's ``energy``;
    ``energy``: the run's source, whose reason the result gives when there is no meter (None:
    energy not asked for).
    """

    def __init__(self, pgid: int | None, *, interval_s: float = INTERVAL_S, pss_every: int = PSS_EVERY,
                 reader: Callable[[int, bool], GroupSample] | None = None, gpu: bool = True,
                 energy: EnergySource | None = None, meter: Any = None) -> None:
        self.pgid = pgid
        self.interval_s = interval_s
        self.pss_every = max(1, pss_every)
        self.reader = reader or read_group
        self.gpu = gpu
        self.result: ResourceUse | None = None
        self._acc = Accumulator(interval_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Nvml | None = None
        self._gpu_note = ""
        self._error = ""
        self.energy = energy
        self._meter = meter  # the phase's adapters.telemetry.energy meter (None: no counter to read)

    def start(self) -> None:
        """Take the first sample and start the thread (nothing for an external endpoint)."""
        if self.pgid is None:
            return
        if self.gpu:
            self._nvml, self._gpu_note = Nvml.open()
        self._sample(pss=True)
        self._thread = threading.Thread(target=self._loop, name=f"resources-{self.pgid}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s) and not self._error:
            self._sample(pss=len(self._acc.samples) % self.pss_every == 0)

    def _sample(self, pss: bool) -> None:
        assert self.pgid is not None
        try:
            sample = self.reader(self.pgid, pss)
            if self._nvml is not None:
                sample.gpu_memory_bytes, sample.gpu_util_percent = self._nvml.sample(sample.cpu_s)
            if self._meter is not None:
                self._meter.sample()
            self._acc.add(sample)
        except Exception as exc:  # informational: a failed reading never fails a run
            self._error = f"sampling stopped after {len(self._acc.samples)} samples: {type(exc).__name__}: {exc}"

    def stop(self) -> ResourceUse:
        """Stop the thread, take a last sample, and return (and keep in ``result``) the use."""
        if self.result is not None:
            return self.result
        if self.pgid is None:
            self.result = ResourceUse(interval_s=self.interval_s, note=EXTERNAL_NOTE, gpu_note="",
                                      energy=None if self.energy is None else PhaseEnergy(reason=EXTERNAL_NOTE))
            return self.result
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if not self._error:
            self._sample(pss=True)
        energy = None
        gpu_note = self._gpu_note
        if self._nvml is not None:
            energy = self._nvml.energy_j()
            if self._nvml.device_wide:
                gpu_note = "device-wide: NVML listed none of the group's processes (another PID namespace?)"
            self._nvml.close()
        self.result = self._acc.result(gpu_energy_j=energy, gpu_note=gpu_note, note=self._error)
        self.result.energy = self._phase_energy()
        return self.result

    def _phase_energy(self) -> PhaseEnergy | None:
        """The phase's energy from the meter; a source of kind none as its reason; None unasked."""
        if self._meter is not None:
            return self._meter.result()
        if self.energy is not None:
            return PhaseEnergy(source="none", reason=self.energy.reason or "no energy source")
        return None

    def __enter__(self) -> "ResourceSampler":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def with_output_tokens(use: ResourceUse, output_tokens: int) -> ResourceUse:
    """``use`` with ``energy_per_output_token_j`` = energy (J) / ``output_tokens``: the run's
    measured source (:attr:`ResourceUse.energy`, NVML or RAPL), else the GPUs' NVML counter
    (None without energy or tokens; never 0 for an unread counter)."""
    measured = use.energy.energy_j if use.energy is not None else None
    joules = measured if measured is not None else use.gpu_energy_j
    if joules is None or output_tokens <= 0:
        return use
    return use.model_copy(update={"energy_per_output_token_j": joules / output_tokens})


def combine_repeats(uses: list[ResourceUse]) -> ResourceUse | None:
    """One engine's use over its repeats: peaks are the peak over repeats, means the mean of the
    repeats' means, samples summed, every repeat kept in ``repeats``. None for no repeat; the
    repeat itself for one."""
    if not uses:
        return None
    if len(uses) == 1:
        return uses[0]

    def peak(name: str) -> Any:
        values = [v for u in uses if (v := getattr(u, name)) is not None]
        return max(values) if values else None

    def mean(name: str, integer: bool = False) -> Any:
        values = [v for u in uses if (v := getattr(u, name)) is not None]
        if not values:
            return None
        m = sum(values) / len(values)
        return round(m) if integer else round(m, 3)

    energies = [u.gpu_energy_j for u in uses]
    return ResourceUse(
        interval_s=uses[0].interval_s, samples=sum(u.samples for u in uses),
        duration_s=round(sum(u.duration_s or 0.0 for u in uses), 3),
        peak_rss_bytes=peak("peak_rss_bytes"), mean_rss_bytes=mean("mean_rss_bytes", True),
        peak_pss_bytes=peak("peak_pss_bytes"), mean_pss_bytes=mean("mean_pss_bytes", True),
        mean_cpu_percent=mean("mean_cpu_percent"), peak_cpu_percent=peak("peak_cpu_percent"),
        cpu_cores=uses[0].cpu_cores, processes_max=peak("processes_max"), sampler_ms_mean=mean("sampler_ms_mean"),
        peak_gpu_memory_bytes=peak("peak_gpu_memory_bytes"),
        mean_gpu_memory_bytes=mean("mean_gpu_memory_bytes", True),
        mean_gpu_util_percent=mean("mean_gpu_util_percent"), peak_gpu_util_percent=peak("peak_gpu_util_percent"),
        gpu_energy_j=None if None in energies else round(sum(energies), 3),  # type: ignore[arg-type]
        energy_per_output_token_j=mean("energy_per_output_token_j"),
        gpu_note=next((u.gpu_note for u in uses if u.gpu_note), ""),
        note="; ".join(dict.fromkeys(u.note for u in uses if u.note)),
        energy=_combined_energy([u.energy for u in uses]), repeats=list(uses),
    )


def _combined_energy(phases: list[PhaseEnergy | None]) -> PhaseEnergy | None:
    """The repeats' energy summed (J and s; no series), None unless every repeat was read; the
    first reason when one was not."""
    if any(p is None for p in phases):
        return None
    known = [p for p in phases if p is not None]
    if any(p.energy_j is None or p.duration_s is None for p in known):
        return known[0].model_copy(update={"energy_j": None, "series": [],
                                           "reason": next((p.reason for p in known if p.reason), "not read")})
    watts = [p.sampled_watts for p in known]
    return PhaseEnergy(source=known[0].source, energy_j=round(sum(p.energy_j for p in known), 6),  # type: ignore[misc]
                       duration_s=round(sum(p.duration_s for p in known), 6), idle_watts=known[0].idle_watts,  # type: ignore[misc]
                       sampled_watts=None if None in watts else round(sum(watts) / len(watts), 3))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# install size of an engine's environment


def venv_root(executable: str | os.PathLike[str]) -> Path | None:
    """The virtual environment an executable lives in: the nearest of its parent folders (up to
    three) holding ``pyvenv.cfg`` (``.engines/vllm/venv/bin/vllm`` → ``.engines/vllm/venv``);
    symlinks are not followed (a venv's python links to the base interpreter). None outside one."""
    path = Path(executable)
    if not path.is_absolute():
        return None
    for parent in list(path.parents)[:3]:
        if (parent / "pyvenv.cfg").is_file():
            return parent
    return None


def folder_bytes(root: Path) -> int:
    """Apparent size of the regular files under ``root`` (bytes, ``du --apparent-size -b``
    style): symlinks not followed, a hard-linked file counted once."""
    total, seen, stack = 0, set(), [str(root)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        if st.st_nlink > 1:
                            if (st.st_dev, st.st_ino) in seen:
                                continue
                            seen.add((st.st_dev, st.st_ino))
                        total += st.st_size
                except OSError:
                    continue
    return total


def _signature(root: Path) -> list[int]:
    """Modification times (ns) of the venv's ``bin`` and ``site-packages`` folders: installing,
    upgrading or removing a package changes at least one of them."""
    dirs = [root / "bin", *sorted(root.glob("lib*/python*/site-packages"))]
    return [d.stat().st_mtime_ns for d in dirs if d.is_dir()]


def cache_file() -> Path:
    """``$XDG_CACHE_HOME/llm-serve-bench/install-sizes.json`` (``~/.cache`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llm-serve-bench" / "install-sizes.json"


def install_bytes(root: Path, cache: Path | None = None) -> int:
    """:func:`folder_bytes` of ``root``, cached in ``cache`` (default :func:`cache_file`) under the
    folder's :func:`_signature`, so a venv is walked once until a package changes (a walk of a
    3 GB venv takes about 0.5 s). An unreadable or unwritable cache only costs the walk."""
    cache = cache or cache_file()
    key = str(Path(root).absolute())
    signature = _signature(Path(root))
    try:
        stored = json.loads(cache.read_text())
        entry = stored.get(key) if isinstance(stored, dict) else None
    except (OSError, ValueError):
        stored, entry = {}, None
    if isinstance(entry, dict) and entry.get("signature") == signature and isinstance(entry.get("bytes"), int):
        return int(entry["bytes"])
    size = folder_bytes(Path(root))
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        stored = stored if isinstance(stored, dict) else {}
        stored[key] = {"signature": signature, "bytes": size}
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(stored, indent=1))
        tmp.replace(cache)
    except OSError:
        pass
    return size


def install_facts(effective_config: dict[str, Any], cache: Path | None = None) -> dict[str, Any]:
    """The manifest's install facts of one engine from its effective configuration:
    ``install_bytes`` (bytes, :func:`install_bytes` of the venv its command runs from) and
    ``install_dir``, or ``install_bytes`` None with ``install_note`` saying why (an external
    endpoint; an executable outside a virtual environment)."""
    if effective_config.get("base_url") or not effective_config.get("argv"):
        return {"install_bytes": None, "install_note": "not applicable (external endpoint)"}
    root = venv_root(effective_config["argv"][0])
    if root is None:
        return {"install_bytes": None,
                "install_note": f"not measured: {effective_config['argv'][0]} is not inside a virtual environment"}
    facts: dict[str, Any] = {"install_bytes": install_bytes(root, cache), "install_dir": str(root)}
    if root == venv_root(sys.executable):
        facts["install_note"] = "the harness's own virtual environment (shared, not the engine's alone)"
    return facts


def fmt_bytes(value: float | None) -> str:
    """``1.5 GiB`` / ``512 MiB`` (binary units); "—" for None."""
    if value is None or not math.isfinite(value):
        return "—"
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(value) >= size:
            return f"{value / size:,.1f} {unit}"
    return f"{value:,.0f} B"
