"""The main job's decision from stored artefacts: ``ladder.json`` and the request records →
each engine's capacity at the SLO (with its interval), the gates, the verdict and its sentence.

Everything is recomputed from the records (no number an adapter declares about itself): each
ladder point's measurements are its records grouped by ``RequestRecord.repeat`` (``probe`` = the
point's index), read by :mod:`harness.scoring.capacity.frontier`; :mod:`harness.scoring.verdict.verdict` decides.
``bench run`` calls :func:`judge` when its ladders are done; ``bench report`` can call it again.
"""

from __future__ import annotations

import math
from typing import Sequence

from harness.metrics import SLO, slo_table
from results.hardware import cost_per_million_tokens
from results.schema import CapacityAtSLO, Decision, EngineLadder, EngineStatus, LadderSummary, RequestRecord
from results.schema.records import STOPPED_PHASE
from results.schema.metric_registry import metric_figure, tps_figure

from ..capacity.frontier import Capacity, PointSample, Requests, capacity_of, engine_stream, point_stats
from ..capacity.jobs import fill_jobs
from ..capacity.race import ceiling, floor
from ..capacity.samples import measured_span_s
from ..capacity.spread import Spread, spread_of
from ..formatting import METRIC_LABELS
from ..gates import REFERENCE_ENGINES, first
from .verdict import Candidate, Verdict, decide

MAX_SENTENCE = 320  # characters: the verdict is read at a glance

# The SLOs that decide when the user gives none (--slo replaces them), by hardware class and
# workload. p90, not p99: a ladder point holds tens of requests, whose p99 is their maximum.
# CPU (the 2-core reference machine, SmolLM2-135M, fp32): a 5 tokens/s reading speed (TPOT
# 200 ms); a first token within 2 s for chat-like prompts, 4 s for agentic turns, whose
# prompts carry the session's history (up to ~1,200 tokens here). GPU: the pairs production
# serving is judged by (TPOT 50 ms = 20 tokens/s per user; TTFT 500 ms, 1.5 s for agentic).
DEFAULT_SLOS = {
    ("cpu", "agentic"): "ttft_p90=4000,tpot_p90=200",
    ("cpu", ""): "ttft_p90=2000,tpot_p90=200",
    ("gpu", "agentic"): "ttft_p90=1500,tpot_p90=50",
    ("gpu", ""): "ttft_p90=500,tpot_p90=50",
}


def default_slos(hardware_kind: str, workload: str) -> list[SLO]:
    """The deciding SLOs when none are given (:data:`DEFAULT_SLOS`)."""
    from harness.metrics import parse_slos

    kind = "cpu" if hardware_kind == "cpu" else "gpu"
    return parse_slos(DEFAULT_SLOS.get((kind, workload), DEFAULT_SLOS[kind, ""]))


def _sessions(records: Sequence[RequestRecord], cut: set[str] | frozenset[str] = frozenset()) -> int:
    """Sessions whose every turn succeeded and none was cut (a point stopped early)."""
    by: dict[str, bool] = {}
    for r in records:
        key = r.session_id or r.request_id
        by[key] = by.get(key, True) and r.success and key not in cut
    return sum(by.values())


def ladder_points(engine: str, ladder: EngineLadder, records: Sequence[RequestRecord], devices: int,
                  agentic: bool) -> list[PointSample]:
    """An engine's ladder points as measured: its measured records by point (``probe``) and
    measurement (``repeat``)."""
    mine: dict[tuple[int, int], list[RequestRecord]] = {}
    cut: dict[tuple[int, int], set[str]] = {}  # sessions with a turn cut when the point stopped early
    for r in records:
        if r.engine == engine and r.phase == "measured" and r.probe is not None:
            mine.setdefault((r.probe, r.repeat), []).append(r)
        elif r.engine == engine and r.phase == STOPPED_PHASE and r.probe is not None:
            cut.setdefault((r.probe, r.repeat), set()).add(r.session_id or r.request_id)
    out = []
    for point in ladder.points:  # the measurements the ladder lists (an interrupted one is not a measurement)
        keys = [k for k in sorted(mine) if k[0] == point.index and k[1] < max(1, len(point.seeds))]
        if not keys:
            continue
        out.append(PointSample(float(point.load), tuple(Requests.of(mine[k], measured_span_s(mine[k])) for k in keys),
                               devices, tuple(_sessions(mine[k], cut.get(k, set())) for k in keys) if agentic else None))
    return out


