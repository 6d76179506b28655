"""The configuration search of ``bench run --tune`` (harness/scoring/verdict/tuning.py): its candidates,
its halving schedule, the gain it reports, and (on the decision test bed's scripted engines,
harness/app/run/testbed.py, on a simulated clock) that it finds the known best setting within
its budget and reports, never retries, a setting the engine refuses (issue 27)."""

from __future__ import annotations

import dataclasses

import numpy as np

from harness.app.run import testbed
from harness.loadgen.simulated import SimEngine, true_capacity
from harness.metrics import parse_slos
from harness.scoring.capacity.frontier import Capacity
from harness.scoring.verdict.tuning import Rejected, Unfaithful, best_of, candidates, gain, grid, label, rungs, successive_halving, upper_envelope

SLOS = parse_slos("ttft_p90=1000,tpot_p90=60")
OUTPUT_TOKENS = 32
# every slot configured costs 4 % of each step (a static reservation): the capacity at the SLO
# peaks at 16 slots (analytic truth: 2 → 85, 4 → 146, 8 → 222, 16 → 282, 32 → 128 tok/s; 64 misses it)
BASE = SimEngine("slots", slots=8, prefill_ms=80, tpot_ms=20, batch_slowdown=0.05, slot_overhead=0.04, jitter=0.08)
SLOTS = (8, 2, 4, 16, 32, 64)  # the defaults (8) first, as the real search orders them


def configs() -> list[SimEngine]:
    return [dataclasses.replace(BASE, name=f"slots{s}", slots=s) for s in SLOTS]


def test_the_truth_peaks_at_16_slots() -> None:
    truth = {e.slots: true_capacity(e, OUTPUT_TOKENS, 1000, 60) for e in configs()}
    assert max(truth, key=truth.get) == 16
    assert truth[16] > 1.2 * truth[8] and truth[64] == 0.0


def test_the_search_finds_the_best_slot_count_within_its_budget() -> None:
    found, spent = [], []
    for trial in range(10):
        tried, best, _ = testbed.tune(configs(), 240.0, SLOS, OUTPUT_TOKENS, trial)
        found.append(tried[best].config["slots"])
        spent.append(sum(t.seconds for t in tried))
    assert found.count("16") >= 9, found
    # within the budget: a rung's points may end past its share by one point at most
    assert max(spent) < 240.0 * 1.5, spent


def test_a_setting_the_engine_refuses_is_reported_and_never_retried() -> None:
    tried, best, calls = testbed.tune(configs(), 240.0, SLOS, OUTPUT_TOKENS, trial=0, refuses=("slots64",))
    refused = SLOTS.index(64)
    assert tried[refused].status == "rejected" and "refused --slots 64" in tried[refused].reason
    assert calls[refused] == 1 and tried[refused].estimates == []
    assert tried[best].config == {"slots": "16"}


def test_candidates_try_the_defaults_then_each_knob_alone_then_combinations() -> None:
    space = {"max_num_seqs": ["8", "32"], "max_num_batched_tokens": ["512", "2048"]}
    # round-robin over the knobs: a small limit still moves each of them
    assert candidates(space, 3) == [{}, {"max_num_seqs": "8"}, {"max_num_batched_tokens": "512"}]
    every = candidates(space, 100)
    assert every[:5] == [{}, {"max_num_seqs": "8"}, {"max_num_batched_tokens": "512"}, {"max_num_seqs": "32"},
                         {"max_num_batched_tokens": "2048"}]
    assert len(every) == 1 + 4 + 4 and all(c in every for c in grid(space))
    assert candidates(space, 100, seed=1)[5:] != candidates(space, 100, seed=2)[5:] or len(every) < 7
    assert candidates({}, 4) == [{}]
    assert label({}) == "defaults" and label({"a": "1", "b": "2"}) == "a=1 b=2"


def test_the_halving_schedule_splits_the_budget_equally_over_its_rungs() -> None:
    assert rungs(1, 100) == []
    assert rungs(2, 100) == [(2, 50.0)]  # a grid: one rung
    assert rungs(4, 120) == [(4, 15.0), (2, 30.0)]
    assert rungs(5, 120) == [(5, 8.0), (3, 40 / 3), (2, 20.0)]
    for n in (2, 3, 4, 5, 8, 13):
        assert abs(sum(c * s for c, s in rungs(n, 300)) - 300) < 1e-9


