"""Report plots as PNG bytes, drawn with matplotlib's object API on the Agg canvas (no pyplot, no
global backend switch, no display needed).

Every function takes plain data (lists of floats per series label) and returns PNG bytes; the
caller embeds them (base64 ``data:`` URI in HTML, files next to the Markdown).
"""

from __future__ import annotations

import io
from typing import Sequence

import numpy as np

DPI = 100


def _png(fig) -> bytes:  # type: ignore[no-untyped-def]
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


def _figure(w: float, h: float):  # type: ignore[no-untyped-def]
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), dpi=DPI)


def ecdf(values: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Empirical CDF: sorted values and their cumulative fractions ``(i + 1) / n``."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    y = np.arange(1, x.size + 1, dtype=np.float64) / max(1, x.size)
    return x, y


def cdf_grid(series: dict[str, dict[str, list[float]]], panels: Sequence[tuple[str, str]]) -> bytes:
    """A grid of CDF panels (2 columns).

    ``series``: label (engine or run/engine) → metric key → values in ms;
    ``panels``: (metric key, axis title) in display order, e.g. ``("ttft", "TTFT (ms)")``.
    A panel with no data says so instead of drawing an empty axis.
    """
    rows = (len(panels) + 1) // 2
    fig = _figure(11, 3.6 * rows)
    for i, (key, title) in enumerate(panels):
        ax = fig.add_subplot(rows, 2, i + 1)
        drawn = False
        pooled = [v for data in series.values() for v in (data.get(key) or [])]
        right = float(np.percentile(pooled, 99)) if len(pooled) >= 100 else None  # one outlier must not squeeze it
        for label, data in series.items():
            vals = data.get(key) or []
            if not vals:
                continue
            x, y = ecdf(vals)
            x, y = np.concatenate([x[:1], x]), np.concatenate([[0.0], y])  # start the step at 0
            ax.step(x, y, where="post", label=f"{label} (n={len(vals)})", linewidth=1.6)
            drawn = True
        if right is not None and right > 0 and max(pooled) > 1.5 * right:
            ax.set_xlim(left=min(0.0, min(pooled)), right=right * 1.05)
            title = f"{title}; x cut at the p99 of all ({right:,.0f}), longest {max(pooled):,.0f}"
        ax.set_xlabel(title)
        ax.set_ylabel("fraction ≤ x")
        ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3)
        if drawn:
            ax.legend(fontsize=8, loc="lower right")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    return _png(fig)


def pareto_frontier(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points not dominated in (higher x = throughput, lower y = latency), ordered
    by x. A point is dominated when another has x ≥ and y ≤ with at least one strict."""
    idx = []
    for i, (x, y) in enumerate(points):
        dominated = any(
            (x2 >= x and y2 <= y) and (x2 > x or y2 < y) for j, (x2, y2) in enumerate(points) if j != i
        )
        if not dominated:
            idx.append(i)
    return sorted(idx, key=lambda i: points[i][0])


def throughput_latency(points: list[tuple[str, float, float]], y_label: str = "p99 TTFT (ms)") -> bytes:
    """Scatter of (label, output tokens/s, latency in ms) with the Pareto frontier drawn as a
    dashed line when it holds at least two points."""
    fig = _figure(8, 4.8)
    ax = fig.add_subplot(1, 1, 1)
    for label, x, y in points:
        ax.scatter([x], [y], s=50, label=label, zorder=3)
    front = pareto_frontier([(x, y) for _, x, y in points]) if len(points) >= 2 else []
    if len(front) >= 2:  # a frontier of one point is no line: not in the legend either
        ax.plot([points[i][1] for i in front], [points[i][2] for i in front], "k--", linewidth=1,
                label="Pareto frontier", zorder=2)
    ax.set_xlabel("output throughput (tokens/s)")
    ax.set_ylabel(y_label)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)


def per_turn(series: dict[str, dict[int, float]], y_label: str = "median TTFT (ms)") -> bytes:
    """Line plot of a per-turn statistic: label → {turn_id: value in ms}."""
    fig = _figure(8, 4.2)
    ax = fig.add_subplot(1, 1, 1)
    for label, by_turn in series.items():
        turns = sorted(by_turn)
        ax.plot(turns, [by_turn[t] for t in turns], marker="o", label=label)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # turns are whole numbers
    ax.set_xlabel("turn (turn_id)")
    ax.set_ylabel(y_label)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)