def _stored(cap: Capacity, price_per_hour: float | None, target_tps: float | None, devices: int = 1) -> CapacityAtSLO:
    """The stored capacity: ``price_per_hour`` is USD per device-hour (the capacity is per device, so
    $/1M = price / per-device tok/s); ``devices``: what one deployment uses, so the devices a target
    needs are whole deployments of them."""
    usd = cost_per_million_tokens(price_per_hour, cap.output_tps) if price_per_hour is not None else None
    deployments = math.ceil(target_tps / (cap.output_tps * devices)) if target_tps and cap.output_tps > 0 else None
    needed = deployments * devices if deployments is not None else None
    top = ceiling(cap)
    return CapacityAtSLO(output_tps=cap.output_tps, interval=cap.interval, request_rate=cap.request_rate, load=cap.load,
                         floor=floor(cap), ceiling=top if math.isfinite(top) else None,
                         bracket=cap.bracket, open=cap.open, binding=cap.binding, never_met=cap.never_met,
                         measurements=cap.measurements, lowest_fails=cap.lowest_fails,
                         spread=round(cap.spread.tau, 6) if cap.spread.known else None,
                         spread_df=cap.spread.df if cap.spread.known else 0,
                         usd_per_1m_output_tokens=usd, devices_needed=needed,
                         usd_per_hour=needed * price_per_hour if needed is not None and price_per_hour is not None else None)


def _fill_points(ladder: EngineLadder, cap: Capacity, client_rps: float | None = None) -> None:
    """Each stored point's verdict and frontier coordinates, as the capacity judged them, and
    whether the client may have limited it (its request rate above ``client_rps``)."""
    by_load = {int(p.load): p for p in cap.points}
    for point in ladder.points:
        stats = by_load.get(point.load)
        if stats is None:
            continue
        finite = lambda v: v if math.isfinite(v) else None  # noqa: E731  (JSON has no infinity)
        point.passed, point.margin, point.binding = stats.passed, finite(stats.margin), stats.binding
        point.values = {k: finite(v) for k, v in stats.values.items() if not math.isnan(v)}
        point.failure_rate, point.output_tps = stats.failure_rate, stats.output_tps
        point.request_rate, point.per_user_tps = stats.request_rate, stats.per_user_tps
        requests_per_s = point.metrics.request_throughput if point.metrics is not None else stats.request_rate
        point.client_limited = bool(client_rps and requests_per_s and requests_per_s > client_rps)


def gate(name: str, ladder: EngineLadder, cap: Capacity | None, max_failure_rate: float, *,
         allow_unchecked: bool = False) -> tuple[str, str] | None:
    """The measured gates of :data:`harness.scoring.gates.GATES` on one ladder: ``(stage,
    one-line reason)`` of the first ``name`` fails, None when it passes them: did not start or
    measure, or crashed under load (``not measured``); failed above the bound at the lowest load
    (``reliability``); missed the SLO at the lowest load (``slo``); its outputs fell below the
    fidelity floor (``harness.metrics.fidelity``), or its fidelity check was asked for
    (``ladder.fidelity`` is not None) but could not run or covered fewer than 90 % of the
    prompts, unless ``allow_unchecked`` (``--allow-unchecked``; :meth:`FidelityResult.exclusion`)
    (``fidelity``). No check asked for (``--fidelity-prompts 0``): no fidelity gate."""
    if ladder.status is EngineStatus.SKIPPED or ladder.status is EngineStatus.NOT_MEASURED:
        return "not measured", ladder.reason or ladder.status.value
    if ladder.crash:
        return "not measured", f"crashed under load ({ladder.crashed_at} in flight): {ladder.crash}"[:300]
    if cap is None:
        return "not measured", ladder.reason or "no ladder point was measured"
    if cap.never_met:
        lowest = cap.points[0]
        if lowest.binding == "errors":
            return "reliability", (f"failed {lowest.failure_rate:.0%} of its requests at the lowest load "
                                   f"(bound {max_failure_rate:.0%})")
        shown = ", ".join(f"{k} {metric_figure(k, v)} ms" for k, v in lowest.values.items())
        return "slo", f"misses the SLO at the lowest load ({int(lowest.load)} in flight: {shown})"
    if ladder.status is not EngineStatus.OK:
        return "not measured", ladder.reason or "failed"
    if ladder.fidelity is not None and (why := ladder.fidelity.exclusion(allow_unchecked)):
        return "fidelity", why
    return None


