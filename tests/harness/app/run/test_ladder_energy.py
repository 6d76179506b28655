"""Energy on the load ladders, end to end through ``bench run`` on a scripted engine the harness
starts (tests/fake_servers/tunable_engine.py, 1 slot): on a machine without RAPL the energy line
says why once and every artefact holds null with the reason, never 0; with a fake RAPL tree whose
counters advance exactly 1 J per read and wrap around, each phase's energy and each point's J per
output token are what that counter says."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, Iterator

import pytest
from typer.testing import CliRunner

import adapters.registry as registry
from adapters.telemetry.energy import RAPL_ROOT_ENV, RaplZone
from harness.app.cli import app
from results.schema import LadderSummary, Recipe
from tests.fake_servers.tunable_engine import TunableEngine
from tests.quick_reports import quick_reports


@pytest.fixture(autouse=True)
def _no_charts(monkeypatch):
    quick_reports(monkeypatch)  # no assertion here reads a chart or the winner map: seconds a run saved


ARGS = ["--engine", "vllm", "--workload", "random", "--input-len", "8", "--output-len", "8", "--warmup", "1",
        "--no-calibration", "--no-equivalence", "--no-feature-probes", "--fidelity-prompts", "0", "--threads", "1",
        "--max-load", "2", "--ladder-budget", "3", "--time-budget", "60", "--slo", "ttft_p90=2000,tpot_p90=200"]
MAX_RANGE = 262_143_328_850


@pytest.fixture
def paced(monkeypatch):
    real = registry.get_adapter
    monkeypatch.setattr(registry, "get_adapter", lambda name, hardware=None: TunableEngine("vllm") if name == "vllm"
                        else real(name, hardware))
    monkeypatch.setenv("BENCH_HARDWARE", "cpu")


def _energy_values(node: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    """Every (key, value) under a key naming energy, watts, J or tokens per J, anywhere in ``node``."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _energy_values(v, k)
    elif isinstance(node, list):
        for v in node:
            yield from _energy_values(v, key)
    elif any(w in key for w in ("energy_j", "j_per_token", "tokens_per_j", "watts", "usd_per_1m_output_tokens")):
        yield key, node


def test_no_rapl_says_why_once_and_stores_null_never_zero(paced, tmp_path: Path, monkeypatch) -> None:
    empty = tmp_path / "powercap"
    empty.mkdir()
    monkeypatch.setenv(RAPL_ROOT_ENV, str(empty))
    res = CliRunner().invoke(app, ["run", *ARGS, "--price-per-kwh", "0.2", "-o", str(tmp_path), "--run-id", "none"])
    assert res.exit_code == 0, res.output
    why = f"no RAPL: no intel-rapl package zone under {empty}"
    assert res.output.count("energy: not readable on this machine") == 1
    assert f"energy: not readable on this machine ({why}): stored as null" in res.output
    assert f"Energy: not measured ({why}): J per output token stored as null, never 0." in res.output
    run = tmp_path / "none"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["energy"]["kind"] == "none" and manifest["energy"]["reason"] == why
    ladder = LadderSummary.model_validate_json((run / "ladder.json").read_text())
    points = ladder.engines["vllm"].points
    assert points and all(p.energy.j_per_token is None and p.energy.reason == why for p in points)
    cap = ladder.engines["vllm"].capacity
    assert cap.energy.j_per_token is None and cap.energy.usd_per_1m_output_tokens is None and cap.energy_provisioned is None
    summary = json.loads((run / "summary.json").read_text())
    assert summary["engines"]["vllm"]["resources"]["energy"]["reason"] == why
    if (run / "recipe.json").exists():
        assert Recipe.model_validate_json((run / "recipe.json").read_text()).energy.j_per_token is None
    found = [kv for f in ("manifest.json", "ladder.json", "summary.json") for kv in _energy_values(json.loads((run / f).read_text()))]
    assert found and all(v != 0 for _, v in found)  # never 0
    hour = ladder.engines["vllm"].capacity.usd_per_1m_output_tokens  # the hour's price: the only cost there is
    assert [(k, v) for k, v in found if v is not None and k != "price_per_kwh" and v != hour] == []  # energy: null


def _counting_rapl(root: Path, monkeypatch) -> None:
    """A package and a DRAM zone whose ``energy_uj`` advances exactly 1 J per read, starting 4 J
    below the counter's range so it wraps around at once."""
    for name, label in (("intel-rapl:0", "package-0"), ("intel-rapl:0:0", "dram")):
        (root / name).mkdir(parents=True)
        (root / name / "name").write_text(label)
        (root / name / "max_energy_range_uj").write_text(str(MAX_RANGE))
        (root / name / "energy_uj").write_text("0")
    counters: dict[Path, Iterator[int]] = {}

    def read_uj(self: RaplZone) -> int:
        count = counters.setdefault(self.path, itertools.count())
        value = MAX_RANGE - 4_000_000 + 1_000_000 * next(count)
        return value - MAX_RANGE if value > MAX_RANGE else value

    monkeypatch.setattr(RaplZone, "read_uj", read_uj)
    monkeypatch.setenv(RAPL_ROOT_ENV, str(root))


def test_a_fake_rapl_counter_gives_exact_joules_per_token(paced, tmp_path: Path, monkeypatch) -> None:
    _counting_rapl(tmp_path / "powercap", monkeypatch)
    res = CliRunner().invoke(app, ["run", *ARGS, "--watts", "50", "-o", str(tmp_path), "--run-id", "rapl"])
    assert res.exit_code == 0, res.output
    assert "energy: measured: RAPL package + DRAM counters" in res.output and "intel-rapl:0 (package-0)" in res.output
    run = tmp_path / "rapl"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["energy"]["kind"] == "rapl" and manifest["energy"]["idle_watts"] > 0
    summary = json.loads((run / "summary.json").read_text())
    use = summary["engines"]["vllm"]["resources"]
    phases = [r["energy"] for r in use["repeats"]] or [use["energy"]]
    for p in phases:  # 2 zones x 1 J per sample after the first, across the wrap
        assert p["energy_j"] == pytest.approx(2.0 * (len(p["series"]) - 1)) and p["energy_j"] > 0
    ladder = LadderSummary.model_validate_json((run / "ladder.json").read_text())
    cap = ladder.engines["vllm"].capacity
    at = next(p for p in ladder.engines["vllm"].points if p.load == cap.energy_load)
    tokens = at.metrics.total_output_tokens
    assert cap.energy.source == "rapl" and cap.energy.j_per_token == pytest.approx(sum(p["energy_j"] for p in phases) / tokens)
    assert cap.energy.tokens_per_j == pytest.approx(1 / cap.energy.j_per_token)
    assert cap.energy_provisioned.source == "provisioned" and cap.energy_provisioned.mean_watts == pytest.approx(50.0)
    assert "J/tok" in res.output and "(RAPL)" in res.output and "(provisioned)" in res.output
