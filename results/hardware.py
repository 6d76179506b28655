"""Hardware profiles and prices: the deployment targets the scorer checks engines against,
as every run's manifest records them.

The one home of the hardware *data* and its pure functions; the scorer, the application and the
adapters' probes all use it, and it imports nothing of the harness or the adapters. Detecting
this machine (``nvidia-smi``, ``rocm-smi``, the NVIDIA driver, ``BENCH_HARDWARE``) runs commands
and lives in :mod:`adapters.telemetry.hardware`, which builds its profiles with this module's; its
``get_profile`` also resolves the name ``"detected"``.

A :class:`HardwareProfile` is one kind of device times a device count. Named profiles
(:data:`PROFILES`, :func:`named_profile`) carry vendor datasheet figures; a manifest records
one as :class:`results.schema.HardwareFacts` (:meth:`HardwareProfile.to_facts`), which reads
back with :func:`profile_from_manifest`. Nothing here measures speed;
``bandwidth_bytes_per_s`` is informational.

Prices (``price_per_hour``, USD per device-hour) are public on-demand list prices at the date
given in :data:`PRICES` (cloud prices move; ``--price-per-hour`` overrides them), used for the
cost per output token (:func:`cost_per_million_tokens`, the one place that arithmetic lives).

Memory sizes are per device, in bytes. Datasheet capacities are taken as the nominal GiB
(80 GB → 80 GiB), which is what ``nvidia-smi`` reports within 1 % for these parts.
FP8 support follows NVIDIA's rule (FP8 tensor cores from compute capability 8.9, Ada
Lovelace / Hopper; vLLM's ``fp8`` quantization needs the same) and AMD CDNA3 (MI300X).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .schema.facts import HardwareFacts

GiB = 1024**3
FP8_MIN_COMPUTE_CAPABILITY = (8, 9)  # Ada Lovelace (8.9) and Hopper (9.0) and newer

HARDWARE_KINDS = ("nvidia", "amd", "cpu")
"""The device kinds an adapter declares (``adapters.base.Capabilities.hardware``) and a profile has."""


@dataclass(frozen=True)
class HardwareProfile:
    """One deployment target.

    ``kind``: ``"nvidia" | "amd" | "cpu"`` (one of :data:`HARDWARE_KINDS`);
    ``memory_bytes``: memory of ONE device in bytes (for CPU: total RAM);
    ``num_devices``: how many such devices (GPUs) the deployment gets;
    ``compute_capability``: CUDA (major, minor), e.g. ``(9, 0)`` for Hopper; None for CPU/AMD;
    ``supports_fp8``: FP8 matmuls in hardware; ``bandwidth_bytes_per_s``: memory bandwidth of
    one device in bytes/s (datasheet; None when unknown); ``source``: where the figures came from;
    ``price_per_hour``: USD per device-hour (:data:`PRICES`; for ``"cpu"`` the whole machine is
    the device), None when no price is known; ``price_source``: where that price came from.
    """

    name: str
    kind: str
    memory_bytes: int
    num_devices: int = 1
    compute_capability: tuple[int, int] | None = None
    supports_fp8: bool = False
    bandwidth_bytes_per_s: float | None = None
    source: str = "datasheet"
    price_per_hour: float | None = None  # USD per device-hour (on-demand list price); None = no price known
    price_source: str = ""  # where the price came from (provider page and date read, or --price-per-hour)

    @property
    def total_memory_bytes(self) -> int:
        """``memory_bytes × num_devices`` (bytes)."""
        return self.memory_bytes * self.num_devices

    def with_devices(self, num_devices: int) -> "HardwareProfile":
        """The same device kind with another device count. Raises ValueError for < 1."""
        if num_devices < 1:
            raise ValueError(f"the device count must be at least 1, got {num_devices}")
        return dataclasses.replace(self, num_devices=num_devices)

    @property
    def deployment_price_per_hour(self) -> float | None:
        """``price_per_hour × num_devices`` (USD/h), None without a price."""
        return None if self.price_per_hour is None else self.price_per_hour * self.num_devices

    def with_price(self, price_per_hour: float, source: str = "--price-per-hour") -> "HardwareProfile":
        """The same target at another price per device-hour (USD). Raises ValueError for a price
        that is not a finite number > 0."""
        check_price(price_per_hour)
        return dataclasses.replace(self, price_per_hour=float(price_per_hour), price_source=source)

    def describe(self) -> str:
        """One human line, e.g. ``"2 × H100-80GB (nvidia, 80.0 GiB each, cc 9.0, FP8)"``."""
        cc = f", cc {self.compute_capability[0]}.{self.compute_capability[1]}" if self.compute_capability else ""
        fp8 = ", FP8" if self.supports_fp8 else ""
        return f"{self.num_devices} × {self.name} ({self.kind}, {self.memory_bytes / GiB:.1f} GiB each{cc}{fp8})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (compute capability as a list)."""
        d = dataclasses.asdict(self)
        d["compute_capability"] = list(self.compute_capability) if self.compute_capability else None
        d["total_memory_bytes"] = self.total_memory_bytes
        return d

    def to_facts(self) -> HardwareFacts:
        """The form ``manifest.json`` records (:meth:`to_dict`'s keys, typed)."""
        return HardwareFacts.model_validate(self.to_dict())


