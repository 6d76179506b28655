"""Each agentic ladder point's jobs and each capacity's jobs per hour (issue 40, item 4), filled in
``ladder.json`` by :func:`harness.scoring.verdict.decision.judge` from the records
(:mod:`harness.metrics.jobs` defines the figures).

A point's jobs per hour per device is its judged sessions/s (``LadderPoint.request_rate``,
:func:`harness.scoring.capacity.frontier.point_stats`: completed sessions over the measured span) × 3600 /
devices; the capacity's is its ``request_rate`` (interpolated at the SLO boundary as its
throughput is) × 3600 / devices: one figure for the capacity wherever it is printed (the table's
"jobs/h", the verdict's). Each point's prefix cache is accounted for beside its jobs
(:mod:`harness.metrics.cache`: the measured hit rate against the workload's optimal, throughput
with and without reused prefix tokens) and the ladder's eviction cliff marked."""

from __future__ import annotations

from typing import Sequence

from harness.metrics.cache import cache_figures, eviction_cliff
from harness.metrics.jobs import SECONDS_PER_HOUR, job_figures, session_key
from results.schema import EngineLadder, RequestRecord
from results.schema.records import STOPPED_PHASE

from .samples import measured_span_s


def fill_jobs(ladder: EngineLadder, name: str, records: Sequence[RequestRecord], devices: int,
              optimal: float | None = None) -> None:
    """Set ``ladder``'s points' ``jobs`` and ``cache``, its ``eviction_cliff`` and its capacity's
    ``jobs_per_hour`` (in place) from engine ``name``'s ``records``: a point's measured records
    (``probe`` = its index, ``repeat`` below its measurement count), its sessions cut when it
    stopped early counted as not completed. ``devices``: what one deployment used; ``optimal``:
    the workload's infinite-cache hit rate (``LadderSummary.cache_optimal``). Points without
    records keep None."""
    mine: dict[int, list[RequestRecord]] = {}
    cut: dict[int, set[tuple[int, int | None, str]]] = {}
    for r in records:
        if r.engine != name or r.probe is None:
            continue
        if r.phase == "measured":
            mine.setdefault(r.probe, []).append(r)
        elif r.phase == STOPPED_PHASE:
            cut.setdefault(r.probe, set()).add(session_key(r))
    for point in ladder.points:
        measured = [r for r in mine.get(point.index, []) if r.repeat < max(1, len(point.seeds))]
        if measured:
            point.jobs = job_figures(measured, point.request_rate, devices, cut.get(point.index, ()))
            span = sum(measured_span_s([r for r in measured if r.repeat == k]) for k in {r.repeat for r in measured})
            point.cache = cache_figures(measured, span, devices, optimal)
    cliff = eviction_cliff([(p.load, p.cache.measured_hit_rate, p.cache.optimal_hit_rate) for p in ladder.points
                            if p.cache is not None])
    ladder.eviction_cliff = int(cliff) if cliff is not None else None
    cap = ladder.capacity
    if cap is not None:
        cap.jobs_per_hour = 0.0 if cap.never_met else cap.request_rate * SECONDS_PER_HOUR / devices

