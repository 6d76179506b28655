"""``ladder.json``: the main job's load ladders (each engine's capacity at the SLO) and the
decision they make: :class:`LadderSummary`, one :class:`EngineLadder` per engine with its
:class:`LadderPoint` s and :class:`CapacityAtSLO`, and the :class:`Decision`."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .base import SCHEMA_VERSION, Artefact, Bound
from .energy import EnergyFigures
from .engine import EngineStatus
from .series import EngineSeries
from .fidelity import FidelityResult
from .jobs import CacheFigures, JobFigures
from .metrics import Metrics
from .metric_registry import tps_figure

LADDER_FILE = "ladder.json"


class LadderPoint(Artefact):
    """One load of an engine's ladder (``harness.app.run.ladder``): ``load`` requests (agentic:
    sessions) in flight, closed loop; ``index`` its place in the order measured (its records'
    ``probe``); ``seeds`` of its measurements (one per repeat, in repeat order; fresh prompts each)
    and the requests each planned (``planned_requests``, agentic: turns; with its seed it rebuilds
    the measurement's workload, ``harness.app.run.ladder_trial.measurement_options``); ``metrics``
    pooled over them and ``repeats`` each one's (empty for one). The verdict: ``passed`` (every
    SLO held and failures within the bound), ``margin`` (max over SLOs of value / threshold;
    None = infinite), ``values`` (each SLO's judged value in ms; None = infinite),
    ``failure_rate``, ``binding`` (the SLO nearest its threshold, or "errors"). The frontier's
    axes: ``output_tps`` (output tokens/s per device), ``request_rate`` (requests/s; agentic:
    sessions/s), ``per_user_tps`` (tokens/s per user: 1000 / median TPOT). ``wall_s``: its
    measurements' wall time (s). ``client_limited``: the client sent its requests faster than
    half its calibrated maximum there, so it may be what limited the load (never held against
    the engine: measure again with more ``--client-workers``). ``energy``: J per output token
    there with its interval, by the run's energy source (every figure None with the reason when
    none could be read); ``energy_provisioned``: the same from ``--watts`` (None without it)."""

    index: int
    load: int
    seeds: list[int] = Field(default_factory=list)
    planned_requests: list[int] = Field(default_factory=list)
    metrics: Metrics | None = None
    repeats: list[Metrics] = Field(default_factory=list)
    passed: bool = False
    margin: float | None = None
    values: dict[str, float | None] = Field(default_factory=dict)
    failure_rate: float = 0.0
    binding: str = ""
    output_tps: float = 0.0
    request_rate: float = 0.0
    per_user_tps: float | None = None
    wall_s: float = 0.0
    client_limited: bool = False
    energy: EnergyFigures | None = None
    energy_provisioned: EnergyFigures | None = None
    series: list[EngineSeries] = Field(default_factory=list)  # the engine's /metrics over each measurement (issue 43)
    jobs: JobFigures | None = None  # an agentic point's jobs (harness.scoring.capacity.jobs); None: not agentic, or an older run
    cache: CacheFigures | None = None  # an agentic point's prefix cache against the theoretical (harness.scoring.capacity.jobs)


def tps_interval_text(interval: tuple[float, float] | None) -> str:
    """A capacity's 95 % interval as every table and sentence prints it: ``"[69.1–78.4]"`` (``tps_figure``); "" for None."""
    return "" if interval is None else f"[{tps_figure(interval[0])}–{tps_figure(interval[1])}]"


