"""The race and the allocation (harness/scoring/capacity/race.py, allocation.py) on scripted engines whose
truth is known (harness/loadgen/simulated.py), through the same rule the main job runs
(harness/app/run/testbed.py's ``race``), and on hand-made points whose bounds are worked out."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.app.run import testbed
from harness.app.run.ladder import Ladder, Rung
from harness.app.run.testbed import faster
from harness.loadgen.simulated import SimEngine
from harness.metrics import parse_slos
from harness.scoring.verdict.allocation import SETTLED_DF, Ladders, next_steps
from harness.scoring.capacity.frontier import PointStats, Requests, capacity_from
from harness.scoring.capacity.race import RACE_MARGIN, ceiling, floor, reach_of, standings
from harness.scoring.verdict.verdict import Candidate, Verdict, decide

SLOS = parse_slos("ttft_p90=1000,tpot_p90=60")
BASE = SimEngine("base", slots=16, prefill_ms=80, tpot_ms=25, batch_slowdown=0.08, jitter=0.08)


def pt(load: float, tps: float, margin: float) -> PointStats:
    return PointStats(load=load, margin=margin, values={}, failure_rate=0.0, passed=margin <= 1.0, output_tps=tps,
                      request_rate=tps / 10, per_user_tps=None, binding="ttft_p90")


def test_an_open_ladders_ceiling_follows_the_closed_system_model():
    # margins 0.2, 0.4, 0.6 at 1, 2, 4: the secant from the first to the last rises 0.4 over 3 loads,
    # so the margin reaches 1 by 4 + 0.4 / (0.4 / 3) = 7 at the latest; the steepest secant is the
    # origin's (10 tok/s per unit of load), so the capacity is at most 30 + 10 x 3 = 60
    cap = capacity_from([pt(1, 10, 0.2), pt(2, 18, 0.4), pt(4, 30, 0.6)])
    assert cap.open and reach_of([p for p in cap.points]) == pytest.approx(7.0)
    assert ceiling(cap) == pytest.approx(60 * (1 + RACE_MARGIN))
    assert ceiling(cap, max_load=5) == pytest.approx((30 + 10 * 1) * (1 + RACE_MARGIN))  # the ladder stops at 5
    assert floor(cap) == 30  # what its highest point sustained
    # nothing bounds it: one point, the low end alone (two), or a margin that did not rise
    assert ceiling(capacity_from([pt(1, 10, 0.2)])) == math.inf
    assert ceiling(capacity_from([pt(1, 10, 0.2), pt(2, 18, 0.4)])) == math.inf
    assert ceiling(capacity_from([pt(1, 10, 0.5), pt(2, 18, 0.45), pt(4, 30, 0.4)])) == math.inf


def test_a_closed_ladders_bounds_are_its_bracket():
    cap = capacity_from([pt(1, 10, 0.2), pt(2, 18, 0.6), pt(4, 25, 1.4)])  # broke at 4
    assert not cap.open and cap.bracket == (2, 4)
    assert floor(cap) == 18  # the passing bracket point: throughput does not fall as load rises
    assert ceiling(cap) == pytest.approx(25 * (1 + RACE_MARGIN))  # the failing one's, at most


def test_an_engine_below_the_leaders_floor_is_out_and_leaves_the_verdict_separated():
    lead = capacity_from([pt(1, 40, 0.1), pt(2, 80, 0.2), pt(4, 150, 0.3), pt(8, 200, 0.5)])
    hopeless = capacity_from([pt(1, 10, 0.2), pt(2, 18, 0.4), pt(4, 30, 0.6)])  # open, at most 69
    hopeful = capacity_from([pt(1, 60, 0.2), pt(2, 110, 0.4), pt(4, 170, 0.6)])  # open, could pass 200
    race = standings({"lead": lead, "hopeless": hopeless, "hopeful": hopeful})
    assert [s.name for s in race] == ["lead", "hopeful", "hopeless"]
    out = {s.name: s.out for s in race}
    assert out["lead"] == "" and out["hopeful"] == ""
    # the bar named for what it is: the leader's floor (its passing point's throughput, without an interval)
    assert out["hopeless"] == "at most 69.0 tok/s, below lead's floor of 200.0 tok/s (the throughput its passing load sustained)"
    v = decide([Candidate("lead", lead), Candidate("hopeless", hopeless), Candidate("hopeful", hopeful)])
    assert v.outcome == "undecided" and v.unsettled == ["hopeful"]  # the open engine that could lead
    v = decide([Candidate("lead", lead), Candidate("hopeless", hopeless)])
    assert v.outcome == "separated" and v.winner == "lead" and v.unsettled == []  # an open runner-up out of the race


def test_the_aimed_climb_measures_near_the_projected_boundary_not_at_twice_the_load():
    margins = {1: 0.2, 2: 0.4, 4: 0.6}
    loads = []

    def measure(load, seed, repeat):  # noqa: ANN001, ANN202
        loads.append(load)
        raise AssertionError("not measured here")

    ladder = Ladder(measure, SLOS)
    for load, m in margins.items():
        ladder.rungs.append(Rung(index=len(ladder.rungs), load=load, stats=pt(load, 10 * load, m)))
    assert ladder.next_load(4, aim=False) == 8
    assert ladder.next_load(4, aim=True) == 7  # the margin reaches 1 by 7 at the latest


def test_a_hopeless_scripted_engine_is_dropped_after_its_first_points():
    """An engine with a third of the leader's capacity: its low end (1 and 2 in flight), then,
    once the leader has climbed and raised the bar, one more point (the margin's secant needs
    three), after which its ceiling is below the leader's floor: out, never bisected or repeated;
    the leader is decided and measured on."""
    leader, hopeless = faster(BASE, "leader", 3.0), dataclass_replace(BASE, "hopeless")
    for t in range(3):
        v, ladders = testbed.race([leader, hopeless], [2 * t, 2 * t + 1], SLOS, 32)
        assert v.winner == "leader" and v.outcome == "separated", v
        rungs = ladders["hopeless"].rungs
        assert [r.load for r in rungs] == [1, 2, 4] and all(r.stats.passed for r in rungs)
        assert all(len(r.measurements) == 1 for r in rungs)
        assert ladders["hopeless"].stopped == "race"
        race = standings({n: c for n, lad in ladders.items() if (c := lad.capacity(resamples=300)) is not None})
        assert next(s for s in race if s.name == "hopeless").out.startswith("at most ")
        lead = ladders["leader"]
        p, f = lead.bracket()
        assert p is not None and f is not None and f.load - p.load <= max(1, 0.25 * p.load)  # its boundary narrowed


def test_an_open_leader_climbs_before_the_engines_that_could_pass_it():
    lead = capacity_from([pt(1, 40, 0.1), pt(2, 80, 0.2)])  # open, nothing bounds it yet
    other = capacity_from([pt(1, 30, 0.2), pt(2, 50, 0.3)])
    race = standings({"lead": lead, "other": other})
    v = decide([Candidate("lead", lead), Candidate("other", other)])
    assert v.outcome == "undecided"
    info = Ladders(gap={}, passing={"lead": 2, "other": 2}, climbable={"lead": True, "other": True}, climbs={}, repeats={})
    assert [(s.engine, s.action) for s in next_steps(race, v, info)] == [("lead", "climb")]
    info = Ladders(gap={}, passing={"lead": 2, "other": 2}, climbable={"lead": True, "other": True},
                   climbs={"lead": 3}, repeats={})  # the leader has climbed all it may: the other's turn
    assert [(s.engine, s.action) for s in next_steps(race, v, info)] == [("other", "climb")]


def test_the_low_end_is_measured_briefly_and_in_full_when_it_fails():
    """The main job's first climb measures its lowest point with the brief callback; a brief low
    end that fails is measured again in full (pooled: the gate never rests on a brief one)."""
    calls: list[tuple[str, int]] = []

    def measurer(kind: str, failing: bool):  # noqa: ANN202
        def measure(load: int, seed: int, repeat: int):  # noqa: ANN202
            calls.append((kind, load))
            n = 8 if kind == "brief" else 16
            ttft = 2000.0 if failing and load == 1 else 100.0
            return requests_of([ttft] * n), None
        return measure

    for failing, expected in ((False, [("brief", 1), ("full", 2)]), (True, [("brief", 1), ("full", 1)])):
        calls.clear()
        ladder = Ladder(measurer("full", failing), parse_slos("ttft_p90=1000"), max_points=2,
                        brief=measurer("brief", failing))
        ladder.climb(bisect=False)
        assert calls == expected, calls
        assert len(ladder.rungs[0].measurements) == (2 if failing else 1)


def test_a_climb_stops_once_its_ceiling_is_below_the_bar():
    """``Ladder.bar``: the climb of an engine other than the leader stops after the point that put
    its ceiling below the leader's floor, not at its boundary. Margins 0.2, 0.4, 0.6 at 1, 2, 4
    reach 1 by 7 at the latest, and 10 tok/s per unit of load bounds it by (40 + 10 x 3) x 1.15 =
    80.5 tok/s: a bar of 81 stops it there; one of 80 lets it climb to its boundary (aimed at 7,
    then 9, where its SLO breaks)."""
    margins = {1: 0.2, 2: 0.4, 4: 0.6, 7: 0.85}
    measured: list[int] = []

    def measure(load: int, seed: int, repeat: int):  # noqa: ANN202
        measured.append(load)
        return requests_of([1000.0 * margins.get(load, 1.3)] * 16, tps=10 * load), None

    for bar, loads, why in ((81.0, [1, 2, 4], "race"), (80.0, [1, 2, 4, 7, 9], "slo"), (0.0, [1, 2, 4, 7, 9], "slo")):
        measured.clear()
        ladder = Ladder(measure, parse_slos("ttft_p90=1000"), bar=bar)
        assert ladder.climb(bisect=False) == why and measured == loads, (bar, measured)


def test_the_bar_reads_the_ceiling_as_the_allocation_judges_it_interval_included():
    """The climb's bar and the allocation's judge read one ceiling: the same points as above, but
    with output lengths that vary (±50 % around the mean) put the top point's interval's upper
    end above its estimate, and the judge's ceiling above 81 tok/s; the climb then goes on to its
    boundary instead of stopping "race" where the judge still counts it in the race (make bench,
    2026-12-06: vLLM stopped at 141 < 144 by the estimate, kept in at 146 by its interval, and was
    left open). An engine that did stop "race" may climb on (CLIMBS_ON) if the judge disagrees."""
    from harness.app.run.ladder import CLIMBS_ON

    margins = {1: 0.2, 2: 0.4, 4: 0.6, 7: 0.85}
    measured: list[int] = []

    def measure(load: int, seed: int, repeat: int):  # noqa: ANN202
        measured.append(load)
        got = requests_of([1000.0 * margins.get(load, 1.3)] * 16, tps=10 * load)
        spread = np.where(np.arange(16) % 2 == 0, 0.5, 1.5)  # same mean, tokens vary
        return Requests(ok=got.ok, ttft=got.ttft, tpot=got.tpot, e2el=got.e2el, tokens=got.tokens * spread, itl=got.itl,
                        duration_s=got.duration_s), None

    ladder = Ladder(measure, parse_slos("ttft_p90=1000"), bar=81.0)
    cheap = ceiling(ladder_at(ladder, measure, [1, 2, 4]).capacity(resamples=0))
    judged = ceiling(ladder.capacity(resamples=300))
    assert cheap == pytest.approx(80.5) and judged > 81.0
    measured.clear()
    ladder = Ladder(measure, parse_slos("ttft_p90=1000"), bar=81.0)
    assert ladder.climb(bisect=False) == "slo" and measured == [1, 2, 4, 7, 9]
    assert "race" in CLIMBS_ON and "slo" not in CLIMBS_ON


def ladder_at(ladder: Ladder, measure, loads: list[int]) -> Ladder:  # noqa: ANN001
    """``ladder`` with one measurement at each of ``loads`` (no climb, no bar)."""
    for load in loads:
        ladder.point(load)
    return ladder


def test_an_engine_just_under_the_leader_is_measured_until_separated_or_equivalent():
    """3 % apart: both boundaries are bisected to adjacent loads, then their bracket points are
    repeated (at most 3 times) until the verdict is separated or equivalent; it is never left
    undecided, and a wrong winner is never claimed separated."""
    near = faster(BASE, "near", 1.03)
    for t in range(3):
        v, ladders = testbed.race([near, BASE], [2 * t, 2 * t + 1], SLOS, 32)
        assert v.outcome in ("separated", "equivalent", "not_separated"), v
        assert not (v.outcome == "separated" and v.winner == "base")
        for lad in ladders.values():
            p, f = lad.bracket()
            assert p is not None and f is not None and f.load - p.load == 1  # bisected to adjacent loads
        if v.outcome == "not_separated":  # the rule's most: three repeats of both bracket points each
            assert all(sum(len(r.measurements) - 1 for r in lad.rungs) == 3 * 2 for lad in ladders.values())


def test_engines_15_percent_apart_are_decided_in_under_half_the_equal_budgets_time():
    """The must-show of issue 39 on the simulated clock (benchmarks/decision_bed.py prints the
    table): the allocation names the right winner, separated, in less than half the measuring
    time of equal budgets (every engine's full ladder, bisected, its bracket measured twice more),
    the leader's fresh-start repeat included."""
    better = faster(BASE, "better", 1.15)
    ratios = []
    for t in range(4):
        equal, allocated = [0.0], [0.0]
        testbed.candidate(better, 2 * t, SLOS, 32, clock=equal)
        testbed.candidate(BASE, 2 * t + 1, SLOS, 32, clock=equal)
        v, _ = testbed.race([better, BASE], [2 * t, 2 * t + 1], SLOS, 32, clock=allocated)
        assert v.outcome == "separated" and v.winner == "better", v
        ratios.append(allocated[0] / equal[0])
    assert sorted(ratios)[len(ratios) // 2] < 0.5, ratios


def test_the_rule_spends_nothing_once_the_leaders_capacity_is_found():
    lead = capacity_from([pt(1, 40, 0.1), pt(2, 80, 0.5), pt(3, 100, 1.2)])
    other = capacity_from([pt(1, 10, 0.5), pt(2, 12, 1.4)])
    race = standings({"lead": lead, "other": other})
    v = Verdict(outcome="separated", winner="lead", leader="lead")
    info = Ladders(gap={"lead": 1, "other": 1}, passing={"lead": 2, "other": 1}, climbable={}, climbs={},
                   repeats={"lead": 1})
    assert next_steps(race, v, info) == []
    steps = next_steps(race, v, Ladders(gap={"lead": 1}, passing={"lead": 2}, climbable={}, climbs={}, repeats={}))
    assert [(s.engine, s.action) for s in steps] == [("lead", "repeat")]  # its spread between starts, once
    # ... while the spread between measurements is not settled: from SETTLED_DF degrees of freedom (earlier runs on
    # the machine), the interval already holds the spread between runs, and the repeat is not made
    fresh = Ladders(gap={"lead": 1}, passing={"lead": 2}, climbable={}, climbs={}, repeats={})
    assert [s.action for s in next_steps(race, v, fresh, spread_df=SETTLED_DF - 1)] == ["repeat"]
    assert next_steps(race, v, fresh, spread_df=SETTLED_DF) == []


def test_a_machine_whose_spread_is_settled_decides_engines_50_percent_apart_in_under_half_the_time():
    """On a machine whose earlier runs settled the spread between measurements (a prior of more than
    SETTLED_DF degrees of freedom, testbed.history), the leader is not repeated once separated:
    engines 50 % apart (the bed's row whose first run on a machine takes half the equal budgets'
    time) are decided, the right way, in well under half of it."""
    better = faster(BASE, "better", 1.5)
    prior = testbed.history(BASE, range(100, 106), SLOS, 32)
    assert sum(len(g) - 1 for g in prior) >= SETTLED_DF
    ratios = []
    for t in range(4):
        equal, allocated = [0.0], [0.0]
        testbed.candidate(better, 2 * t, SLOS, 32, clock=equal)
        testbed.candidate(BASE, 2 * t + 1, SLOS, 32, clock=equal)
        v, ladders = testbed.race([better, BASE], [2 * t, 2 * t + 1], SLOS, 32, clock=allocated, prior=prior)
        assert v.outcome == "separated" and v.winner == "better", v
        assert max(len(r.measurements) for r in ladders["better"].rungs) == 1  # no repeat
        ratios.append(allocated[0] / equal[0])
    assert sorted(ratios)[len(ratios) // 2] < 0.45, ratios


def requests_of(ttft_ms: list[float], tps: float = 10.0) -> Requests:
    """One measurement of ``len(ttft_ms)`` successful requests over 1 s: those TTFTs (ms), 20 ms
    TPOT, ``tps`` output tokens in all."""
    n = len(ttft_ms)
    ttft = np.array(ttft_ms, dtype=float)
    return Requests(ok=np.ones(n, bool), ttft=ttft, tpot=np.full(n, 20.0), e2el=ttft + 200.0, tokens=np.full(n, tps / n),
                    itl=tuple(np.array([20.0]) for _ in range(n)), duration_s=1.0)


def dataclass_replace(engine: SimEngine, name: str) -> SimEngine:
    import dataclasses

    return dataclasses.replace(engine, name=name)
