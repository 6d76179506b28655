"""``replay.json``: the replay-fidelity certificate of an agentic run (``harness.metrics.replay``):
what was sent against the sessions built for the same measurements, per statistic, within a
tolerance or flagged; and how those sessions cover the trace they were drawn from (not judged)."""

from __future__ import annotations

from pydantic import Field

from .base import SCHEMA_VERSION, Artefact

REPLAY_FILE = "replay.json"
REPLAY_TOLERANCE = 0.05
"""±5 %: a statistic sent further from the built sessions' is flagged."""


class CertificateRow(Artefact):
    """One statistic: ``trace`` (the whole trace's value at the run's scale), ``built`` (the
    sessions built for the measurements, pooled), ``sent`` (what those measurements sent; for the
    theoretical hit rates None: the prompts sent are not stored), ``deviation`` (sent / built − 1;
    hit rates: sent − built, in points of 1; None where the built is 0 and the sent is not),
    ``within`` (|deviation| ≤ the tolerance; None: shown, not judged), ``coverage`` (built /
    trace − 1, hit rates in points: how far the drawn sample is from the whole trace; never
    judged), ``unit``."""

    statistic: str
    unit: str = ""
    trace: float | None = None
    built: float | None = None
    sent: float | None = None
    deviation: float | None = None
    within: bool | None = None
    coverage: float | None = None


class EngineReplay(Artefact):
    """One engine's side of the certificate: the ``requests`` and ``sessions`` (jobs) it was
    sent over its ``measurements`` (a ladder's points and repeats), the ``left_out_sessions``
    (cut in flight by a measurement stopped early: on neither side), the ``failed_sessions`` (with a
    request the engine failed: on neither side, the engine's failure, not the replay's), the ``rows`` and the
    statistics ``flagged`` (sent outside the tolerance of built)."""

    requests: int = 0
    sessions: int = 0
    measurements: int = 0
    left_out_sessions: int = 0
    failed_sessions: int = 0
    rows: list[CertificateRow] = Field(default_factory=list)
    flagged: list[str] = Field(default_factory=list)


class ReplayCertificate(Artefact):
    """``replay.json``: ``trace`` (what was replayed: the file and importer, or the shipped
    trajectories), ``content`` (real / synthetic / mixed text), the scaling it was sent at
    (``scale`` of lengths; ``time_scale``: tool times ÷ it; ``think_time_scale`` for the shipped
    set), ``tolerance``, the trace's ``trace_sessions`` / ``trace_requests`` (every session once),
    the prefix cache the theoretical hit rates assume (``cache_blocks`` of ``block_tokens``
    tokens, LRU), and per engine its :class:`EngineReplay`; ``note``: what the sides are."""

    schema_version: str = SCHEMA_VERSION
    run_id: str = ""
    trace: str = ""
    content: str = "real"
    scale: float = 1.0
    time_scale: float = 1.0
    think_time_scale: float | None = None
    tolerance: float = REPLAY_TOLERANCE
    trace_sessions: int = 0
    trace_requests: int = 0
    block_tokens: int = 16
    cache_blocks: int = 0
    engines: dict[str, EngineReplay] = Field(default_factory=dict)
    note: str = ""
