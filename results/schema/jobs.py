"""Jobs as the agent user sees them, per ladder point of an agentic run (issue 40, item 4):
:class:`JobFigures`, computed by ``harness.metrics.jobs`` and ``harness.scoring.capacity.jobs``, stored on
``ladder.json``'s :class:`~results.schema.LadderPoint` s. A *job* is one agent session: its turns
and the tool time between them."""

from __future__ import annotations

from .base import Artefact


class JobFigures(Artefact):
    """One ladder point's jobs. ``completed``: sessions whose every turn succeeded (none cut when
    the point stopped early), over the point's measurements; ``per_hour_per_device``: jobs
    completed per hour per device (the point's sessions/s, the judge's ``request_rate``, × 3600 /
    devices); ``per_hour_per_user``: jobs one agent completes per hour, back to back (3600 / the
    mean job latency in s: by Little's law, ``per_hour_per_device × devices ≈ load ×
    per_hour_per_user``); ``latency_s_p50`` / ``latency_s_p90``: job latency, a completed
    session's first scheduled send to its last completion (s, tool time included: what the user
    waits for the task; numpy linear percentiles); ``turn_tps_p50`` / ``turn_tps_p10``: per-turn
    interactivity with tool time excluded (MLPerf Endpoints' convention: output tokens / s per
    user over the generating time only: a successful turn's output tokens / (its last token −
    its send), s), the median turn and the slow tenth. None: no completed job (or turn)."""

    completed: int = 0
    per_hour_per_device: float | None = None
    per_hour_per_user: float | None = None
    latency_s_p50: float | None = None
    latency_s_p90: float | None = None
    turn_tps_p50: float | None = None
    turn_tps_p10: float | None = None


class CacheFigures(Artefact):
    """One ladder point's prefix cache, accounted for against the workload's (issue 40, item 3;
    ``harness.metrics.cache``). ``prompt_tokens``: the successful requests' prompt tokens;
    ``cached_tokens``: those the engine reported served from its cache
    (``usage.prompt_tokens_details.cached_tokens``; None: it reported none); ``measured_hit_rate``
    = cached / prompt tokens over the requests that reported it (None: none did);
    ``optimal_hit_rate``: the workload's theoretical hit rate under an infinite cache
    (``LadderSummary.cache_optimal``, :mod:`workloads.prefix_cache`; None: not computed);
    ``total_tps_reused``: (prompt + output tokens) / s per device, reused prefix tokens counted
    (the figure that flatters a cache); ``total_tps_computed``: the same without them (prompt −
    cached + output: the tokens the engine computed; None without cached counts); s = the
    point's measured spans summed (first send → last completion of each measurement)."""

    prompt_tokens: int = 0
    cached_tokens: int | None = None
    measured_hit_rate: float | None = None
    optimal_hit_rate: float | None = None
    total_tps_reused: float | None = None
    total_tps_computed: float | None = None
