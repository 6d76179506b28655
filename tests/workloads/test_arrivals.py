"""Arrival processes: exact schedules for degenerate cases, mean rate and CV within statistical
tolerance for the random ones (fixed seeds, 40k samples: the standard error of the mean gap
is CV/sqrt(n) <= 1%, tolerances are 4-8%), and the rescale that makes a drawn schedule offer
exactly the requested rate while keeping the draw's shape."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workloads.arrivals import ArrivalError, arrival_offsets, scale_timestamps, windowed_rate_offsets
from workloads.stats import schedule_rate

N = 40_000


def gaps(offsets: list[float]) -> np.ndarray:
    return np.diff(np.concatenate([[0.0], offsets]))


def test_infinite_rate_sends_everything_at_zero():
    assert arrival_offsets(5, rate=math.inf, seed=1) == [0.0] * 5
    assert arrival_offsets(0, rate=2.0, seed=1) == []


def test_constant_rate_is_evenly_spaced():
    off = arrival_offsets(4, rate=4.0, seed=0, process="constant")
    assert off == pytest.approx([0.25, 0.5, 0.75, 1.0])


@pytest.mark.parametrize(
    "process,burstiness,cv",
    [("poisson", 1.0, 1.0), ("gamma", 1.0, 1.0), ("gamma", 0.25, 2.0), ("gamma", 4.0, 0.5), ("poisson", 0.25, 1.0)],
)
def test_random_processes_hit_rate_and_cv(process, burstiness, cv):
    rate = 5.0
    g = gaps(arrival_offsets(N, rate=rate, burstiness=burstiness, seed=42, process=process))
    assert np.all(g >= 0)
    assert 1.0 / g.mean() == pytest.approx(rate, rel=0.04)
    assert g.std() / g.mean() == pytest.approx(cv, rel=0.08)


def test_offsets_are_ascending_and_deterministic():
    a = arrival_offsets(100, rate=3.0, burstiness=0.5, seed=7)
    assert a == arrival_offsets(100, rate=3.0, burstiness=0.5, seed=7)
    assert a != arrival_offsets(100, rate=3.0, burstiness=0.5, seed=8)
    assert all(x < y for x, y in zip(a, a[1:]))


def test_drawn_schedule_offers_exactly_the_requested_rate():
    # --request-rate 2, 32 requests, seed 0: the raw Poisson draw offers 1.71 req/s
    raw = arrival_offsets(32, rate=2.0, seed=0, rescale=False)
    assert schedule_rate(raw) == pytest.approx(1.708566409466856, rel=1e-12)
    off = arrival_offsets(32, rate=2.0, seed=0)
    # by the metrics' own formula, (n-1) / (last - first): the requested rate
    assert schedule_rate(off) == pytest.approx(2.0, abs=1e-9)
    assert (len(off) - 1) / (off[-1] - off[0]) == pytest.approx(2.0, abs=1e-9)
    # the shape is the draw's: every gap (the lead gap before the first arrival included)
    # is the raw gap times one factor (to the float error of differencing cumulative offsets)
    ratio = gaps(off) / gaps(raw)
    assert ratio == pytest.approx(np.full(32, 1.708566409466856 / 2.0), rel=1e-9)
    assert off[0] > 0 and off[0] == pytest.approx(raw[0] * ratio[0])


@pytest.mark.parametrize("process,burstiness", [("poisson", 1.0), ("gamma", 0.25), ("gamma", 4.0)])
@pytest.mark.parametrize("n,rate", [(2, 0.5), (4, 0.5), (32, 2.0), (1000, 7.0)])
def test_rescale_hits_the_rate_for_every_draw(process, burstiness, n, rate):
    for seed in range(5):
        off = arrival_offsets(n, rate=rate, burstiness=burstiness, seed=seed, process=process)
        assert schedule_rate(off) == pytest.approx(rate, abs=1e-9)
        assert np.all(np.diff(off) >= 0) and off[0] > 0


def test_burstiness_still_sets_the_gaps_cv():
    def cv(burstiness: float) -> float:
        g = np.diff(arrival_offsets(2000, rate=3.0, burstiness=burstiness, seed=11))
        return float(g.std() / g.mean())

    bursty, poisson, regular = cv(0.25), cv(1.0), cv(4.0)
    assert bursty == pytest.approx(2.0, rel=0.15) and poisson == pytest.approx(1.0, rel=0.1)
    assert regular == pytest.approx(0.5, rel=0.1) and bursty > poisson > regular
    # the rescale leaves the CV exactly as drawn (one factor for every gap)
    raw = np.diff(arrival_offsets(2000, rate=3.0, burstiness=0.25, seed=11, rescale=False))
    assert float(raw.std() / raw.mean()) == pytest.approx(bursty, rel=1e-9)


def test_rescale_edge_cases():
    assert arrival_offsets(1, rate=4.0, seed=0) == pytest.approx([0.25])  # one arrival: at 1/rate (N/rate)
    assert arrival_offsets(5, rate=math.inf, seed=0) == [0.0] * 5  # all at once: nothing to rescale
    # a draw whose gaps underflowed to 0 (burstiness 1e-3, seed 5): vLLM's factor, the last
    # arrival at n/rate; the arrivals still coincide (no factor can spread them)
    off = arrival_offsets(3, rate=1.0, burstiness=1e-3, seed=5)
    assert off == pytest.approx([3.0, 3.0, 3.0]) and math.isinf(schedule_rate(off))


@pytest.mark.parametrize(
    "kwargs,fragment",
    [
        ({"rate": 0.0}, "rate must be > 0"),
        ({"rate": -1.0}, "rate must be > 0"),
        ({"rate": float("nan")}, "rate must be > 0"),
        ({"rate": 1.0, "burstiness": 0.0}, "burstiness"),
        ({"rate": 1.0, "process": "weibull"}, "unknown arrival process"),
    ],
)
def test_bad_parameters_raise_one_line_value_errors(kwargs, fragment):
    with pytest.raises(ArrivalError, match=fragment) as exc:
        arrival_offsets(3, seed=0, **kwargs)
    assert isinstance(exc.value, ValueError) and "\n" not in str(exc.value)


def test_scale_timestamps_divides_by_time_scale_from_first():
    assert scale_timestamps([10.0, 11.0, 14.0], 2.0) == pytest.approx([0.0, 0.5, 2.0])
    with pytest.raises(ArrivalError, match="must not decrease"):
        scale_timestamps([1.0, 0.5], 1.0)
    with pytest.raises(ArrivalError, match="time scale"):
        scale_timestamps([1.0], 0.0)


def test_windowed_rates_follow_each_window():
    # window 0: 20 rps CV 1; window 1 idle; window 2: 5 rps CV 2 (ServeGen-style)
    w = 500.0
    off = np.asarray(windowed_rate_offsets([(20.0, 1.0), (0.0, 0.0), (5.0, 2.0)], window_s=w, seed=3))
    first, idle, last = off[off < w], off[(off >= w) & (off < 2 * w)], off[off >= 2 * w]
    assert len(idle) == 0
    assert len(first) / w == pytest.approx(20.0, rel=0.05)
    assert len(last) / w == pytest.approx(5.0, rel=0.12)
    g = np.diff(last)
    assert g.std() / g.mean() == pytest.approx(2.0, rel=0.15)
    assert len(windowed_rate_offsets([(20.0, 1.0)], window_s=w, seed=3, max_arrivals=10)) == 10