def test_halving_keeps_the_better_half_and_the_survivor_of_most_rungs_wins() -> None:
    values = [10.0, 30.0, 20.0, 40.0]  # configuration i's true value; estimates exact
    seen: list[tuple[int, int]] = []

    def evaluate(i: int, rung: int, seconds: float) -> tuple[float, float]:
        seen.append((i, rung))
        if i == 2:
            raise RuntimeError("crashed under load")
        return values[i], seconds

    tried, best = successive_halving([{"k": str(v)} for v in values], 80.0, evaluate)
    assert best == 3
    assert [i for i, r in seen if r == 0] == [0, 1, 2, 3]
    assert sorted(i for i, r in seen if r == 1) == [1, 3]  # of the three that measured, the better two
    assert tried[2].status == "failed" and tried[2].reason == "crashed under load"
    assert best_of([]) == 0


def test_a_rejection_leaves_the_search_at_once() -> None:
    def evaluate(i: int, rung: int, seconds: float) -> tuple[float, float]:
        if i == 1:
            raise Rejected("unknown flag --foo")
        return float(i), 1.0

    tried, best = successive_halving([{}, {"foo": "1"}, {"k": "2"}], 30.0, evaluate)
    assert tried[1].status == "rejected" and tried[1].reason == "unknown flag --foo"
    assert best == 2


def test_a_configuration_below_the_fidelity_floor_is_never_measured_again_nor_chosen() -> None:
    """The configuration of lower precision would measure the most (9.0) but failed its fidelity
    check at rung 0: it leaves the search, and the best faithful one is chosen."""
    seen: list[tuple[int, int]] = []

    def evaluate(i: int, rung: int, seconds: float) -> tuple[float, float]:
        seen.append((i, rung))
        if i == 2:
            raise Unfaithful("fidelity 0.750 [0.689, 0.802] … — below the floor 0.90")
        return [1.0, 2.0, 9.0, 1.5][i], 1.0

    tried, best = successive_halving([{}, {"k": "2"}, {"kv": "int4"}, {"k": "3"}], 40.0, evaluate)
    assert tried[2].status == "unfaithful" and tried[2].reason.endswith("below the floor 0.90")
    assert tried[2].estimates == [] and tried[2].seconds == 0.0
    assert (2, 1) not in seen and best == 1


def _cap(tps: float, spread: float, seed: int) -> Capacity:
    draws = np.random.default_rng(seed).normal(tps, spread, 600)
    return Capacity(tps, 1.0, 4.0, (4.0, 8.0), draws=draws, interval=(float(np.percentile(draws, 2.5)),
                                                                        float(np.percentile(draws, 97.5))))


def test_the_gain_is_none_inside_the_noise_and_a_ratio_with_its_interval_outside() -> None:
    big = gain(_cap(130.0, 3.0, 1), _cap(100.0, 3.0, 2))
    assert abs(big.ratio - 1.3) < 1e-9 and not big.none
    assert big.interval[0] > 1.2 and big.interval[1] < 1.4
    assert big.text().startswith("1.30× [")
    small = gain(_cap(103.0, 6.0, 1), _cap(100.0, 6.0, 2))  # [0.88-1.20]: neither a gain nor shown to be none
    assert small.none and small.outcome == "not_separated"
    assert small.text().startswith("none shown (1.03×") and "not separated from the defaults" in small.text()
    same = gain(_cap(101.0, 0.5, 1), _cap(100.0, 0.5, 2))  # its 90 % interval inside the 5 % margin: equivalent
    assert same.none and same.outcome == "equivalent" and same.text().startswith("none (1.01×")
    assert gain(None, _cap(100.0, 3.0, 2)).ratio is None
    # defaults whose interval reaches 0 (SGLang-CPU's in issue 27's run): the gain's upper end is ∞, said so
    zero_lo = _cap(100.0, 3.0, 2)
    zero_lo.draws[:60] = 0.0  # 10 % of its bootstrap draws met the SLO at no load
    unbounded = gain(_cap(140.0, 30.0, 1), zero_lo)
    assert unbounded.none and unbounded.interval[1] == float("inf")
    assert "–∞]" in unbounded.text() and "inf" not in unbounded.text()
    noisy_worse = gain(_cap(97.0, 6.0, 1), _cap(100.0, 6.0, 2))
    assert noisy_worse.none and noisy_worse.text().startswith("none (0.97× [") and noisy_worse.text().endswith(
        "; the configuration chosen measured below the defaults when both were climbed again (within the noise))")
    assert gain(_cap(130.0, 3.0, 1), _cap(100.0, 3.0, 2), defaults_best=True).text() == \
        "none: the defaults were the best configuration tried"