class CapacityAtSLO(Artefact):
    """An engine's capacity at the SLO (``harness.scoring.capacity.frontier``): ``output_tps`` (output
    tokens/s per device) with its 95 % ``interval`` (bootstrap; None = not computed),
    ``request_rate`` (requests/s; agentic: sessions/s), ``load`` (the boundary's concurrency,
    interpolated), ``bracket`` (passing load, failing load; None = not found), ``open`` (no load
    failed: a lower bound, shown as ≥), ``binding`` (what broke at the failing load: an SLO key
    or "errors"), ``never_met`` (the lowest load failed), ``usd_per_1m_output_tokens`` at it
    (None without a price), and for ``--target-load`` the ``devices_needed`` and
    ``usd_per_hour`` of serving it (at most, when the capacity is open); ``measurements``: the
    fewest measurements of the points it rests on; ``spread`` / ``spread_df``: the run's spread
    between measurements its interval holds (``harness.scoring.capacity.spread``: the standard
    deviation of one measurement's effect on log throughput, and its degrees of freedom; None /
    0: no point of the run was measured twice, so an interval resting on points measured once
    holds the requests' noise only, not the run-to-run noise). ``energy`` / ``energy_provisioned``: the figures of the point at
    ``energy_load`` in flight (the highest passing load below the boundary), as
    :class:`LadderPoint` has them (None: never met, or an older run)."""

    output_tps: float
    interval: tuple[Bound, Bound] | None = None
    request_rate: float = 0.0
    load: float = 0.0
    bracket: tuple[float | None, float | None] = (None, None)
    open: bool = False
    binding: str = ""
    never_met: bool = False
    usd_per_1m_output_tokens: float | None = None
    devices_needed: int | None = None
    usd_per_hour: float | None = None
    measurements: int = 1
    spread: float | None = None
    spread_df: int = 0
    lowest_fails: float = 0.0  # the share of bootstrap draws in which even the lowest load fails (interval down to 0)
    floor: float | None = None  # tok/s per device it is at least, and ceiling: at most (None: nothing bounds it), as
    ceiling: float | None = None  # the race reads them (harness.scoring.capacity.race); None in older runs
    energy: EnergyFigures | None = None
    energy_provisioned: EnergyFigures | None = None
    energy_load: int | None = None
    jobs_per_hour: float | None = None  # agentic: jobs (sessions) completed per hour per device at it (request_rate × 3600 / devices)

    @property
    def tps_text(self) -> str:
        """The capacity as every sentence and table prints it (the verdict, the capacity table, the
        tuning's lines, bench compare, the race): output tok/s per device in ``tps_figure``'s form
        (one decimal, as every tok/s figure), ``≥`` when open; its interval, floor and ceiling are
        printed in the same form (:attr:`interval_text`, ``tps_figure``)."""
        return f"{'≥ ' if self.open else ''}{tps_figure(self.output_tps)}"

    @property
    def interval_text(self) -> str:
        """Its 95 % interval as every table prints it: ``"[12.2–15.1]"`` (the capacity's decimals); "" without one."""
        return tps_interval_text(self.interval)

    @property
    def jobs_text(self) -> str:
        """Its jobs per hour per device as the verdict and the capacity table print it (3 significant
        digits: :func:`results.schema.metric_registry.jobs_figure`; ``≥`` when open); "" when not counted (not agentic, older run)."""
        if self.jobs_per_hour is None:
            return ""
        from .metric_registry import jobs_figure

        figure = jobs_figure(self.jobs_per_hour)
        return f"{'≥ ' if self.open else ''}{figure}"

    @property
    def load_text(self) -> str:
        """Its load in flight as the verdict and the capacity table print it (3 significant digits)."""
        return f"{'≥ ' if self.open else ''}{self.load:.3g}"


class EngineLadder(Artefact):
    """One engine's ladder: ``status`` and ``reason`` (as in ``summary.json``), why it stopped
    (``stopped``: slo, saturated, max_load, budget, max_points, crashed), the engine's last words
    when it died (``crash``, at ``crashed_at`` in flight), its ``points`` in load order, its
    ``capacity`` (None without points), ``excluded`` (the gate's one line; "" = eligible),
    ``reference`` (the yardstick), and the tie-breakers: ``startup_s``, ``processes``,
    ``verified_features``, ``peak_memory_bytes``; ``display_name``."""

    status: EngineStatus
    reason: str = ""
    stopped: str = ""
    crash: str = ""
    crashed_at: int | None = None
    points: list[LadderPoint] = Field(default_factory=list)
    capacity: CapacityAtSLO | None = None
    excluded: str = ""
    excluded_stage: str = ""  # the gate that excluded it (harness.scoring.gates.GATES); "" = eligible, or an older run
    reference: bool = False
    display_name: str | None = None
    devices: int | None = None  # devices one deployment of it used (its launch's parallel sizes, --devices); None: the run's
    startup_s: float | None = None
    startup_alone: bool | None = None  # startup_s was measured with no other engine starting (None: older run)
    processes: int | None = None
    verified_features: int | None = None
    peak_memory_bytes: float | None = None
    fidelity: FidelityResult | None = None  # the output-fidelity check (None: not checked)
    race: str = ""  # why the main job measured it no more: out of the race (harness.scoring.capacity.race); "" = it was not
    eviction_cliff: int | None = None  # agentic: the load where its measured hit rate fell away from the optimal (harness.metrics.cache)


