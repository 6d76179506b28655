"""Jobs as the agent user sees them, from ``ladder.json`` only (issue 40, items 3 and 4): the job
frontier chart and the per-point jobs table of an agentic run (:class:`results.schema.JobFigures`),
with each point's prefix cache beside them (:class:`results.schema.CacheFigures`) and the
eviction cliff marked.

**The job frontier** (``job_frontier.png``, TensorRT-LLM's trace-replay view): one curve per
engine through its ladder points in load order, x = jobs per hour per user (3600 / the mean job
latency: what one agent finishes back to back, tool time included), y = jobs per hour per
device; a point that failed the SLO is hollow; each engine's capacity at the SLO is a large
marker (the winner's a star) at its jobs/h per device, at the per-user figure interpolated by
load between the points that bracket it. The same engines and colours as the request-level
frontier (:func:`reports.frontier.engine_colors`).
"""

from __future__ import annotations

from typing import Any

from results.schema import EngineLadder, LadderPoint, LadderSummary

from .frontier import engine_colors
from .plots import _figure, _png
from results.schema.metric_registry import jobs_figure


def _plotted(e: EngineLadder) -> list[LadderPoint]:
    """The points with both job axes, in load order."""
    return [p for p in sorted(e.points, key=lambda p: p.load)
            if p.jobs is not None and p.jobs.per_hour_per_device is not None and p.jobs.per_hour_per_user]


def _capacity_xy(e: EngineLadder, pts: list[LadderPoint]) -> tuple[float, float] | None:
    """The capacity's place: its jobs/h per device, at the per-user jobs/h interpolated by load."""
    cap = e.capacity
    if cap is None or cap.never_met or cap.jobs_per_hour is None or not pts:
        return None
    lo = max((p for p in pts if p.load <= cap.load), key=lambda p: p.load, default=pts[0])
    hi = min((p for p in pts if p.load >= cap.load), key=lambda p: p.load, default=pts[-1])
    t = 0.0 if hi.load == lo.load else (cap.load - lo.load) / (hi.load - lo.load)
    x_lo, x_hi = lo.jobs.per_hour_per_user, hi.jobs.per_hour_per_user  # type: ignore[union-attr]
    return x_lo + t * (x_hi - x_lo), cap.jobs_per_hour  # type: ignore[operator]


def job_frontier_png(s: LadderSummary) -> bytes | None:
    """The job frontier (module docstring); None when no engine has a point with jobs (not an
    agentic run, or one stored before jobs were counted)."""
    curves = {n: pts for n, e in s.engines.items() if (pts := _plotted(e))}
    if not curves:
        return None
    fig = _figure(9, 5.6)
    ax = fig.add_subplot(1, 1, 1)
    winner = s.decision.winner if s.decision else ""
    colors = engine_colors(s)
    for name, pts in curves.items():
        e, color = s.engines[name], colors.get(name, "grey")
        xs = [p.jobs.per_hour_per_user for p in pts]  # type: ignore[union-attr]
        ys = [p.jobs.per_hour_per_device for p in pts]  # type: ignore[union-attr]
        label = name + (" (yardstick)" if e.reference else "") + (" — excluded" if e.excluded else "")
        ax.plot(xs, ys, "--" if e.reference else "-", color=color, linewidth=1.6, label=label, alpha=0.5 if e.excluded else 1)
        for p, x, y in zip(pts, xs, ys):
            ax.plot([x], [y], "o", color=color, markerfacecolor=color if p.passed else "white", markersize=5)
            ax.annotate(str(p.load), (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7, color=color)
        if (xy := _capacity_xy(e, pts)) is not None:
            star = name == winner
            ax.plot([xy[0]], [xy[1]], "*" if star else "D", color=color, markersize=14 if star else 8,
                    markerfacecolor="white" if e.capacity.open else color, markeredgecolor="black", alpha=0.85, zorder=5)  # type: ignore[union-attr]
    ax.set_xlabel("jobs/h per user (3600 / mean job latency: one agent's finished sessions per hour, tool time included)")
    ax.set_ylabel("jobs/h per device (finished agent sessions per hour)")
    ax.set_title(f"Jobs per hour, {s.workload}: points labelled by agents in flight, hollow = failed the SLO;\n"
                 "★ winner, ◆ capacity at the SLO (hollow: a lower bound)", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _png(fig)


def _num(v: float | None, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def job_rows(s: LadderSummary) -> list[dict[str, Any]]:
    """The per-point jobs table: one row per engine and load with jobs (load order), the figures
    as printed ("–" where none): jobs, then the prefix cache (``hit``: measured / the optimal, an
    infinite cache's; ``tps``: total tokens/s per device with reused prefix tokens counted /
    computed only); the load of an engine's eviction cliff reads ``8 ← eviction cliff``."""
    rows = []
    for name, e in s.engines.items():
        for p in sorted(e.points, key=lambda p: p.load):
            j, c = p.jobs, p.cache
            if j is None:
                continue
            rows.append({"engine": name, "load": f"{p.load}{' ← eviction cliff' if p.load == e.eviction_cliff else ''}",
                         "passed": "yes" if p.passed else "no", "completed": j.completed,
                         "per_device": _jobs(j.per_hour_per_device), "per_user": _jobs(j.per_hour_per_user),
                         "latency": f"{_num(j.latency_s_p50, '.1f')} / {_num(j.latency_s_p90, '.1f')}",
                         "turn_tps": f"{_num(j.turn_tps_p50, '.1f')} / {_num(j.turn_tps_p10, '.1f')}",
                         "hit": f"{_num(c and c.measured_hit_rate, '.1%')} / {_num(c and c.optimal_hit_rate, '.1%')}",
                         "tps": f"{_num(c and c.total_tps_reused, ',.1f')} / {_num(c and c.total_tps_computed, ',.1f')}"})
    return rows


def cliff_lines(s: LadderSummary) -> list[str]:
    """One line per engine whose ladder has an eviction cliff (``EngineLadder.eviction_cliff``)."""
    out = []
    for name, e in s.engines.items():
        if e.eviction_cliff is None:
            continue
        at = next((p for p in e.points if p.load == e.eviction_cliff and p.cache is not None), None)
        rates = (f": measured hit rate {_num(at.cache.measured_hit_rate, '.1%')} against the infinite cache's "
                 f"{_num(at.cache.optimal_hit_rate, '.1%')}" if at is not None and at.cache is not None else "")
        out.append(f"{name}'s prefix cache falls away at {e.eviction_cliff} agents in flight{rates} (more than 10 points "
                   "below, where every lower load was within): the sessions' prefixes no longer fit its cache.")
    return out


def _jobs(value: float | None) -> str:
    """Jobs per hour in the one printed form the capacity table and the verdict use."""
    return "–" if value is None else jobs_figure(value)