def run_points(summary: LadderSummary, records: Sequence[RequestRecord]) -> dict[str, list[PointSample]]:
    """Every engine's :func:`ladder_points` in ``summary``, by name."""
    agentic = summary.workload == "agentic"
    return {name: ladder_points(name, ladder, records, ladder.devices or summary.devices, agentic)
            for name, ladder in summary.engines.items()}


def run_spread(points: dict[str, list[PointSample]], summary: LadderSummary | None = None) -> Spread:
    """The run's spread between measurements over every engine's ladder ``points``, pooled with
    the earlier runs' that ``summary`` took in (its ``spread_prior``;
    :func:`harness.scoring.capacity.spread.spread_of`)."""
    stored = summary.spread_prior if summary is not None else None
    return spread_of([[p.repeats for p in pts] for pts in points.values()], stored.groups if stored is not None else [],
                     stored.df if stored is not None else None)


def engine_capacity(summary: LadderSummary, name: str, records: Sequence[RequestRecord], slos: Sequence[SLO],
                    seed: int = 0, points: list[PointSample] | None = None,
                    spread: Spread | None = None) -> tuple[Capacity | None, list[PointSample]]:
    """Engine ``name``'s capacity at ``slos`` from its ladder's records (None when it measured no
    point), with its bootstrap draws from the engine's own random stream
    (:func:`harness.scoring.capacity.frontier.engine_stream` of ``seed``), and the points it was read from
    (``points``: those already read by :func:`ladder_points`, for a caller deciding one ladder at
    many SLOs); ``spread``: the run's spread between measurements (:func:`run_spread`; None: read
    from every ladder of ``summary``)."""
    ladder = summary.engines[name]
    if points is None:
        points = ladder_points(name, ladder, records, ladder.devices or summary.devices, summary.workload == "agentic")
    if spread is None:
        spread = run_spread(run_points(summary, records), summary)
    cap = capacity_of(points, slos, summary.max_failure_rate, seed=engine_stream(seed, name), spread=spread) if points else None
    if cap is not None and ladder.stopped == "saturated":
        cap.open = False  # the engine's throughput stopped rising: its capacity, not a lower bound
    return cap, points


def judge(summary: LadderSummary, records: Sequence[RequestRecord], slos: Sequence[SLO], *,
          price_per_hour: float | None = None, target_tps: float | None = None, extra_gates: dict[str, tuple[str, str]] | None = None,
          client_rps: float | None = None, interrupted: str = "", seed: int = 0,
          points: dict[str, list[PointSample]] | None = None) -> LadderSummary:
    """Fill each engine's capacity and the decision of ``summary`` (in place; also returned)
    from ``records``; ``price_per_hour``: USD per device-hour (``results.hardware.device_price``); ``extra_gates``: exclusions decided elsewhere (the
    declared gates of :data:`harness.scoring.gates.GATES`: hardware, a required feature, memory
    fit), engine → (stage, one line); an engine failing several gates is excluded by the earliest; ``client_rps``: the request rate the client can send without
    limiting the load (half its calibrated maximum, times its workers; None = not calibrated):
    points above it are marked client-limited, never held against the engine; ``points``: each
    engine's :func:`ladder_points`, already read (the winner map decides one run at many SLOs)."""
    agentic = summary.workload == "agentic"
    candidates = []
    samples = dict(points or {})
    if any(name not in samples for name in summary.engines):
        samples = {**run_points(summary, records), **samples}
    spread = run_spread(samples, summary)
    for name, ladder in summary.engines.items():
        cap, samples[name] = engine_capacity(summary, name, records, slos, seed, samples[name], spread)
        if cap is not None:
            ladder.capacity = _stored(cap, price_per_hour, target_tps, ladder.devices or summary.devices)
            _fill_points(ladder, cap, client_rps)
        if agentic:
            fill_jobs(ladder, name, records, ladder.devices or summary.devices, summary.cache_optimal)
        found = first((extra_gates or {}).get(name), gate(name, ladder, cap, summary.max_failure_rate,
                                                           allow_unchecked=summary.allow_unchecked))
        ladder.excluded_stage, ladder.excluded = found if found is not None else ("", "")
        candidates.append(Candidate(name, cap, excluded=ladder.excluded, reference=name in REFERENCE_ENGINES,
                                    startup_s=ladder.startup_s, startup_alone=ladder.startup_alone is not False,
                                    processes=ladder.processes,
                                    verified_features=ladder.verified_features, peak_memory_bytes=ladder.peak_memory_bytes))
    verdict = decide(candidates)
    caps = {c.name: c.capacity for c in candidates}
    summary.decision = Decision(
        winner=verdict.winner, runner_up=verdict.runner_up, ratio=verdict.ratio, ratio_interval=verdict.ratio_interval,
        tie=verdict.tie, tie_breaker=verdict.tie_breaker, undecided=verdict.undecided, interrupted=interrupted,
        outcome=verdict.outcome, leader=verdict.leader, equivalence_interval=verdict.equivalence_interval,
        unsettled=verdict.unsettled,
        ranking=verdict.ranking, yardsticks=verdict.yardsticks,
        excluded={n: r for n, r in verdict.excluded.items()}, slos=slo_table(slos),
        slos_default=summary.slos_default, unit="sessions" if agentic else "requests",
        binding=_binding(caps.get(verdict.winner), summary, verdict.winner, samples.get(verdict.winner, []), slos))
    summary.decision.sentence = sentence(summary.decision, summary, slos)
    return summary


