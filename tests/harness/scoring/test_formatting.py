"""The condition label (harness.scoring.formatting): the requested and the achieved load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from results.schema import RequestRecord

from tests.helpers import CPU_ONLY, make_records, ok_entry, write_run


def test_condition_label_gives_the_requested_and_the_achieved_load(tmp_path: Path) -> None:
    from harness.scoring.formatting import condition_label
    from harness.scoring.measured.gather import gather

    def measured(run_id: str, records: list[RequestRecord], offered: float | None, workload: str = "chat",
                 drop_requested: bool = False) -> Any:
        entry = ok_entry(records, CPU_ONLY, offered_rate=offered)
        if drop_requested:  # a run from before requested_rate was recorded
            entry["metrics"].pop("requested_rate")
        run = write_run(tmp_path, run_id, {"own": entry}, records, workload=workload)
        return gather([run]).engines["own"].measurements[0]

    assert condition_label(("chat", 4.0)) == "chat at 4 req/s"  # the short form, as before
    # the default agentic run: 0.5 sessions/s asked for and offered, first turns sent 0.49/s
    agentic = measured("a", make_records("own", 8, ttft_ms=50.0, tpot_ms=5.0, interval_s=1 / 0.49, turns=2,
                                         workload="agentic"), 0.5, workload="agentic")
    assert agentic.condition == ("agentic", 0.5)
    assert condition_label(agentic.condition, [agentic]) == "agentic at 0.50 sessions/s requested, 0.49 achieved"
    # repeats: the achieved range
    fast = measured("c1", make_records("own", 9, ttft_ms=50.0, tpot_ms=5.0, interval_s=0.25), 4.0)
    slow = measured("c2", make_records("own", 9, ttft_ms=50.0, tpot_ms=5.0, interval_s=0.26), 4.0)
    assert condition_label(fast.condition, [fast]) == "chat at 4.00 req/s requested, 4.00 achieved"
    assert condition_label(fast.condition, [slow, fast]) == "chat at 4.00 req/s requested, 3.85–4.00 achieved"
    # an older run recorded no requested rate (its offered rate was the raw draw's): "offered"
    old = measured("o", make_records("own", 9, ttft_ms=50.0, tpot_ms=5.0, interval_s=0.166), 6.02, drop_requested=True)
    assert condition_label(old.condition, [old]) == "chat at 6.02 req/s offered, 6.02 achieved"
    # a trace offers its own rate; no rate limit stays "max load"; one arrival has no achieved rate
    trace = measured("t", make_records("own", 5, ttft_ms=50.0, tpot_ms=5.0, interval_s=0.1, workload="trace"), 10.0,
                     workload="trace")
    assert condition_label(trace.condition, [trace]) == "trace at 10.00 req/s, the trace's own rate, 10.00 achieved"
    burst = measured("b", make_records("own", 4, ttft_ms=50.0, tpot_ms=5.0, interval_s=0.0), None)
    assert condition_label(burst.condition, [burst]) == "chat at max load (no rate limit)"
    single = measured("s", make_records("own", 1, ttft_ms=50.0, tpot_ms=5.0), 2.0)
    assert condition_label(single.condition, [single]) == "chat at 2.00 req/s requested, achieved not measured"


def test_a_closed_loop_point_is_labelled_by_its_load_not_as_max_load() -> None:
    from harness.scoring.formatting import condition_label, in_flight
    from tests.helpers import make_records

    # 8 requests, 2 in flight at a time (each client sends its next when its last ends): a closed loop at 2
    records = make_records("own", 8, ttft_ms=50.0, tpot_ms=5.0, interval_s=0.0)
    for i, r in enumerate(records):
        start = (i // 2) * 1_000_000_000 + (i % 2) * 1000
        r.send_ns, r.scheduled_ns, r.end_ns = start, start, start + 900_000_000
    assert in_flight(records) == 2

    class M:
        def __init__(self, recs):
            self.records, self.achieved_rate = recs, None

    assert condition_label(("agentic", float("inf")), [M(records)]) == "agentic at 2 sessions in flight (closed loop)"


def test_the_verdict_and_the_capacity_table_print_one_figure_for_a_capacity() -> None:
    """Issue 39's review: a capacity of 14.5 tok/s per device read "14" in the verdict (0 decimals,
    rounded half to even) and 14.5 in the table: the same figure is printed the same way in both."""
    from harness.metrics import parse_slos
    from harness.scoring.verdict.decision import sentence
    from reports.frontier import capacity_rows
    from results.schema import CapacityAtSLO, Decision, EngineLadder, EngineStatus, LadderSummary

    slos = parse_slos("ttft_p90=4000")
    s = LadderSummary(run_id="r", workload="agentic", slos={"ttft_p90": 4000.0})
    s.engines["a"] = EngineLadder(status=EngineStatus.OK, capacity=CapacityAtSLO(
        output_tps=14.5, interval=(14.25, 14.75), load=14.5, request_rate=0.5, bracket=(14, 15), binding="ttft_p90"))
    s.engines["b"] = EngineLadder(status=EngineStatus.OK, capacity=CapacityAtSLO(
        output_tps=6.5, interval=(6.25, 6.75), load=6.5, request_rate=0.2, bracket=(6, 7), binding="ttft_p90"))
    d = Decision(winner="a", runner_up="b", leader="a", ratio=2.23, ratio_interval=(2.1, 2.4), outcome="separated",
                 ranking=["a", "b"], binding="p90 TTFT binds", unit="sessions")
    s.decision = d
    said, row = sentence(d, s, slos), capacity_rows(s)[0]
    assert (row["capacity"], row["load"]) == ("14.5", "14.5")
    assert said.startswith("a: 14.5 agents sustained (14.5 output tok/s per device, 1 run) at p90 TTFT ≤ 4 s")
    open_cap = s.engines["a"].capacity.model_copy(update={"open": True})
    s.engines["a"].capacity = open_cap
    d.winner, d.undecided, d.unsettled, d.outcome = "", "a", ["a"], "undecided"
    assert "a leads with ≥ 14.5 output tok/s per device" in sentence(d, s, slos)
    assert capacity_rows(s)[0]["capacity"] == "≥ 14.5" and capacity_rows(s)[0]["load"] == "≥ 14.5"


def test_a_latency_in_a_sentence_is_the_tables_figure() -> None:
    from harness.scoring.formatting import format_ms

    # 137.55 ms TPOT read "137.5" in the weighted table's sentences and "137.55" in report.md: now one form
    assert format_ms(137.55, "slo:tpot_p99") == "138 ms" == format_ms(137.55, "tpot_p99_ms")
    assert format_ms(13.755, "tpot_p90") == "13.8 ms" and format_ms(float("inf"), "ttft_p90") == "∞ (failed requests)"