class Decision(Artefact):
    """The verdict (``harness.scoring.verdict.verdict``): ``winner`` ("" = none), ``runner_up``,
    ``ratio`` of their capacities with its 95 % ``ratio_interval`` and 90 %
    ``equivalence_interval``, the ``outcome`` (``harness.scoring.verdict.verdict``: *separated*,
    *equivalent*, *not_separated*, *undecided*, *single*, *none*), the ``leader`` (highest
    capacity, winner or not), ``tie`` (equivalent: the 90 % interval inside the 5 % margin) and
    the ``tie_breaker`` that then decided, ``undecided`` (the first of ``unsettled``: engines
    whose ladder stopped before an SLO broke, so they may be better than the leader: then there
    is no winner), ``interrupted`` (who stopped the
    run before it finished: the verdict rests on what was measured), ``binding`` (the winner's
    deciding constraint), ``sentence`` (the verdict in one sentence), ``ranking`` (eligible production engines, best first), ``yardsticks``,
    ``excluded`` (engine → one line), the ``slos`` that decided (key → ms) and whether they were
    the defaults, the load ``unit`` (``sessions`` or ``requests`` in flight)."""

    winner: str = ""
    runner_up: str = ""
    ratio: float | None = None
    ratio_interval: tuple[Bound, Bound] | None = None
    tie: bool = False
    tie_breaker: str = ""
    undecided: str = ""
    outcome: str = ""  # separated | equivalent | not_separated | undecided | single | none ("" = written before)
    leader: str = ""
    equivalence_interval: tuple[Bound, Bound] | None = None
    unsettled: list[str] = Field(default_factory=list)
    interrupted: str = ""
    binding: str = ""
    sentence: str = ""
    ranking: list[str] = Field(default_factory=list)
    yardsticks: list[str] = Field(default_factory=list)
    excluded: dict[str, str] = Field(default_factory=dict)
    slos: dict[str, float] = Field(default_factory=dict)
    slos_default: bool = False
    unit: str = "requests"


class TunedConfig(Artefact):
    """One configuration an engine's search tried (``bench run --tune``,
    :mod:`harness.scoring.verdict.tuning`): ``id`` (its records' engine name, e.g. ``vllm#2``),
    ``engine_args`` (what it ran with: the run's own engine args and the knobs the search set; {}
    = the engine's defaults), ``label`` (the knobs the search set, or "defaults"), ``status`` (``measured``;
    ``rejected``: the engine refused it, with the engine's line in ``reason``; ``failed``;
    ``unfaithful``: it lowers precision and its answers fell below the fidelity floor, the check's
    line in ``reason``; ``interrupted``: the search was stopped while it measured or before its turn),
    ``numerics`` ("reference": the baseline's precision; else what it lowers, e.g. "lower
    precision (dtype=bfloat16)", ``--tune-lower-precision``),
    ``rungs`` of the search it reached, ``measuring_s`` spent on it, its ``ladder`` (points and
    capacity at the SLO, judged as the main job's are) and ``command`` (the command line it ran)."""

    id: str
    engine_args: dict[str, str] = Field(default_factory=dict)
    label: str = ""  # the knobs as one line ("max_num_seqs=32"; "defaults")
    status: str = "measured"
    reason: str = ""
    rungs: int = 0
    measuring_s: float = 0.0
    ladder: EngineLadder | None = None
    command: str = ""
    numerics: str = "reference"


