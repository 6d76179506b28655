"""What ``bench engines check`` and ``bench engines fidelity`` are asked for, generated into their
commands like ``bench run``'s (:func:`harness.app.cli.options.command_from`). ``--engine-arg``,
``--model``, ``--threads``, ``--workload`` and ``--fidelity-floor`` are ``bench run``'s declarations
(:mod:`harness.app.settings.shared`, :mod:`harness.app.settings.workload`): same parsing and
checks; the help, default and bounds are these commands' own (one engine thread each by default).
``--engine``, ``--fidelity-prompts`` and ``--fidelity-tokens`` are spelled as ``bench run``'s; the
former ``--engines``, ``--prompts`` and ``--tokens`` still read, hidden from ``--help``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

from pydantic import Field

from harness.app.settings.fields import Cli, CliModel
from harness.app.settings.shared import ENGINE_ARGS, MODEL, EngineArgs, Model
from harness.app.settings.workload import WORKLOAD_OPTIONS

_MODEL = MODEL.replace(flags=("--model",), help="Hugging Face model folder (default: the embedded model)")
_ENGINE_ARGS = ENGINE_ARGS.replace(help="ENGINE:key=value passed to that engine")
_THREADS = Cli("--threads", range=True, help="intra-op CPU threads per engine")


class EngineCheckSettings(CliModel):
    """``bench engines check``: ``engines`` comma-separated (the first the reference), greedy
    ``max_tokens`` per prompt (>= 1), ``threads`` per engine (>= 1), server logs in ``run_dir``
    (None = results/check-<time>), ``json_out``: the full result as JSON."""

    engines: Annotated[str, Cli("--engine", "-e", aliases=("--engines",), help="comma-separated engines; the first is the reference")] = "own,transformers"
    model: Annotated[Model, _MODEL] = None
    max_tokens: Annotated[int, Field(ge=1), Cli("--max-tokens", range=True, help="greedy tokens per prompt")] = 32
    threads: Annotated[int, Field(ge=1), _THREADS] = 1
    engine_args: Annotated[EngineArgs, _ENGINE_ARGS] = Field(default_factory=dict)
    run_dir: Annotated[Optional[Path], Cli("--run-dir", help="where server logs go (default: results/check-<time>)")] = None
    json_out: Annotated[bool, Cli("--json", help="print the full result as JSON")] = False


class EngineFidelitySettings(CliModel):
    """``bench engines fidelity``: ``engines`` comma-separated or 'all'; ``workload`` whose
    sessions' first requests are the ``prompts`` (1-512), each answered greedily for ``tokens``
    (1-1024); ``fidelity_floor`` in [0, 1] for other numerics; ``threads`` per engine (>= 1);
    ``run_dir`` None = results/fidelity-<time>."""

    engines: Annotated[str, Cli("--engine", "-e", aliases=("--engines",), help="comma-separated engines, or 'all' (every engine that can run here)")] = "all"
    model: Annotated[Model, _MODEL] = None
    workload: Annotated[str, WORKLOAD_OPTIONS.options["name"].replace(
        flags=("--workload",), help="the workload whose prompts are checked (its sessions' first requests)")] = "agentic"
    prompts: Annotated[int, Field(ge=1, le=512), Cli("--fidelity-prompts", range=True, aliases=("--prompts",), help="prompts checked")] = 32
    tokens: Annotated[int, Field(ge=1, le=1024), Cli("--fidelity-tokens", range=True, aliases=("--tokens",), help="greedy tokens per prompt")] = 64
    fidelity_floor: Annotated[float, Field(ge=0.0, le=1.0), Cli("--fidelity-floor", range=True, help="the floor for configurations of other numerics (the reference's precision: 0.99)")] = 0.90
    threads: Annotated[int, Field(ge=1), _THREADS] = 1
    engine_args: Annotated[EngineArgs, _ENGINE_ARGS] = Field(default_factory=dict)
    run_dir: Annotated[Optional[Path], Cli("--run-dir", help="where fidelity.json and server logs go (default: results/fidelity-<time>)")] = None
