"""The regression guard (issue 41) on scripted engines whose truth is known: an engine slowed by
20 % has moved down (with the right sign, and fails a 0.95 gate), a re-run of the same engine is
equivalent, a noisy one within the noise, and a lower bound never claims what it cannot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.loadgen.simulated import SimEngine
from harness.metrics import parse_slos
from harness.scoring.verdict.compare import change, compare, fails, ratio_text
from harness.scoring.capacity.frontier import Capacity
from results.store import load_run

from tests.helpers import sim_ladder_run

SLOS = parse_slos("ttft_p90=1000,tpot_p90=60")
X = SimEngine("x", slots=8, prefill_ms=50, tpot_ms=20, jitter=0.05)
SLOWER = SimEngine("x", slots=8, prefill_ms=60, tpot_ms=24, jitter=0.05)  # every time 20 % longer


def _runs(tmp_path: Path, b_engine: SimEngine, b_seed: int) -> tuple:
    a = load_run(sim_ladder_run(tmp_path, "a", {"x": X}, requests=64, seed=0))
    b = load_run(sim_ladder_run(tmp_path, "b", {"x": b_engine}, requests=64, seed=b_seed))
    return (a.ladder, a.records), (b.ladder, b.records)


def test_an_engine_slowed_by_20_percent_has_moved_down(tmp_path: Path) -> None:
    a, b = _runs(tmp_path, SLOWER, 100)
    [c] = compare(a, b, SLOS)
    assert c.moved == "moved_down" and 0.76 < c.ratio < 0.9  # 1 / 1.2 = 0.83, read through the ladder
    assert c.interval[1] < 1 / 1.05 and fails(c, 0.95) and not fails(c, 0.7)
    [back] = compare(b, a, SLOS)  # the other way round: the right sign
    assert back.moved == "moved_up" and back.ratio == pytest.approx(1 / c.ratio)


def test_a_re_run_of_the_same_engine_is_equivalent(tmp_path: Path) -> None:
    a, b = _runs(tmp_path, X, 100)
    [c] = compare(a, b, SLOS)
    assert c.moved == "equivalent" and 1 / 1.05 <= c.equivalence[0] and c.equivalence[1] <= 1.05
    assert not fails(c, 0.95)
    shown = a[0].engines["x"].capacity  # run A's capacity as its own verdict stored it
    assert c.before.output_tps == pytest.approx(shown.output_tps) and c.before.interval == pytest.approx(shown.interval)


def _cap(tps: float, spread: float, open_: bool = False, never: bool = False) -> Capacity:
    draws = np.random.default_rng(int(tps)).normal(tps, spread, 300)
    return Capacity(tps, 1.0, 4.0, (4.0, None if open_ else 8.0), open=open_, never_met=never,
                    interval=(tps - 2 * spread, tps + 2 * spread), draws=draws)


def test_a_lower_bound_bounds_the_claim_on_one_side_only() -> None:
    up_from_open = change("x", _cap(100, 1, open_=True), _cap(150, 1))
    assert up_from_open.moved == "not_separated" and "lower bound in A" in up_from_open.why  # A could have been 150 too
    down_to_open = change("x", _cap(150, 1), _cap(100, 1, open_=True))
    assert down_to_open.moved == "not_separated" and not fails(down_to_open, 0.95)  # B could be 150 after all
    assert ratio_text(down_to_open).startswith("≥ 0.67×")
    assert change("x", _cap(150, 1), _cap(100, 1)).moved == "moved_down"
    assert change("x", _cap(100, 1, open_=True), _cap(100, 1, open_=True)).moved == "not_separated"  # never "within"
    assert change("x", _cap(100, 10, open_=True), _cap(100, 10)).moved == "not_separated"  # holds 1, but A could be more


def test_a_ratio_whose_interval_holds_1_and_reaches_past_the_margin_is_within_the_noise() -> None:
    """Two closed capacities 10 % apart, each ±20 %: the 95 % interval of the ratio holds 1 and
    reaches past ±5 % either way: within the noise (no change seen), naming the margin the pair is
    equivalent at; the gate holds. Two 4 % apart, each ±1–2 %: beyond the noise, not shown beyond
    the margin either: not separated, naming the margin it moved at."""
    noisy = change("x", _cap(100, 10), _cap(110, 11))
    assert noisy.moved == "within_noise" and noisy.interval[0] < 1 < noisy.interval[1] and not fails(noisy, 0.95)
    assert noisy.why.startswith("its 95 % interval holds 1: equivalent from --margin 0.")
    small = change("x", _cap(100, 0.5), _cap(104, 1.0))
    assert small.moved == "not_separated" and small.interval[0] > 1 and "moved up at --margin 0.0" in small.why


def test_a_fall_to_zero_inside_the_noise_is_not_moved_and_passes_the_gate() -> None:
    """Run B's lowest point failed, but by a hair: it passes in a fifth of B's draws, so the 95 %
    interval of the ratio reaches 1 and the fall is not claimed (nor gated); where B fails in
    every draw it has moved down to 0, said with why."""
    rng = np.random.default_rng(1)
    hair = np.where(rng.random(300) < 0.2, rng.normal(100, 1, 300), 0.0)
    marginal = change("x", _cap(100, 1), Capacity(0.0, 0.0, 0.0, (None, 1.0), never_met=True, draws=hair))
    assert marginal.moved in ("within_noise", "not_separated") and not fails(marginal, 0.95)
    assert marginal.interval[0] == 0.0 and marginal.interval[1] > 0.95
    assert marginal.why.startswith("run B misses the SLO at its lowest load, within its own noise; ")
    certain = change("x", _cap(100, 1), Capacity(0.0, 0.0, 0.0, (None, 1.0), never_met=True, draws=np.zeros(300)))
    assert certain.moved == "moved_down" and certain.interval == (0.0, 0.0) and fails(certain, 0.95)
    assert certain.why == "run B misses the SLO at its lowest load"


def test_an_engine_that_stops_meeting_the_slo_has_moved_down_to_zero() -> None:
    gone = change("x", _cap(100, 1), Capacity(0.0, 0.0, 0.0, (None, 1.0), never_met=True))
    assert gone.moved == "moved_down" and gone.ratio == 0.0 and fails(gone, 0.95)
    back = change("x", Capacity(0.0, 0.0, 0.0, (None, 1.0), never_met=True), _cap(100, 1))
    assert back.moved == "moved_up" and not fails(back, 0.95) and ratio_text(back).startswith("∞× [∞–∞]")
    assert change("x", None, _cap(100, 1)).moved == "no_capacity"
    assert change("x", None, None).why == "neither run measured a point of it"


def test_a_change_beyond_the_noise_but_under_the_margin_says_at_which_margin_it_moved():
    """Not separated at the margin asked, but its 95 % interval excludes 1: the guard names the
    margin below which it reads as moved, not one at which it would be called equivalent."""
    from harness.scoring.verdict.compare import Change, _what_margin

    up = Change("x", None, None, ratio=1.12, interval=(1.027, 1.30), equivalence=(1.04, 1.25))
    assert _what_margin(up) == "moved up at --margin 0.02 or less; measure more to tell it from the margin"
    down = Change("x", None, None, ratio=0.9, interval=(0.80, 0.97), equivalence=(0.82, 0.95))
    assert _what_margin(down).startswith("moved down at --margin 0.03 or less")  # 1/0.97 - 1 = 0.0309
    noise = Change("x", None, None, ratio=1.0, interval=(0.80, 1.20), equivalence=(0.85, 1.151))
    assert _what_margin(noise) == "equivalent from --margin 0.18 (measure more for a narrower one)"  # 1/0.85-1
    wide = Change("x", None, None, ratio=1.0, interval=(0.2, 4.0), equivalence=(0.3, 3.0))
    assert _what_margin(wide) == "measure more to show any change is small"
