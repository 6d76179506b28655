"""The spread between measurements (harness/scoring/capacity/spread.py): the Paule–Mandel
estimate on hand-made groups whose answer is known in closed form, one measurement's log
throughput and its delta-method variance on hand-made records, the widening of a capacity's
draws, and, on scripted engines whose every measurement runs on a machine faster or slower
than the last (``SimEngine.drift``), intervals that hold their coverage only when widened."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.app.run import testbed
from harness.loadgen.simulated import SimEngine, true_capacity
from harness.metrics import parse_slos
from harness.scoring.capacity.frontier import PointSample, capacity_of, engine_stream
from harness.scoring.capacity.samples import Requests
from harness.scoring.capacity.spread import (NO_SPREAD, Spread, estimate, groups_of, machine_draws, measurement_log_rate,
                                             spread_of)
from results.schema import RequestRecord

MS = 1_000_000


def test_pairs_of_precise_measurements_give_the_closed_form() -> None:
    # a pair (x1, x2) with variances v: Q(τ²) = d² / (2τ² + 2v); Q summed = ν solves to τ² = Σd² / (2ν) − v
    groups = [[(0.0, 0.001), (0.2, 0.001)], [(1.0, 0.001), (1.1, 0.001)]]
    s = estimate(groups)
    assert s.df == 2 and s.points == 2 and s.known
    assert s.tau ** 2 == pytest.approx((0.2 ** 2 + 0.1 ** 2) / 4 - 0.001, rel=1e-9)


def test_a_group_of_three_counts_two_degrees_of_freedom() -> None:
    # equal variances: the weighted mean is the plain mean, Q = Σ(x − x̄)² / (τ² + v) = 2 → τ² = S² − v
    xs = [0.0, 0.1, 0.3]
    s = estimate([[(x, 0.0005) for x in xs]])
    assert s.df == 2
    assert s.tau ** 2 == pytest.approx(float(np.var(xs, ddof=1)) - 0.0005, rel=1e-9)


def test_differences_the_requests_explain_give_no_spread() -> None:
    # Q(0) = 0.01² / (2 × 0.01) = 0.005 ≤ ν = 1: the sampling noise alone explains it
    s = estimate([[(0.0, 0.01), (0.01, 0.01)]])
    assert s.known and s.df == 1 and s.tau == 0.0
    assert s.text() == "±0.0 % between measurements (ν = 1)"


def test_a_brief_noisy_measurement_does_not_read_as_machine_noise() -> None:
    # group A: far apart but each measurement very noisy (v = 0.1); group B: two precise equal readings.
    # Q(0) = 0.25 / 0.2 + 0 = 1.25 ≤ ν = 2: no spread (an unweighted moment estimate would give τ² > 0)
    s = estimate([[(0.0, 0.1), (0.5, 0.1)], [(2.0, 1e-4), (2.0, 1e-4)]])
    assert s.df == 2 and s.tau == 0.0
    unweighted = (0.5 ** 2 / 2 - 0.1 + 0.0 - 1e-4) / 2
    assert unweighted > 0


def test_no_point_measured_twice_estimates_nothing() -> None:
    s = estimate([[(0.0, 0.01)], []])
    assert s == NO_SPREAD and not s.known and s.df == 0
    assert s.text() == "not estimated (no point measured twice)"


def test_one_difference_is_used_with_cauchy_tails() -> None:
    # one pair: τ² = d² / 2 − v; its t has 1 df, and the draws are clipped at e^±5
    s = estimate([[(0.0, 0.001), (0.2, 0.001)]])
    assert s.df == 1 and s.known
    assert s.tau ** 2 == pytest.approx(0.2 ** 2 / 2 - 0.001, rel=1e-9)
    u = machine_draws(s, [1], 20_000, 0)[0]
    assert np.abs(u).max() == 5.0 and np.percentile(u, 97.5) == pytest.approx(12.71 * s.tau, rel=0.1)


def rec(i: int, session: str, send: float, end: float, tokens: int) -> RequestRecord:
    """A request of ``tokens`` output tokens from ``send`` to ``end`` ms, first token 10 ms after ``send``."""
    first = send + 10
    chunks = [int((first + k * (end - first) / max(tokens - 1, 1)) * MS) for k in range(tokens)]
    r = RequestRecord(request_id=f"r{i}", engine="e", workload="w", session_id=session, send_ns=int(send * MS),
                      scheduled_ns=int(send * MS), max_tokens=tokens)
    r.success, r.first_token_ns, r.last_token_ns, r.end_ns = True, chunks[0], chunks[-1], chunks[-1]
    r.chunk_times_ns, r.output_tokens_server = chunks, tokens
    return r


def test_one_measurement_reads_its_throughput_and_the_delta_method_variance() -> None:
    # two sessions (clusters): a: 10 tokens over 100 ms; b: 30 tokens over 100 ms
    records = [rec(0, "a", 0, 100, 10), rec(1, "b", 0, 100, 30)]
    req = Requests.of(records, 0.1, steady=False)
    got = measurement_log_rate(req)
    assert got is not None
    x, v = got
    assert x == pytest.approx(math.log(40 / 0.1))
    # z_c = y_c / Σy − x_c / Σx = (0.25 − 0.5, 0.75 − 0.5); v = n / (n − 1) Σ z² = 2 × 0.125
    assert v == pytest.approx(2 * (0.25 ** 2 + 0.25 ** 2))
    same = Requests.of([rec(0, "a", 0, 100, 20), rec(1, "b", 0, 100, 20)], 0.1, steady=False)
    assert measurement_log_rate(same) == (pytest.approx(math.log(400.0)), 0.0)  # equal service rates: no sampling noise
    assert measurement_log_rate(Requests.of([rec(0, "a", 0, 100, 20)], 0.1, steady=False)) is None  # one cluster


def test_machine_draws_spread_each_point_by_the_spread_over_root_k() -> None:
    assert not machine_draws(NO_SPREAD, [1, 2], 5, 0).any()
    assert not machine_draws(Spread(0.0, 4, 2), [1], 5, 0).any()
    u = machine_draws(Spread(0.1, 10_000, 3), [1, 4], 20_000, 0)
    assert u.shape == (2, 20_000)
    assert u[0].std() == pytest.approx(0.1, rel=0.03)  # one measurement: the whole spread
    assert u[1].std() == pytest.approx(0.05, rel=0.03)  # four: the mean of four effects
    assert abs(np.corrcoef(u)[0, 1]) < 0.03  # each point measured at its own time: independent
    # few degrees of freedom: t's tails (t with 2 df: 97.5 % quantile 4.30, the normal's 1.96)
    few = machine_draws(Spread(0.1, 2, 1), [1], 20_000, 0)[0]
    assert np.percentile(few, 97.5) == pytest.approx(0.430, rel=0.08)
    np.testing.assert_array_equal(machine_draws(Spread(0.1, 2, 1), [1], 50, 7), machine_draws(Spread(0.1, 2, 1), [1], 50, 7))


def test_only_whole_measurements_without_failures_are_evidence() -> None:
    # a point measured three times: whole (24 requests), cut short (12: a brief low end, an SLO-stopped point) and
    # whole with one failed request: only the first and a second whole, clean one make a group
    from harness.loadgen.simulated import simulate

    engine = SimEngine("e", slots=4, jitter=0.05)

    def measured(seed: int, n: int, fail: bool = False) -> Requests:
        records, duration = simulate(engine, 2, n, 8, seed)
        if fail:
            records[3].success, records[3].error_class = False, "http_500"
        return Requests.of(records, duration)

    whole, short, failed, again = measured(1, 24), measured(2, 12), measured(3, 24, fail=True), measured(4, 24)
    assert groups_of([[[whole, short, failed]]]) == []  # one whole clean measurement: no group
    (group,) = groups_of([[[whole, short, failed, again]]])
    assert group == [measurement_log_rate(whole), measurement_log_rate(again)]


def test_an_estimate_of_zero_leaves_the_interval_as_it_was() -> None:
    # the measurements agree within their sampling noise: their resampling stays, no factor is drawn
    from harness.loadgen.simulated import simulate

    engine = SimEngine("e", slots=4, jitter=0.05)
    pts = []
    for load in (1, 2, 4):
        reps = []
        for k in range(3):
            records, duration = simulate(engine, load, 24, 8, 100 * load + k)
            reps.append(Requests.of(records, duration))
        pts.append(PointSample(float(load), tuple(reps)))
    slos = parse_slos("tpot_p90=60")
    plain = capacity_of(pts, slos, seed=5)
    zero = capacity_of(pts, slos, seed=5, spread=Spread(0.0, 6, 3))
    np.testing.assert_array_equal(plain.draws, zero.draws)
    assert zero.spread.known and zero.interval == plain.interval


def test_a_capacity_holds_the_spread_and_records_it() -> None:
    slos = parse_slos("tpot_p90=1000")
    engine = SimEngine("e", slots=4, jitter=0.05)
    from harness.loadgen.simulated import simulate

    def measured(seed: int) -> Requests:
        records, duration = simulate(engine, 2, 24, 8, seed)
        return Requests.of(records, duration)

    pts = [PointSample(2.0, (measured(1), measured(2)))]
    plain = capacity_of(pts, slos, seed=3)
    spread = spread_of([[p.repeats for p in pts]])
    assert spread.df == 1
    wide = capacity_of(pts, slos, seed=3, spread=Spread(0.1, 4, 2))
    assert plain.spread == NO_SPREAD and wide.spread == Spread(0.1, 4, 2)
    assert wide.output_tps == plain.output_tps  # the estimate is the same; only its interval widens
    assert plain.interval is not None and wide.interval is not None
    assert wide.interval[0] < plain.interval[0] and wide.interval[1] > plain.interval[1]


SLOS = parse_slos("ttft_p90=1000,tpot_p90=60")


@pytest.mark.parametrize("drift", [0.0, 0.08])
def test_intervals_hold_their_coverage_when_each_measurement_runs_on_another_machine_state(drift: float) -> None:
    # each measurement's times scaled by its own lognormal factor (drift): what CPU steal and fresh starts do
    # to a real engine. Its bracket points measured 3 times: widened by the spread, the 95 % intervals cover
    # the analytic truth; the requests' noise alone (not widened) does not, once there is drift
    engine = SimEngine("base", slots=16, prefill_ms=80, tpot_ms=25, batch_slowdown=0.08, jitter=0.08, drift=drift)
    true = true_capacity(engine, 32, 1000.0, 60.0)
    trials = 30
    widened = plain = 0
    for t in range(trials):
        ladder = testbed.climb(engine, t, SLOS, 32, repeats=2)
        a = ladder.capacity(seed=engine_stream(t, "base"))
        b = ladder.capacity(seed=engine_stream(t, "base"), spread=NO_SPREAD)
        assert a is not None and b is not None and a.interval and b.interval
        assert a.spread.known and a.spread.df >= 2
        widened += a.interval[0] <= true <= a.interval[1]
        plain += b.interval[0] <= true <= b.interval[1]
    assert widened >= 0.9 * trials
    if drift:
        assert plain <= 0.8 * trials  # the defect the spread fixes


def test_a_prior_is_worth_the_degrees_of_freedom_it_says():
    """Points measured across runs share each run's state: a prior of many such groups says what
    it is worth (SpreadPrior.df), and the spread counts that, not one per measurement."""
    groups = [[(0.0, 1e-4), (0.1, 1e-4), (-0.1, 1e-4)] for _ in range(5)]  # 5 points x 3 runs: 10 by count
    assert spread_of([], groups).df == 10
    capped = spread_of([], groups, prior_df=2)  # three runs: two
    assert capped.df == 2 and capped.tau == pytest.approx(spread_of([], groups).tau)
