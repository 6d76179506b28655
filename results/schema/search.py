"""``search.json``: a ``bench search`` run (capacity under SLOs): :class:`SearchSummary`, each
engine's :class:`EngineSearch` with its probes, and the capacity ranking."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .base import SCHEMA_VERSION, Artefact
from .engine import EngineStatus, ResourceUse
from .metrics import Interval, Metrics

SEARCH_FILE = "search.json"


class LoadProbe(Artefact):
    """One probe point of a capacity search (``harness.app.search.capacity.search_capacity``).

    ``load``: the offered load (the caller's unit: req/s, sessions/s or concurrency);
    ``meets_slo``: every SLO held at its percentile; ``saturated``: the achieved arrival rate
    fell short of the offered one beyond the validity band (counts as a fail); ``achieved``:
    the achieved arrival rate (req/s; None = not measured); ``values``: the judged value of
    each SLO in ms by its key (``{"ttft_p99": 21.3}``; None = infinite: the percentile landed
    on a failed request, or no value); ``reason``: a human sentence; ``duration_s``: the
    probe's wall time by the search's clock (filled in by :func:`search_capacity`).
    """

    load: float
    meets_slo: bool
    saturated: bool = False
    achieved: float | None = None
    values: dict[str, float | None] = Field(default_factory=dict)
    reason: str = ""
    duration_s: float | None = None
    margin: float | None = None  # max over SLOs of value / threshold (None = infinite, or an older run)
    binding: str = ""  # the SLO key with the largest ratio, "errors" or "saturated"

    @property
    def passed(self) -> bool:
        """Meets every SLO and is not saturated."""
        return self.meets_slo and not self.saturated


class SearchProbe(LoadProbe):
    """One stored probe point of ``bench search``: a :class:`LoadProbe` plus its index, the
    workload seed it was drawn with and the probe's full :class:`Metrics` (None when it
    measured nothing).

    With ``--repeats N`` (N > 1) the probe is N measurements back to back: ``metrics`` are
    pooled over them (the verdict is judged on these), ``repeats`` holds each repeat's own
    metrics, ``repeat_passed`` each repeat's own verdict, ``seeds`` each repeat's workload seed
    (``seed`` is the first's). ``intervals``: the headline numbers' 95 % intervals (over
    repeats, or over the requests of the one repeat). All empty in files from before repeats.
    ``resources``: what the engine's process group used during the probe's measurements
    (combined over its repeats; None for an endpoint the harness did not start, or an older
    file); ``engine_metrics``: the engine's own counters over the last repeat ({} without them).
    """

    index: int
    seed: int | None = None
    metrics: Metrics | None = None
    seeds: list[int] = Field(default_factory=list)  # per repeat; empty for one repeat
    repeats: list[Metrics] = Field(default_factory=list)  # per repeat; empty for one repeat
    repeat_passed: list[bool] = Field(default_factory=list)  # each repeat's own verdict
    intervals: dict[str, Interval] = Field(default_factory=dict)
    resources: ResourceUse | None = None
    engine_metrics: dict[str, Any] = Field(default_factory=dict)


class EngineSearch(Artefact):
    """One engine's capacity search: the fields of ``harness.app.search.capacity.CapacityResult``
    (``capacity`` in ``unit``, 0 = no probe passed; ``stopped``: converged | budget | max_probes
    | never_met | high_reached, or ``interrupted`` / ``failed``; ``bracket``: highest passing,
    lowest failing load; ``elapsed_s``, ``budget_s`` s) with :class:`SearchProbe` probes, and the
    engine's status (``ok``: searched; ``failed``: crashed or interrupted, probes kept;
    ``skipped``: cannot run here) with its reason."""

    status: EngineStatus = EngineStatus.OK
    reason: str = ""
    display_name: str | None = None
    version: str | None = None
    startup_s: float | None = None
    capacity: float = 0.0
    stopped: str | None = None
    bracket: tuple[float | None, float | None] = (None, None)
    probes: list[SearchProbe] = Field(default_factory=list)
    message: str = ""
    elapsed_s: float = 0.0
    low: float | None = None
    high: float | None = None
    tolerance: float | None = None
    budget_s: float | None = None
    max_probes: int | None = None
    integer: bool = False
    unit: str = ""


class CapacityRank(Artefact):
    """One engine's place in the capacity ranking (``harness.scoring.verdict.capacity_ranking``):
    ``rank`` 1 = highest capacity (tied engines share a rank); ``tied_with``: engines whose
    capacity bracket overlaps this one's; ``reference``: the yardstick engine (never
    recommended); ``at_least``: the search stopped before a failing load above the capacity
    was found (budget, probe limit, ``--high``), so the capacity is a lower bound."""

    engine: str
    rank: int
    capacity: float
    bracket: tuple[float | None, float | None] = (None, None)
    tied_with: list[str] = Field(default_factory=list)
    reference: bool = False
    at_least: bool = False


class CapacityRecommendation(Artefact):
    """Engines ranked by their capacity under the SLOs, and the deciding sentence.

    ``recommended``: the highest-capacity production engine with a capacity above 0 (None when
    none); ``sentence``: e.g. "sglang sustains 3.1 sessions/s at p99 TTFT ≤ 500 ms and p99 TPOT
    ≤ 50 ms; vllm 2.4; own 2.2 (yardstick)"; ``tie_groups``: engines tied by overlapping
    brackets; ``excluded``: engine → why it is not ranked (failed, skipped)."""

    recommended: str | None = None
    sentence: str = ""
    unit: str = ""
    ranking: list[CapacityRank] = Field(default_factory=list)
    tie_groups: list[list[str]] = Field(default_factory=list)
    excluded: dict[str, str] = Field(default_factory=dict)
    method: str = ""


class SearchSummary(Artefact):
    """``search.json``: a ``bench search`` run (capacity under SLOs per engine).

    ``search_var``: ``rate`` (requests/s; agentic: session starts/s) or ``concurrency``
    (in-flight requests, open rate); ``unit``: the load's unit; ``slos``: key → threshold ms
    (``slos_default``: the defaults were used, no ``--slo``); ``budget_s``: the whole search's
    budget (s), ``budget_per_engine_s`` its even share per engine; ``requests_per_probe``: the
    workload's request count per measurement; ``repeats``: measurements per probe (``--repeats
    N``); ``seed``: the base seed (repeat ``k`` of probe ``i`` uses seed + i * N + k);
    ``wall_s``: the command's wall time (s), engine start-ups included."""

    schema_version: str = SCHEMA_VERSION
    run_id: str
    workload: str
    search_var: str
    unit: str
    slos: dict[str, float] = Field(default_factory=dict)
    slos_default: bool = False
    low: float
    high: float | None = None
    tolerance: float
    budget_s: float
    budget_per_engine_s: float
    max_probes: int
    requests_per_probe: int | None = None  # per measurement: a probe takes ``repeats`` of them
    repeats: int = 1  # ``--repeats``: measurements per probe, back to back; the verdict is on their pooled metrics
    seed: int = 0
    wall_s: float = 0.0
    engines: dict[str, EngineSearch] = Field(default_factory=dict)
    capacity_recommendation: CapacityRecommendation | None = None
