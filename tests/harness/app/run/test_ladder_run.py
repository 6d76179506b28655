"""The race's line under the capacity table (``EngineLadder.race``, ``reports.frontier.race_note``)
names the statistic an engine was held to: the leader's floor, which may sit below the 95 %
interval the table prints beside it (the new-user review read "cannot reach openvino's 68.5
tok/s" beside openvino's [69.1–78.4] as two figures for one thing)."""

from __future__ import annotations

from harness.app.run.ladder_run import _race_line
from reports.frontier import race_note
from results.schema import CapacityAtSLO, EngineLadder, EngineStatus, LadderSummary


def _summary(floor: float) -> LadderSummary:
    lead = CapacityAtSLO(output_tps=74.26, interval=(69.12, 78.41), floor=floor, ceiling=90.0)
    slow = CapacityAtSLO(output_tps=40.0, interval=(38.0, 42.0), open=True, floor=38.0, ceiling=49.43)
    return LadderSummary(run_id="r", workload="agentic", slos={"tpot_p90": 60.0}, engines={
        "openvino": EngineLadder(status=EngineStatus.OK, capacity=lead),
        "vllm": EngineLadder(status=EngineStatus.OK, capacity=slow)})


def test_the_race_line_names_the_leaders_floor_and_the_interval_it_sits_below() -> None:
    s = _summary(floor=68.5)  # the passing point sustained 68.5: below the interval's low end
    line = _race_line(s, "vllm", "openvino", 3, "said then")
    assert line == ("at most 49.4 tok/s, below openvino's floor of 68.5 tok/s (the throughput its passing load "
                    "sustained, below its 95 % interval [69.1–78.4]): stopped after 3 points")
    s.engines["vllm"].race = line
    assert race_note(s) == f"Out of the race, measured no more: vllm {line}."


def test_a_floor_at_the_interval_s_low_end_says_so() -> None:
    line = _race_line(_summary(floor=69.12), "vllm", "openvino", 3, "said then")
    assert line.startswith("at most 49.4 tok/s, below openvino's floor of 69.1 tok/s (the low end of its 95 % "
                           "interval [69.1–78.4])")
