"""Hardware detection: what this machine is (the adapters' probes and the application ask).

:func:`detect_kind` answers the adapters' question ("nvidia" / "amd" / "cpu");
``BENCH_HARDWARE`` overrides it (to inspect what an adapter would do on another machine).
``detect_hardware()`` describes this machine as a :class:`~results.hardware.HardwareProfile`
(``nvidia-smi`` when present, else ``rocm-smi``, else the CPU with its total RAM from psutil);
:func:`detect_nvidia_driver` reads the driver the CUDA recipes check (:mod:`adapters.runtime.gpu_recipes`);
:func:`get_profile` resolves a profile name, ``"detected"`` included.

The profiles, prices and the cost arithmetic themselves are data recorded in every manifest
and read by the scorer: they live in :mod:`results.hardware`, which this module builds on
(and which imports nothing that runs commands).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from results.hardware import (
    FP8_MIN_COMPUTE_CAPABILITY,
    HARDWARE_KINDS,
    HardwareProfile,
    cpu_profile,
    known_price,
    named_profile,
)


def _parse_nvidia_smi(text: str) -> HardwareProfile | None:
    """Parse ``nvidia-smi --query-gpu=name,memory.total,compute_cap --format=csv,noheader,nounits``.

    ``memory.total`` is in MiB. Returns None for empty output.
    """
    rows = [[c.strip() for c in line.split(",")] for line in text.strip().splitlines() if line.strip()]
    if not rows:
        return None
    name, mem_mib, cc = rows[0][0], rows[0][1], rows[0][2] if len(rows[0]) > 2 else ""
    try:
        major, minor = (int(x) for x in cc.split(".")[:2])
        capability: tuple[int, int] | None = (major, minor)
    except ValueError:
        capability = None
    memory = int(float(mem_mib) * 1024**2)
    price, price_source = known_price(name, memory)
    return HardwareProfile(
        name=f"detected: {name}",
        kind="nvidia",
        memory_bytes=memory,
        num_devices=len(rows),
        compute_capability=capability,
        supports_fp8=capability is not None and capability >= FP8_MIN_COMPUTE_CAPABILITY,
        source="this machine (nvidia-smi)",
        price_per_hour=price,
        price_source=price_source,
    )


def _run(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def _detect_amd() -> HardwareProfile | None:
    text = _run(["rocm-smi", "--showmeminfo", "vram", "--csv"])
    if not text:
        return None
    sizes = []
    for line in text.splitlines()[1:]:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[1].isdigit():
            sizes.append(int(parts[1]))  # "VRAM Total Memory (B)"
    if not sizes:
        return None
    return HardwareProfile(
        name="detected: AMD GPU",
        kind="amd",
        memory_bytes=sizes[0],
        num_devices=len(sizes),
        supports_fp8=False,
        source="this machine (rocm-smi)",
    )


def detect_hardware() -> HardwareProfile:
    """This machine: NVIDIA GPUs via ``nvidia-smi`` (name, memory, compute capability), AMD GPUs
    via ``rocm-smi``, else the CPU with total RAM (psutil). Never raises for missing tools.

    (torch.cuda is not consulted: ``nvidia-smi`` ships with every NVIDIA driver and needs no
    multi-second torch import.)
    """
    if shutil.which("nvidia-smi"):
        text = _run(
            ["nvidia-smi", "--query-gpu=name,memory.total,compute_cap", "--format=csv,noheader,nounits"]
        )
        prof = _parse_nvidia_smi(text) if text else None
        if prof is not None:
            return prof
    if shutil.which("rocm-smi"):
        prof = _detect_amd()
        if prof is not None:
            return prof
    return cpu_profile()


def get_profile(name: str, num_devices: int | None = None) -> HardwareProfile:
    """A named profile (:func:`results.hardware.named_profile`, case-insensitive) or, for
    ``"detected"``, this machine (:func:`detect_hardware`), optionally with another device count.

    Raises ValueError (one line listing the valid names) for an unknown name, and for
    ``num_devices < 1``.
    """
    if (name or "").strip().lower() != "detected":
        return named_profile(name, num_devices)
    prof = detect_hardware()
    return prof if num_devices is None else prof.with_devices(num_devices)


@dataclass(frozen=True)
class NvidiaDriver:
    """What this machine's NVIDIA driver reports (``nvidia-smi``, which ships with every driver).

    ``driver_version``: e.g. ``"580.65.06"``; ``cuda_version``: the newest CUDA the driver API
    supports (the banner's "CUDA Version: 13.0" → ``(13, 0)``; None when not shown);
    ``compute_capabilities`` and ``gpu_names``: one entry per GPU, in nvidia-smi's order.
    """

    driver_version: str
    cuda_version: tuple[int, int] | None
    compute_capabilities: tuple[tuple[int, int], ...]
    gpu_names: tuple[str, ...]

    @property
    def driver_tuple(self) -> tuple[int, ...]:
        """``"580.65.06"`` → ``(580, 65, 6)`` for comparisons (non-numeric parts dropped)."""
        return version_tuple(self.driver_version)


def version_tuple(text: str) -> tuple[int, ...]:
    """``"575.51.03"`` → ``(575, 51, 3)``; stops at the first non-numeric part."""
    out: list[int] = []
    for part in text.strip().split("."):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def parse_nvidia_driver(query_csv: str, banner: str) -> NvidiaDriver | None:
    """Parse ``nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader`` and
    the plain ``nvidia-smi`` banner (for "CUDA Version: X.Y"). None when no GPU row is listed."""
    rows = [[c.strip() for c in line.split(",")] for line in query_csv.strip().splitlines() if line.count(",") >= 2]
    if not rows:
        return None
    m = re.search(r"CUDA Version\s*:\s*(\d+)\.(\d+)", banner)
    caps = []
    for row in rows:
        cc = version_tuple(row[2])
        caps.append((cc[0], cc[1]) if len(cc) >= 2 else (0, 0))
    return NvidiaDriver(driver_version=rows[0][1], cuda_version=(int(m[1]), int(m[2])) if m else None,
                        compute_capabilities=tuple(caps), gpu_names=tuple(r[0] for r in rows))


def detect_nvidia_driver() -> NvidiaDriver | None:
    """This machine's NVIDIA driver version, its CUDA driver API version and each GPU's compute
    capability, from two ``nvidia-smi`` calls; None without nvidia-smi or a GPU. Never raises."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    query = _run([smi, "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"])
    return parse_nvidia_driver(query or "", _run([smi]) or "") if query else None


def detect_kind() -> str:
    """``"nvidia"``, ``"amd"`` or ``"cpu"`` for this machine: ``BENCH_HARDWARE`` when set, else
    ``nvidia-smi -L`` listing a GPU → nvidia, ``rocm-smi`` listing one → amd, else cpu.

    Raises ValueError when ``BENCH_HARDWARE`` holds something else.
    """
    forced = os.environ.get("BENCH_HARDWARE")
    if forced:
        if forced not in HARDWARE_KINDS:
            raise ValueError(f"BENCH_HARDWARE={forced!r} is not one of {', '.join(HARDWARE_KINDS)}: fix or unset it")
        return forced
    smi = shutil.which("nvidia-smi")
    if smi and "GPU " in (_run([smi, "-L"]) or ""):
        return "nvidia"
    rocm = shutil.which("rocm-smi")
    if rocm and "GPU" in (_run([rocm, "--showid"]) or ""):
        return "amd"
    return "cpu"
