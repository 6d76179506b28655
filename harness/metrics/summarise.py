"""The one summary of measured requests: records → each repeat's metrics → pooled → intervals.

``bench run`` (an engine's repeats), ``bench search`` (a probe's repeats), the rebuild of a
killed run and ``bench import`` all summarise through :func:`summarise`, with the same inputs:
the records (each carrying its ``repeat``) and the :class:`Condition` they were measured under.

1. the records of the measured phase (and a duration run's warm-up / cool-down windows, which
   ``compute_metrics`` counts apart) are grouped by ``RequestRecord.repeat``;
2. each repeat's :func:`~harness.metrics.compute_metrics` under the condition (SLOs, offered and
   requested rates, planned turns, a duration run's timing);
3. the pooled metrics over the repeats (:func:`harness.metrics.repeats.pooled_metrics`:
   distributions over every request, rates over the summed measured time);
4. the headline numbers' 95 % intervals (:func:`harness.metrics.repeats.headline_intervals`:
   over repeats for two or more, else over the requests of the one).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from results.schema import WINDOW_PHASES, Interval, MeasuredCondition, Metrics, RequestRecord
from workloads.base import RunTiming

from .repeats import headline_intervals, pooled_metrics
from .slo import SLO
from .summary import compute_metrics


@dataclass(frozen=True)
class Condition:
    """What measured requests were offered, as every summary of them needs it: ``slos``
    judged; ``offered_rate`` (req/s or sessions/s; None or inf = no open-loop target) and
    ``requested_rate`` (what was asked for; None = the offered one); ``planned_turns``
    (requests each session sends when every turn succeeds, by session id; None = not known);
    ``timing`` (a duration run's clock; None for a count-based one); ``seed`` for the
    bootstrap of the intervals."""

    slos: tuple[SLO, ...] = ()
    offered_rate: float | None = None
    requested_rate: float | None = None
    planned_turns: Mapping[str, int] | None = None
    timing: RunTiming | None = None
    seed: int = 0

    def facts(self) -> MeasuredCondition:
        """The stored form (``manifest.json``'s ``condition``), without the SLOs and seed the
        manifest keeps elsewhere; infinite rates are stored as None."""
        def finite(rate: float | None) -> float | None:
            return rate if rate is not None and math.isfinite(rate) else None

        return MeasuredCondition(offered_rate=finite(self.offered_rate), requested_rate=finite(self.requested_rate),
                                 planned_turns=dict(self.planned_turns) if self.planned_turns is not None else None,
                                 timing=dataclasses.asdict(self.timing) if self.timing is not None else None)

    @classmethod
    def from_facts(cls, facts: MeasuredCondition, slos: Sequence[SLO] = (), seed: int = 0) -> "Condition":
        """The condition a manifest stored (:meth:`facts`), judged by ``slos``."""
        return cls(tuple(slos), facts.offered_rate, facts.requested_rate, facts.planned_turns,
                   RunTiming(**facts.timing) if facts.timing else None, seed)


@dataclass
class Summary:
    """:func:`summarise`'s result: ``repeats`` (each repeat's metrics, in repeat order),
    ``pooled`` (over all of them; the one repeat's own when there is one), ``intervals``
    (headline key, e.g. ``ttft_ms.p99`` → its 95 % interval), ``records`` (the measured ones)."""

    repeats: list[Metrics]
    pooled: Metrics
    intervals: dict[str, Interval] = field(default_factory=dict)
    records: list[RequestRecord] = field(default_factory=list)


def counted(record: RequestRecord) -> bool:
    """Whether a record belongs to what metrics are computed over: the measured phase and a
    duration run's windows (which the metrics count apart)."""
    return record.phase == "measured" or record.phase in WINDOW_PHASES


def repeat_metrics(records: Sequence[RequestRecord], condition: Condition) -> Metrics:
    """The metrics of one repeat's records under ``condition``."""
    return compute_metrics([r for r in records if counted(r)], condition.slos, condition.offered_rate,
                           condition.requested_rate, condition.planned_turns, condition.timing)


def summarise(records: Sequence[RequestRecord], condition: Condition, *, intervals: bool = True) -> Summary:
    """Summarise ``records`` (any phases; the counted ones are used) measured under
    ``condition`` (module docstring). ``intervals`` False skips the bootstrap. Raises
    ValueError when no record is counted."""
    groups: dict[int, list[RequestRecord]] = {}
    for record in records:
        if counted(record):
            groups.setdefault(record.repeat, []).append(record)
    if not groups:
        raise ValueError("nothing to summarise: no measured request")
    per_repeat = [repeat_metrics(groups[k], condition) for k in sorted(groups)]
    measured = [r for k in sorted(groups) for r in groups[k]]
    pooled = pooled_metrics(per_repeat, measured, condition.slos, condition.offered_rate, condition.requested_rate)
    found = headline_intervals(per_repeat, measured, condition.slos, seed=condition.seed) if intervals else {}
    return Summary(repeats=per_repeat, pooled=pooled, intervals=found, records=measured)
