"""Repeats inside one run folder and ties in the ranking (issue 12, "repeats and intervals"):
one measurement per repeat, a score interval per engine over repeats, overlapping intervals
reported as ties, and plain words when noise was not measured."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.metrics import compute_metrics
from harness.metrics.repeats import pooled_metrics
from harness.scoring import recommend
from harness.scoring.measured.gather import gather
from results.hardware import GiB, HardwareProfile
from results.recommendation import Recommendation
from results.schema import RequestRecord

from tests.helpers import CPU_ONLY, NS_PER_S, OWN_CAPS, make_records, write_run

CPU = HardwareProfile("CPU", "cpu", 64 * GiB)
FIXTURES = Path(__file__).parents[3] / "fixtures"


def repeated_entry(name: str, ttft_by_repeat: list[float], caps: dict[str, Any] = CPU_ONLY,
                   out_tokens: int = 10) -> tuple[dict[str, Any], list[RequestRecord]]:
    """A ``summary.json`` entry of a ``--repeats N`` run: per-repeat metrics (``repeats``), the
    pooled ``metrics``, and the records stamped with their repeat (repeat i starts 100 s after i-1)."""
    records: list[RequestRecord] = []
    per_repeat = []
    for index, ttft in enumerate(ttft_by_repeat):
        batch = [r.model_copy(update={"repeat": index, "request_id": f"{r.request_id}-r{index}"})
                 for r in make_records(name, 8, ttft_ms=ttft, tpot_ms=10.0, out_tokens=out_tokens,
                                       start_ns=(10 + 100 * index) * NS_PER_S)]
        per_repeat.append(compute_metrics(batch, [], offered_rate=4.0))
        records += batch
    pooled = pooled_metrics(per_repeat, records, offered_rate=4.0) if len(per_repeat) > 1 else per_repeat[0]
    entry = {"status": "ok", "reason": "", "display_name": name, "version": "1", "capabilities": caps,
             "metrics": pooled.model_dump(mode="json"),
             "repeats": [m.model_dump(mode="json") for m in per_repeat] if len(per_repeat) > 1 else []}
    return entry, records


def run_of(tmp_path: Path, run_id: str, engines: dict[str, tuple[dict[str, Any], list[RequestRecord]]]):
    return write_run(tmp_path, run_id, {name: entry for name, (entry, _) in engines.items()},
                     [r for _, records in engines.values() for r in records])


def test_one_measurement_per_repeat_with_its_own_records(tmp_path: Path) -> None:
    run = run_of(tmp_path, "r", {"vllm": repeated_entry("vllm", [100.0, 120.0, 90.0])})
    measurements = gather([run]).engines["vllm"].measurements
    assert [m.repeat for m in measurements] == [0, 1, 2]
    assert [m.values["ttft_p99_ms"] for m in measurements] == [100.0, 120.0, 90.0]
    assert all(len(m.records) == 8 and {r.repeat for r in m.records} == {m.repeat} for m in measurements)
    rec = recommend([run], hardware=CPU, preset="latency")
    assert rec.ranking[0].repeats == 3
    assert rec.ranking[0].metrics["ttft_p99_ms"] == 100.0  # the median over the repeats
    assert rec.ranking[0].score_interval is not None and rec.ranking[0].score_interval.n == 3


def test_identical_engines_over_three_repeats_are_tied(tmp_path: Path) -> None:
    # the same scripted engine twice, with the same run-to-run spread in a different order
    engines = {"vllm": repeated_entry("vllm", [100.0, 120.0, 90.0]),
               "sglang": repeated_entry("sglang", [110.0, 95.0, 105.0])}
    rec = recommend([run_of(tmp_path, "r", engines)], hardware=CPU, preset="latency")
    assert rec.score_repeats == 3
    assert rec.tie_groups == [[rec.winner, next(n for n in ("vllm", "sglang") if n != rec.winner)]]
    assert rec.noise_could_flip is True and len(rec.tied_with_winner) == 1
    rival = rec.tied_with_winner[0]
    scores = {r.engine: r.score_interval for r in rec.ranking}
    text = (f"tied with {rival} within the noise (median per-repeat score with its 95% interval over 3 repeats: "
            f"{rec.winner} {scores[rec.winner].point:.3f} [{scores[rec.winner].low:.3f}, "
            f"{scores[rec.winner].high:.3f}] vs {rival} {scores[rival].point:.3f} [{scores[rival].low:.3f}, "
            f"{scores[rival].high:.3f}]): noise could flip the winner")
    assert text in rec.deciding_constraint
    # exactly identical behaviour: identical per-repeat scores, one tie group
    same = {"vllm": repeated_entry("vllm", [100.0, 120.0, 90.0]), "sglang": repeated_entry("sglang", [100.0, 120.0, 90.0])}
    rec = recommend([run_of(tmp_path, "same", same)], hardware=CPU, preset="latency")
    assert rec.tie_groups == [["sglang", "vllm"]] and rec.noise_could_flip is True
    assert rec.ranking[0].score_interval == rec.ranking[1].score_interval


def test_clearly_different_engines_are_not_tied(tmp_path: Path) -> None:
    engines = {"vllm": repeated_entry("vllm", [100.0, 105.0, 98.0]),
               "sglang": repeated_entry("sglang", [300.0, 310.0, 295.0])}
    rec = recommend([run_of(tmp_path, "r", engines)], hardware=CPU, preset="latency")
    assert rec.winner == "vllm" and rec.tie_groups == [["vllm"], ["sglang"]]
    assert rec.noise_could_flip is False and rec.tied_with_winner == []
    # 3 repeats: separated, but identical engines come out this separated 1 time in 10 by chance
    assert "the intervals do not overlap" in rec.deciding_constraint
    assert ("vllm scored above sglang in 3 of 3 paired repeats, but with 3 repeats two identical engines come out "
            "this separated by chance 1 time in 10: provisional, rerun with --repeats 4 or more") in rec.deciding_constraint
    four = {"vllm": repeated_entry("vllm", [100.0, 105.0, 98.0, 101.0]),
            "sglang": repeated_entry("sglang", [300.0, 310.0, 295.0, 305.0])}
    rec = recommend([run_of(tmp_path, "four", four)], hardware=CPU, preset="latency")
    assert "noise cannot flip the winner on this data: the intervals do not overlap" in rec.deciding_constraint
    assert "vllm scored above sglang in 4 of 4 paired repeats (by chance between identical engines: 1 in 35)" \
        in rec.deciding_constraint
    low = {r.engine: r.score_interval.low for r in rec.ranking}
    high = {r.engine: r.score_interval.high for r in rec.ranking}
    assert low["vllm"] > high["sglang"]
    # the repeat-level noise check of the sensitivity applies to repeats inside one folder too
    assert any(s.startswith("the spread over repeats cannot flip vllm vs sglang") for s in rec.sensitivity)
    stored = Recommendation.model_validate_json(rec.model_dump_json())
    assert stored.tie_groups == rec.tie_groups and stored.ranking[0].score_interval == rec.ranking[0].score_interval


def test_chance_that_identical_engines_come_out_separated():
    from harness.scoring.weighted.ties import chance_separated

    assert [round(1 / chance_separated(n)) for n in (2, 3, 4, 5)] == [3, 10, 35, 126]


def test_one_repeat_says_noise_was_not_measured(tmp_path: Path) -> None:
    engines = {"vllm": repeated_entry("vllm", [100.0]), "sglang": repeated_entry("sglang", [300.0])}
    rec = recommend([run_of(tmp_path, "r", engines)], hardware=CPU, preset="latency")
    assert rec.score_repeats == 1 and rec.tie_groups == [] and rec.noise_could_flip is None
    assert all(r.score_interval is None for r in rec.ranking)
    assert ("run-to-run noise was not measured (1 repeat): no tie check was possible; rerun with --repeats 2 or more"
            in rec.deciding_constraint)


def test_reference_engine_gets_an_interval_but_never_the_tie_verdict(tmp_path: Path) -> None:
    engines = {"own": repeated_entry("own", [50.0, 52.0, 49.0], OWN_CAPS),
               "vllm": repeated_entry("vllm", [100.0, 105.0, 98.0])}
    rec = recommend([run_of(tmp_path, "r", engines)], hardware=CPU, preset="latency")
    assert rec.winner == "vllm" and rec.ranking[0].engine == "own" and rec.ranking[0].score_interval is not None
    assert rec.noise_could_flip is None  # no production rival
    assert rec.yardstick.endswith("; outside the noise of vllm (score " + (
        f"{rec.ranking[0].score_interval.point:.3f} [{rec.ranking[0].score_interval.low:.3f}, "
        f"{rec.ranking[0].score_interval.high:.3f}] vs ") + (
        f"{rec.ranking[1].score_interval.point:.3f} [{rec.ranking[1].score_interval.low:.3f}, "
        f"{rec.ranking[1].score_interval.high:.3f}], 3 repeats)"))
    assert "tie check" not in rec.deciding_constraint and "noise" not in rec.deciding_constraint


def test_old_recommendation_files_still_load() -> None:
    old = json.loads((FIXTURES / "run_v1_recommendation.json").read_text())
    assert "tie_groups" not in old and "score_interval" not in old["ranking"][0]
    rec = Recommendation.model_validate(old)
    assert rec.winner == "own" and rec.score_repeats == 0 and rec.tie_groups == [] and rec.noise_could_flip is None
    assert rec.ranking[0].score_interval is None and rec.ranking[0].reference is False
