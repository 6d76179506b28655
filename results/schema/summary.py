"""``summary.json``: :class:`RunSummary`, what each engine measured in one run, and the
run's greedy-equivalence check."""

from __future__ import annotations

from pydantic import Field

from .base import SCHEMA_VERSION, Artefact
from .engine import EngineResult, EngineStatus
from .parity import ParityAudit


class EquivalenceResult(Artefact):
    """Greedy output agreement of one engine with the reference engine, token by token."""

    token_agreement: float | None = None
    exact_matches: int = 0
    prompts: int = 0
    first_divergence: list[int | None] = Field(default_factory=list)


class Equivalence(Artefact):
    """The greedy-equivalence check of a run (harness.loadgen.equivalence)."""

    reference: str
    prompts: list[str] = Field(default_factory=list)
    max_tokens: int = 0
    engines: dict[str, EquivalenceResult] = Field(default_factory=dict)


class RunSummary(Artefact):
    """``summary.json``: what each engine measured in one run."""

    schema_version: str = SCHEMA_VERSION
    run_id: str
    workload: str = "unknown"
    slos: dict[str, float] = Field(default_factory=dict)
    repeats: int = 1  # ``--repeats``: rounds of every engine, interleaved (A B C, A B C)
    engines: dict[str, EngineResult] = Field(default_factory=dict)
    equivalence: Equivalence | None = None
    parity: ParityAudit | None = None  # engine-configuration parity audit (None = an older run)

    def ok_engines(self) -> list[str]:
        """Names of the engines with status ok, in run order."""
        return [n for n, e in self.engines.items() if e.status is EngineStatus.OK]
