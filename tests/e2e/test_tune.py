"""``bench run --tune`` end to end on a scripted engine the harness starts
(tests/fake_servers/tunable_engine.py: its capacity at the SLO peaks at 8 slots, and it refuses
64): the search finds 8 slots, reports the refused setting with the engine's line, the main job
climbs the engine at what it found, ``ladder.json`` keeps every configuration's ladder and the
gain over the defaults, and ``recipe.json`` holds the command line (issue 27;
tests/harness/app/settings/test_tune_options.py: ``--engine-config`` turns it back into run settings)."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

import adapters.registry as registry
from harness.app.cli import app
from results.schema import LadderSummary, Recipe
from tests.fake_servers.tunable_engine import TunableEngine

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # configurations ranked by the capacity measured on real engines: run alone (make test)

ARGS = ["--workload", "random", "--input-len", "8", "--output-len", "8", "--warmup", "1", "--no-calibration",
        "--no-equivalence", "--no-feature-probes", "--threads", "1", "--max-load", "8", "--ladder-budget", "3",
        "--slo", "ttft_p90=150,tpot_p90=25"]


@pytest.fixture
def tunable(monkeypatch):
    real = registry.get_adapter
    monkeypatch.setattr(registry, "get_adapter", lambda name, hardware=None: TunableEngine("vllm") if name == "vllm"
                        else real(name, hardware))


def test_the_search_finds_the_best_setting_and_its_recipe_runs_again(tmp_path, tunable):
    res = CliRunner().invoke(app, ["run", "--engine", "vllm", *ARGS, "--tune", "8", "--tune-configs", "4",
                                   "-o", str(tmp_path), "--run-id", "tuned"])
    assert res.exit_code == 0, res.output
    run = tmp_path / "tuned"
    ladder = LadderSummary.model_validate_json((run / "ladder.json").read_text())
    tuning = ladder.tuning["vllm"]
    assert tuning.space == {"slots": ["2", "8", "64"]} and tuning.method == "successive halving"
    by_args = {json.dumps(c.engine_args): c for c in tuning.configs}
    assert set(by_args) == {"{}", '{"slots": "2"}', '{"slots": "8"}', '{"slots": "64"}'}
    refused = by_args['{"slots": "64"}']
    assert refused.status == "rejected" and "at most 16" in refused.reason and refused.rungs == 0
    assert f"{refused.id} (slots=64): rejected by the engine, not tried again (vllm: --slots 64" in res.output
    chosen = tuning.config(tuning.chosen)
    assert chosen is not None and chosen.engine_args == {"slots": "8"}
    assert "--slots 8" in chosen.command
    assert by_args["{}"].ladder is not None and by_args["{}"].ladder.capacity is not None
    # the defaults climbed again as the main job climbs (vllm#defaults): one slot's TTFT breaks at 4 in flight,
    # so their capacity is known (between 2 and 4 in flight); 8 slots hold up to the highest load (a lower bound)
    base, main = tuning.defaults, ladder.engines["vllm"]
    assert tuning.defaults_id == "vllm#defaults" and not tuning.defaults_reason and 0 < tuning.defaults_s
    assert base is not None and base.capacity is not None and not base.capacity.open and 2 <= base.capacity.load < 4
    assert [p.load for p in base.points][:3] == [1, 2, 4] and main.capacity is not None and main.capacity.open
    # the gain is the tuned capacity over that climb's
    assert tuning.gain == pytest.approx(main.capacity.output_tps / base.capacity.output_tps, rel=1e-9)
    assert tuning.gain > 1.5 and not tuning.gain_none and tuning.gain_text.startswith("≥ ")
    assert 0 < tuning.used_s
    # every configuration is its own engine in the records, the main job the engine itself
    records = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    assert {r["engine"] for r in records} >= {"vllm", "vllm#0", "vllm#1", "vllm#2", "vllm#defaults"}
    assert (run / "logs" / "vllm#2.log").exists() and (run / "logs" / "vllm#defaults.log").exists()
    assert manifest_command(run, "vllm#defaults").endswith("--slots 1")  # the scripted engine's defaults: 1 slot
    # the main job climbed the engine at 8 slots; the recipe is its command line
    manifest = json.loads((run / "manifest.json").read_text())
    assert "--slots 8" in manifest["engines"]["vllm"]["command"]
    assert "vllm: tuned slots=8" in res.output and "Recipe (vllm" in res.output
    assert ladder.decision.sentence.startswith("vllm (tuned: slots=8) sustains"), ladder.decision.sentence
    md = (run / "report.md").read_text()
    assert md.index("## Verdict") < md.index("Each engine at its best") < md.index("## Weighted score")
    assert f"| vllm | slots=8 (vllm#2) | ≥ {main.capacity.output_tps:,.1f} [" in md
    assert f"| {base.capacity.output_tps:,.1f} [" in md and "rejected: vllm: --slots 64 is more than" in md
    assert len(tuning.envelope) >= 2 and (run / "report-plots" / "frontier.png").exists()
    recipe = Recipe.model_validate_json((run / "recipe.json").read_text())
    assert recipe.engine == "vllm" and recipe.engine_args == {"slots": "8"} and recipe.tuned
    assert "--slots 8" in recipe.command and recipe.capacity_tps and recipe.capacity_interval
    assert recipe.climb_to == math.ceil(main.capacity.load) > 1  # the re-run climbs at least that far
    again = CliRunner().invoke(app, ["run", "--engine-config", str(run / "recipe.json"), *ARGS, "-o", str(tmp_path),
                                     "--run-id", "again"])  # the recipe measured again, against what it stored
    assert again.exit_code == 0, again.output
    assert manifest_command(tmp_path / "again", "vllm").endswith("--slots 8")
    check = again.output
    assert f"The recipe's capacity was read at up to {recipe.climb_to} in flight" in check
    rerun = LadderSummary.model_validate_json((tmp_path / "again" / "ladder.json").read_text()).engines["vllm"]
    assert max(p.load for p in rerun.points) >= recipe.climb_to
    assert "vllm from its recipe (run tuned): " in check and " output tok/s per device now, " in check
    assert any(f"then: {where} the recipe's interval" in check for where in ("inside", "above", "below")), check
    shown = CliRunner().invoke(app, ["results", "show", "tuned", "-o", str(tmp_path)])  # the same first screen, later
    assert shown.exit_code == 0, shown.output
    assert "vllm: tuned slots=8 (vllm#2), gain over its defaults ≥ " in shown.output
    assert f"Recipe: {run / 'recipe.json'}" in shown.output.replace("\n", "")


def manifest_command(run, engine: str) -> str:
    return json.loads((run / "manifest.json").read_text())["engines"][engine]["command"]


def test_an_engine_config_that_is_not_a_recipe_is_one_line(tmp_path):
    bad = tmp_path / "recipe.json"
    bad.write_text('{"engine_args": {}}')
    res = CliRunner().invoke(app, ["run", "--engine-config", str(bad), "-o", str(tmp_path)])
    assert res.exit_code == 2
    assert "is not a recipe (engine is required: give it)" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(app, ["run", "--engine-config", str(tmp_path / "missing.json"), "-o", str(tmp_path)])
    assert res.exit_code == 2 and "cannot read it" in res.output


def test_a_search_interrupted_keeps_what_it_measured_and_chooses_nothing(tmp_path, tunable, monkeypatch):
    """Ctrl-C while the third configuration (slots=8) climbs: the two measured before keep their
    ladders and seconds, the stopped one and the one never reached say so, nothing is chosen and no
    gain is claimed (a review found an interrupted search reported as 'the defaults were the best')."""
    from harness.app.run import tune

    real = tune.climb_ladder

    def stopped_at_the_third(plan, *args, **kwargs):
        if plan.name == "vllm#2":
            raise KeyboardInterrupt
        return real(plan, *args, **kwargs)

    monkeypatch.setattr(tune, "climb_ladder", stopped_at_the_third)
    res = CliRunner().invoke(app, ["run", "--engine", "vllm", *ARGS, "--tune", "8", "--tune-configs", "4",
                                   "-o", str(tmp_path), "--run-id", "stopped"])
    assert res.exit_code == 130, res.output
    ladder = LadderSummary.model_validate_json((tmp_path / "stopped" / "ladder.json").read_text())
    tuning = ladder.tuning["vllm"]
    assert tuning.interrupted == "the user (Ctrl-C)" and tuning.chosen == ""
    assert [c.status for c in tuning.configs] == ["measured", "measured", "interrupted", "interrupted"]
    assert all(c.rungs == 1 and c.measuring_s > 0 and c.ladder is not None for c in tuning.configs[:2])
    assert tuning.configs[2].reason == "interrupted while measuring (rung 1)" and tuning.configs[2].rungs == 0
    assert tuning.configs[3].reason.startswith("not measured: the search was interrupted before its turn")
    assert tuning.used_s == pytest.approx(sum(c.measuring_s for c in tuning.configs[:2]), abs=0.02) and tuning.used_s > 0
    assert tuning.gain is None and tuning.gain_text == "not measured: the search was interrupted by the user (Ctrl-C) before it chose"
    assert "the defaults were the best" not in res.output
    assert "vllm: not tuned — the search was interrupted by the user (Ctrl-C) before it chose (2 of 4 configurations" in \
        res.output.replace("\n", " ")


def test_lower_precision_is_chosen_only_past_the_fidelity_floor(tmp_path, monkeypatch):
    """--tune-lower-precision on the precision-only scripted engine (tests/fake_servers/
    tunable_engine.py: PrecisionEngine): int4 fits the most sequences but answers wrong at every
    4th token, so it is dropped at its fidelity check, before any measuring; fp8 (0.95 agreement:
    under the strict floor, over the floor for other numerics) is measured and chosen, the main job
    holds it to the same floor, and the verdict and the recipe say it lowers precision."""
    from harness.app.run import context
    from tests.fake_servers.fidelity_server import synthetic_reference
    from tests.fake_servers.tunable_engine import PrecisionEngine

    ref = synthetic_reference(prompts=8, tokens=32, near_tie_every=7, eos_prompts=(2,))
    (tmp_path / "ref.json").write_text(ref.model_dump_json())
    monkeypatch.setattr(context, "run_reference", lambda *args, **kwargs: ref)
    real = registry.get_adapter
    monkeypatch.setattr(registry, "get_adapter", lambda name, hardware=None: PrecisionEngine("vllm", tmp_path / "ref.json")
                        if name == "vllm" else real(name, hardware))
    res = CliRunner().invoke(app, ["run", "--engine", "vllm", *ARGS, "--fidelity-prompts", "8", "--fidelity-tokens", "32",
                                   "--tune", "6", "--tune-configs", "3", "--tune-lower-precision", "-o", str(tmp_path),
                                   "--run-id", "low"])
    assert res.exit_code == 0, res.output
    run = tmp_path / "low"
    ladder = LadderSummary.model_validate_json((run / "ladder.json").read_text())
    tuning = ladder.tuning["vllm"]
    assert tuning.lower_precision and tuning.space == {"kv_dtype": ["int4", "fp8"]}
    defaults, int4, fp8 = tuning.configs
    assert int4.engine_args == {"kv_dtype": "int4"} and int4.status == "unfaithful" and int4.rungs == 0
    assert int4.reason.startswith("fidelity 0.7") and "below the floor 0.9" in int4.reason
    assert int4.ladder is None and int4.measuring_s == 0  # dropped before any measuring
    assert int4.numerics == fp8.numerics.replace("fp8", "int4") == "lower precision (kv_dtype=int4)"
    assert defaults.numerics == "reference" and defaults.status == fp8.status == "measured"
    assert tuning.chosen == fp8.id and fp8.engine_args == {"kv_dtype": "fp8"}
    main = ladder.engines["vllm"]  # the main job's fidelity check: the floor for other numerics, passed
    assert main.fidelity.passed and main.fidelity.floor == 0.9 and main.fidelity.agreement_outside_near_ties < 0.97
    assert main.excluded == "" and main.capacity.output_tps > 0
    assert ladder.decision.sentence.startswith("vllm (tuned: kv_dtype=fp8, lower precision) sustains"), \
        ladder.decision.sentence
    said = " ".join(res.output.split())
    assert "lower precision (--tune-lower-precision or the run's engine args): kv_dtype=int4; kv_dtype=fp8; each " \
           "answers the output-fidelity check before it is measured, and is dropped unless it passes the floor 0.9" in said
    assert f"{int4.id} (kv_dtype=int4): lower precision that did not pass the fidelity gate: not measured, never chosen " \
           "(fidelity 0.7" in said
    assert "1 of lower precision failed the fidelity gate" in said
    recipe = Recipe.model_validate_json((run / "recipe.json").read_text())
    assert recipe.engine_args == {"kv_dtype": "fp8"} and recipe.numerics == "lower precision (kv_dtype=fp8)"
    md = (run / "report.md").read_text()
    assert "unfaithful: fidelity 0.7" in md and "| kv_dtype=fp8 (lower precision) |" in md
    assert "vllm: tuned kv_dtype=fp8 (lower precision: its fidelity check faces the floor for other numerics) (vllm#" in said
    assert "below the floor 0.90 |" in md  # the reason is not cut before the floor
