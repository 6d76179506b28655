"""``bench run --tune`` in the report and on the console (reports/tuning.py): the search table's
seconds column, the gain line of a finished and of an interrupted search, and why no recipe was
made, from ``ladder.json``'s content only (issue 27)."""

from __future__ import annotations

from reports.tuning import gain_line, no_recipe_reason, recipe_check, tried_rows, tuning_rows
from results.schema import CapacityAtSLO, Decision, EngineLadder, EngineTuning, LadderSummary, TunedConfig
from results.schema.engine import EngineStatus


def _summary(tuning: EngineTuning, decision: Decision, reference: bool = False) -> LadderSummary:
    main = EngineLadder(status=EngineStatus.OK, capacity=CapacityAtSLO(output_tps=373.8, interval=(366.8, 380.9), open=True),
                        reference=reference)
    return LadderSummary(run_id="r", workload="agentic", slos={"ttft_p90": 2000.0}, engines={"own": main},
                         tuning={"own": tuning}, decision=decision)


def _tuning(**kw) -> EngineTuning:
    configs = [TunedConfig(id="own#0", label="defaults", rungs=2, measuring_s=30.0),
               TunedConfig(id="own#1", label="max_num_seqs=32", rungs=2, measuring_s=32.4),
               TunedConfig(id="own#2", label="max_num_seqs=8", status="rejected", reason="own: refused")]
    return EngineTuning(space={"max_num_seqs": ["32", "8"]}, method="successive halving", budget_s=60.0,
                        used_s=62.4, configs=configs, **kw)


def test_the_seconds_column_names_the_budget_and_the_defaults_climb() -> None:
    s = _summary(_tuning(chosen="own#1", defaults_id="own#defaults", defaults_s=75.2,
                         gain_text="unknown: both ladders stopped before an SLO broke (lower bounds), so their ratio is "
                                   "no measure of it"), Decision(yardsticks=["own"]), reference=True)
    row = tuning_rows(s)[0]
    assert row["seconds"] == "62 (budget 60) + 75 defaults' climb"
    assert row["chosen"] == "max_num_seqs=32 (own#1)" and row["tried"] == "3 (1 rejected)"
    assert row["tuned"] == "≥ 373.8 [366.8–380.9]"
    line = gain_line("own", s.tuning["own"])
    assert line == ("own: tuned max_num_seqs=32 (own#1), gain over its defaults unknown: both ladders stopped before an "
                    "SLO broke (lower bounds), so their ratio is no measure of it; 3 configurations, 62 s of measuring; "
                    "1 rejected by the engine")
    assert no_recipe_reason(s) == ("the verdict names no production winner: own only ranked as a yardstick, never the "
                                   "recommendation; what its search chose is in ladder.json's tuning (own)")


def test_an_interrupted_search_chooses_nothing_and_says_by_whom() -> None:
    t = _tuning(chosen="", interrupted="the user (Ctrl-C)",
                gain_text="not measured: the search was interrupted by the user (Ctrl-C) before it chose")
    t.configs[1].status, t.configs[1].reason = "interrupted", "interrupted while measuring (rung 2)"
    s = _summary(t, Decision(interrupted="the user (Ctrl-C)"))
    assert tuning_rows(s)[0]["chosen"] == "none: the search was interrupted by the user (Ctrl-C)"
    assert gain_line("own", t) == ("own: not tuned — the search was interrupted by the user (Ctrl-C) before it chose "
                                   "(1 of 3 configurations, 62 s of measuring; 1 rejected by the engine)")
    assert [r["status"] for r in tried_rows(s)] == ["measured", "interrupted: interrupted while measuring (rung 2)",
                                                   "rejected: own: refused"]
    assert no_recipe_reason(s) == "the verdict names no winner (interrupted by the user (Ctrl-C))"


def test_no_recipe_says_why() -> None:
    t = _tuning(chosen="own#1")
    assert no_recipe_reason(_summary(t, Decision(winner="e"))) == \
        "e is an endpoint the harness does not start (no command line to store)"
    assert no_recipe_reason(_summary(t, Decision(ranking=["a", "b"], undecided="b"))).startswith(
        "the verdict names no winner (undecided")
    assert no_recipe_reason(_summary(t, None)) == "no decision was made"


def test_a_recipe_measured_again_is_compared_with_the_capacity_it_stored() -> None:
    from results.schema import Recipe

    recipe = Recipe(engine="own", run_id="tune-cpu", workload="agentic", slos={"ttft_p90": 2000.0}, capacity_tps=370.0,
                    capacity_interval=(360.0, 380.0))
    s = _summary(_tuning(chosen="own#1"), Decision(yardsticks=["own"]))  # own now: ≥ 373.8 [366.8–380.9]
    assert recipe_check(recipe, s) == ("own from its recipe (run tune-cpu): ≥ 373.8 [366.8–380.9] output tok/s per device "
                                       "now, 370.0 [360.0–380.0] then: inside the recipe's interval")
    low = recipe.model_copy(update={"capacity_tps": 420.0, "capacity_interval": (400.0, 440.0)})
    assert recipe_check(low, s).endswith("below the recipe's interval (this run's ladder stopped before an SLO broke: "
                                         "a lower bound, raise --ladder-budget)")
    s.engines["own"].capacity.open = False
    assert recipe_check(low, s).endswith("below the recipe's interval (the recipe's capacity did not hold up here: "
                                         "another machine, load on it, or the spread between starts)")
    high = recipe.model_copy(update={"capacity_tps": 300.0, "capacity_interval": (290.0, 310.0), "capacity_open": True})
    assert recipe_check(high, s).endswith("≥ 300.0 [290.0–310.0] then: above the recipe's interval (consistent: the "
                                          "recipe's was a lower bound)")
    other = recipe.model_copy(update={"slos": {"ttft_p90": 500.0}})
    assert recipe_check(other, s).endswith("then: not compared (the recipe was measured on agentic under ttft_p90 ≤ 500 ms)")
