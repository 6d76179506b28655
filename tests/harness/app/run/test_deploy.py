"""A recipe that deploys (issue 41): the launch command with this machine's interpreter, checkout,
model folder, host and port as parameters; the engine's version, install commands, the model's
digest, the hardware and the harness's commit recorded."""

from __future__ import annotations

import sys

from adapters.runtime.server import PROJECT_ROOT
from harness.app.run.deploy import deployable
from results.schema import Manifest, Recipe


def test_the_template_names_no_path_of_this_machine() -> None:
    model = "/home/me/.cache/llm-serve-bench/models/SmolLM2"
    argv = [sys.executable, "-m", "adapters.shims.ov_server", "--model", model, "--ir-dir", f"{model}-openvino/ir",
            "--host", "127.0.0.1", "--port", "43761", "--threads", "1", "--prompt", "a b"]
    manifest = Manifest.model_validate({
        "harness_version": "0.1.0", "git_sha": "c" * 40,
        "model": {"name": "SmolLM2", "path": model, "digest": "d" * 64},
        "hardware": {"name": "CPU", "kind": "cpu", "num_devices": 1},
        "engines": {"openvino": {"version": "2026.4.1.0", "display_name": "OpenVINO GenAI", "argv": argv, "port": 43761,
                                 "env": {"PYTHONPATH": str(PROJECT_ROOT), "OMP_NUM_THREADS": "1"},
                                 "shim": "adapters.shims.ov_server", "production_server": "OVMS"}}})
    r = deployable(Recipe(engine="openvino", command=" ".join(argv)), manifest)
    assert r.command_template == ("{python} -m adapters.shims.ov_server --model {model} --ir-dir {model}-openvino/ir "
                                  "--host {host} --port {port} --threads 1 --prompt 'a b'")
    assert r.env_template == {"PYTHONPATH": "{project}", "OMP_NUM_THREADS": "1"}
    assert r.engine_version == "2026.4.1.0" and r.shim == "adapters.shims.ov_server" and r.production_server == "OVMS"
    assert r.install[0].startswith("bench engines setup openvino") and "openvino-genai==2026.4.1.0" in r.install[1]
    assert r.model == {"name": "SmolLM2", "digest": "d" * 64, "source": "a local model folder (--model)"}
    assert r.hardware["kind"] == "cpu" and r.git_sha == "c" * 40 and r.serve.startswith("bench serve recipe.json")