# On-demand list prices, USD per device-hour, from each provider's public price page at the date
# given (transcribed there by public price indexes: api-evangelist's plans files for Lambda and
# RunPod, the tokenwatt/gpu-cloud-prices index for DigitalOcean). They move, and providers differ
# by 2-4x for the same part: pass --price-per-hour for what you pay. L4: no price read yet (None).
PRICES: dict[str, tuple[float, str]] = {
    "H100-80GB": (3.99, "Lambda on-demand 8x H100 SXM, per GPU-hour (lambda.ai/instances, 2026-09-20)"),
    "A100-80GB": (2.79, "Lambda on-demand 8x A100 SXM 80 GB, per GPU-hour (lambda.ai/instances, 2026-09-20)"),
    "H200-141GB": (4.59, "RunPod on-demand pod H200 141 GB, per GPU-hour (runpod.io/pricing, 2026-10-07)"),
    "MI300X": (2.59, "DigitalOcean on-demand gpu-mi300x1-192gb, 1x MI300X (list price, 2026-10-07)"),
}
CPU_PRICE_PER_VCPU_HOUR = 0.0335
"""USD per vCPU-hour assumed for a CPU machine: Google Compute Engine ``e2-standard-2`` (2 vCPU,
8 GB) on-demand in us-central1 lists $0.067006/h (cloud.google.com/compute/vm-instance-pricing),
i.e. $0.0335 per vCPU with its share of memory. A CPU profile is priced at this times the cores
the machine has (the whole machine is the device); an assumption, override with --price-per-hour."""


def check_price(price_per_hour: float) -> None:
    """Raise ValueError (one line with the fix) unless ``price_per_hour`` is a finite number > 0."""
    if not isinstance(price_per_hour, (int, float)) or not math.isfinite(price_per_hour) or price_per_hour <= 0:
        raise ValueError(f"a price per device-hour must be a positive number of USD, e.g. 2.5; got {price_per_hour!r}")


def cost_per_million_tokens(price_per_hour: float | None, tokens_per_s: float | None) -> float | None:
    """USD per 1M tokens at ``tokens_per_s``: ``price_per_hour / (tokens_per_s × 3600) × 1e6``
    ($2.00/h at 100 tok/s → $5.56). None when either is missing, not finite or ≤ 0."""
    if price_per_hour is None or tokens_per_s is None:
        return None
    if not (math.isfinite(price_per_hour) and math.isfinite(tokens_per_s)) or price_per_hour <= 0 or tokens_per_s <= 0:
        return None
    return price_per_hour / (tokens_per_s * 3600.0) * 1e6


