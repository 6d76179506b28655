"""Validity gates: which measured conditions the decision may rest on.

A condition (workload, offered rate) of one engine is **invalid**, and left out of the decision
with its reason, when any of its repeats

1. **missed its offered arrival rate** beyond ±5 % (``Metrics.rate_valid`` False, the band
   ``harness.metrics.RATE_TOLERANCE``): the client or the engine could not keep the schedule,
   so its latencies were measured at another load than its label says;
2. **ran the client near its own limit**: the client's request rate (the achieved arrival
   rate, or the measured request throughput where that is higher - an agentic run's achieved
   rate counts session starts, not requests) above :data:`CLIENT_RATE_FRACTION` (half) of the
   calibrated ``max_rate_rps``, times the client processes that measured the run
   (``bench run --client-workers N``: N × the single-process maximum; the rule behind
   ``harness.loadgen.calibrate.workers_needed``). Why half: the calibration measures the client's ceiling with
   one-token replies from a server that does no work, while a real run also parses every
   streamed chunk, so the true ceiling is lower; and a single event loop busy more than half
   the time queues its sends and chunk timestamps (an M/M/1 queue's time in system is twice
   the service time at utilisation 0.5), so the TTFTs and the achieved rate start to carry the
   client's own delay rather than the engine's;
(``client_reasons``). A third check **qualifies, never invalidates**:

3. **per-token gaps finer than the client can time**: the calibration's ITL timing
   error p99 above :data:`ITL_ERROR_FRACTION` (10 %) of the condition's measured TPOT p50 puts a
   note on that engine's ITL figures (:func:`itl_qualifier`); the engine stays. Why not a
   gate: TPOT and TTFT rest on two stamps per request ((E2E − TTFT) / (n − 1)), so a per-chunk
   stamp error of a few ms barely moves them, and a gate on it threw healthy engines out on a
   busy 2-core machine (issue 26: the reference engine at TPOT p50 21 ms on every run). TPOT,
   not the ITL p50: an engine that flushes several tokens per read (the ONNX Runtime GenAI shim
   on the reference machine: ITL p50 0.2 ms, TPOT p50 48 ms) has sub-millisecond ITLs that are
   its delivery pattern, not gaps the client failed to time. Why a relative bound: ITL and TPOT are what the latency SLOs and score rest on, and an error of
   a tenth of the typical gap keeps the client's share of a gap to the same order as the ±5 %
   load band already accepted. A fixed bound does not fit both ends: on the 2-core reference
   machine the calibration's p99 is 2-16 ms depending on what else runs, against ITL p50s of
   80-110 ms for the CPU engines (a 1 ms bound would flag every CPU run whose timing error is a
   few percent), while on a GPU engine with 5 ms gaps 1 ms is already 20 %. The calibrated
   error is an upper bound on the client's own (it includes the null server's sleep jitter,
   measured at 32 concurrent streams, usually more than a run keeps in flight), so the rule
   errs towards flagging. Conditions without an ITL (one-token replies) are not checked by it.

A condition is invalid when any of its repeats fails rule 1 or 2: keeping only the repeats that kept up would
bias its medians towards the engine's good runs. Without a client calibration (``--no-calibration``,
a failed calibration, an older run) rules 2-3 are not applied and a note says the client limit
was not checked.

An engine all of whose conditions are invalid is eliminated at the ``"validity"`` stage with
the reasons; one with some valid conditions is judged on those only (its
:class:`harness.scoring.measured.gather.EngineRuns` is replaced by a copy without the invalid ones) and a note lists
the left-out conditions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from harness.metrics import RATE_TOLERANCE
from results.schema.metric_registry import metric_figure

from ..formatting import condition_label, rate_text
from ..measured.gather import ClientCalibration, Condition, EngineRuns, Measurement, RunFacts
from .constraints import Elimination

CLIENT_RATE_FRACTION = 0.5
"""A condition is invalid when the client sent more than this fraction of its calibrated maximum rate."""
ITL_ERROR_FRACTION = 0.10
"""A condition is invalid when the client's calibrated ITL error p99 exceeds this fraction of its TPOT p50."""

@dataclass(frozen=True)
class InvalidCondition:
    """A condition left out: its label (requested and achieved load) and why."""

    condition: Condition
    label: str
    reason: str


