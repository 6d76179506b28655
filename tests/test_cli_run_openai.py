"""`bench run --engine openai` against a real loopback server: the summary, manifest and
records a user gets, and one-line errors (exit 2) for bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from harness.app.cli import app
from harness.loadgen.nullserver import null_server

STAT_KEYS = {"mean", "median", "std", "p50", "p90", "p95", "p99", "p99_9", "max"}


@pytest.fixture(scope="module")
def url():
    with null_server() as u:
        yield u


def test_run_openai_writes_summary_manifest_and_records(url, tmp_path):
    res = CliRunner().invoke(app, [
        "run", "--engine", "openai", "--base-url", url, "--model", "null", "--workload", "random",
        "--num-requests", "12", "--input-len", "16", "--output-len", "5", "--request-rate", "inf",
        "--warmup", "1", "--no-calibration", "--no-equivalence", "--slo", "ttft_p99=5000,tpot_p99=1000",
        "-o", str(tmp_path), "--run-id", "r1",
    ])
    assert res.exit_code == 0, res.output
    run = tmp_path / "r1"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["schema_version"] == "2.0" and summary["workload"] == "random"
    e = summary["engines"]["openai"]
    assert e["status"] == "ok" and e["reason"] == ""
    m = e["metrics"]
    for key in ("requests_completed", "requests_failed", "duration_s", "request_throughput", "output_throughput",
                "input_throughput", "total_token_throughput"):
        assert key in m
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        assert set(m[key]) == STAT_KEYS and m[key]["p50"] is not None
    assert m["requests_completed"] == 12 and m["requests_failed"] == 0
    # the null server streams exactly max_tokens tokens and reports them in usage
    assert m["total_output_tokens"] == 12 * 5
    assert m["output_throughput"] == pytest.approx(60 / m["duration_s"])
    assert m["goodput"]["good_requests"] == 12 and m["goodput"]["slo_attainment"] == 1.0
    manifest = json.loads((run / "manifest.json").read_text())
    # the null server reports prompt_tokens=1 for 16-token prompts: the drift is flagged, not hidden
    assert manifest["validity"]["openai"]["input_token_drift"] > 0.05
    assert "input tokens differ from our tokenizer's count" in res.output
    for key in ("command", "harness_version", "hardware", "model", "workload", "git_sha", "engines"):
        assert key in manifest
    assert manifest["workload"]["seed"] == 0 and manifest["workload"]["input_len"] == 16
    lines = (run / "requests.jsonl").read_text().splitlines()
    phases = [json.loads(x)["phase"] for x in lines]
    assert phases.count("measured") == 12 and phases.count("warmup") == 1
    # every artefact of a fresh run validates against its model
    from results.recommendation import Recommendation
    from results.schema import Manifest, RunSummary

    assert RunSummary.model_validate_json((run / "summary.json").read_text()).engines["openai"].metrics.requests_completed == 12
    assert Manifest.model_validate_json((run / "manifest.json").read_text()).metric_definitions
    assert Recommendation.model_validate_json((run / "recommendation.json").read_text()).winner == "openai"


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--request-rate", "fast"], "--request-rate"),
        (["--slo", "ttft_p99"], "no value"),
        (["--engine", "nosuch"], "unknown engine 'nosuch'"),
        (["--workload", "nosuch"], "unknown workload 'nosuch'"),
        (["--engine", "openai"], "--base-url"),
        (["--num-requests", "0"], "--num-requests must be > 0"),
        (["--engine-arg", "vllm"], "vllm"),
        (["--api", "grpc"], "--api"),
        (["--preset", "foo"], "unknown --preset 'foo'"),
        (["--hardware", "NOPE"], "--hardware"),
        (["--slo", "ttft_p42=5"], "p42"),
        (["--slo", "ttft_p99=5,ttft_p99=6"], "given twice"),
        (["--threads", "1000"], "exceeds"),
        (["--run-id", "../escape"], "plain folder name"),
        (["--model", "/nonexistent/model"], "not a folder"),
        (["--workload", "x[/]"], "unknown workload 'x[/]'"),
        (["--engine", "own,own"], "twice"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, needle, tmp_path):
    res = CliRunner().invoke(app, ["run", *args, "-o", str(tmp_path)])
    assert res.exit_code == 2, res.output
    out = res.output.strip()
    assert needle in out and "Traceback" not in out
    assert len(out.splitlines()) <= 2  # one message (rich may wrap a long line once)


def test_existing_run_folder_or_file_output_dir_is_refused_before_running(tmp_path):
    (tmp_path / "taken").mkdir()
    res = CliRunner().invoke(app, ["run", "--engine", "own", "-o", str(tmp_path), "--run-id", "taken"])
    assert res.exit_code == 2 and "already exists" in res.output
    afile = tmp_path / "afile"
    afile.write_text("x")
    res = CliRunner().invoke(app, ["run", "--engine", "own", "-o", str(afile)])
    assert res.exit_code == 2 and "is a file" in res.output