def test_a_gain_over_lower_bounds_says_so() -> None:
    chosen_open = _cap(130.0, 3.0, 1)
    chosen_open.open = True
    lower = gain(chosen_open, _cap(100.0, 3.0, 2))
    assert lower.bound == "≥" and not lower.none and lower.text().startswith("≥ 1.30× [")
    default_open = _cap(100.0, 3.0, 2)
    default_open.open = True
    upper = gain(_cap(130.0, 3.0, 1), default_open)
    assert upper.bound == "≤" and upper.none
    assert upper.text().startswith("none shown (≤ 1.30× [") and upper.text().endswith(
        "]: an upper bound, the defaults' ladder stopped before an SLO broke)")
    # the chosen configuration below the defaults' lower bound: it measured worse (SGLang-CPU's case in issue 27's run)
    worse = gain(_cap(14.0, 4.0, 1), default_open)
    assert worse.bound == "≤" and worse.none and worse.text().endswith(
        "the configuration chosen measured below the defaults when both were climbed again: the search's pick did not hold up)")
    both = gain(chosen_open, default_open)  # a ratio of two lower bounds measures nothing: no number shown
    assert both.bound == "≈" and both.none and both.text().startswith("unknown: both ladders stopped")
    assert "×" not in both.text() and "[" not in both.text()


def test_the_defaults_are_kept_unless_the_best_beats_them_by_more_than_5_percent() -> None:
    def search(values: list[float]) -> int:
        return successive_halving([{"k": str(i)} for i in range(len(values))], 40.0,
                                  lambda i, r, s: (values[i], s))[1]

    assert search([175.0, 150.0, 176.0]) == 0  # own#2 176 over own#0 175 in a review: a pick by the noise
    assert search([175.0, 150.0, 183.75]) == 0  # exactly 5 % over: still within the margin
    assert search([175.0, 150.0, 184.0]) == 2  # clearly better
    assert search([0.0, 10.0]) == 1  # the defaults never met the SLO


def test_the_defaults_go_on_to_the_next_rung_over_a_configuration_not_5_percent_better() -> None:
    """Rung 0 of vLLM-CPU's search in issue 27's run read 34.3 (defaults), 34.7 and 34.6 tok/s: the
    defaults must not leave the search on 0.4 tok/s of noise."""
    seen: list[tuple[int, int]] = []

    def evaluate(i: int, rung: int, seconds: float) -> tuple[float, float]:
        seen.append((i, rung))
        return [34.3, 34.7, 34.6][i] + rung * 5.0, seconds

    successive_halving([{}, {"k": "1"}, {"k": "2"}], 60.0, evaluate)
    assert sorted(i for i, r in seen if r == 1) == [0, 1]


def test_an_interrupted_search_marks_what_it_did_not_measure_and_keeps_the_seconds() -> None:
    tried: list = []

    def evaluate(i: int, rung: int, seconds: float) -> tuple[float, float]:
        if i == 2:
            exc = KeyboardInterrupt()
            exc.spent_s = 7.5  # what the trial measured before the Ctrl-C
            raise exc
        return 100.0 + i, 10.0

    try:
        successive_halving([{}, {"k": "1"}, {"k": "2"}, {"k": "3"}], 80.0, evaluate, tried=tried)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the interrupt must pass through")
    assert [t.status for t in tried] == ["measured", "measured", "interrupted", "interrupted"]
    assert tried[0].estimates == [100.0] and tried[0].seconds == 10.0
    assert tried[2].seconds == 7.5 and tried[2].reason == "interrupted while measuring (rung 1)"
    assert tried[3].seconds == 0.0 and tried[3].reason.startswith("not measured: the search was interrupted")


def test_the_envelope_keeps_the_points_no_other_beats_on_both_axes() -> None:
    points = [(10.0, 100.0), (5.0, 180.0), (8.0, 90.0), (20.0, 40.0), (5.0, 150.0), (12.0, 100.0)]
    assert upper_envelope(points) == [(5.0, 180.0), (12.0, 100.0), (20.0, 40.0)]
    assert upper_envelope([]) == []
