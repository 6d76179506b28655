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
    "q8_0 weights"): its fidelity check (when one ran) faced the floor for other numerics, not the strict one."""

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
    energy: EnergyFigures | None = None  # J per output token at its capacity point (ladder.json's), None figures with the reason when unread
    energy_provisioned: EnergyFigures | None = None  # the same from --watts (None without it)