def _binding(cap: Capacity | None, summary: LadderSummary, name: str, points: Sequence[PointSample] = (),
             slos: Sequence[SLO] = ()) -> str:
    """The winner's deciding constraint, as a clause of the verdict; a claim that no SLO broke is
    made only when no measurement up to there broke one judged alone (else it says how many did,
    and that the pooled percentiles held)."""
    if cap is None:
        return ""
    ladder = summary.engines.get(name)
    top = int(cap.bracket[0] or 0)
    broke = _broken(points, slos, summary.max_failure_rate, top) if cap.open or (ladder and ladder.stopped == "saturated") else {}
    held = ""
    if broke:
        n = sum(len(p.repeats) for p in points if p.load <= top)
        held = (f"; {sum(broke.values())} of {n} measurements up to there broke "
                f"{', '.join(slo_words(k) for k in broke)} judged alone (the pooled percentiles held)")
    if ladder is not None and ladder.stopped == "saturated":
        return ("its throughput stopped rising before the pooled SLOs broke" if broke else
                "its throughput stopped rising before any SLO broke") + held
    if cap.open:
        return (f"the pooled SLOs held up to {top} in flight (a lower bound)" if broke else
                f"no SLO broke up to {top} in flight (a lower bound)") + held
    return f"{slo_words(cap.binding)} binds"


def _broken(points: Sequence[PointSample], slos: Sequence[SLO], max_failure_rate: float, top: int) -> dict[str, int]:
    """How many measurements at loads up to ``top`` failed when judged alone, by what broke."""
    out: dict[str, int] = {}
    for p in points:
        if p.load > top:
            continue
        for i, req in enumerate(p.repeats):
            st = point_stats(p.load, req, slos, max_failure_rate, p.devices, p.sessions[i] if p.sessions else None)
            if not st.passed:
                out[st.binding] = out.get(st.binding, 0) + 1
    return out


def slo_words(key: str) -> str:
    """``tpot_p90`` → ``p90 TPOT``; ``errors`` → ``failed requests``."""
    if key == "errors":
        return "failed requests"
    metric, _, pct = key.partition("_p")
    return f"p{pct.replace('_', '.')} {METRIC_LABELS.get(metric, metric.upper())}" if pct else key


def slos_text(slos: Sequence[SLO]) -> str:
    """``p90 TTFT ≤ 3 s, p90 TPOT ≤ 200 ms``."""
    def ms(v: float) -> str:
        return f"{v / 1000:g} s" if v >= 1000 else f"{v:g} ms"
    return ", ".join(f"{slo_words(s.key)} ≤ {ms(s.threshold_ms)}" for s in slos)


