"""The runner's absolute schedule, on a controlled clock: every request is due at
``t0 + start_offset`` (never cumulative sleeps), and the clock starts at the first arrival, so
the idle lead-in before it is not waited out."""

from __future__ import annotations

import asyncio
import types

import pytest

import harness.loadgen.runner as runner_mod
from harness.loadgen.client import EndpointTarget
from harness.app.core.model import resolve_model
from harness.loadgen.nullserver import null_server
from harness.loadgen.runner import START_LEAD_NS, Runner, RunnerOptions
from workloads.registry import build_workload
from workloads.tokens import TokenKit

pytestmark = pytest.mark.serial  # arrival schedules kept against the wall clock: run alone (make test)


@pytest.fixture(scope="module")
def kit():
    from transformers import AutoTokenizer

    return TokenKit(AutoTokenizer.from_pretrained(str(resolve_model(None))))


def test_schedule_starts_at_the_first_arrival_and_keeps_the_gaps(kit, monkeypatch):
    base = 10**15
    # a frozen clock for the runner only: due times are computed from it, so each request
    # is due exactly at base + LEAD + (its offset - the first offset)
    monkeypatch.setattr(runner_mod, "time", types.SimpleNamespace(perf_counter_ns=lambda: base))
    w = build_workload("random", kit, num_requests=3, input_len=8, output_len=2, request_rate=4.0, seed=3)
    offsets = [s.start_offset_s for s in w.sessions]
    assert offsets[0] > 0  # the first arrival is one drawn gap after the start
    with null_server() as url:
        r = Runner(EndpointTarget(url, "null"), "null", w.name, lambda rec: None, None, RunnerOptions())
        records = asyncio.run(r.measure(w))
    sched = sorted(rec.scheduled_ns for rec in records)
    expected = sorted(base + START_LEAD_NS - int(offsets[0] * 1e9) + int(o * 1e9) for o in offsets)
    assert sched == expected
    assert sched[0] == pytest.approx(base + START_LEAD_NS, abs=1)  # no idle lead-in
    # the 2 gaps between the first and last due times span 2 / 4 s: the runner offers the
    # requested 4 req/s (the drawn schedule is rescaled to it; the lead gap is not waited out)
    assert sched[-1] - sched[0] == pytest.approx(0.5e9, abs=2)
    assert all(rec.success for rec in records)
