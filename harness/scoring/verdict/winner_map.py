"""The winner map: the verdict over a grid of SLOs, decided from a run's records (issue 41).

For each cell of a grid of thresholds (a TPOT percentile across, a TTFT percentile down), the
run's ladders are decided again by the decision core (:func:`harness.scoring.verdict.decision.judge`:
the same capacities, intervals, gates and three outcomes as the run's own verdict), with the
exclusions the scorer declared (hardware, a required feature, the memory fit) kept. The default
grid is the user's threshold times :data:`GRID_FACTORS` on each axis; an axis the user set no SLO
on gets the default SLO's percentile and threshold (for the hardware and workload) times the factors, plus a column "no such SLO"
(``None``) where the user's own question sits. The user may choose an axis's thresholds and the
percentile of both (``bench recommend --map-tpot 50,100,200 --map-percentile 99``); a map at
another percentile than the user's SLO replaces that SLO in every cell, and names no boundary.

The nearest boundary (:func:`boundary`): from the user's cell, the first grid step in each of
the four directions (tighter or looser, on either axis) where the answer changes (another
winner, or no winner), refined by :data:`REFINE_STEPS` bisections in log-threshold between the
two grid values; the nearest in log-threshold is named in one line ("tighten p90 TPOT to 140 ms
and vllm takes over"). The threshold named is one the core decided at, not an interpolation.

Cost: one :func:`judge` per cell (about 0.1–0.2 s on a make bench run of 2,000 records), so a
7 × 7 map takes a few seconds.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from harness.metrics import SLO, slo_table
from results.schema import LadderSummary, MapCell, RequestRecord, WinnerMap

from ..gates import DECLARED_STAGES
from .decision import default_slos, judge, ladder_points, slo_words

GRID_FACTORS = (0.35, 0.5, 0.7, 1.0, 1.4, 2.0, 2.8)
REFINE_STEPS = 4
AXES = ("tpot", "ttft")  # across, down

Key = tuple[str, str]  # (winner, outcome when there is no winner): what the map compares


def _key(cell: MapCell) -> Key:
    return (cell.winner, "" if cell.winner else cell.outcome)


def _axis(slos: Sequence[SLO], metric: str, defaults: Sequence[SLO], factors: Sequence[float],
          given: Sequence[float] | None = None, percentile: float | None = None
          ) -> tuple[SLO, list[float | None], int | None]:
    """The axis of ``metric``: its SLO (the user's on it, else the default's from
    :data:`harness.scoring.verdict.decision.DEFAULT_SLOS`, at ``percentile`` when given), its thresholds
    (ms: ``given``, else that SLO's threshold times ``factors``) and the index of the question's
    own threshold on it. An axis the user set no SLO on ends with ``None`` ("no such SLO", the
    question's place); one whose SLO the user set at another percentile than ``percentile`` does
    not hold the question (index None): the map replaces that SLO by its own."""
    mine = next((s for s in slos if s.metric == metric), None)
    base = mine or next(s for s in defaults if s.metric == metric)
    if percentile is not None:
        base = SLO(metric, base.threshold_ms, percentile)
    values: list[float | None] = sorted(given) if given else [base.threshold_ms * f for f in factors]
    if mine is None:
        return base, values + [None], len(values)
    if mine.percentile != base.percentile:
        return base, values, None
    asked = mine.threshold_ms  # a grid value, not a judged one
    if asked not in values:  # a grid of the user's that skips their own threshold: add it
        values = sorted([*values, asked])  # type: ignore[type-var]
    return base, values, values.index(asked)


def _copy(summary: LadderSummary) -> LadderSummary:
    """What :func:`judge` writes into, copied (each engine and point, one level: judge assigns
    their fields, it changes nothing inside them); a deep copy of a whole run took a fifth of the map's time."""
    return summary.model_copy(update={"engines": {n: e.model_copy(update={"points": [p.model_copy() for p in e.points]})
                                                  for n, e in summary.engines.items()}})


class _Decider:
    """Decides one pair of thresholds (a deep copy of the ladder judged; memoised)."""

    def __init__(self, summary: LadderSummary, records: Sequence[RequestRecord], held: list[SLO],
                 x: SLO, y: SLO, seed: int) -> None:
        self.summary, self.records, self.held, self.x, self.y, self.seed = summary, records, held, x, y, seed
        self.gates = {n: (e.excluded_stage, e.excluded) for n, e in summary.engines.items()
                      if e.excluded and e.excluded_stage in DECLARED_STAGES}
        self.cache: dict[tuple[float | None, float | None], MapCell] = {}
        agentic = summary.workload == "agentic"
        self.points = {n: ladder_points(n, e, records, e.devices or summary.devices, agentic)
                       for n, e in summary.engines.items()}  # read once: only the SLOs change from cell to cell

    def slos(self, x_ms: float | None, y_ms: float | None) -> list[SLO]:
        out = list(self.held)
        if y_ms is not None:
            out.append(SLO(self.y.metric, y_ms, self.y.percentile))
        if x_ms is not None:
            out.append(SLO(self.x.metric, x_ms, self.x.percentile))
        return out

    def __call__(self, x_ms: float | None, y_ms: float | None) -> MapCell:
        if (x_ms, y_ms) not in self.cache:
            ladder = _copy(self.summary)
            judge(ladder, self.records, self.slos(x_ms, y_ms), extra_gates=self.gates, seed=self.seed, points=self.points)
            d = ladder.decision
            assert d is not None
            self.cache[x_ms, y_ms] = MapCell(outcome=d.outcome or "none", winner=d.winner, leader=d.leader,
                                             runner_up=d.runner_up)
        return self.cache[x_ms, y_ms]


def winner_map(summary: LadderSummary, records: Sequence[RequestRecord], slos: Sequence[SLO], *,
               hardware_kind: str = "cpu", factors: Sequence[float] = GRID_FACTORS, seed: int = 0,
               grid: Mapping[str, Sequence[float]] | None = None, percentile: float | None = None) -> WinnerMap:
    """The map of ``summary``'s ladders over a grid around ``slos`` (module docstring); ``summary``
    is not changed. ``grid``: the thresholds (ms) of an axis by metric (``{"tpot": [50, 100, 200]}``;
    an axis not given: around the SLO); ``percentile``: both axes' percentile (default: the
    user's SLO's on that axis, else the default SLO's). Raises ValueError when ``factors`` does
    not hold 1.0 (the user's own cell), or a grid holds a threshold that is not > 0."""
    if 1.0 not in factors:
        raise ValueError("the grid's factors must include 1.0 (the question's own thresholds)")
    grid = dict(grid or {})
    if any(not (v > 0) for values in grid.values() for v in values):
        raise ValueError("a winner map's thresholds are milliseconds > 0")
    defaults = default_slos(hardware_kind, summary.workload)
    x, xs, mine_x = _axis(slos, AXES[0], defaults, factors, grid.get(AXES[0]), percentile)
    y, ys, mine_y = _axis(slos, AXES[1], defaults, factors, grid.get(AXES[1]), percentile)
    held = [s for s in slos if s.metric not in AXES]
    decide = _Decider(summary, records, held, x, y, seed)
    cells = [decide(xv, yv) for yv in ys for xv in xs]
    out = WinnerMap(x_key=x.key, y_key=y.key, x_ms=xs, y_ms=ys, held=slo_table(held), slos=slo_table(slos),
                    cells=cells, asked=None if mine_x is None or mine_y is None else (mine_y, mine_x))
    if out.asked is None:
        asked = ", ".join(f"{slo_words(s.key)} ≤ {_ms(s.threshold_ms)}" for s in slos if s.metric in AXES)
        out.boundary = (f"the SLOs asked ({asked}) are not on this map of {slo_words(x.key)} × {slo_words(y.key)}: "
                        "no boundary is named from them")
        return out
    out.boundary, out.boundary_key, out.boundary_ms = boundary(out, decide, mine_x, mine_y)  # type: ignore[arg-type]
    return out


def _ms(v: float) -> str:
    return f"{v / 1000:.3g} s" if v >= 1000 else f"{v:.3g} ms"


def _answer(cell: MapCell) -> str:
    if cell.winner:
        return f"{cell.winner} wins"
    if cell.outcome == "none":
        return "no engine meets the SLOs"
    if cell.outcome == "undecided":
        return f"{cell.leader} leads but is not decided (an open ladder could still lead)"
    return f"{cell.leader} leads, not separated from {cell.runner_up}"


def _takes_over(cell: MapCell) -> str:
    return f"{cell.winner} takes over" if cell.winner else _answer(cell)


def _refine(decide: _Decider, axis: int, same: float, other: float, fixed: float | None) -> tuple[float, MapCell]:
    """Bisect (log-threshold) between ``same`` (the user's answer) and ``other`` (another one)
    on ``axis`` (0 = x, 1 = y); the threshold nearest ``same`` found with another answer."""
    def at(v: float) -> MapCell:
        return decide(v, fixed) if axis == 0 else decide(fixed, v)

    mine = _key(at(same))
    for _ in range(REFINE_STEPS):
        mid = math.sqrt(same * other)
        if _key(at(mid)) == mine:
            same = mid
        else:
            other = mid
    return other, at(other)


def boundary(m: WinnerMap, decide: _Decider, j0: int, i0: int) -> tuple[str, str | None, float | None]:
    """The nearest change of answer from cell (``i0``, ``j0``) (module docstring): the line, the
    SLO key and the threshold (ms) named."""
    here = m.cell(i0, j0)
    found: list[tuple[float, str, str, float, MapCell]] = []  # (log distance, verb, key, ms, cell)
    for axis, values, key, start, fixed in ((0, m.x_ms, m.x_key, j0, m.y_ms[i0]), (1, m.y_ms, m.y_key, i0, m.x_ms[j0])):
        for step in (-1, 1):
            k = start + step
            while 0 <= k < len(values):
                cell = m.cell(i0, k) if axis == 0 else m.cell(k, j0)
                if _key(cell) != _key(here):
                    break
                k += step
            if not 0 <= k < len(values):
                continue
            same, other = values[k - step], values[k]
            if same is None or other is None:  # the change is at "no such SLO": no threshold between
                ms, cell = (other if other is not None else same), cell
                verb = "drop" if other is None else "set"
            else:
                ms, cell = _refine(decide, axis, same, other, fixed)
                verb = "tighten" if other < same else "loosen"
            mine = values[start]
            dist = abs(math.log(ms / mine)) if mine is not None and ms is not None else math.inf
            found.append((dist, verb, key, ms, cell))
    if not found:
        return (f"{_answer(here)} everywhere on the map ({_span(m.x_key, m.x_ms)} × {_span(m.y_key, m.y_ms)})",
                None, None)
    dist, verb, key, ms, cell = min(found, key=lambda f: f[0])
    if verb == "drop":
        return f"without a {slo_words(key)} SLO, {_takes_over(cell)}", key, None
    return f"{verb} {slo_words(key)} to {_ms(ms)} and {_takes_over(cell)}", key, ms


def _span(key: str, values: Sequence[float | None]) -> str:
    finite = [v for v in values if v is not None]
    return f"{slo_words(key)} {_ms(min(finite))}–{_ms(max(finite))}"


__all__ = ["GRID_FACTORS", "boundary", "winner_map"]