def sentence(d: Decision, summary: LadderSummary, slos: Sequence[SLO]) -> str:
    """The verdict in one sentence (about 300 characters), by outcome
    (:mod:`harness.scoring.verdict.verdict`): *separated*: the winner, its capacity at the SLO, the ratio
    over the runner-up with its 95 % interval, the deciding constraint; *equivalent*: the winner
    and what broke the tie; *not separated*: who leads, that it is not separated, and how to
    measure more; *undecided*: who leads and every engine whose ladder stopped before an SLO
    broke; "no engine …" when none is eligible. An interrupted run says so first. An agentic
    winner reads "N agents sustained" (N: the sessions in flight at its capacity, the table's
    load) with its jobs per hour per device (:mod:`harness.scoring.capacity.jobs`)."""
    lead = f"Interrupted by {d.interrupted}, on what was measured: " if d.interrupted else ""
    where = f"at {slos_text(slos)}{' (default SLOs)' if d.slos_default else ''}"
    leader = d.leader or (d.ranking[0] if d.ranking else "")
    if d.undecided:
        best = summary.engines[leader].capacity
        assert best is not None
        unsettled = d.unsettled or [d.undecided]
        stops = ", ".join(f"{n} at {_tps(summary.engines[n].capacity)}" for n in unsettled
                          if summary.engines[n].capacity is not None)
        whose = "ladder" if len(unsettled) == 1 else "ladders"
        return _fit(f"{lead}Undecided {where}: {leader} leads with {_tps(best)} output tok/s per device, but the "
                    f"{whose} of {stops} stopped before any SLO broke, so {'it' if len(unsettled) == 1 else 'they'} "
                    "could lead; raise --ladder-budget (or --max-load) to find the limit.")
    if not d.winner and d.outcome == "not_separated":
        best = summary.engines[leader].capacity
        assert best is not None
        return _fit(f"{lead}Not separated {where}: {leader} leads with {_tps(best)} output tok/s per device, "
                    f"{_ratio(d, best)} {d.runner_up}'s, neither clearly ahead (by more than 5 %) nor equivalent "
                    "(within 5 %); measure more: raise --time-budget or --repeats.")
    if not d.winner:
        if not d.excluded and d.yardsticks:
            return _fit(f"{lead}No production engine was measured; the reference engine {', '.join(d.yardsticks)} "
                        f"(a yardstick, never recommended) has its capacity {where} on the chart.")
        why = "; ".join(r if r.startswith(f"{n}: ") else f"{n}: {r}" for n, r in list(d.excluded.items())[:2])
        return _fit(f"{lead}No engine to recommend {where}: {why or 'none was measured'}.")
    cap = summary.engines[d.winner].capacity
    assert cap is not None
    unit = ("sessions" if d.unit == "sessions" else "requests") if round(cap.load, 3) != 1 else d.unit.rstrip("s")
    # its points were measured once and no point of the run twice: its interval holds no run-to-run noise
    once = ", 1 run" if d.runner_up and cap.measurements < 2 and not cap.spread_df else ""
    head = (f"{lead}{d.winner}{_tuned(summary, d.winner)} sustains {cap.load_text} {unit} in flight "
            f"({_tps(cap)} output tok/s per device{once}) {where}")
    if d.unit == "sessions":  # an agent user buys finished jobs: the agents sustained, and their jobs per hour
        jobs = f" and {cap.jobs_text} jobs/h" if cap.jobs_text else ""
        head = (f"{lead}{d.winner}{_tuned(summary, d.winner)}: {cap.load_text} agent{'' if unit == 'session' else 's'} "
                f"sustained ({_tps(cap)} output tok/s{jobs} per device{once}) {where}")
    if not d.runner_up:
        return _fit(f"{head}; the only engine eligible{_fidelity_gated(d, summary, cap)}; {d.binding}.")
    gated = _fidelity_gated(d, summary, cap)
    if d.tie:
        best = summary.engines[leader].capacity
        assert best is not None
        lo, hi = d.equivalence_interval or (math.nan, math.nan)
        return _fit(f"{head}: equivalent to {d.runner_up} ({_ratio(d, best)}; 90 % interval {lo:.2f}–{hi:.2f}, "
                    f"inside ±5 %), decided by {d.tie_breaker}{gated}.")
    second = summary.engines[d.runner_up].capacity
    if second is not None and second.open and second.ceiling is not None and cap.floor:  # out of the race
        return _fit(f"{head}; {d.runner_up} cannot reach it (at most {tps_figure(second.ceiling)} tok/s, below "
                    f"{d.winner}'s floor of {tps_figure(cap.floor)}: the least its capacity can be){gated}; {d.binding}.")
    return _fit(f"{head}, {_ratio(d, cap)} {d.runner_up}'s{gated}; {d.binding}.")


