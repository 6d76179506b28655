"""``bench run --repeats N``: engines measured in interleaved rounds (A B, A B), every record
stamped with its repeat, per-repeat metrics and pooled metrics stored, headline intervals over
repeats; a crash in a later repeat fails the engine and keeps what it measured."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
from typer.testing import CliRunner

import adapters.registry as registry
from adapters.base import EngineError, Endpoint
from harness.app.cli import app
from harness.loadgen.nullserver import null_server
from results.schema import RunSummary
from results.store import load_run

from tests.harness.app.run.test_orchestrator_failures import ARGS, NullEngine


@pytest.fixture(scope="module")
def url():
    with null_server() as u:
        yield u


class Named(NullEngine):
    def __init__(self, url: str, name: str, launches: list[str]) -> None:
        super().__init__(url)
        self.name = name
        self.launches = launches

    @contextmanager
    def launch(self, config):
        self.launches.append(self.name)
        yield Endpoint(base_url=self.url, model_name="null", display_name=f"{self.name} fake")


class CrashesInSecondRepeat(Named):
    @contextmanager
    def launch(self, config):
        self.launches.append(self.name)
        yield Endpoint(base_url=self.url, model_name="null", display_name="crashy fake")
        if self.launches.count(self.name) == 2:
            raise EngineError("own exited unexpectedly with code -9", "Killed\n")


def _fakes(monkeypatch, engines):
    monkeypatch.setattr(registry, "get_adapter", lambda n, hardware=None: engines[n])


def test_repeats_are_interleaved_fresh_starts_with_per_repeat_and_pooled_metrics(url, tmp_path, monkeypatch):
    launches: list[str] = []
    _fakes(monkeypatch, {"own": Named(url, "own", launches), "transformers": Named(url, "transformers", launches)})
    res = CliRunner().invoke(app, ["run", "--engine", "own,transformers", "--repeats", "3", *ARGS, "--slo", "ttft_p99=5000",
                                   "-o", str(tmp_path), "--run-id", "rep"])
    assert res.exit_code == 0, res.output
    # interleaved in alternating order (A B, B A, A B), each repeat a fresh launch
    assert launches == ["own", "transformers", "transformers", "own", "own", "transformers"]
    run = load_run(tmp_path / "rep")
    assert run.summary.repeats == 3
    RunSummary.model_validate_json((tmp_path / "rep" / "summary.json").read_text())
    for name in ("own", "transformers"):
        entry = run.summary.engines[name]
        assert entry.status.value == "ok"
        assert [m.requests_completed for m in entry.repeats] == [5, 5, 5]
        assert entry.metrics.requests_completed == 15
        assert entry.metrics.duration_s == pytest.approx(sum(m.duration_s for m in entry.repeats))
        assert entry.intervals["ttft_ms.p50"].basis == "repeats" and entry.intervals["ttft_ms.p50"].n == 3
        assert entry.intervals["output_throughput"].n == 3
        assert entry.intervals["ttft_ms.p50"].low <= entry.intervals["ttft_ms.p50"].high
        recs = [r for r in run.records if r.engine == name and r.phase == "measured"]
        assert sorted({r.repeat for r in recs}) == [0, 1, 2] and len(recs) == 15
    # interleaving by time: each repeat's engines one after another, the order reversed in odd
    # repeats so that a drifting machine does not favour the engine that always goes first
    first = {(r.engine, r.repeat): r.send_ns for r in run.records if r.phase == "measured"}
    order = sorted(first, key=lambda key: min(r.send_ns for r in run.records
                                               if (r.engine, r.repeat) == key and r.phase == "measured"))
    assert order == [("own", 0), ("transformers", 0), ("transformers", 1), ("own", 1), ("own", 2), ("transformers", 2)]
    assert "repeat 2/3" in res.output


def test_a_crash_in_a_later_repeat_fails_the_engine_and_keeps_its_first_repeat(url, tmp_path, monkeypatch):
    launches: list[str] = []
    _fakes(monkeypatch, {"own": CrashesInSecondRepeat(url, "own", launches),
                         "transformers": Named(url, "transformers", launches)})
    res = CliRunner().invoke(app, ["run", "--engine", "own,transformers", "--repeats", "3", *ARGS,
                                   "-o", str(tmp_path), "--run-id", "crash"])
    assert res.exit_code == 0, res.output
    s = json.loads((tmp_path / "crash" / "summary.json").read_text())
    own = s["engines"]["own"]
    assert own["status"] == "failed" and own["reason"].startswith("repeat 2/3: own exited unexpectedly")
    assert own["metrics"]["requests_completed"] == 10  # repeat 1, and repeat 2 measured before the crash
    assert launches == ["own", "transformers", "transformers", "own", "transformers"]  # not restarted after
    assert s["engines"]["transformers"]["status"] == "ok" and len(s["engines"]["transformers"]["repeats"]) == 3
