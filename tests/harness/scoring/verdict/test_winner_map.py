"""The winner map (issue 41): the verdict decided again over a grid of SLOs from the records, on
scripted engines whose crossover is known: ``nimble`` (4 slots, 10 ms per token) serves a tight
TPOT that ``wide`` (32 slots, 30 ms per token) cannot meet at any load, and ``wide`` carries far
more load once TPOT is loose enough for it."""

from __future__ import annotations

from pathlib import Path

from harness.loadgen.simulated import SimEngine
from harness.metrics import parse_slos
from harness.scoring.verdict.decision import judge
from harness.scoring.verdict.winner_map import GRID_FACTORS, winner_map
from results.schema import LadderSummary

from tests.helpers import sim_ladder_run

SLOS = parse_slos("ttft_p90=1000,tpot_p90=60")
ENGINES = {"nimble": SimEngine("nimble", slots=4, prefill_ms=40, tpot_ms=10, jitter=0.05),
           "wide": SimEngine("wide", slots=32, prefill_ms=60, tpot_ms=30, batch_slowdown=0.02, jitter=0.05)}


def crossover_run(root: Path, slos=SLOS) -> Path:
    """A run folder in which ``nimble`` and ``wide`` climbed ladders of 1 … 32 in flight."""
    return sim_ladder_run(root, "cross", ENGINES, ",".join(f"{s.key}={s.threshold_ms:g}" for s in slos))


def _decided(summary: LadderSummary, records, text: str) -> str:
    again = summary.model_copy(deep=True)
    judge(again, records, parse_slos(text))
    return again.decision.winner


def test_each_cell_is_the_verdict_the_core_gives_at_its_thresholds(tmp_path: Path) -> None:
    from results.store import load_run

    run = load_run(crossover_run(tmp_path))
    m = winner_map(run.ladder, run.records, SLOS)
    assert m.x_key == "tpot_p90" and m.y_key == "ttft_p90"
    assert m.x_ms == [60 * f for f in GRID_FACTORS] and m.y_ms == [1000 * f for f in GRID_FACTORS]
    mine = m.cell(GRID_FACTORS.index(1.0), GRID_FACTORS.index(1.0))
    assert mine.winner == run.ladder.decision.winner == "wide"  # the user's own cell is the run's verdict
    tight = m.cell(GRID_FACTORS.index(1.0), 0)  # TPOT p90 ≤ 21 ms: wide never meets it
    assert tight.winner == "nimble" == _decided(run.ladder, run.records, "ttft_p90=1000,tpot_p90=21")
    for i, y in enumerate(m.y_ms):  # a few cells checked against the core, judged alone
        for j in (0, 3, 6):
            assert m.cell(i, j).winner == _decided(run.ladder, run.records, f"ttft_p90={y!r},tpot_p90={m.x_ms[j]!r}")
    assert run.ladder.decision.slos == {"ttft_p90": 1000.0, "tpot_p90": 60.0}  # the run's own ladder untouched


def test_the_nearest_boundary_names_a_threshold_the_core_decided_at(tmp_path: Path) -> None:
    """Tightening TPOT from 60 ms, wide's lead shrinks into the noise before nimble takes over:
    the first change is "not separated", at a threshold between the grid's 42 and 60 ms, refined
    by bisection; 30 ms and below is nimble's."""
    from results.store import load_run

    run = load_run(crossover_run(tmp_path))
    m = winner_map(run.ladder, run.records, SLOS)
    assert m.boundary_key == "tpot_p90" and 30 < m.boundary_ms < 60
    assert m.boundary == f"tighten p90 TPOT to {m.boundary_ms:.3g} ms and wide leads, not separated from nimble"
    at = run.ladder.model_copy(deep=True)
    judge(at, run.records, parse_slos(f"ttft_p90=1000,tpot_p90={m.boundary_ms!r}"))
    assert at.decision.outcome == "not_separated" and at.decision.winner == ""  # what the line says, judged alone
    assert _decided(run.ladder, run.records, f"ttft_p90=1000,tpot_p90={m.boundary_ms * 1.07!r}") == "wide"
    assert [m.cell(3, j).winner for j in range(3)] == ["nimble", "nimble", "wide"]  # 21, 30, 42 ms


def test_an_axis_without_an_slo_gets_a_none_column_where_the_question_sits(tmp_path: Path) -> None:
    from results.store import load_run

    only = parse_slos("ttft_p90=1000")
    run = load_run(crossover_run(tmp_path, only))
    m = winner_map(run.ladder, run.records, only, hardware_kind="cpu")
    assert m.x_key == "tpot_p90" and m.x_ms[-1] is None and m.x_ms[:-1] == [200 * f for f in GRID_FACTORS]
    assert m.cell(GRID_FACTORS.index(1.0), len(m.x_ms) - 1).winner == run.ladder.decision.winner


def test_a_grid_without_the_question_is_refused(tmp_path: Path) -> None:
    import pytest

    from results.store import load_run

    run = load_run(crossover_run(tmp_path))
    with pytest.raises(ValueError, match="must include 1.0"):
        winner_map(run.ladder, run.records, SLOS, factors=(0.5, 2.0))


def test_the_user_chooses_an_axis_s_thresholds_and_the_percentile(tmp_path: Path) -> None:
    from reports.winner_map import _own_cell, winner_map_png
    from results.store import load_run

    run = load_run(crossover_run(tmp_path))
    m = winner_map(run.ladder, run.records, SLOS, grid={"tpot": [90, 21, 30]})
    assert m.x_ms == [21, 30, 60, 90]  # sorted, the question's own 60 ms added
    assert m.y_ms == [1000 * f for f in GRID_FACTORS] and m.asked == (GRID_FACTORS.index(1.0), 2)
    row = GRID_FACTORS.index(1.0)
    assert [m.cell(row, j).winner for j in range(4)] == ["nimble", "nimble", "wide", "wide"]
    assert m.cell(row, 0).winner == _decided(run.ladder, run.records, "ttft_p90=1000,tpot_p90=21")
    assert m.boundary.startswith("tighten p90 TPOT to ")  # still named from the question's own cell

    p99 = winner_map(run.ladder, run.records, SLOS, percentile=99)
    assert (p99.x_key, p99.y_key, p99.asked, p99.boundary_key) == ("tpot_p99", "ttft_p99", None, None)
    assert None not in p99.x_ms and None not in p99.y_ms  # the user set both axes: no "no such SLO" column
    assert "are not on this map of p99 TPOT × p99 TTFT" in p99.boundary
    j = 0  # 21 ms at p99: the cell is the core's verdict with the p90 SLOs replaced by p99 ones
    assert p99.cell(row, j).winner == _decided(run.ladder, run.records, f"ttft_p99=1000,tpot_p99={p99.x_ms[j]!r}")
    assert _own_cell(p99) is None and winner_map_png(p99, run.ladder)[:4] == b"\x89PNG"  # drawn, nothing framed
    import pytest

    with pytest.raises(ValueError, match="milliseconds > 0"):
        winner_map(run.ladder, run.records, SLOS, grid={"ttft": [0, 1000]})
