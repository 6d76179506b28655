"""Arrival processes: exact schedules for degenerate cases, mean rate and CV within statistical
tolerance for the random ones (fixed seeds, 40k samples: the standard error of the mean gap
is CV/sqrt(n) <= 1%, tolerances are 4-8%)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workloads.arrivals import ArrivalError, arrival_offsets, scale_timestamps, windowed_rate_offsets

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
