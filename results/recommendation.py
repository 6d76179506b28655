"""The recommendation as a stored artefact: ``<run-dir>/recommendation.json``.

The models a :class:`Recommendation` consists of (what ``harness.scoring.recommend`` returns,
what ``bench recommend --json`` prints and what the reports render), and the helpers that write
and read it. Imports nothing of the harness: only pydantic, the standard library and
``results``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, computed_field

from .errors import ResultsError
from .schema import Interval

RECOMMENDATION_FILE = "recommendation.json"

DEFAULT_MEMORY_UTILIZATION = 0.9  # vLLM's default gpu_memory_utilization
TIE_BREAK = "equal scores are ordered by higher output throughput, then lower p99 TTFT, then engine name"
"""The tie-break rule the scorer applies and states in every result."""


class MemoryFit(BaseModel):
    """Does the model + KV cache fit the target? All sizes in bytes.

    ``kv_bytes_per_token = 2 (K and V) × num_layers × num_kv_heads × head_dim × dtype_bytes``
    (vLLM's KV cache sizing, :func:`results.model_geometry.kv_bytes_per_token`);
    ``kv_tokens = concurrency × context_tokens``;
    ``total_bytes = weights_bytes + kv_bytes_per_token × kv_tokens``;
    ``usable_bytes = memory_bytes × devices_used × memory_utilization``.
    ``fits`` is None when something needed was not recorded (then ``arithmetic`` says what).
    """

    engine: str
    fits: bool | None = None
    num_params: int | None = None
    dtype_bytes: int | None = None
    weights_bytes: int | None = None
    num_layers: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    kv_bytes_per_token: int | None = None
    concurrency: int | None = None
    concurrency_source: str = "not recorded"
    context_tokens: int | None = None
    kv_tokens: int | None = None
    kv_bytes: int | None = None
    total_bytes: int | None = None
    devices_used: int = 1
    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION
    usable_bytes: int | None = None
    headroom: float | None = None
    arithmetic: str = ""


class RankedEngine(BaseModel):
    """One surviving engine: ``score`` in [0, 1], ``components`` (criterion → normalized score in
    [0, 1]), ``contributions`` (criterion → wᵢ·sᵢ/Σw, summing to ``score``), ``metrics`` (raw
    values at ``condition``: ``*_ms`` in ms, ``output_throughput`` in tokens/s,
    ``request_throughput``/``goodput`` in requests/s).

    ``reference``: the reference engine, ranked as a yardstick and never the recommendation;
    ``declared_features``: the serving features its adapter declares — declared, unverified,
    never scored; ``verified_features``: the features its feature probes verified (over every
    run that probed it, ``harness.scoring.checks.features``; empty when it was not probed), which the
    ``features`` component counts; ``score_interval``: the median of its per-repeat scores with a 95 % bootstrap
    interval over repeats (``harness.scoring.weighted.ties``; None with fewer than 2 repeats). All
    default so recommendations stored before them still load.
    """

    rank: int
    engine: str
    display_name: str
    score: float
    components: dict[str, float]
    contributions: dict[str, float]
    metrics: dict[str, float | bool | None]
    condition: str
    repeats: int
    notes: list[str] = Field(default_factory=list)
    reference: bool = False
    declared_features: list[str] = Field(default_factory=list)
    verified_features: list[str] = Field(default_factory=list)
    score_interval: Interval | None = None


class WeightFlip(BaseModel):
    """The smallest change of one criterion's weight that changes the winner (others fixed):
    above ``to_weight`` (raising) or below it (lowering) ``new_winner`` wins."""

    criterion: str
    from_weight: float
    to_weight: float
    new_winner: str


class Recommendation(BaseModel):
    """The scorer's answer; JSON-serialisable (``model_dump_json``).

    ``winner`` is None when no engine survives the hard constraints (then ``message`` says why
    and :attr:`exit_code` is 1). ``eliminated`` maps engine → one-line reason (including
    skipped/failed/not-measured engines); ``elimination_stage`` maps engine → ``"not measured" |
    "hardware" | "feature" | "memory" | "slo"``.

    ``winner`` is never the reference engine (it is ranked, as a yardstick); ``yardstick`` is
    the sentence that says where the reference engine stands against the winner ("" when it
    was not measured).

    Noise (``harness.scoring.weighted.ties``): ``score_repeats`` is how many aligned repeats the score
    intervals rest on (< 2: none, no tie check possible); ``tie_groups`` the ranked engines
    grouped into ties (intervals overlapping the group leader's), best first;
    ``tied_with_winner`` the production engines tied with the winner; ``noise_could_flip``
    whether the winner's interval overlaps a production rival's (None = not measured or no
    rival). All default so older recommendation files still load.
    """

    winner: str | None
    winner_display_name: str | None = None
    ranking: list[RankedEngine]
    eliminated: dict[str, str]
    elimination_stage: dict[str, str]
    deciding_constraint: str
    sensitivity: list[str]
    weight_flips: list[WeightFlip] = Field(default_factory=list)
    weights: dict[str, float]
    preset: str
    hardware: dict[str, Any]
    slos: dict[str, float]
    required_features: list[str]
    memory_fit: dict[str, MemoryFit]
    workloads: list[str]
    runs: list[str]
    tie_break: str = TIE_BREAK
    notes: list[str] = Field(default_factory=list)
    message: str = ""
    yardstick: str = ""
    score_repeats: int = 0
    on_ladder: bool = False  # the run was decided on load ladders: this is the weighted lens on the ladder's points
    tie_groups: list[list[str]] = Field(default_factory=list)
    tied_with_winner: list[str] = Field(default_factory=list)
    noise_could_flip: bool | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def exit_code(self) -> int:
        """0 when an engine was recommended, 1 when none survives (also in the JSON)."""
        return 0 if self.winner is not None else 1


def write_recommendation(run_dir: Path | str, recommendation: Recommendation) -> Path:
    """Write ``recommendation`` to ``<run_dir>/recommendation.json`` and return that path.

    Atomic: written to ``recommendation.json.tmp`` first, then moved over the old file with
    ``os.replace``, so a reader never sees half a file. Raises OSError when the folder cannot
    be written.
    """
    path = Path(run_dir) / RECOMMENDATION_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(recommendation.model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


DECISIONS_DIR = "decisions"
"""The run folder's sub-folder of re-decisions (``bench recommend RUN --slo …``): one folder per
question, beside the run's own answer, never over it."""


def question_name(**asked: Any) -> str:
    """A folder name for one question from the options that were given (None or "" = not given):
    ``slo=tpot_p90=150,ttft_p90=2000`` → ``slo-tpot_p90=150,ttft_p90=2000``; "default" when none;
    a name over 150 characters is cut to 141 and ends with 8 hex digits of the whole question's
    SHA-256, so two long questions never share a folder."""
    import hashlib
    import re

    text = "_".join(f"{k}-{v}" for k, v in asked.items() if v not in (None, ""))
    name = re.sub(r"[^A-Za-z0-9_.,=+-]+", "-", text)
    if len(name) > 150:  # cut, and told apart from every other question cut alike by a digest of the whole
        name = name[:141] + "-" + hashlib.sha256(text.encode()).hexdigest()[:8]
    return name or "default"


def write_decision(run_dir: Path | str, name: str, recommendation: Recommendation, ladder: Any = None) -> Path:
    """Store a re-decision in ``<run_dir>/decisions/<name>/``: its ``recommendation.json`` and,
    for a ladder run decided again, its ``ladder.json`` (a :class:`results.schema.LadderSummary`);
    returns the folder. Raises OSError when it cannot be written."""
    folder = Path(run_dir) / DECISIONS_DIR / name
    folder.mkdir(parents=True, exist_ok=True)
    write_recommendation(folder, recommendation)
    if ladder is not None:
        from .schema import LADDER_FILE

        tmp = folder / (LADDER_FILE + ".tmp")
        tmp.write_text(ladder.model_dump_json(indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, folder / LADDER_FILE)
    return folder


def read_recommendation(run_dir: Path | str) -> Recommendation | None:
    """The stored ``<run_dir>/recommendation.json``, or None when the run has none (e.g.
    folders written before recommendations were stored).

    The stored ``exit_code`` is ignored on reading (it is computed from ``winner``). Raises
    :class:`results.errors.ResultsError` naming the file when it is not a valid recommendation.
    """
    path = Path(run_dir) / RECOMMENDATION_FILE
    if not path.is_file():
        return None
    try:
        return Recommendation.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as exc:
        raise ResultsError(
            f"{path} is not a readable recommendation ({type(exc).__name__}); "
            "delete it: `bench recommend` scores the run again from its measurements"
        ) from exc