@dataclass
class ValidityVerdict:
    """``engines``: every engine, those judged on some valid conditions as copies holding only
    those (the others unchanged); ``eliminated``: engines with no valid condition (stage
    ``"validity"``); ``left_out``: engine → its invalid conditions, for the engines still judged;
    ``notes``: the caveats for the recommendation."""

    engines: dict[str, EngineRuns]
    eliminated: dict[str, Elimination] = field(default_factory=dict)
    left_out: dict[str, list[InvalidCondition]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _signed_percent(fraction: float) -> str:
    """``-0.19`` → ``"−19%"`` (a real minus sign), ``0.07`` → ``"+7%"``."""
    return f"{fraction:+.0%}".replace("-", "−")


def _client_rate_text(rate: float) -> str:
    """A calibrated client rate: thousands separated and whole above 100 req/s (``"2,658"``)."""
    return f"{rate:,.0f}" if rate >= 100 else rate_text(rate)


def rate_reason(measurement: Measurement) -> str | None:
    """Rule 1: the achieved arrival rate outside ±5 % of the offered one (None = kept up or not gated)."""
    if measurement.rate_valid is not False:
        return None
    offered, achieved = measurement.recorded_offered_rate, measurement.achieved_rate
    why = "the client or the engine could not keep the schedule"
    if not offered or achieved is None:
        return f"the achieved arrival rate missed the offered one beyond ±{RATE_TOLERANCE:.0%}: {why}"
    unit = "sessions/s" if measurement.run.workload == "agentic" else "req/s"
    return (f"achieved {rate_text(achieved)} {unit} vs {rate_text(offered)} offered "
            f"({_signed_percent((achieved - offered) / offered)}): {why}")


def client_rate(measurement: Measurement) -> float | None:
    """Requests/s the client sustained: the larger of the achieved arrival rate and the request
    throughput; at an infinite offered rate (everything sent at once) the throughput only: the
    "arrival rate" of a burst is how fast the client enqueued a handful of sends (thousands per
    second), not a load it had to keep up."""
    arrival = measurement.achieved_rate if math.isfinite(measurement.offered_rate) else None
    rates = [rate for rate in (arrival, measurement.values.get("request_throughput"))
             if rate is not None and math.isfinite(rate)]
    return max(rates) if rates else None


def client_reasons(measurement: Measurement) -> list[str]:
    """Rule 2 against the run's client calibration (none when it was not recorded or failed)."""
    calibration = measurement.run.client_calibration
    if not calibration.recorded or calibration.error:
        return []
    reasons = []
    rate = client_rate(measurement)
    workers = calibration.workers  # --client-workers N: N processes, each calibrated at max_rate_rps
    if calibration.max_rate_rps and rate is not None and rate > CLIENT_RATE_FRACTION * workers * calibration.max_rate_rps:
        ceiling = _client_rate_text(calibration.max_rate_rps)
        ceiling = f"{workers} workers x {ceiling}" if workers > 1 else ceiling
        reasons.append(
            f"the client sent {rate_text(rate)} req/s, above {CLIENT_RATE_FRACTION:.0%} of its calibrated maximum "
            f"{ceiling} req/s (null server): "
            "the client, not the engine, may be the limit"
        )
    return reasons


def itl_qualifier(measurement: Measurement) -> str | None:
    """Rule 3: why this repeat's ITL figures carry the client's timing error (None = they do
    not, or no calibration); a note, never a gate."""
    calibration = measurement.run.client_calibration
    if not calibration.recorded or calibration.error:
        return None
    error, tpot = calibration.itl_error_ms_p99, measurement.values.get("tpot_p50_ms")
    if error is not None and tpot is not None and tpot > 0 and error > ITL_ERROR_FRACTION * tpot:
        return (f"the client's ITL timing error p99 {error:,.1f} ms (calibration) exceeds {ITL_ERROR_FRACTION:.0%} of "
                f"the measured TPOT p50 {metric_figure('tpot_p50', tpot)} ms: its ITL figures are within the client's own timing error "
                "(TPOT and TTFT, two stamps per request, are not)")
    return None


def measurement_reasons(measurement: Measurement) -> list[str]:
    """Why one repeat is invalid (empty = valid)."""
    reason = rate_reason(measurement)
    return ([reason] if reason else []) + client_reasons(measurement)


def condition_reason(repeats: Sequence[Measurement]) -> str | None:
    """Why a condition is invalid (any repeat invalid), None when every repeat is valid."""
    invalid = [reasons for repeat in repeats if (reasons := measurement_reasons(repeat))]
    if not invalid:
        return None
    text = "; ".join(dict.fromkeys(reason for reasons in invalid for reason in reasons))
    return f"{text} (in {len(invalid)} of {len(repeats)} repeats)" if len(repeats) > 1 else text


def judge_validity(engines: dict[str, EngineRuns], runs: Sequence[RunFacts]) -> ValidityVerdict:
    """Gate every measured engine's conditions (see the module docstring)."""
    verdict = ValidityVerdict(engines={})
    for name, engine in engines.items():
        verdict.engines[name] = engine
        qualified = next((q for m in engine.measurements if (q := itl_qualifier(m))), None)
        if qualified:
            verdict.notes.append(f"{name}: ITL qualified, not excluded: {qualified}")
        invalid = [
            InvalidCondition(condition, condition_label(condition, engine.at(condition)), reason)
            for condition in engine.conditions()
            if (reason := condition_reason(engine.at(condition)))
        ]
        if not invalid:
            continue
        if len(invalid) == len(engine.conditions()):
            verdict.eliminated[name] = ("validity", _elimination_reason(invalid))
            continue
        bad = {entry.condition for entry in invalid}
        verdict.engines[name] = replace(
            engine, measurements=[m for m in engine.measurements if m.condition not in bad])
        verdict.left_out[name] = invalid
        verdict.notes.append(
            f"{name}: judged on its valid conditions only; left out "
            + "; ".join(f"{entry.label} ({entry.reason})" for entry in invalid)
        )
    verdict.notes.extend(calibration_notes(runs))
    return verdict


def _elimination_reason(invalid: list[InvalidCondition]) -> str:
    if len(invalid) == 1:
        return invalid[0].reason
    return "no valid condition: " + "; ".join(f"{condition_label(entry.condition)}: {entry.reason}"
                                              for entry in invalid)


def _runs_text(run_ids: list[str], total: int) -> str:
    if total == 1:
        return "the run"
    return f"run{'s' if len(run_ids) > 1 else ''} {', '.join(run_ids)}"


def calibration_notes(runs: Sequence[RunFacts]) -> list[str]:
    """What the validity gates checked: the client limit, or that it was not checked and why."""
    total = len(runs)
    missing = [run.run_id for run in runs if not run.client_calibration.recorded]
    failed = [(run.run_id, run.client_calibration.error) for run in runs if run.client_calibration.error]
    calibrated: list[ClientCalibration] = [run.client_calibration for run in runs
                                           if run.client_calibration.recorded and not run.client_calibration.error]
    rate_only = f"conditions were gated on achieved vs offered arrival rate (±{RATE_TOLERANCE:.0%}) only"
    notes = []
    if missing:
        notes.append(f"the client limit was not checked: {_runs_text(missing, total)} recorded no client calibration "
                     f"(--no-calibration or an older run); {rate_only}")
    for run_id, error in failed:
        notes.append(f"the client limit was not checked: the client calibration of "
                     f"{_runs_text([run_id], total)} failed ({error}); {rate_only}")
    if not calibrated:
        return notes
    gates = [f"achieved arrival rate within ±{RATE_TOLERANCE:.0%} of offered"]
    max_rates = sorted(c.max_rate_rps for c in calibrated if c.max_rate_rps)
    if max_rates:
        counts = sorted({c.workers for c in calibrated})
        per = "" if counts == [1] else f" per worker x {'/'.join(map(str, counts))} client workers"
        gates.append(f"client request rate ≤ {CLIENT_RATE_FRACTION:.0%} of its calibrated maximum "
                     f"({_range(max_rates, _client_rate_text)} req/s{per})")
    errors = sorted(c.itl_error_ms_p99 for c in calibrated if c.itl_error_ms_p99 is not None)
    unchecked = [what for what, values in (("request rate", max_rates), ("ITL timing error", errors)) if not values]
    tail = f"; the client's {' and '.join(unchecked)} not recorded by its calibration, not checked" if unchecked else ""
    qualifier = (f"; ITL figures qualified (never a gate) where the client's ITL timing error p99 "
                 f"({_range(errors, lambda v: f'{v:,.1f}')} ms) exceeds {ITL_ERROR_FRACTION:.0%} of a condition's "
                 "TPOT p50") if errors else ""
    notes.append(f"validity gates: {'; '.join(gates)}{tail}{qualifier}")
    return notes


def _range(values: list[float], fmt: Callable[[float], str]) -> str:
    low, high = fmt(values[0]), fmt(values[-1])
    return low if low == high else f"{low}–{high}"
