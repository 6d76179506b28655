"""harness/metrics/energy.py: a point's J per output token (ratio of sums) and its interval by
the ratio estimator, over measurements or the time windows of one; provisioned figures apart;
null with the reason, never 0."""

from __future__ import annotations

import math

import pytest
from harness.metrics.energy import EnergySample, t975, point_energy, provisioned_energy, ratio_interval, windows
from results.schema import EnergySource, PhaseEnergy, RequestRecord

RAPL = EnergySource(kind="rapl", zones=["intel-rapl:0 (package-0)"], idle_watts=5.0, price_per_kwh=0.36)


def phase(joules: float, seconds: float = 10.0) -> PhaseEnergy:
    return PhaseEnergy(source="rapl", energy_j=joules, duration_s=seconds, idle_watts=5.0,
                       series=[(0, 0.0), (int(seconds * 1e9), joules)])


def test_ratio_interval_by_hand() -> None:
    e, t = [10.0, 14.0, 12.0], [100.0, 100.0, 100.0]
    r, ci = ratio_interval(e, t)
    assert r == pytest.approx(0.12)
    se = math.sqrt(((-2.0) ** 2 + 2.0 ** 2 + 0.0) / (3 * 2)) / 100.0
    half = 4.303 * se  # t(0.975, 2)
    assert ci == pytest.approx((0.12 - half, 0.12 + half))
    assert ratio_interval([5.0], [10.0]) == (0.5, None)


def test_t_quantiles_from_the_table_and_beyond_it() -> None:
    assert t975(1) == 12.706 and t975(30) == 2.042
    assert t975(60) == pytest.approx(2.000, abs=0.002) and t975(120) == pytest.approx(1.980, abs=0.001)


def test_point_over_its_measurements_with_above_idle_and_the_energy_cost() -> None:
    samples = [EnergySample(phase(100.0), 1000, 10.0), EnergySample(phase(120.0), 1000, 10.0),
               EnergySample(phase(110.0), 1000, 10.0)]
    fig = point_energy(samples, RAPL)
    assert fig.source == "rapl" and fig.over == "measurements" and fig.samples == 3
    assert fig.j_per_token == pytest.approx(0.11) and fig.tokens_per_j == pytest.approx(1 / 0.11)
    half = 4.303 * math.sqrt(200.0 / 6) / 1000  # t(0.975, 2) x SE: residuals -10, +10, 0 J over 1000 tokens each
    lo, hi = fig.j_per_token_interval
    assert (lo, hi) == pytest.approx((0.11 - half, 0.11 + half))
    assert fig.tokens_per_j_interval == pytest.approx((1 / hi, 1 / lo))
    assert fig.j_per_token_above_idle == pytest.approx((330.0 - 5.0 * 30.0) / 3000)
    assert fig.mean_watts == pytest.approx(11.0)
    # two measurements far apart: the interval reaches 0, and tokens per J has no upper bound
    wide = point_energy(samples[:2], RAPL)
    assert wide.j_per_token_interval[0] < 0 and wide.tokens_per_j_interval[1] == math.inf
    assert fig.usd_per_1m_output_tokens == pytest.approx(0.11 * 1e6 / 3.6e6 * 0.36)  # $0.011 per 1M tokens


def _record(times_s: list[float], tokens: int) -> RequestRecord:
    return RequestRecord(request_id=str(times_s), engine="e", workload="w", scheduled_ns=0, success=True,
                         chunk_times_ns=[int(t * 1e9) for t in times_s], output_tokens_server=tokens)


def test_one_measurement_splits_into_time_windows() -> None:
    # 10 s at 10 W, then 10 s at 30 W; tokens: 40 in the first half, 40 in the second
    p = PhaseEnergy(source="rapl", energy_j=400.0, duration_s=20.0,
                    series=[(0, 0.0), (10_000_000_000, 100.0), (20_000_000_000, 400.0)])
    records = [_record([1.0, 3.0, 5.0, 7.0], 40), _record([11.0, 13.0, 15.0, 17.0], 40)]
    w = windows(p, records, 80, count=2)
    assert w == ((100.0, 40.0), (300.0, 40.0))
    fig = point_energy([EnergySample(p, 80, 20.0, w)], RAPL)
    assert fig.over == "windows" and fig.samples == 2 and fig.j_per_token == pytest.approx(5.0)
    r, ci = ratio_interval([100.0, 300.0], [40.0, 40.0])
    assert fig.j_per_token_interval == pytest.approx(ci)


def test_an_unread_counter_gives_null_with_its_reason_never_zero() -> None:
    none = EnergySource(kind="none", reason="no RAPL: no intel-rapl package zone under /sys/class/powercap")
    fig = point_energy([EnergySample(PhaseEnergy(reason=none.reason), 500, 10.0)], none)
    assert fig.source == "none" and fig.reason == none.reason
    assert fig.j_per_token is None and fig.tokens_per_j is None and fig.usd_per_1m_output_tokens is None
    assert 0 not in [v for v in fig.model_dump().values() if isinstance(v, (int, float)) and not isinstance(v, bool)][1:]
    assert point_energy([EnergySample(None, 500, 10.0)], None).reason == "energy was not read in this run"


def test_provisioned_watts_are_labelled_and_apart() -> None:
    samples = [EnergySample(None, 1000, 10.0), EnergySample(None, 500, 10.0)]
    fig = provisioned_energy(samples, 350.0, 0.2)
    assert fig.source == "provisioned" and fig.label == "provisioned (--watts 350)"
    assert fig.j_per_token == pytest.approx(350.0 * 20.0 / 1500) and fig.mean_watts == pytest.approx(350.0)
    assert fig.usd_per_1m_output_tokens == pytest.approx(fig.j_per_token * 1e6 / 3.6e6 * 0.2)
    assert provisioned_energy(samples, None) is None
