"""``recommend_cmd`` / ``report_cmd`` through typer's CliRunner on a small app built here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from harness.app.cli.report import recommend_cmd, report_cmd

from tests.helpers import CPU_ONLY, OWN_CAPS, SMOLLM2, make_records, ok_entry, skipped, write_run

app = typer.Typer()
app.command("recommend")(recommend_cmd)
app.command("report")(report_cmd)
runner = CliRunner()


def _run(tmp_path: Path, run_id: str = "20261129-193500-chat"):
    r_sgl = make_records("sglang", 8, ttft_ms=100.0, tpot_ms=20.0)
    r_tf = make_records("transformers", 8, ttft_ms=130.0, tpot_ms=20.0)
    engines = {"sglang": ok_entry(r_sgl, OWN_CAPS), "transformers": ok_entry(r_tf, CPU_ONLY),
               "tensorrt_llm": skipped("tensorrt_llm: needs an NVIDIA GPU, none found")}
    return write_run(tmp_path, run_id, engines, r_sgl + r_tf)


def test_recommend_prints_the_deciding_constraint(tmp_path: Path) -> None:
    _run(tmp_path)
    res = runner.invoke(app, ["recommend", "latest", "--output-dir", str(tmp_path), "--hardware", "CPU",
                              "--slo", "ttft_p99=120"])
    assert res.exit_code == 0, res.output
    assert "Deciding constraint: sglang: the only engine meeting p99 TTFT ≤ 120 ms" in " ".join(res.output.split())
    assert "Sensitivity:" in res.output


def test_recommend_json(tmp_path: Path) -> None:
    run = _run(tmp_path)
    res = runner.invoke(app, ["recommend", str(run.run_dir), "--hardware", "recorded", "--json",
                              "--preset", "latency", "--weights", "features=0"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["winner"] == "sglang" and data["weights"]["features"] == 0.0 and data["weights"]["latency"] == 4.0
    assert data["eliminated"]["tensorrt_llm"].startswith("not measured (skipped)")
    assert data["hardware"]["name"] == "recorded: Test CPU"
    assert data["exit_code"] == 0


def test_no_surviving_engine_exits_1(tmp_path: Path) -> None:
    run = _run(tmp_path)
    res = runner.invoke(app, ["recommend", str(run.run_dir), "--hardware", "CPU", "--slo", "ttft_p99=50"])
    assert res.exit_code == 1
    text = " ".join(res.output.split())
    assert "no engine survives the hard constraints" in text
    assert "loosen an SLO (--slo)" in text


def test_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    run = _run(tmp_path)
    cases = [
        (["recommend", "nope", "--output-dir", str(tmp_path)], "no run 'nope'"),
        (["recommend", str(run.run_dir), "--hardware", "B200"], "unknown hardware profile 'B200'"),
        (["recommend", str(run.run_dir), "--slo", "ttft=fast"], "SLO ttft needs a number of milliseconds"),
        (["recommend", str(run.run_dir), "--weights", "speed=3"], "unknown weight 'speed'"),
        (["recommend", str(run.run_dir), "--preset", "cheap"], "unknown --preset 'cheap': choose from latency"),
        (["recommend", str(run.run_dir), "--gpus", "0"], "--gpus must be at least 1"),
        (["report", str(tmp_path / "missing")], "no run '"),
    ]
    for argv, message in cases:
        res = runner.invoke(app, argv)
        assert res.exit_code == 2, (argv, res.output)
        assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
        err = " ".join(res.stderr.split())
        assert err.startswith("error: ") and message in err, (argv, err)
        assert "Traceback" not in res.output


def test_report_cmd_single_and_compare(tmp_path: Path) -> None:
    a = _run(tmp_path, "a")
    b = _run(tmp_path, "b")
    res = runner.invoke(app, ["report", str(a.run_dir)])
    assert res.exit_code == 0, res.output
    assert (a.run_dir / "report.md").is_file() and (a.run_dir / "report.html").is_file()
    res = runner.invoke(app, ["report", "a", "b", "--output-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    html = (a.run_dir / "report-compare.html").read_text()
    assert "Comparison of a, b" in html and "b/sglang" in html
    assert "report-compare.html" in res.output
    assert not (b.run_dir / "report-compare.html").exists()


def _spec_run(tmp_path: Path, run_id: str, *, workload: str = "random", model: dict | None = None, **spec):
    """A run whose manifest records a workload spec (random, input_len 256 ...) and a model."""
    recs = make_records("sglang", 8, ttft_ms=100.0, tpot_ms=20.0, workload=workload)
    manifest = {
        "created_at": "2026-11-29T19:35:00",
        "hardware": {"cpu_model": "Test CPU", "cpu_count": 2, "memory_bytes": 8 * 1024**3, "gpus": []},
        "model": {**SMOLLM2, "path": f"/machine-{run_id}/SmolLM2-135M-Instruct", **(model or {})},
        "workload": {"kind": workload, "seed": 0, "num_requests": 8, "request_rate": "inf", "input_len": 256,
                     "output_len": 32, "api": "completions",
                     "tokenizer": f"/machine-{run_id}/SmolLM2-135M-Instruct", **spec},
    }
    return write_run(tmp_path, run_id, {"sglang": ok_entry(recs, OWN_CAPS)}, recs, workload=workload, manifest=manifest)


@pytest.mark.parametrize("second,why", [
    (dict(workload="chat"), "runs a and b measured different workloads (random vs chat)"),
    (dict(input_len=1024), "runs a and b measured the random workload differently (input_len 256 vs 1024)"),
    (dict(model={"name": "Qwen2.5-7B", "num_layers": 28}), "runs a and b served different models (SmolLM2-135M-Instruct vs Qwen2.5-7B"),
])
@pytest.mark.parametrize("command", ["report", "recommend"])
def test_unlike_runs_are_not_ranked_together(tmp_path: Path, command: str, second: dict, why: str) -> None:
    _spec_run(tmp_path, "a")
    _spec_run(tmp_path, "b", **second)
    res = runner.invoke(app, [command, "a", "b", "--output-dir", str(tmp_path)])
    assert res.exit_code == 2, res.output
    err = " ".join(res.stderr.split())
    assert err.startswith("error: cannot rank these runs together: " + why), err
    assert "report or score each run on its own" in err
    assert not (tmp_path / "a" / "report-compare.md").exists()


def test_runs_of_one_workload_at_other_loads_and_paths_are_ranked_together(tmp_path: Path) -> None:
    # another rate, seed, request count and machine (model and tokenizer paths) is the same workload and model
    _spec_run(tmp_path, "a")
    _spec_run(tmp_path, "b", request_rate=4.0, seed=3, num_requests=16)
    res = runner.invoke(app, ["recommend", "a", "b", "--output-dir", str(tmp_path), "--hardware", "CPU"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["report", "a", "b", "--output-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output


def test_a_weight_given_twice_is_refused(tmp_path: Path) -> None:
    run = _run(tmp_path)
    res = runner.invoke(app, ["recommend", str(run.run_dir), "--weights", "throughput=1,throughput=2"])
    assert res.exit_code == 2
    assert " ".join(res.stderr.split()) == "error: weight throughput is given twice in --weights: give each criterion once"


def _hashes(folder: Path) -> dict[str, str]:
    import hashlib

    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and "decisions" not in p.relative_to(folder).parts}


def test_a_re_decision_leaves_the_run_folder_unchanged_and_stores_its_answer_beside_it(tmp_path: Path) -> None:
    """Issue 41: ``bench recommend RUN --slo …`` decides the ladders again from the records and
    stores the answer in decisions/<question>/, never over the run's own files (hashed before
    and after); what it prints is what it stores."""
    from results.schema import LadderSummary
    from results.store import load_run
    from tests.reports.test_frontier import ladder_run

    run_dir = ladder_run(tmp_path)
    before = _hashes(run_dir)
    own = load_run(run_dir).ladder.decision
    res = runner.invoke(app, ["recommend", str(run_dir), "--hardware", "CPU", "--slo", "ttft_p90=1000,tpot_p90=40"])
    assert _hashes(run_dir) == before
    folder = run_dir / "decisions" / "slo-tpot_p90=40,ttft_p90=1000_hardware-CPU"  # one name whatever the order
    again = LadderSummary.model_validate_json((folder / "ladder.json").read_text()).decision
    assert (folder / "recommendation.json").is_file() and again.slos == {"ttft_p90": 1000.0, "tpot_p90": 40.0}
    assert again.sentence != own.sentence and again.winner == "fast"
    assert again.sentence in " ".join(res.output.split()) or again.sentence[:60] in " ".join(res.output.split())
    assert res.exit_code == 0, res.output


def test_a_re_decision_says_which_ladder_to_climb_where_the_stored_one_cannot_answer(tmp_path: Path) -> None:
    """Under SLOs every measured point meets, the stored ladders only give lower bounds: the
    verdict says so, and one line per engine says how to measure it further."""
    from tests.reports.test_frontier import ladder_run

    run_dir = ladder_run(tmp_path)
    res = runner.invoke(app, ["recommend", str(run_dir), "--hardware", "CPU", "--slo", "ttft_p90=600000,tpot_p90=60000"])
    text = " ".join(res.output.split())
    for name in ("fast", "slow"):
        assert (f"{name}: every point measured (up to 32 in flight) meets these SLOs, so the stored ladder cannot say "
                f"where it stops: bench run --engine {name} --slo ttft_p90=600000,tpot_p90=60000 --max-load 128") in text
    assert "own: every point" not in text  # the yardstick is not what is decided



def _ladder_run_with_metrics(root: Path) -> Path:
    """A run whose two simulated engines climbed load ladders under ttft_p90=1000,tpot_p90=60 ('fast':
    18 ms per token at one in flight, 'slow': 30 ms), stored as `bench run` stores them: each
    engine's summary.json entry holds the metrics of its capacity point (``ladder_point``, over
    the point's steady state), the figures the weighted lens scores."""
    from harness.loadgen.simulated import SimEngine
    from tests.helpers import sim_ladder_run

    engines = {"fast": SimEngine("fast", slots=16, prefill_ms=60, tpot_ms=18, jitter=0.05),
               "slow": SimEngine("slow", slots=8, prefill_ms=90, tpot_ms=30, jitter=0.05)}
    return sim_ladder_run(root, "lad", engines, requests=16, with_metrics=True)


