"""``--engine-config FILE`` (a recipe.json a run wrote) becomes run settings: its engine, its
engine args under the user's --engine-arg, its threads; and ``--tune``'s help lists every
engine's search space (issue 27)."""

from __future__ import annotations

import json

import pytest

from harness.app.settings.run import RunSettings
from harness.app.settings.tune_options import tune_help
from results.schema import Recipe


def _recipe(tmp_path, **over) -> str:
    r = Recipe(engine="vllm", engine_args={"max_num_seqs": "32", "max_num_batched_tokens": "2048"}, threads=1,
               command="python -m vllm.entrypoints.openai.api_server --max-num-seqs 32", **over)
    path = tmp_path / "recipe.json"
    path.write_text(r.model_dump_json())
    return str(path)


def test_a_recipe_sets_the_engine_its_args_and_threads(tmp_path) -> None:
    cfg = RunSettings.model_validate({"engine": {"config": _recipe(tmp_path), "names": ["all"]}})
    assert cfg.engine.names == ["vllm"] and cfg.engine.threads == 1
    assert cfg.engine.args == {"vllm": {"max_num_seqs": "32", "max_num_batched_tokens": "2048"}}


def test_the_users_engine_arg_and_threads_win_over_the_recipe(tmp_path) -> None:
    cfg = RunSettings.model_validate({"engine": {"config": _recipe(tmp_path), "threads": 2, "names": ["vllm", "own"],
                                                 "args": {"vllm": {"max_num_seqs": "64"}}}})
    assert cfg.engine.names == ["vllm", "own"] and cfg.engine.threads == 2
    assert cfg.engine.args["vllm"] == {"max_num_seqs": "64", "max_num_batched_tokens": "2048"}


def test_a_recipe_for_another_engine_than_named_is_one_line(tmp_path) -> None:
    with pytest.raises(ValueError, match="is a recipe for vllm, and --engine names own: add vllm to --engine"):
        RunSettings.model_validate({"engine": {"config": _recipe(tmp_path), "names": ["own"]}})


def test_the_tune_help_lists_each_engines_search_space() -> None:
    text = tune_help()
    assert "vllm: max_num_seqs 32|8|128, max_num_batched_tokens 2048|512|8192" in text
    assert "sglang: max_running_requests 32|8|128" in text and "llamacpp: parallel 8|4|16" in text
    assert "On a GPU: own:" in text and "enforce_eager true" in text and "cuda_graphs false" in text
    # precision knobs only under --tune-lower-precision, listed apart from the others
    plain, lower = text.split("With --tune-lower-precision also")
    assert "bfloat16" not in plain and "fp8" not in plain and "outtype" not in plain and "cache_type_k" not in plain
    assert "on a CPU vllm: dtype bfloat16; llamacpp: outtype q8_0, cache_type_k q8_0" in lower
    assert "on a GPU own: dtype bfloat16; vllm: kv_cache_dtype fp8; sglang: kv_cache_dtype fp8_e5m2" in lower


@pytest.mark.parametrize("values, message", [
    ({"engine": {"config": ""}}, "--engine-config is empty"),
    ({"tune": {"seconds": float("inf")}}, "finite number"),
    ({"tune": {"configs": 3}}, "--tune-configs sets how many configurations --tune tries: add --tune SECONDS"),
    ({"tune": {"lower_precision": True}}, "--tune-lower-precision lets --tune try lower precision: add --tune SECONDS"),
    ({"tune": {"lower_precision": True, "seconds": 60}, "check": {"fidelity_prompts": 0}},
     "--tune-lower-precision needs the output-fidelity check to gate what it lowers: drop --fidelity-prompts 0"),
])
def test_bad_tuning_options_are_one_line(tmp_path, values, message) -> None:
    with pytest.raises(ValueError, match=message):
        RunSettings.model_validate(values)


@pytest.mark.parametrize("over, message", [
    ({"engine": "prod"}, "a recipe for 'prod', not an engine this harness starts"),
    ({"threads": 0}, "threads 0 is not a thread count"),
    ({"engine_args": {"bad key": "1"}}, "engine_args: --engine-arg"),
    ({"climb_to": 0}, "climb_to must be >= 1, got 0"),
])
def test_a_recipe_that_cannot_run_here_is_one_line(tmp_path, over, message) -> None:
    r = {"engine": "vllm", "engine_args": {"max_num_seqs": "32"}, "threads": 1, **over}
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(r))
    with pytest.raises(ValueError, match=message):
        RunSettings.model_validate({"engine": {"names": ["all"], "config": str(path)}})


def test_a_search_budget_under_a_second_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"--tune 0.001 is seconds of measuring per engine for the search: under 1 s"):
        RunSettings.model_validate({"engine": {"names": ["own"]}, "tune": {"seconds": 0.001}})
    assert RunSettings.model_validate({"engine": {"names": ["own"]}, "tune": {"seconds": 1}}).tune.seconds == 1.0