def _ratio(d: Decision, leader: CapacityAtSLO) -> str:
    """``1.65× [1.38–1.91]`` (the ratio and its 95 % interval); ``≥ …`` when the leader's capacity
    is a lower bound (so is the ratio)."""
    if d.ratio is None:
        return "?"
    lo, hi = d.ratio_interval or (math.nan, math.nan)
    ge = "≥ " if leader.open else ""
    return f"{ge}{d.ratio:.2f}× [{lo:.2f}–{hi:.2f}]".replace("inf]", "∞]")


def _tuned(summary: LadderSummary, name: str) -> str:
    """`` (tuned: max_num_seqs=32)`` when ``--tune`` chose the winner's configuration (`` (tuned:
    dtype=bfloat16, lower precision)`` when it lowers precision), `` (at its defaults, ...)`` when
    the search kept them ("" without a search)."""
    t = summary.tuning.get(name)
    chosen = t.config(t.chosen) if t is not None and t.configs else None
    if chosen is None:
        return ""
    if chosen is t.configs[0]:  # type: ignore[union-attr]
        return f" (at its defaults, the best of {len(t.configs)} configurations tried)"  # type: ignore[union-attr]
    return f" (tuned: {chosen.label}{', lower precision' if chosen.numerics != 'reference' else ''})"


def _fidelity_gated(d: Decision, summary: LadderSummary, cap: CapacityAtSLO) -> str:
    """A clause naming the fidelity gate when it decided: an engine it excluded (below the floor,
    or not checked) could have won (its ceiling, :mod:`harness.scoring.capacity.race`, above the winner's
    floor: the main job checks an engine as soon as it leads, so an excluded one may have
    measured no more than its low end); else, when ``--allow-unchecked`` let a winner whose check
    did not vouch for it compete, that it was not checked ("" when neither)."""
    for name in d.excluded:
        other = summary.engines.get(name)
        if other is None or other.fidelity is None or other.capacity is None or other.capacity.never_met:
            continue
        f = other.fidelity
        top = other.capacity.ceiling if other.capacity.ceiling is not None else math.inf
        if top <= (cap.floor or cap.output_tps) or d.excluded[name] != f.exclusion(summary.allow_unchecked):
            continue  # it could not have won, or another gate excluded it
        if f.passed is False:
            return (f"; the fidelity gate decided: {name} measured {_tps(other.capacity)} tok/s but its outputs agree "
                    f"with the reference at only {f.agreement_outside_near_ties:.3f} (floor {f.floor:.2f})")
        return (f"; the fidelity gate decided: {name} measured {_tps(other.capacity)} tok/s but its {f.unchecked()} "
                "(--allow-unchecked lets it compete)")
    winner = summary.engines.get(d.winner)
    if winner is not None and winner.fidelity is not None and (why := winner.fidelity.unchecked()):
        return f"; {d.winner}'s {why} (--allow-unchecked)"
    return ""


def _tps(cap: CapacityAtSLO) -> str:
    return cap.tps_text  # the capacity table's figure (reports.frontier.capacity_rows)


def _fit(text: str) -> str:
    return text if len(text) <= MAX_SENTENCE else text[:MAX_SENTENCE - 1] + "…"


def verdict_of(summary: LadderSummary) -> Verdict:
    """The stored decision as a :class:`Verdict` (for callers that print it)."""
    d = summary.decision or Decision()
    return Verdict(winner=d.winner, runner_up=d.runner_up, ratio=d.ratio, ratio_interval=d.ratio_interval, tie=d.tie,
                   tie_breaker=d.tie_breaker, undecided=d.undecided, outcome=d.outcome or "none",  # type: ignore[arg-type]
                   leader=d.leader, equivalence_interval=d.equivalence_interval, unsettled=list(d.unsettled),
                   ranking=d.ranking, yardsticks=d.yardsticks, excluded=d.excluded)
