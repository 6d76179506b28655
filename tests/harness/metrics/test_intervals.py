"""Confidence intervals and ties (issue 12): seeded statistical tests on known distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.metrics import (
    ConfidenceInterval,
    bootstrap_ci,
    coefficient_of_variation,
    could_flip,
    headline_interval,
    intervals_overlap,
    median_ci_over_repeats,
    rank_with_ties,
    two_stage_bootstrap_ci,
)
from harness.metrics.intervals import _ragged_rows_stat

TRIALS = 200


def _coverage(draw, true_median: float, n: int = 200) -> float:
    hits = 0
    for trial in range(TRIALS):
        sample = draw(np.random.default_rng(1000 + trial), n)
        ci = bootstrap_ci(sample, "median", n_resamples=1000, seed=trial)
        hits += ci.low <= true_median <= ci.high
    return hits / TRIALS


def test_median_ci_covers_true_median_lognormal():
    mu, sigma = math.log(100.0), 0.5  # median exp(mu) = 100 ms
    rate = _coverage(lambda rng, n: rng.lognormal(mu, sigma, n), math.exp(mu))
    print(f"lognormal median 95% CI coverage: {rate:.3f} over {TRIALS} trials")
    assert rate >= 0.90


def test_median_ci_covers_true_median_normal():
    rate = _coverage(lambda rng, n: rng.normal(250.0, 40.0, n), 250.0)
    print(f"normal median 95% CI coverage: {rate:.3f} over {TRIALS} trials")
    assert rate >= 0.90


def test_two_stage_ci_covers_true_median_over_iid_repeats():
    mu, sigma = math.log(100.0), 0.5
    hits = 0
    for trial in range(TRIALS):
        rng = np.random.default_rng(5000 + trial)
        repeats = [rng.lognormal(mu, sigma, 70) for _ in range(3)]
        ci = two_stage_bootstrap_ci(repeats, "median", n_resamples=1000, seed=trial)
        hits += ci.low <= 100.0 <= ci.high
    rate = hits / TRIALS
    print(f"two-stage (3 repeats x 70 requests) median 95% CI coverage: {rate:.3f}")
    assert rate >= 0.90


def test_two_stage_widens_when_repeats_disagree():
    """Run-to-run shift (repeat 2 runs 30% slower): the interval spans both repeats' medians,
    while a bootstrap over the pooled requests (repeats treated as one sample) is far narrower."""
    rng = np.random.default_rng(7)
    a = rng.lognormal(math.log(100.0), 0.1, 200)
    b = rng.lognormal(math.log(130.0), 0.1, 200)
    two = two_stage_bootstrap_ci([a, b])
    flat = bootstrap_ci(np.concatenate([a, b]))
    assert two.low <= np.median(a) and two.high >= np.median(b)
    assert (two.high - two.low) > 3 * (flat.high - flat.low)
    assert two.basis == "repeats" and two.n == 2 and "repeats" in two.method
    assert two.cv == pytest.approx(coefficient_of_variation([np.median(a), np.median(b)]))
    assert two.point == pytest.approx(np.median(np.concatenate([a, b])))


def test_two_stage_unequal_repeat_sizes_and_ragged_rule():
    rng = np.random.default_rng(3)
    groups = [rng.normal(50, 5, 40), rng.normal(50, 5, 65), rng.normal(50, 5, 7)]
    ci = two_stage_bootstrap_ci(groups, "p90", n_resamples=500)
    assert ci.low <= ci.point <= ci.high
    assert ci.point == pytest.approx(np.percentile(np.concatenate(groups), 90))
    # the padded-row statistic equals numpy's linear percentile row by row
    rows = [rng.normal(0, 1, m) for m in (1, 2, 5, 9)]
    padded = np.full((4, 9), np.nan)
    for i, r in enumerate(rows):
        padded[i, : r.size] = r
    counts = np.array([r.size for r in rows])
    for q in (0.0, 37.5, 50.0, 99.0, 100.0):
        np.testing.assert_allclose(_ragged_rows_stat(padded, counts, q), [np.percentile(r, q) for r in rows])
    np.testing.assert_allclose(_ragged_rows_stat(padded, counts, None), [r.mean() for r in rows])


def test_percentile_statistics_point_is_numpy_percentile():
    x = np.random.default_rng(11).lognormal(3.0, 0.7, 500)
    assert bootstrap_ci(x, "p99").point == float(np.percentile(x, 99))
    assert bootstrap_ci(x, "p99_9").point == float(np.percentile(x, 99.9))
    assert bootstrap_ci(x, "mean").point == pytest.approx(x.mean())
    assert bootstrap_ci(x, "median").point == float(np.median(x))
    ci = bootstrap_ci(x, "p99")
    assert ci.low <= ci.point <= ci.high
    with pytest.raises(ValueError, match="unknown statistic"):
        bootstrap_ci(x, "p101")
    with pytest.raises(ValueError, match="unknown statistic"):
        bootstrap_ci(x, "max")


def _engine(median_ms: float, seed: int, spread: float = 0.3, n: int = 200) -> ConfidenceInterval:
    rng = np.random.default_rng(seed)
    return bootstrap_ci(rng.lognormal(math.log(median_ms), spread, n), "median", seed=seed)


def test_identical_engines_tie_and_different_ones_do_not():
    a, b = _engine(100.0, 1), _engine(100.0, 2)
    groups = rank_with_ties({"a": a, "b": b}, higher_is_better=False)
    assert len(groups) == 1 and sorted(groups[0]) == ["a", "b"]
    assert could_flip(a, b)
    tie_rate = np.mean([intervals_overlap(_engine(100.0, 2 * s), _engine(100.0, 2 * s + 1)) for s in range(50)])
    assert tie_rate >= 0.95
    fast, slow = _engine(100.0, 3, spread=0.05), _engine(200.0, 4, spread=0.05)
    assert rank_with_ties({"slow": slow, "fast": fast}, higher_is_better=False) == [["fast"], ["slow"]]
    assert not could_flip(fast, slow)


def test_three_engines_two_tied_one_separate():
    scores = {"C": _engine(200.0, 9, 0.1), "A": _engine(100.0, 7, 0.1), "B": _engine(101.0, 8, 0.1)}
    groups = rank_with_ties(scores, higher_is_better=False)
    assert [sorted(g) for g in groups] == [["A", "B"], ["C"]]
    # higher is better reverses the order of groups
    assert [sorted(g) for g in rank_with_ties(scores, higher_is_better=True)] == [["C"], ["A", "B"]]


def test_tie_groups_compare_with_the_leader_not_a_chain():
    def iv(p, lo, hi):
        return ConfidenceInterval(p, lo, hi, 10, 0.95, "bootstrap over requests", None)

    scores = {"x": iv(10.0, 9.0, 11.0), "y": iv(8.5, 7.5, 9.5), "z": iv(7.0, 6.0, 8.0)}
    # y overlaps x and z, z does not overlap x: z leads its own group
    assert rank_with_ties(scores) == [["x", "y"], ["z"]]
    assert rank_with_ties({}) == []
    # touching bounds count as overlap (closed intervals)
    assert intervals_overlap(iv(1, 0, 1), iv(2, 1, 3))


def test_single_value_and_empty_sample():
    one = bootstrap_ci([42.0])
    assert (one.point, one.low, one.high, one.n, one.cv) == (42.0, 42.0, 42.0, 1, None)
    assert "no interval" in one.method
    with pytest.raises(ValueError, match="empty") as err:
        bootstrap_ci([])
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="nan or inf"):
        bootstrap_ci([1.0, math.inf])
    with pytest.raises(ValueError, match="at least 2 repeats"):
        median_ci_over_repeats([3.0])
    with pytest.raises(ValueError, match="at least 2 repeats"):
        two_stage_bootstrap_ci([[1.0, 2.0]])
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci([1.0, 2.0], confidence=95)


def test_deterministic_given_seed():
    x = np.random.default_rng(0).exponential(50.0, 300)
    assert bootstrap_ci(x, seed=5) == bootstrap_ci(list(x), seed=5)
    assert bootstrap_ci(x, seed=5) != bootstrap_ci(x, seed=6)
    groups = [x[:100], x[100:220], x[220:]]
    assert two_stage_bootstrap_ci(groups, "p99", seed=1) == two_stage_bootstrap_ci(groups, "p99", seed=1)


def test_cv_hand_computation():
    values = [10.0, 12.0, 14.0]  # mean 12, sample std sqrt(((-2)^2 + 0 + 2^2) / 2) = 2
    assert bootstrap_ci(values).cv == pytest.approx(2.0 / 12.0)
    assert coefficient_of_variation([5.0]) is None
    assert coefficient_of_variation([-1.0, 1.0]) is None


def test_median_over_two_repeats_is_their_range():
    ci = median_ci_over_repeats([3.0, 5.0])
    assert (ci.point, ci.low, ci.high, ci.n, ci.basis) == (4.0, 3.0, 5.0, 2, "repeats")
    assert ci.method == "bootstrap over repeats"


def test_headline_interval_picks_and_states_its_basis():
    rng = np.random.default_rng(21)
    reqs = [list(rng.normal(100, 10, 50)) for _ in range(3)]
    two = headline_interval([float(np.median(r)) for r in reqs], reqs, "median")
    assert two.basis == "repeats" and two.n == 3 and "two-stage" in two.method
    only_repeat_numbers = headline_interval([2.1, 2.4, 2.2], [], "median")  # e.g. throughput per repeat
    assert only_repeat_numbers.method == "bootstrap over repeats" and only_repeat_numbers.point == 2.2
    one = headline_interval(None, reqs[0], "p99")
    assert one.basis == "requests" and one.method == "bootstrap over requests" and one.n == 50
    assert headline_interval([1.0], [reqs[0]], "p99") == one
    single = headline_interval([7.0], [], "median")
    assert (single.low, single.high, single.basis) == (7.0, 7.0, "repeats")