class EngineTuning(Artefact):
    """One engine's configuration search: the ``space`` searched (knob → values), the ``method``
    ("successive halving", "grid"), its ``budget_s`` and the ``used_s`` of it (s of measuring),
    every configuration tried (``configs``, the defaults first), the one ``chosen`` (its id; the
    main job measured it under the engine's own name), the ``gain`` tuning gave (tuned capacity
    over the defaults') with its 95 % ``gain_interval`` and whether it is none (``gain_none``:
    within the noise or 5 %) as ``gain_text``, the ``envelope`` over every configuration's
    passing points and the main job's ((tokens/s per user, output tokens/s per device), the
    Pareto frontier, by tokens/s per user), and a ``note`` (why nothing was searched, e.g. an endpoint).
    When the search chose other than the defaults, the defaults climbed afresh as the main job
    climbs: ``defaults`` (that ladder, the out-of-the-box capacity the gain is over), its records'
    engine name ``defaults_id`` (``vllm#defaults``), ``defaults_s`` of measuring (outside the
    search's budget) and ``defaults_reason`` when that climb failed. ``interrupted``: who stopped
    the search before it chose (then ``chosen`` is "" and the gain not measured).
    ``lower_precision``: the user allowed configurations of lower precision
    (``--tune-lower-precision``), each gated by the output-fidelity check."""

    space: dict[str, list[str]] = Field(default_factory=dict)
    method: str = ""
    budget_s: float = 0.0
    used_s: float = 0.0
    configs: list[TunedConfig] = Field(default_factory=list)
    chosen: str = ""
    gain: float | None = None
    gain_interval: tuple[Bound, Bound] | None = None
    gain_none: bool = True
    gain_text: str = ""
    envelope: list[tuple[float, float]] = Field(default_factory=list)
    note: str = ""
    defaults: EngineLadder | None = None
    defaults_id: str = ""
    defaults_s: float = 0.0
    defaults_reason: str = ""
    interrupted: str = ""  # who stopped the search before it chose (Ctrl-C, SIGTERM); then chosen is ""
    lower_precision: bool = False

    def config(self, config_id: str) -> TunedConfig | None:
        return next((c for c in self.configs if c.id == config_id), None)


class SpreadPrior(Artefact):
    """The spread between measurements that earlier runs on this machine showed, frozen into a
    run when it started (``harness.app.run.spread_history``) so that deciding it again gives the
    same intervals: ``runs`` (their ids, newest first) and ``groups`` (per point measured more
    than once within one of them, or by one engine set up alike in several of them, each
    measurement's ``[log output tok/s, its sampling variance]``; ``harness.scoring.capacity.spread``)
    and ``df``: the degrees of freedom they are worth (the points measured across runs share each
    run's state, so those count one per run beyond the first, not one per measurement)."""

    runs: list[str] = Field(default_factory=list)
    groups: list[list[tuple[float, float]]] = Field(default_factory=list)
    df: int | None = None  # the degrees of freedom the groups are worth (None: one per measurement beyond each group's first)


class LadderSummary(Artefact):
    """``ladder.json``: a run whose engines climbed load ladders. ``workload``, ``slos`` (key →
    ms) and whether they were the defaults, ``max_failure_rate``, ``devices`` (throughput is per
    device), ``budget_per_engine_s`` (s of measuring per engine's first climb, at most),
    ``time_budget_s`` (the whole job's), ``boundary_repeats`` (the most repeats of a bracket point), ``seed`` (measurement m of an engine draws seed + m),
    ``engines`` (name → :class:`EngineLadder`), ``decision``, ``target_load`` (``--target-load``:
    the load to size for, with its unit), ``wall_s``, ``tuning`` (``--tune``: each engine's
    configuration search, :class:`EngineTuning`; the ``engines`` are then the tuned ones) and
    ``allow_unchecked`` (``--allow-unchecked``: an engine whose output-fidelity check could not
    run, or covered too few prompts, competes; else the gate excludes it); ``spread_prior``: the
    spread between measurements earlier runs on this machine showed, pooled with this run's own
    (:class:`SpreadPrior`; None: none, or an older run)."""

    schema_version: str = SCHEMA_VERSION
    run_id: str
    workload: str
    slos: dict[str, float] = Field(default_factory=dict)
    slos_default: bool = False
    max_failure_rate: float = 0.05
    devices: int = 1
    budget_per_engine_s: float | None = None
    time_budget_s: float | None = None  # --time-budget: the whole job's (None: an older run)
    boundary_repeats: int = 0
    seed: int = 0
    engines: dict[str, EngineLadder] = Field(default_factory=dict)
    decision: Decision | None = None
    target_load: dict[str, Any] | None = None
    wall_s: float | None = None
    tuning: dict[str, EngineTuning] = Field(default_factory=dict)  # bench run --tune: engine → its search
    allow_unchecked: bool = False
    cache_optimal: float | None = None  # agentic: the workload's theoretical prefix-cache hit rate, infinite cache (None: not computed)
    spread_prior: SpreadPrior | None = None