def test_a_re_decision_scores_the_weighted_view_on_the_re_decided_ladder(tmp_path: Path) -> None:
    """Issue 39's review (a test owed): under --slo tpot_p90=25, 'slow' (30 ms per token at one in
    flight) misses the SLO at its lowest load: the re-decided ladder excludes it, while the stored
    one (tpot_p90=60) has it eligible; 'fast''s capacity point moves from 16 in flight down to 4.
    The weighted view must follow the re-decided ladder (the lens does not judge the SLOs of a
    ladder run itself: the ladder's gates are its gates, its points its points), so it no longer
    ranks 'slow', and scores 'fast' at 4 in flight, not at the stored 16 (whose p90 TPOT breaks 25 ms)."""
    from results.store import load_run

    run_dir = _ladder_run_with_metrics(tmp_path)
    stored = load_run(run_dir).ladder
    assert all(not e.excluded for e in stored.engines.values()) and stored.decision.winner == "fast"
    res = runner.invoke(app, ["recommend", str(run_dir), "--hardware", "CPU", "--json"])
    own = json.loads(res.stdout)  # the run's own SLOs: both ranked
    assert [r["engine"] for r in own["ranking"]] == ["fast", "slow"] and own["eliminated"] == {}
    assert own["ranking"][0]["condition"] == "random at 16 requests in flight (closed loop)"

    res = runner.invoke(app, ["recommend", str(run_dir), "--hardware", "CPU", "--json", "--slo", "ttft_p90=1000,tpot_p90=25"])
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)
    folder = run_dir / "decisions" / "slo-tpot_p90=25,ttft_p90=1000_hardware-CPU"
    again = json.loads((folder / "ladder.json").read_text())
    assert again["engines"]["slow"]["excluded_stage"] == "slo"  # the re-decided ladder excludes it ...
    slow_line = again["engines"]["slow"]["excluded"]
    assert slow_line.startswith("misses the SLO at the lowest load (1 in flight: ")
    assert rec["winner"] == "fast" and [r["engine"] for r in rec["ranking"]] == ["fast"]  # ... and so does the lens
    assert rec["eliminated"] == {"slow": slow_line} and rec["elimination_stage"] == {"slow": "slo"}
    assert json.loads((folder / "recommendation.json").read_text())["eliminated"] == {"slow": slow_line}
    fast, at = rec["ranking"][0], next(p for p in again["engines"]["fast"]["points"] if p["load"] == 4)
    assert again["engines"]["fast"]["capacity"]["bracket"] == [4.0, 8.0]  # the re-decided capacity point ...
    assert fast["condition"] == "random at 4 requests in flight (closed loop)"  # ... is the one scored
    assert fast["metrics"]["output_throughput"] == pytest.approx(at["output_tps"])
    assert load_run(run_dir).summary.engines["fast"].ladder_point == 4  # the run's own entry unchanged (16 in flight)