def cpu_price() -> tuple[float, str]:
    """``(USD per hour, source)`` of this machine as a CPU deployment: its usable cores ×
    :data:`CPU_PRICE_PER_VCPU_HOUR`."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return (round(cores * CPU_PRICE_PER_VCPU_HOUR, 6),
            f"assumed: {cores} vCPU x ${CPU_PRICE_PER_VCPU_HOUR}/vCPU-hour (GCE e2-standard-2 on-demand, us-central1)")


def cpu_profile() -> HardwareProfile:
    """The ``"CPU"`` profile filled in for this machine: its total RAM (psutil) and :func:`cpu_price`."""
    import psutil

    price, price_source = cpu_price()
    return HardwareProfile(
        name="CPU",
        kind="cpu",
        memory_bytes=int(psutil.virtual_memory().total),
        source="this machine (psutil total RAM)",
        price_per_hour=price,
        price_source=price_source,
    )


def known_price(gpu_name: str, memory_bytes: int) -> tuple[float | None, str]:
    """The :data:`PRICES` entry of a detected GPU: a profile whose model (``"H100"``) is in the
    name and whose memory is within 10 % (an SXM part: PCIe and NVL boards are priced apart);
    else no price."""
    if any(form in gpu_name.upper() for form in ("PCIE", "NVL")):  # other parts, other prices
        return None, ""
    for key, (price, source) in PRICES.items():
        prof = PROFILES[key]
        model = key.split("-")[0].upper()
        if model in gpu_name.upper() and abs(prof.memory_bytes - memory_bytes) <= 0.1 * prof.memory_bytes:
            return price, source
    return None, ""


# Datasheet figures: NVIDIA H100 SXM5 80 GB (3.35 TB/s), H200 SXM 141 GB (4.8 TB/s),
# A100 SXM4 80 GB (2.039 TB/s), L4 24 GB (300 GB/s); AMD Instinct MI300X 192 GB (5.3 TB/s).
PROFILES: dict[str, HardwareProfile] = {
    "H100-80GB": HardwareProfile("H100-80GB", "nvidia", 80 * GiB, 1, (9, 0), True, 3.35e12),
    "H200-141GB": HardwareProfile("H200-141GB", "nvidia", 141 * GiB, 1, (9, 0), True, 4.8e12),
    "A100-80GB": HardwareProfile("A100-80GB", "nvidia", 80 * GiB, 1, (8, 0), False, 2.039e12),
    "L4-24GB": HardwareProfile("L4-24GB", "nvidia", 24 * GiB, 1, (8, 9), True, 3.0e11),
    "MI300X": HardwareProfile("MI300X", "amd", 192 * GiB, 1, None, True, 5.3e12),
    "CPU": HardwareProfile("CPU", "cpu", 0, 1, None, False, None, "this machine's RAM at lookup"),
}
"""Named profiles; ``"CPU"`` is filled with this machine's RAM (and cores' price) when looked up."""
PROFILES.update({key: dataclasses.replace(PROFILES[key], price_per_hour=price, price_source=source)
                 for key, (price, source) in PRICES.items()})

SPECIAL_NAMES = ("detected",)
"""Profile names that describe this machine; ``adapters.telemetry.hardware.get_profile`` resolves them."""


def profile_from_manifest(hardware: HardwareFacts | Mapping[str, Any] | None) -> HardwareProfile | None:
    """The hardware a run was measured on, from ``manifest.json``'s ``hardware``
    (:class:`~results.schema.HardwareFacts`, or the same as a dict).

    Accepts a :class:`HardwareProfile` as stored (``kind``, ``memory_bytes``, ...), or the
    ``cpu_model``/``memory_bytes``/``gpus`` form. For the latter it uses ``gpus`` (list of dicts with ``name``/``memory_bytes``/``compute_capability`` or strings)
    when present, else the CPU with ``memory_bytes``. Returns None when nothing was recorded.
    """
    if hardware is None:
        return None
    hw = hardware if isinstance(hardware, HardwareFacts) else HardwareFacts.model_validate(hardware)
    if not hw.recorded:
        return None
    if hw.kind in HARDWARE_KINDS and hw.memory_bytes is not None:
        # a HardwareProfile as stored (what ``bench run`` records)
        cc_list = hw.compute_capability
        name = str(hw.name or hw.kind)
        return HardwareProfile(
            name=name if name.startswith(("recorded", "detected")) else f"recorded: {name}",
            kind=str(hw.kind),
            memory_bytes=int(hw.memory_bytes),
            num_devices=int(hw.num_devices or 1),
            compute_capability=(int(cc_list[0]), int(cc_list[1])) if cc_list else None,
            supports_fp8=bool(hw.supports_fp8),
            bandwidth_bytes_per_s=hw.bandwidth_bytes_per_s,
            source="run manifest",
            price_per_hour=_stored_price(hw.price_per_hour),
            price_source=str(hw.price_source or ""),
        )
    gpus = hw.gpus or []
    if gpus:
        g0 = gpus[0] if isinstance(gpus[0], dict) else {"name": str(gpus[0])}
        name = str(g0.get("name", "GPU"))
        kind = "amd" if any(k in name.upper() for k in ("AMD", "INSTINCT", "MI3")) else "nvidia"
        cc_raw = g0.get("compute_capability")
        cc: tuple[int, int] | None = None
        if isinstance(cc_raw, (list, tuple)) and len(cc_raw) >= 2:
            cc = (int(cc_raw[0]), int(cc_raw[1]))
        elif isinstance(cc_raw, str) and "." in cc_raw:
            a, b = cc_raw.split(".")[:2]
            cc = (int(a), int(b))
        mem = int(g0.get("memory_bytes") or g0.get("memory_total_bytes") or 0)
        return HardwareProfile(
            name=f"recorded: {name}",
            kind=kind,
            memory_bytes=mem,
            num_devices=len(gpus),
            compute_capability=cc,
            supports_fp8=cc is not None and cc >= FP8_MIN_COMPUTE_CAPABILITY,
            source="run manifest",
        )
    if hw.memory_bytes is None:
        return None
    return HardwareProfile(
        name=f"recorded: {hw.cpu_model or 'CPU'}",
        kind="cpu",
        memory_bytes=int(hw.memory_bytes),
        source="run manifest",
    )


def _stored_price(value: Any) -> float | None:
    """A recorded price when it is a positive finite number, else None (old runs have none)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def run_price(hardware: HardwareFacts | Mapping[str, Any] | None) -> tuple[float, str] | None:
    """``(USD per hour, source)`` of the hardware a run recorded (the manifest's ``hardware``):
    its price per device-hour × its devices; None when it recorded no price."""
    profile = profile_from_manifest(hardware)
    if profile is None or profile.deployment_price_per_hour is None:
        return None
    devices = f" x {profile.num_devices} devices" if profile.num_devices > 1 else ""
    return profile.deployment_price_per_hour, f"{profile.price_source}{devices}"


