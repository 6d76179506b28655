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
    import os

    import psutil

    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "requests.jsonl").write_text('{"request_id": "r0"}\n')  # a measurement: never thrown away
    res = CliRunner().invoke(app, ["run", "--engine", "own", "-o", str(tmp_path), "--run-id", "taken"])
    assert res.exit_code == 2 and "already exists and holds requests.jsonl" in res.output
    assert f"rm -r {taken}" in " ".join(res.output.split())
    busy = tmp_path / "busy"  # a live bench writes it (this test's own process)
    busy.mkdir()
    (busy / "running.json").write_text(json.dumps({"pid": os.getpid(), "started": psutil.Process().create_time()}))
    res = CliRunner().invoke(app, ["run", "--engine", "own", "-o", str(tmp_path), "--run-id", "busy"])
    assert res.exit_code == 2 and "being written by a running bench" in res.output
    afile = tmp_path / "afile"
    afile.write_text("x")
    res = CliRunner().invoke(app, ["run", "--engine", "own", "-o", str(afile)])
    assert res.exit_code == 2 and "is a file" in res.output


def test_a_killed_runs_empty_folder_does_not_block_its_run_id(url, tmp_path):
    """SIGKILL during calibration leaves running.json (a dead pid), an empty requests.jsonl,
    manifest.json and an empty logs/: the same --run-id runs again in that folder."""
    dead = tmp_path / "again"
    (dead / "logs").mkdir(parents=True)
    (dead / "requests.jsonl").write_text("")
    (dead / "manifest.json").write_text('{"run_id": "again"}')
    (dead / "running.json").write_text(json.dumps({"pid": 2 ** 22 + 7, "started": 1.0}))  # no such process
    res = CliRunner().invoke(app, [
        "run", "--engine", "openai", "--base-url", url, "--model", "null", "--workload", "random", "-n", "2",
        "--input-len", "8", "--output-len", "2", "--warmup", "0", "--no-calibration", "--no-equivalence",
        "--request-rate", "inf", "-o", str(tmp_path), "--run-id", "again"])
    assert res.exit_code == 0, res.output
    assert "reusing" in res.stderr and "no measurement" in res.stderr
    assert json.loads((dead / "summary.json").read_text())["engines"]["openai"]["status"] == "ok"
    assert not (dead / "running.json").exists()  # closed this time


def _openai_run(url: str, out, run_id: str, *extra: str):
    return CliRunner().invoke(app, [
        "run", "--engine", "openai", "--base-url", url, "--model", "m", "--workload", "random", "-n", "3",
        "--input-len", "8", "--output-len", "2", "--warmup", "0", "--no-calibration", "--request-rate", "inf",
        "-o", str(out), "--run-id", run_id, *extra])


def test_the_equivalence_check_gives_up_at_the_request_timeout(tmp_path):
    """A stalled endpoint used to hold the greedy-equivalence prompts for a hard-coded 120 s
    whatever --request-timeout said (a run stalled 2 min 20 s); now they give up at it."""
    import time

    from tests.fake_servers.scripted_endpoint import ScriptedEndpoint

    with ScriptedEndpoint("stall_equivalence") as server:
        t0 = time.monotonic()
        res = _openai_run(server.url, tmp_path, "stall", "--request-timeout", "2")
        elapsed = time.monotonic() - t0
        deadline = time.monotonic() + 10
        while server.cancelled < 3 and time.monotonic() < deadline:  # the server sees the client go away
            time.sleep(0.05)
    assert res.exit_code == 0, res.output
    assert server.cancelled == 3  # the three equivalence prompts, abandoned by the client
    assert elapsed < 60, elapsed  # deadline: the old 120 s wait cannot fit
    summary = json.loads((tmp_path / "stall" / "summary.json").read_text())
    assert summary["engines"]["openai"]["metrics"]["requests_completed"] == 3


def test_a_failed_endpoint_is_failed_with_the_servers_own_words(tmp_path):
    from tests.fake_servers.scripted_endpoint import MESSAGE_400, ScriptedEndpoint

    with ScriptedEndpoint("http_400") as server:
        res = _openai_run(server.url, tmp_path, "bad", "--no-equivalence")
    assert res.exit_code == 1, res.output
    reason = json.loads((tmp_path / "bad" / "summary.json").read_text())["engines"]["openai"]["reason"]
    assert reason.startswith("no request succeeded: 3 of 3 requests failed (100%): http_400 ×3")
    assert MESSAGE_400 in reason  # not only {'http_400': 3}: what the server said


def test_credentials_are_masked_and_token_counts_explained_without_a_tokenizer(tmp_path, monkeypatch):
    import base64

    from tests.fake_servers.scripted_endpoint import ScriptedEndpoint

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ScriptedEndpoint("ok") as server:
        url = f"http://alice:s3cret@127.0.0.1:{server.port}"
        monkeypatch.setattr("sys.argv", ["bench", "run", "--engine", "openai", "--base-url", url])  # the manifest's command
        res = _openai_run(url, tmp_path, "creds", "--no-equivalence")
    assert res.exit_code == 0, res.output
    # the credentials authenticate (HTTP Basic, for the model list and every streamed request) ...
    basic = "Basic " + base64.b64encode(b"alice:s3cret").decode()
    assert server.seen_auth and set(server.seen_auth) == {basic}
    # ... and are written nowhere, printed nowhere
    run = tmp_path / "creds"
    stored = {p.name: p.read_text() for p in run.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl", ".md", ".html")}
    assert {"manifest.json", "summary.json", "report.md", "report.html", "recommendation.json"} <= set(stored)
    assert not [name for name, text in stored.items() if "s3cret" in text]
    assert "s3cret" not in res.output
    manifest = json.loads(stored["manifest.json"])
    assert manifest["engines"]["openai"]["base_url"] == f"http://alice:***@127.0.0.1:{server.port}"
    assert f"http://alice:***@127.0.0.1:{server.port}" in manifest["command"]
    # no --tokenizer: the manifest describes no model, says what the token counts rest on, and so do
    # the console and the report; the memory fit says it was not checked
    assert manifest["model"] is None
    assert "server's usage only" in manifest["workload"]["token_counts"]
    assert "server's usage only" in " ".join(res.output.split())
    assert "server's usage only" in stored["report.md"]
    fit = json.loads(stored["recommendation.json"])["memory_fit"]["openai"]
    assert fit["fits"] is None and fit["arithmetic"].startswith("memory fit not checked: model num_params")


def test_tokenizer_builds_the_workload_and_describes_the_model(tmp_path):
    import shutil

    from harness.app.core.model import default_model_dir, prepare_default_model
    from tests.fake_servers.scripted_endpoint import ScriptedEndpoint

    prepare_default_model()
    folder = tmp_path / "served-model"
    folder.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):  # no weights
        shutil.copy(default_model_dir() / name, folder / name)
    with ScriptedEndpoint("ok") as server:
        res = _openai_run(server.url, tmp_path / "out", "tok", "--no-equivalence", "--tokenizer", str(folder))
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "out" / "tok" / "manifest.json").read_text())
    assert manifest["workload"]["tokenizer"] == str(folder.resolve())
    assert "token_counts" not in manifest["workload"]
    assert manifest["model"]["name"] == "served-model" and manifest["model"]["num_layers"] == 30
    assert manifest["model"]["num_params"] is None  # no weights in the folder: not invented
    assert "usage only" not in res.output
