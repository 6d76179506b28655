"""The race and the allocation (harness/scoring/race.py, allocation.py) on scripted engines whose
truth is known (harness/loadgen/simulated.py), through the same rule the main job runs
(harness/app/run/testbed.py's ``race``), and on hand-made points whose bounds are worked out."""

from __future__ import annotations

import math

import pytest

from harness.app.run import testbed
from harness.app.run.ladder import Ladder, Rung
from harness.app.run.testbed import faster
from harness.loadgen.simulated import SimEngine
from harness.metrics import parse_slos
from harness.scoring.allocation import Ladders, next_steps
from harness.scoring.frontier import PointStats, capacity_from
from harness.scoring.race import RACE_MARGIN, ceiling, floor, reach_of, standings
from harness.scoring.verdict import Candidate, Verdict, decide

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
    # nothing bounds it: one point, or a margin that did not rise
    assert ceiling(capacity_from([pt(1, 10, 0.2)])) == math.inf
    assert ceiling(capacity_from([pt(1, 10, 0.5), pt(2, 18, 0.4)])) == math.inf


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
    assert out["hopeless"] == "cannot reach lead's 200.0 tok/s (at most 69.0)"
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


def test_a_hopeless_scripted_engine_is_dropped_after_its_first_climb():
    """An engine with a third of the leader's capacity: its first climb (doubling until its SLO
    breaks) is all it gets: no bisection, no repeat; the leader is decided and measured on."""
    leader, hopeless = faster(BASE, "leader", 3.0), dataclass_replace(BASE, "hopeless")
    for t in range(3):
        v, ladders = testbed.race([leader, hopeless], [2 * t, 2 * t + 1], SLOS, 32)
        assert v.winner == "leader" and v.outcome == "separated", v
        rungs = ladders["hopeless"].rungs
        loads = [r.load for r in rungs]
        # its first climb only: loads rising until the one that broke its SLO (never bisected), each measured once
        assert loads == sorted(loads) and not rungs[-1].stats.passed and all(r.stats.passed for r in rungs[:-1]), loads
        assert all(len(r.measurements) == 1 for r in rungs)
        race = standings({n: c for n, lad in ladders.items() if (c := lad.capacity(resamples=300)) is not None})
        assert next(s for s in race if s.name == "hopeless").out.startswith("cannot reach leader's")
        lead = ladders["leader"]
        p, f = lead.bracket()
        assert p is not None and f is not None and f.load - p.load <= max(1, 0.25 * p.load)  # its boundary narrowed


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


def dataclass_replace(engine: SimEngine, name: str) -> SimEngine:
    import dataclasses

    return dataclasses.replace(engine, name=name)
