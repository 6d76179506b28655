"""``recipe.json``: a configuration to deploy, as ``bench run`` found it (issue 27): the engine,
the engine args that set it (the ``--engine-arg`` keys the adapter turns into flags), the
threads, and the exact command line and environment the harness started it with (the port the
harness chose included: serve it on yours). ``bench run --engine-config FILE`` measures it again."""

from __future__ import annotations

from pydantic import Field

from .base import SCHEMA_VERSION, Artefact, Bound
from .energy import EnergyFigures

RECIPE_FILE = "recipe.json"


class Recipe(Artefact):
    """``engine``; ``engine_args`` (key → value, as ``--engine-arg ENGINE:key=value``); ``threads``;
    ``command`` (shell-quoted argv as run) and ``env`` (the variables the harness set on top of
    the inherited ones, secrets redacted); where it came from: ``run_id``, ``workload``, ``slos``
    (key → ms), its ``capacity_tps`` (output tokens/s per device at the SLO) with its 95 %
    ``capacity_interval`` and whether that was a lower bound (``capacity_open``); ``climb_to``: the
    load its ladder reached to read that capacity (the first failing load, else the capacity's):
    a re-run climbs at least that far whatever its ``--ladder-budget``, so the two capacities are
    read at the same loads; ``tuned``: a configuration search chose it (else the engine's
    defaults or the user's flags); ``numerics``: "reference" (the precision of the fidelity
    reference, fp32) or what the configuration lowers (e.g. "lower precision (dtype=bfloat16)",
    "q8_0 weights"): its fidelity check (when one ran) faced the floor for other numerics, not the strict one.

    To deploy it without this harness's run folder: ``engine_version``; ``display_name`` (what ran,
    e.g. "OpenVINO GenAI (ContinuousBatchingPipeline, fp32 IR)"); ``shim`` (the module of this
    repository's server around the engine's library, "" when the engine's own server ran) and the
    nearest ``production_server``; ``install`` (commands that build its environment); ``serve``
    (``bench serve recipe.json --host HOST --port PORT``: the same launch, outside a benchmark);
    ``command_template`` / ``env_template``: the command line with ``{python}`` (the engine's
    interpreter), ``{project}`` (this repository), ``{model}``, ``{host}`` and ``{port}`` as
    parameters; ``model`` (``name``, ``digest``: SHA-256 over the folder's files, ``source``);
    ``hardware`` (``name``, ``kind``, ``cpu_model``, ``num_devices``); ``harness_version`` and
    ``git_sha`` (the commit that measured it)."""

    schema_version: str = SCHEMA_VERSION
    engine: str
    engine_args: dict[str, str] = Field(default_factory=dict)
    threads: int | None = None
    command: str = ""
    env: dict[str, str] = Field(default_factory=dict)
    run_id: str = ""
    workload: str = ""
    slos: dict[str, float] = Field(default_factory=dict)
    capacity_tps: float | None = None
    capacity_interval: tuple[Bound, Bound] | None = None
    capacity_open: bool = False
    climb_to: int | None = Field(default=None, ge=1)
    tuned: bool = False
    numerics: str = "reference"
    # What it takes to deploy it elsewhere (issue 41): empty in recipes written before
    engine_version: str | None = None
    display_name: str = ""
    shim: str = ""
    production_server: str = ""
    install: list[str] = Field(default_factory=list)
    serve: str = ""
    command_template: str = ""
    env_template: dict[str, str] = Field(default_factory=dict)
    model: dict[str, str | None] = Field(default_factory=dict)
    hardware: dict[str, str | int | None] = Field(default_factory=dict)
    harness_version: str | None = None
    git_sha: str | None = None
    energy: EnergyFigures | None = None  # J per output token at its capacity point (ladder.json's), None figures with the reason when unread
    energy_provisioned: EnergyFigures | None = None  # the same from --watts (None without it)
