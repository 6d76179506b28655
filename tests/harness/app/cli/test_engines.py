"""``bench engines`` (table, setup errors, check) and the greedy equivalence check, driven
with fake servers that answer fixed texts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from adapters.base import Capabilities, LaunchConfig, ProbeResult
from harness.app.trial.equivalence_check import check_equivalence
from harness.loadgen.equivalence import token_agreement
from adapters.runtime.server import LaunchPlan, ServerAdapter, thread_env
from harness.app.cli.engines import app, engine_state
from adapters import registry

FAKE = Path(__file__).parents[3] / "fake_servers" / "lifecycle_server.py"
runner = CliRunner()


def test_engines_table_json_lists_every_engine_with_reasons():
    res = runner.invoke(app, ["--json"])
    assert res.exit_code == 0, res.output
    rows = {r["engine"]: r for r in json.loads(res.output)}
    # exactly the names --engine accepts, read off the registry (a new engine's module adds its row):
    # the shipped engines in their order, openai listed, no deepspeed-mii row --engine would reject
    assert tuple(rows) == registry.engine_names()
    known = ["own", "transformers", "transformers_serve", "vllm", "sglang", "onnxruntime", "deepspeed",
             "llamacpp", "llamacpp_q8_0", "openvino", "tensorrt_llm", "openai"]
    assert [n for n in rows if n in known] == known and "deepspeed-mii" not in rows
    assert rows["openai"]["state"] == "available" and "--base-url" in rows["openai"]["reason"]
    assert "deepspeed-mii (FastGen)" in rows["deepspeed"]["reason"]  # MII's note kept, in its engine's row
    assert rows["own"]["state"] == "available"
    assert rows["tensorrt_llm"]["state"] == "unsupported hardware"
    assert rows["tensorrt_llm"]["reason"] == "tensorrt_llm: needs an NVIDIA GPU, none found"
    for r in rows.values():
        assert r["reason"].startswith(r["engine"].split("-")[0])


def test_engines_table_renders():
    res = runner.invoke(app, [], env={"COLUMNS": "250"})
    assert res.exit_code == 0 and "tensorrt_llm" in res.output and "needs an NVIDIA GPU" in res.output


def test_engine_state_classification():
    assert engine_state(ProbeResult(True, "x"), ("cpu",), "cpu") == "available"
    assert engine_state(ProbeResult(False, "x: not installed - run", cause="not_installed"), ("cpu",), "cpu") == "not installed"
    assert engine_state(ProbeResult(False, "x: not installed", cause="not_installed"), ("nvidia",), "cpu") == "unsupported hardware"
    assert engine_state(ProbeResult(False, "x: needs a GPU", cause="hardware"), ("cpu", "nvidia"), "cpu") == "unsupported hardware"
    assert engine_state(ProbeResult(False, "x: broken venv"), ("cpu",), "cpu") == "unavailable"


def test_setup_rejects_unknown_and_setup_free_engines():
    res = runner.invoke(app, ["setup", "foo"])
    assert res.exit_code == 2 and "unknown engine 'foo'" in res.output and "all-cpu" in res.output
    res = runner.invoke(app, ["setup", "own"])
    assert res.exit_code == 2 and "own needs no setup here" in res.output


def test_check_rejects_unknown_engine():
    res = runner.invoke(app, ["check", "--engines", "own,nope"])
    assert res.exit_code == 2 and "unknown engine 'nope'" in res.output


def test_token_agreement():
    assert token_agreement([1, 2, 3, 4], [1, 2, 3, 4]) == (4, 1.0)
    assert token_agreement([1, 2, 3, 4], [1, 2, 9, 4]) == (2, 0.5)
    assert token_agreement([1, 2], [1, 2, 3, 4]) == (2, 0.5)
    assert token_agreement([], []) == (0, 1.0)


class TextServer(ServerAdapter):
    """A fake engine whose every completion is ``text``."""

    capabilities = Capabilities(hardware=("cpu",))

    def __init__(self, name: str, text: str, available: bool = True) -> None:
        self.name, self.display_name, self.text, self.available = name, f"fake {name}", text, available

    def probe(self) -> ProbeResult:
        return ProbeResult(self.available, f"{self.name}: " + ("ok" if self.available else "not installed - run setup"))

    def build_command(self, config: LaunchConfig, port: int) -> LaunchPlan:
        cmd = [sys.executable, str(FAKE), "--port", str(port), "--text", self.text]
        if self.name == "crashy":
            cmd += ["--mode", "exit_early"]
        return LaunchPlan(cmd=cmd, env=thread_env(1), model_name="fake-model", display_name=self.display_name)


@pytest.mark.slow
def test_check_equivalence_token_agreement(tmp_path):
    from harness.app.core.model import resolve_model

    model_dir = resolve_model(None)
    adapters = [TextServer("ref", " Paris is the capital of France."),
                TextServer("same", " Paris is the capital of France."),
                TextServer("diverges", " Paris is a city in Texas."),
                TextServer("absent", "x", available=False),
                TextServer("crashy", "x")]
    res = check_equivalence(adapters, model_dir, tmp_path, prompts=["p1", "p2"], max_tokens=8)
    e = res["engines"]
    assert res["reference"] == "ref"
    assert e["ref"]["token_agreement"] == 1.0 and e["same"]["exact_matches"] == 2
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ref = tok(" Paris is the capital of France.", add_special_tokens=False)["input_ids"]
    div = tok(" Paris is a city in Texas.", add_special_tokens=False)["input_ids"]
    prefix, agree = token_agreement(ref, div)
    assert prefix == 2  # " Paris", " is"
    assert e["diverges"]["token_agreement"] == pytest.approx(round(agree, 4))
    assert e["diverges"]["exact_matches"] == 0 and e["diverges"]["per_prompt"][0]["prefix_tokens"] == 2
    assert e["absent"]["status"] == "skipped" and "not installed" in e["absent"]["reason"]
    assert e["crashy"]["status"] == "failed" and "exited with code 3" in e["crashy"]["reason"]
    assert (tmp_path / "logs" / "diverges.log").is_file()


def test_check_and_fidelity_spell_their_options_as_bench_run_and_still_read_the_former_ones() -> None:
    """``--engine`` (``-e``), ``--fidelity-prompts``, ``--fidelity-tokens`` as in ``bench run``; the
    former ``--engines``, ``--prompts``, ``--tokens`` read the same, hidden from ``--help``."""
    from harness.app.cli.options import alias_params, cli_params
    from harness.app.settings.engines import EngineFidelitySettings

    for command in ("check", "fidelity"):
        text = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output
        assert "--engine " in text and "-e " in text and "--engines" not in text
    text = runner.invoke(app, ["fidelity", "--help"], env={"COLUMNS": "200"}).output
    import re

    assert "--fidelity-prompts" in text and "--fidelity-tokens" in text
    assert not re.search(r"(?<![\w-])--(prompts|tokens|engines)\b", text)
    former = {a.cli.aliases: a.alias_of for a in alias_params(cli_params(EngineFidelitySettings))}
    assert former == {("--engines",): "engine", ("--prompts",): "fidelity_prompts", ("--tokens",): "fidelity_tokens"}
    for flag in ("-e", "--engine", "--engines"):  # each spelling reaches the same check
        res = runner.invoke(app, ["check", flag, "own,nope"])
        assert res.exit_code == 2 and "unknown engine 'nope'" in res.output, res.output
