"""The winner map's chart and lines (``winner_map.json``, :class:`results.schema.WinnerMap`).

``winner_map.png``: one cell per pair of thresholds (TPOT percentile across, TTFT percentile
down, ms; "none" = no such SLO), coloured by the engine that wins there in the frontier chart's
colours (:func:`reports.frontier.engine_colors`); a cell with a leader but no winner (not
separated, or undecided: an open ladder could still lead) is hatched in the leader's colour, a
cell where no engine meets the SLOs is grey. Each cell names its answer; the question's own
SLOs are the cell framed in black, and the nearest boundary is the chart's caption.
"""

from __future__ import annotations

from typing import Any, Sequence

from results.schema import LadderSummary, MapCell, WinnerMap

from .frontier import engine_colors
from .plots import _figure, _png

NOBODY = (0.85, 0.85, 0.85, 1.0)
SHORT = {"not_separated": "not sep.", "undecided": "undecided", "none": "none meet"}


def _tick(v: float | None) -> str:
    if v is None:
        return "none"
    return f"{v / 1000:.3g} s" if v >= 1000 else f"{v:.3g}"


def cell_text(cell: MapCell) -> str:
    """The answer in a cell: the winner ("≈" after it when it won on a tie-breaker), or the
    leader with "not sep." / "undecided", or "none meet"."""
    if cell.winner:
        return cell.winner + (" ≈" if cell.outcome == "equivalent" else "")
    if cell.outcome == "none":
        return SHORT["none"]
    return f"{cell.leader} leads\n({SHORT.get(cell.outcome, cell.outcome)})"


def _own_cell(m: WinnerMap) -> tuple[int, int] | None:
    """(row, column) of the question's own SLOs; None when they are not on the map (a map at
    another percentile). A map stored without ``asked`` finds them from ``slos``."""
    if m.asked is not None:
        return m.asked

    def at(values: list[float | None], key: str) -> int | None:
        v = m.slos.get(key)
        return values.index(v) if v in values else values.index(None) if None in values else None

    i, j = at(m.y_ms, m.y_key), at(m.x_ms, m.x_key)
    return None if i is None or j is None else (i, j)


def winner_map_png(m: WinnerMap, ladder: LadderSummary) -> bytes | None:
    """The chart (module docstring); None for an empty map."""
    if not m.cells:
        return None
    colors: dict[str, Any] = engine_colors(ladder)
    rows, cols = len(m.y_ms), len(m.x_ms)
    fig = _figure(max(6.0, 1.15 * cols + 1.5), max(3.5, 0.62 * rows + 1.4))
    ax = fig.add_subplot(1, 1, 1)
    for i in range(rows):
        for j in range(cols):
            cell = m.cell(i, j)
            name = cell.winner or cell.leader
            face = colors.get(name, NOBODY) if name and cell.outcome != "none" else NOBODY
            ax.add_patch(_rect(j, rows - 1 - i, face, hatch=not cell.winner and cell.outcome != "none"))
            ax.text(j + 0.5, rows - 1 - i + 0.5, cell_text(cell), ha="center", va="center", fontsize=7)
    own = _own_cell(m)
    if own is not None:
        ax.add_patch(_rect(own[1], rows - 1 - own[0], None, edge="black", width=2.5))
    ax.set_xlim(0, cols)
    ax.set_ylim(0, rows)
    ax.set_xticks([j + 0.5 for j in range(cols)], [_tick(v) for v in m.x_ms], fontsize=8)
    ax.set_yticks([rows - 1 - i + 0.5 for i in range(rows)], [_tick(v) for v in m.y_ms], fontsize=8)
    ax.set_xlabel(f"{_label(m.x_key)} SLO (ms; tighter to the left)")
    ax.set_ylabel(f"{_label(m.y_key)} SLO (tighter at the top)")
    held = ", ".join(f"{k} ≤ {v:g} ms" for k, v in m.held.items())
    ax.set_title("Who wins under which SLOs (framed: the SLOs asked" + (f"; held: {held}" if held else "") + ")",
                 fontsize=9)
    fig.text(0.01, -0.02, m.boundary, fontsize=8, ha="left", va="top", wrap=True)
    return _png(fig)


def _label(key: str) -> str:
    metric, _, pct = key.partition("_p")
    return f"{metric.upper()} p{pct.replace('_', '.')}" if pct else metric.upper()


def _rect(x: float, y: float, face: Any, *, hatch: bool = False, edge: str = "white", width: float = 1.0) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), 1, 1, facecolor=face if face is not None else "none", edgecolor=edge, linewidth=width,
                     hatch="///" if hatch else None, alpha=0.55 if hatch else 0.8 if face is not None else 1.0)


def map_lines(m: WinnerMap) -> Sequence[str]:
    """The map in words for the report: the axes and the nearest boundary."""
    return [f"Decided again from the records at each of {len(m.cells)} pairs of thresholds "
            f"({_label(m.x_key)} across, {_label(m.y_key)} down), by the same decision core as the verdict.",
            f"Nearest boundary: {m.boundary}."]


__all__ = ["cell_text", "map_lines", "winner_map_png"]
