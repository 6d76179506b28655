"""Typed run artefacts: a version-1 run folder (written by main before the redesign, kept as a
fixture) loads, scores and reports with unchanged numbers; stored models validate."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.app.run.reporting import write_run_reports
from harness.metrics import parse_slos
from harness.scoring import recommend
from results.hardware import profile_from_manifest
from results.recommendation import Recommendation, read_recommendation
from results.schema import EngineFacts, EngineStatus, Manifest, RayTrial, RunSummary, SearchFacts
from results.store import ResultsError, load_run

FIXTURES = Path(__file__).parents[2] / "fixtures"


def _v1_copy(tmp_path: Path) -> Path:
    run_dir = tmp_path / "v1-fixture"
    shutil.copytree(FIXTURES / "run_v1", run_dir)
    return run_dir


def test_v1_run_loads_and_scores_unchanged(tmp_path: Path) -> None:
    run = load_run(_v1_copy(tmp_path))
    assert run.upgraded_from == "1.0" and run.recommendation is None
    assert run.summary.engines["own"].status is EngineStatus.OK
    assert run.summary.engines["own"].metrics.ttft_ms.p99 == pytest.approx(1511.35944015)
    rec = recommend([run], hardware=profile_from_manifest(run.manifest.hardware), slos=parse_slos("ttft_p99=20000"))
    before = Recommendation.model_validate_json((FIXTURES / "run_v1_recommendation.json").read_text())
    # the measured numbers are unchanged; the scores are not (issue 12: features and complexity are no
    # longer read from the adapters' declarations, and the reference engine is never the winner)
    assert [(r.engine, r.metrics) for r in rec.ranking] == [(r.engine, r.metrics) for r in before.ranking]
    assert rec.memory_fit == before.memory_fit
    assert before.winner == "own" and rec.winner == "transformers"


def test_v1_run_reports_and_stores_its_recommendation(tmp_path: Path) -> None:
    run_dir = _v1_copy(tmp_path)
    md_path, html_path = write_run_reports(run_dir)
    md = md_path.read_text()
    assert "| own |" in md and "| transformers |" in md and "| 1,511 |" in md  # the stored p99 TTFT (1,511.36 ms: 3 significant digits, metric_registry.figure)
    assert "TTFT** = first token-bearing chunk − send" in md
    stored = read_recommendation(run_dir)
    assert stored is not None and stored.winner == "transformers"  # own: the reference engine, a yardstick
    # the CDF samples came from the run's own records: as many TTFTs as successful requests
    run = load_run(run_dir)
    assert run.recommendation == stored
    assert "<img" in html_path.read_text()


def test_damaged_artefacts_name_the_file_and_field(tmp_path: Path) -> None:
    run_dir = _v1_copy(tmp_path)
    data = json.loads((run_dir / "summary.json").read_text())
    data["engines"]["own"]["metrics"] = "fast"
    (run_dir / "summary.json").write_text(json.dumps(data))
    with pytest.raises(ResultsError, match=r"summary.json: field engines\.own\.metrics"):
        load_run(run_dir)
    (run_dir / "summary.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(ResultsError, match="not UTF-8"):
        load_run(run_dir)


def test_the_manifest_refuses_a_key_it_does_not_declare(tmp_path: Path) -> None:
    """The stored old run loads (every key it holds is declared); a key no version writes is one line."""
    run_dir = _v1_copy(tmp_path)
    assert load_run(run_dir).manifest.run_id is not None
    data = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps({**data, "engine_configs": {}}))
    with pytest.raises(ResultsError, match=r"manifest.json: field engine_configs: Extra inputs are not permitted"):
        load_run(run_dir)
    with pytest.raises(ValueError, match="engine_configs"):
        Manifest().engine_configs = {}  # a writer's typo fails where it is made


def test_models_round_trip_the_fixture() -> None:
    summary = RunSummary.model_validate_json((FIXTURES / "run_v1" / "summary.json").read_text())
    manifest = Manifest.model_validate_json((FIXTURES / "run_v1" / "manifest.json").read_text())
    assert RunSummary.model_validate_json(summary.model_dump_json()) == summary
    assert manifest.model is not None and manifest.model.num_kv_heads == 3


def test_manifest_sections_are_typed_and_round_trip_key_for_key() -> None:
    """The fixture's hardware, engines, calibration and workload statistics read as models and are
    written back with the same keys in the same order (no key a run never recorded is added);
    ``search`` and ``export_error`` are written only when set."""
    text = (FIXTURES / "run_v1" / "manifest.json").read_text()
    stored, manifest = json.loads(text), Manifest.model_validate_json(text)
    assert manifest.hardware.kind == "cpu" and manifest.hardware.total_memory_bytes == 25276510208
    assert manifest.hardware.price_per_hour is None  # not recorded by this run: read as None, never written
    own = manifest.engines["own"]
    assert own.display_name == "own (reference engine)" and own.startup_parallel is True and own.threads == 1
    assert own.argv[:3] == ["/work/main/.venv/bin/python", "-m", "own_engine"] and own.ray_trials is None
    assert manifest.client_calibration.burst_requests == 300 and manifest.client_calibration.error is None
    assert manifest.workload_stats.input_tokens.p90 == 126.3 and manifest.workload_stats.turns_per_session.max == 1
    written = json.loads(manifest.model_dump_json())
    for key in ("hardware", "engines", "client_calibration", "workload_stats", "workload", "model", "slos", "threads"):
        assert json.dumps(written[key]) == json.dumps(stored[key]), key
    assert Manifest.model_validate_json(manifest.model_dump_json()) == manifest
    assert "search" not in written and "export_error" not in written
    manifest.search = SearchFacts(search_var="rate", unit="req/s", low=1.0, high=None)
    manifest.export_error = "OSError: disk full"
    written = json.loads(manifest.model_dump_json())
    assert written["search"] == {"search_var": "rate", "unit": "req/s", "low": 1.0, "high": None}
    assert list(written)[-2:] == ["search", "export_error"] and written["export_error"] == "OSError: disk full"


def test_engine_facts_merge_like_the_dicts_they_replace() -> None:
    """A later report of an engine's facts replaces the keys it holds and keeps the others; keys
    no field names (an adapter's own configuration) are kept as they were given."""
    first = EngineFacts.model_validate({"display_name": "x", "startup_s": 1.25, "batching": "static"})
    later = EngineFacts(ray_trials=[RayTrial(repeat=0, hostname="h", node_id="n", ip="1.2.3.4", pid=7)])
    merged = first.merged(later).merged(EngineFacts(startup_s=2.0))
    assert merged.model_dump() == {"display_name": "x", "startup_s": 2.0, "batching": "static",
                                   "ray_trials": [{"repeat": 0, "hostname": "h", "ip": "1.2.3.4", "node_id": "n", "pid": 7}]}
    assert merged.adapter_config() == {"batching": "static"} and first.startup_s == 1.25
    assert EngineFacts().model_dump() == {} and not EngineFacts().recorded


def test_an_infinite_ratio_interval_is_stored_and_read_back() -> None:
    """A runner-up whose bootstrap drew a capacity of 0 gives the winner's ratio an infinite upper
    end; written as null it made ladder.json unreadable ("the run folder is damaged") at the end
    of issue 27's measured run."""
    import math

    from results.schema import Decision, EngineTuning, LadderSummary, Recipe

    s = LadderSummary(run_id="r", workload="agentic", decision=Decision(winner="vllm", ratio_interval=(2.79, math.inf)),
                      tuning={"vllm": EngineTuning(gain_interval=(0.7, math.inf))})
    text = s.model_dump_json()
    assert '"ratio_interval":[2.79,"Infinity"]' in text
    back = LadderSummary.model_validate_json(text)
    assert back.decision.ratio_interval == (2.79, math.inf) and back.tuning["vllm"].gain_interval == (0.7, math.inf)
    assert Recipe.model_validate_json(Recipe(engine="e", capacity_interval=(1.0, 2.0)).model_dump_json()).capacity_interval == (1.0, 2.0)