def device_price(hardware: HardwareFacts | Mapping[str, Any] | None) -> tuple[float, str] | None:
    """``(USD per device-hour, source)`` of the hardware a run recorded: the price of one of its
    devices (an engine's cost counts the devices it used, not every device the host has); None
    when it recorded no price."""
    profile = profile_from_manifest(hardware)
    if profile is None or profile.price_per_hour is None:
        return None
    return profile.price_per_hour, f"{profile.price_source} per device"


def named_profile(name: str, num_devices: int | None = None) -> HardwareProfile:
    """A named profile of :data:`PROFILES` (case-insensitive; ``"CPU"`` filled in for this
    machine, :func:`cpu_profile`), optionally with another device count.

    Raises ValueError (one line listing the valid names, :data:`SPECIAL_NAMES` included) for an
    unknown name and for ``num_devices < 1``; for a special name, which only
    ``adapters.telemetry.hardware.get_profile`` resolves (it detects this machine's hardware).
    """
    key = (name or "").strip()
    if key.lower() in SPECIAL_NAMES:
        raise ValueError(f"hardware profile {name!r} describes this machine: adapters.telemetry.hardware.get_profile detects it")
    match = next((p for n, p in PROFILES.items() if n.lower() == key.lower()), None)
    if match is None:
        valid = ", ".join([*PROFILES, *SPECIAL_NAMES])
        raise ValueError(f"unknown hardware profile {name!r}: use one of {valid}")
    prof = cpu_profile() if match.kind == "cpu" else match
    if num_devices is not None:
        prof = prof.with_devices(num_devices)
    return prof
