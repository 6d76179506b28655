"""An engine is one registered class (issue 42): a throwaway engine, declared and registered in
this file alone (no other file of the project names it), runs through ``bench run`` like any
engine, with what its class declares (its launch command, capabilities, effective-settings
reader) used on the way; the registration is undone after the test. Also the registry's rules:
one class per name, the class's own name, :data:`ENGINE_NAMES` in the registration order."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from adapters import registry
from adapters.base import Capabilities, ProbeResult
from adapters.engines.hf import TransformersStaticAdapter
from adapters.engines.own import OwnAdapter
from adapters.runtime.server import LaunchPlan, ServerAdapter
from harness.app.cli import app

PACED = Path(__file__).resolve().parents[1] / "fake_servers" / "paced_server.py"
NAME = "throwaway"
ARGS = ["--workload", "random", "--num-requests", "4", "--input-len", "8", "--output-len", "3", "--warmup", "0",
        "--no-calibration", "--no-equivalence", "--no-feature-probes", "--request-rate", "inf", "--threads", "1"]


def _read_settings(endpoint, settings, timeout_s: float) -> None:
    """Its effective-settings reader: what it says it runs with (a paced fake: one sequence at a time)."""
    settings.set("max_num_seqs", 1, "the throwaway engine's own reader")


class ThrowawayEngine(ServerAdapter):
    """A paced streaming server (tests/fake_servers/paced_server.py) the harness starts, as an engine."""

    name = NAME
    display_name = "throwaway paced engine"
    capabilities = Capabilities(hardware=("cpu",), features=("continuous_batching",), complexity=1)
    stop_grace_s = 2.0
    effective_reader = staticmethod(_read_settings)

    def probe(self) -> ProbeResult:
        return ProbeResult(True, f"{NAME}: a paced fake, always here", "0.0.1")

    def build_command(self, config, port: int) -> LaunchPlan:
        cmd = [sys.executable, str(PACED), "--port", str(port), "--ttft-ms", "5", "--itl-ms", "1"]
        return LaunchPlan(cmd=cmd, env={}, model_name="paced", display_name=self.display_name)


@pytest.mark.slow
def test_a_throwaway_engine_registered_in_a_test_runs_through_bench_run(tmp_path):
    with registry.registered(NAME, ThrowawayEngine):
        assert registry.ENGINE_NAMES[-1] == NAME and NAME not in registry.NOT_IN_ALL
        res = CliRunner().invoke(app, ["run", "--engine", NAME, *ARGS, "-o", str(tmp_path), "--run-id", "tw"])
        assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "tw" / "summary.json").read_text())
    engine = summary["engines"][NAME]
    assert engine["status"] == "ok", engine
    assert engine["metrics"]["requests_completed"] == 4 and engine["display_name"] == "throwaway paced engine"
    assert engine["effective"]["max_num_seqs"] == 1
    assert engine["effective"]["sources"]["max_num_seqs"] == "the throwaway engine's own reader"
    # undone: no engine of that name is left behind
    assert NAME not in registry.ENGINE_NAMES and registry.find_class(NAME) is None
    with pytest.raises(ValueError, match=f"unknown engine '{NAME}'"):
        registry.get_adapter(NAME)
    with pytest.raises(ValueError, match=f"unknown engine '{NAME}'"):
        registry.parse_engine_args([f"{NAME}:slots=2"])


def test_one_class_per_name_under_its_own_name():
    other = type("OtherOwn", (ServerAdapter,), {"name": "own"})
    with pytest.raises(ValueError, match="'own' is registered already, by adapters.engines.own.OwnAdapter"):
        registry.register("own", order=1)(other)
    with pytest.raises(ValueError, match="its class ThrowawayEngine names itself 'throwaway'"):
        registry.register("another", order=1)(ThrowawayEngine)
    assert registry.engine_class("own") is OwnAdapter  # re-registering the same class is harmless
    registry.register("own", order=10)(OwnAdapter)
    assert registry.engine_class("own") is OwnAdapter


def test_a_registration_is_undone_even_when_the_block_fails():
    before = registry.ENGINE_NAMES
    with pytest.raises(RuntimeError):
        with registry.registered(NAME, ThrowawayEngine, order=15):
            assert registry.ENGINE_NAMES[1] == NAME  # order 15: between own (10) and transformers (20)
            assert registry.declared(NAME, "effective_reader") is _read_settings
            raise RuntimeError("the test fails inside")
    assert registry.ENGINE_NAMES == before and registry.declared(NAME, "effective_reader") is None


def test_an_engine_module_that_cannot_load_costs_its_engine_alone(tmp_path):
    # a copy of adapters/ with a broken engine module beside the real ones (a library missing, a name
    # registered twice): every other engine still loads and the reason is one warning line, no traceback
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from adapters.registry import engine_names

    root = Path(__file__).resolve().parents[2]
    shutil.copytree(root / "adapters", tmp_path / "adapters", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "adapters" / "engines" / "broken.py").write_text("import nonexistent_dep_xyz\n")
    (tmp_path / "adapters" / "engines" / "twice.py").write_text(
        "from adapters.registry import register\nfrom adapters.engines.own import OwnAdapter\n\n"
        "@register('own', order=1)\nclass Again(OwnAdapter):\n    pass\n")
    probe = "from adapters.registry import engine_names; print(','.join(engine_names()))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": f"{tmp_path}:{root}", "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().split(",") == list(engine_names())  # every real engine, nothing else
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in done.stderr
    assert "adapters/engines/broken.py could not be loaded (ModuleNotFoundError: No module named 'nonexistent_dep_xyz')" in lines[0]
    assert "adapters/engines/twice.py could not be loaded (ValueError: engine 'own' is registered already" in lines[1]


class MyTransformers(TransformersStaticAdapter):
    """A throwaway engine declared here alone: the transformers shim under another name."""

    name = "throwaway_tf"


def test_a_throwaway_engine_is_listed_everywhere_without_an_edit_elsewhere():
    from harness.app.cli.engines import engine_rows
    from harness.app.run.deploy import install_commands
    from harness.app.settings.groups import EngineSettings
    from harness.app.settings.fields import cli_of

    def setup_help() -> str:
        return cli_of(EngineSettings.model_fields["setup"]).help_text()

    with registry.registered("throwaway_tf", MyTransformers, order=21):
        assert registry.ENGINE_NAMES[:3] == ("own", "transformers", "throwaway_tf")
        assert [r["engine"] for r in engine_rows()][:3] == ["own", "transformers", "throwaway_tf"]
        # it runs from the harness's environment like transformers: the recipe's pip line says so
        assert "pip install 'transformers==5.1.0'  # into the harness's own environment" in install_commands("throwaway_tf", "5.1.0")
        assert "throwaway_tf" not in registry.reference_engines()
        with registry.registered("zzsetup", type("ZzSetup", (ThrowawayEngine,), {
                "name": "zzsetup", "recipe": object(), "setup_note": "it builds for an hour"})):
            assert "not zzsetup, as it builds for an hour: `bench engines setup zzsetup` adds it" in setup_help()
    assert "zzsetup" not in setup_help() and "throwaway_tf" not in registry.ENGINE_NAMES


def test_traits_read_through_the_registry():
    from harness.scoring.gates import REFERENCE_ENGINES

    # the scorer imports nothing of adapters, so it keeps its own set: it must be the registry's
    assert registry.reference_engines() == ("own",) == tuple(REFERENCE_ENGINES)
    assert registry.manual_setup_cpu() == {"deepspeed": "on a CPU it is Hugging Face generate underneath",
                                           "llamacpp": "its llama-server build takes 10–25 minutes"}
    assert "deepspeed-mii (FastGen)" in registry.get_adapter("deepspeed", "cpu").notes()
    assert registry.get_adapter("vllm", "cpu").notes() == ""
