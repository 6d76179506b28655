"""Which accelerator this machine has, as the adapters need it for their probes.

Deliberately tiny and independent of ``harness.hardware`` (data flows harness → adapters,
never back): ``nvidia-smi -L`` listing at least one GPU → ``"nvidia"``; ``rocm-smi`` present
and listing a GPU → ``"amd"``; else ``"cpu"``. ``BENCH_HARDWARE`` (``nvidia``/``amd``/``cpu``)
overrides the detection (used to inspect what an adapter would do on another machine).
"""

from __future__ import annotations

import os
import shutil
import subprocess

KINDS = ("nvidia", "amd", "cpu")


def _lists_gpu(cmd: list[str], marker: str) -> bool:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and marker in out.stdout


def detect_hardware() -> str:
    """``"nvidia"``, ``"amd"`` or ``"cpu"`` for this machine (see module docstring).

    Raises ValueError when ``BENCH_HARDWARE`` holds something else.
    """
    forced = os.environ.get("BENCH_HARDWARE")
    if forced:
        if forced not in KINDS:
            raise ValueError(f"BENCH_HARDWARE={forced!r} is not one of {', '.join(KINDS)}: fix or unset it")
        return forced
    smi = shutil.which("nvidia-smi")
    if smi and _lists_gpu([smi, "-L"], "GPU "):
        return "nvidia"
    rocm = shutil.which("rocm-smi")
    if rocm and _lists_gpu([rocm, "--showid"], "GPU"):
        return "amd"
    return "cpu"
