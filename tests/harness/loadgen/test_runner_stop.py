"""A load-ladder point stops once its SLO verdict is settled (issue 39: the slow engines' failing
points took 50-70 s each), on the virtual clock of tests/harness/loadgen/test_runner_duration.py:
a scripted stream with a known service time, so every count below is exact."""

from __future__ import annotations

import pytest

from harness.metrics import compute_metrics, parse_slos
from harness.scoring.capacity.frontier import SloWatch
from results.schema.records import STOPPED_PHASE
from tests.harness.loadgen.test_runner_duration import _replay, kit  # noqa: F401  (the fixture)
from workloads.registry import build_workload

pytestmark = pytest.mark.serial  # stops timed against the wall clock: run alone (make test)


def _closed(kit, n: int):  # noqa: ANN001, ANN202
    return build_workload("random", kit, num_requests=n, request_rate=float("inf"), input_len=4, output_len=1,
                          with_stats=False)


def test_a_point_whose_slo_has_failed_stops_and_its_cut_requests_are_not_failures(kit, monkeypatch):  # noqa: F811
    # 2 in flight, every request 1 s to its (only) token: TTFT 1,000 ms against p90 <= 500 ms. Requests 1-2 go at
    # once (the synchronised start, not judged); the first completion opens the steady state at +1 s; 3-4 are
    # judged (+2 s), 5-6 (+3 s): the 4th judged violation is more than 10 % of 20 + 1, so p90 over all 20 must
    # fail, and the point stops there
    watch = SloWatch(parse_slos("ttft_p90=500"), 20)
    runner, start = _replay(monkeypatch, _closed(kit, 20), service_s=lambda req: 1.0, max_sessions=2,
                            stop_when=watch)
    measured = [r for r in runner.records if r.phase == "measured"]
    cut = [r for r in runner.records if r.phase == STOPPED_PHASE]
    assert len(measured) == 6 and all(r.success for r in measured)
    assert watch.over["ttft_p90"] == 4 and len(runner.records) < 20
    # nothing else was sent but what was in flight when it stopped (at +3 s), stored as cut
    assert len(runner.records) == len(measured) + len(cut) and len(cut) <= 2
    assert all(r.send_ns == start + 3_000_000_000 for r in cut)
    m = compute_metrics(runner.records)
    assert m.requests_failed == 0 and m.requests_completed == 6  # the cut requests count nowhere


def test_a_point_that_meets_its_slo_is_measured_whole(kit, monkeypatch):  # noqa: F811
    watch = SloWatch(parse_slos("ttft_p90=500"), 20)
    runner, _ = _replay(monkeypatch, _closed(kit, 20), service_s=lambda req: 0.1, max_sessions=2, stop_when=watch)
    assert len(runner.records) == 20 and all(r.phase == "measured" and r.success for r in runner.records)
    assert watch.over["ttft_p90"] == 0


@pytest.mark.parametrize("violations, stops", [(3, False), (4, True)])
def test_the_stop_needs_more_violations_than_the_percentile_can_absorb(violations, stops):
    from results.schema import RequestRecord

    watch = SloWatch(parse_slos("ttft_p90=500"), 20)  # p90 of 20 absorbs 2; the rule waits for 2 + 2
    first = RequestRecord(request_id="0", engine="e", workload="w", scheduled_ns=0, send_ns=0, first_token_ns=10**8, end_ns=10**8,
                          success=True)
    assert watch(first) is False
    told = []
    for i in range(violations):
        r = RequestRecord(request_id=str(i + 1), engine="e", workload="w", scheduled_ns=10**9, send_ns=10**9, first_token_ns=2 * 10**9,
                          end_ns=2 * 10**9, success=True)
        told.append(watch(r))
    assert told[-1] is stops and not any(told[:-1])
