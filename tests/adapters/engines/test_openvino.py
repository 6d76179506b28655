"""OpenVINO GenAI (``adapters.engines.openvino``): the shim's command line from a launch config, the
IR export's command and its content-hash cache (with a fake exporter), the one-line export error,
availability when not installed, ``--parity strict`` and the effective configuration from the
shim's ``/v1/server_info`` - and, when ``bench engines setup openvino`` has built it, the real
pipeline streaming greedy completions that agree with Hugging Face transformers."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from adapters.base import EngineError, LaunchConfig
from adapters.telemetry.effective import from_server_info, read_shim, _Settings
from adapters.engines.openvino import (
    OPENVINO_RELEASE, OpenVinoAdapter, ensure_ir, error_line, export_command, ir_dir, model_digest, numerics,
)
from adapters.parity import ParityTarget
from adapters import registry
from adapters.registry import ENGINE_NAMES, all_adapters, get_adapter
from adapters.shims.ov_export import legacy_config
from adapters.shims.ov_server import effective_info, kv_layout


@pytest.fixture
def engines_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_ENGINES_DIR", str(tmp_path / "engines"))
    return tmp_path / "engines"


@pytest.fixture
def model(tmp_path) -> Path:
    """A model folder with SmolLM2-135M's attention sizes (KV 46,080 bytes per token)."""
    folder = tmp_path / "models" / "SmolLM2"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"num_hidden_layers": 30, "num_attention_heads": 9,
                                                    "num_key_value_heads": 3, "hidden_size": 576,
                                                    "max_position_embeddings": 8192}))
    (folder / "model.safetensors").write_bytes(b"weights")
    return folder


def fake_install(base: Path) -> None:
    """What a finished `bench engines setup openvino` leaves: the marker and the venv's python."""
    (base / "openvino" / "venv" / "bin").mkdir(parents=True)
    (base / "openvino" / "venv" / "bin" / "python").symlink_to(sys.executable)
    (base / "openvino" / "installed.json").write_text(json.dumps({"engine": "openvino", "version": "2026.4.1.0"}))


def cfg(model: Path, tmp_path: Path, **kw) -> LaunchConfig:
    return LaunchConfig(model_dir=model, run_dir=tmp_path / "run", **kw)


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


# ---------------------------------------------------------------------------------------------
# registry, availability
# ---------------------------------------------------------------------------------------------
def test_registered_and_in_the_cpu_setup():
    assert "openvino" in ENGINE_NAMES and isinstance(get_adapter("openvino"), OpenVinoAdapter)
    assert "openvino" in [a.name for a in all_adapters("cpu")]
    assert "openvino" in registry.setup_cpu() and OpenVinoAdapter.effective_reader is read_shim
    steps = registry.cpu_recipes()["openvino"].steps
    pins = [p for st in steps for p in st.packages]
    release = OPENVINO_RELEASE
    # the three OpenVINO distributions come from one release; torch is the local CPU build
    assert f"openvino=={release}" in pins and f"openvino-genai=={release}.0" in pins
    assert f"openvino-tokenizers=={release}.0" in pins and "torch==2.13.0" in pins
    assert any(p.startswith("optimum-intel") for p in pins) and registry.cpu_recipes()["openvino"].version_dist == "openvino-genai"


def test_not_installed_names_the_setup_command(engines_dir, model, tmp_path):
    probe = OpenVinoAdapter(hardware="cpu").probe()
    assert not probe.available and probe.cause == "not_installed"
    assert probe.reason.startswith("openvino:") and "`bench engines setup openvino`" in probe.reason
    with pytest.raises(EngineError, match="bench engines setup openvino"):
        with OpenVinoAdapter(hardware="cpu").launch(cfg(model, tmp_path)):
            pass
    gpu = OpenVinoAdapter(hardware="nvidia").probe()
    assert not gpu.available and gpu.cause == "hardware"
    fake_install(engines_dir)
    probe = OpenVinoAdapter(hardware="cpu").probe()
    assert probe.available and probe.version == "2026.4.1.0" and "ContinuousBatchingPipeline" in probe.reason


# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------
def test_shim_command_from_launch_config(engines_dir, model, tmp_path):
    plan = OpenVinoAdapter(hardware="cpu").build_command(cfg(model, tmp_path, threads=2, model_name="smol"), 8123)
    cmd = plan.cmd
    assert cmd[:3] == [str(engines_dir / "openvino" / "venv" / "bin" / "python"), "-m", "adapters.shims.ov_server"]
    assert flag(cmd, "--model") == str(model) and flag(cmd, "--ir-dir") == str(ir_dir(model))
    assert flag(cmd, "--port") == "8123" and flag(cmd, "--host") == "127.0.0.1"
    assert flag(cmd, "--threads") == "2" and flag(cmd, "--served-model-name") == "smol"
    assert flag(cmd, "--kv-cache-bytes") == str(1 << 30)  # the CPU engines' one KV budget
    assert "--enable-prefix-caching" in cmd and "--dynamic-split-fuse" in cmd
    assert "--max-num-seqs" not in cmd  # the engine's default unless the harness sets it
    assert plan.env["OMP_NUM_THREADS"] == "2" and str(Path(__file__).parents[3]) in plan.env["PYTHONPATH"]
    assert plan.extra_config["numerics"] == "reference" and plan.extra_config["weight_format"] == "fp32"
    assert plan.display_name == "OpenVINO GenAI (ContinuousBatchingPipeline, fp32 IR)"


def test_engine_args_reach_the_scheduler_flags(engines_dir, model, tmp_path):
    args = {"max_num_seqs": "64", "max-num-batched-tokens": "512", "enable_prefix_caching": "false",
            "env.OV_X": "1"}
    cmd = OpenVinoAdapter(hardware="cpu").build_command(cfg(model, tmp_path, engine_args=args), 1).cmd
    assert flag(cmd, "--max-num-seqs") == "64" and flag(cmd, "--max-num-batched-tokens") == "512"
    assert "--no-enable-prefix-caching" in cmd and "--enable-prefix-caching" not in cmd
    plan = OpenVinoAdapter(hardware="cpu").build_command(cfg(model, tmp_path, engine_args=args), 1)
    assert plan.env["OV_X"] == "1"
    with pytest.raises(ValueError, match="set by the harness"):
        OpenVinoAdapter(hardware="cpu").build_command(cfg(model, tmp_path, engine_args={"ir_dir": "/x"}), 1)


def test_other_numerics_are_named(engines_dir, model, tmp_path):
    int8 = OpenVinoAdapter(hardware="cpu").build_command(cfg(model, tmp_path, engine_args={"weight_format": "int8"}), 1)
    assert int8.extra_config["numerics"] == "int8 weights" and "int8" in int8.display_name
    assert "-int8-" in flag(int8.cmd, "--ir-dir") and "--weight-format" not in int8.cmd  # an adapter key
    bf16 = OpenVinoAdapter(hardware="cpu").build_command(cfg(model, tmp_path, engine_args={"precision": "bf16"}), 1)
    assert bf16.extra_config["numerics"] == "bf16 compute"
    assert numerics("fp32", "f32", "u8") == "u8 KV cache" and numerics("fp32", "f32", "f32") == "reference"
    with pytest.raises(ValueError, match="choose from"):
        OpenVinoAdapter(hardware="cpu").build_command(cfg(model, tmp_path, engine_args={"weight_format": "q3"}), 1)


def test_parity_strict_sets_the_scheduler():
    args, could_not = OpenVinoAdapter(hardware="cpu").parity_args(ParityTarget(model_dir=Path(".")))
    assert args == {"kv_cache_bytes": str(1 << 30), "max_num_seqs": "32", "max_num_batched_tokens": "2048",
                    "dynamic_split_fuse": "true", "enable_prefix_caching": "true"} and could_not == []


# ---------------------------------------------------------------------------------------------
# the IR export and its cache
# ---------------------------------------------------------------------------------------------
FAKE_EXPORT = r"""
import json, sys
from pathlib import Path
args = sys.argv[1:]
model, out, fmt = Path(args[args.index("--model") + 1]), Path(args[args.index("--out") + 1]), args[-1]
print("[1/3] exporting", model)
if json.loads((model / "config.json").read_text()).get("fail"):
    print("Traceback (most recent call last):\nValueError: not this one\nov_export: error: the export compressed weights")
    sys.exit(1)
out.mkdir(parents=True)
(out / "openvino_model.xml").write_text(fmt)
(out / "bench_export.json").write_text(json.dumps({"weight_types": {"f32": 3}}))
print("[3/3] done")
"""


def fake_python(tmp_path: Path) -> Path:
    """An interpreter stand-in: ``python -m adapters.shims.ov_export ...`` runs FAKE_EXPORT."""
    script = tmp_path / "fake_export.py"
    script.write_text(FAKE_EXPORT)
    py = tmp_path / "python"
    py.write_text(f"#!/bin/sh\nshift 2\nexec {sys.executable} {script} \"$@\"\n")
    py.chmod(0o755)
    return py


def test_export_command_is_the_exporter_in_the_engine_venv(model, tmp_path):
    cmd = export_command(Path("/venv/bin/python"), model, tmp_path / "out")
    assert cmd == ["/venv/bin/python", "-m", "adapters.shims.ov_export", "--model", str(model.resolve()),
                   "--out", str(tmp_path / "out"), "--weight-format", "fp32"]
    from adapters.shims.ov_export import export_command as cli

    argv = cli(model, tmp_path / "out")  # inside the venv: optimum-cli, fp32 asked for explicitly
    assert argv[-9:] == ["export", "openvino", "--model", str(model), "--task", "text-generation-with-past",
                          "--weight-format", "fp32", str(tmp_path / "out")]


def test_ir_is_cached_beside_the_model_by_content(engines_dir, model, tmp_path):
    out = ir_dir(model)
    assert out.parent == model.parent / "SmolLM2-openvino" and out.name.startswith("SmolLM2-fp32-")
    assert out.name.endswith(model_digest(model)[:16]) and (out.parent / "digests.json").is_file()
    log = tmp_path / "logs" / "openvino.log"
    said: list[str] = []
    path, seconds = ensure_ir(fake_python(tmp_path), model, log, say=said.append)
    assert path == out and seconds > 0 and (out / "bench_export.json").is_file()
    assert "exporting SmolLM2 to OpenVINO IR (fp32" in said[0] and "IR export done" in said[1]
    assert ensure_ir(fake_python(tmp_path), model, log, say=said.append) == (out, 0.0) and len(said) == 2
    assert "[1/3] exporting" in log.read_text()
    int8, _ = ensure_ir(fake_python(tmp_path), model, log, weight_format="int8", say=said.append)
    assert int8 != out and (int8 / "openvino_model.xml").read_text() == "int8"
    (model / "model.safetensors").write_bytes(b"other weights")  # new content: a new folder
    assert ir_dir(model) != out


def test_failed_export_is_one_line_and_leaves_nothing(engines_dir, model, tmp_path):
    (model / "config.json").write_text('{"fail": 1}')
    log = tmp_path / "logs" / "openvino.log"
    with pytest.raises(EngineError) as ei:
        ensure_ir(fake_python(tmp_path), model, log, say=lambda _: None)
    msg = str(ei.value)
    assert "\n" not in msg and msg.startswith("openvino: exporting the model to OpenVINO IR failed: ")
    assert "the export compressed weights" in msg and str(log) in msg and "Traceback" in ei.value.log_tail
    assert not list(ir_dir(model).parent.glob(".*.tmp")) and not ir_dir(model).exists()
    assert error_line("x\nKeyError: 'rope'\nmore") == "KeyError: 'rope'" and error_line("fine") is None


def test_legacy_config_keeps_rope_for_older_transformers():
    cfg5 = {"rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"}, "dtype": "float32"}
    legacy = legacy_config(cfg5)
    assert legacy["rope_theta"] == 100000.0 and legacy["torch_dtype"] == "float32" and "rope_scaling" not in legacy
    scaled = legacy_config({"rope_parameters": {"rope_theta": 5e5, "rope_type": "llama3", "factor": 8.0}})
    assert scaled["rope_scaling"] == {"rope_type": "llama3", "factor": 8.0}
    assert legacy_config({"rope_theta": 1.0}) == {"rope_theta": 1.0}


# ---------------------------------------------------------------------------------------------
# the effective configuration
# ---------------------------------------------------------------------------------------------
def test_kv_budget_as_scheduler_fields():
    per_token = 46_080  # SmolLM2-135M, f32
    gib = kv_layout(1 << 30, per_token)
    assert gib["cache_size"] == 1 and gib["tokens"] == 23_296 and gib["bytes"] == 23_296 * per_token
    odd = kv_layout(600 << 20, per_token)
    assert "cache_size" not in odd and odd["num_kv_blocks"] == (600 << 20) // per_token // 32
    with pytest.raises(ValueError, match="holds no"):
        kv_layout(1000, per_token)


def test_effective_settings_from_server_info():
    class SC:
        max_num_seqs, max_num_batched_tokens, enable_prefix_caching, dynamic_split_fuse = 256, 256, True, True

    kv = kv_layout(1 << 30, 46_080)
    info = effective_info(SC(), kv, {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32",
                                     "KV_CACHE_PRECISION": "f32"}, 8192, {"weight_types": {"f32": 211}})
    s = _Settings("cpu")
    from_server_info(json.loads(json.dumps(info)), s, "shim /v1/server_info")
    got = s.build()
    assert got.kv_capacity_tokens == 23_296 and got.kv_capacity_bytes == 23_296 * 46_080 and got.block_size == 32
    assert got.prefix_caching is True and got.chunked_prefill is True and got.chunked_prefill_tokens == 256
    assert got.max_num_seqs == 256 and got.max_num_batched_tokens == 256 and got.dtype == "float32"
    assert got.threads == 1 and got.max_model_len == 8192 and got.speculative == "off"
    assert info["numerics"] == "reference" and info["weights"] == {"f32": 211}


# ---------------------------------------------------------------------------------------------
# the real engine (skipped unless `bench engines setup openvino` has built it)
# ---------------------------------------------------------------------------------------------
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time,"]


async def _complete(base: str, model: str, prompt: str, max_tokens: int) -> tuple[str, dict, int, str]:
    import aiohttp

    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    text, usage, chunks, finish = "", {}, 0, ""
    async with aiohttp.ClientSession() as s:
        async with s.post(base + "/v1/completions", json=body) as resp:
            assert resp.status == 200, await resp.text()
            async for raw in resp.content:
                line = raw.decode().strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                obj = json.loads(line[5:])
                usage = obj.get("usage") or usage
                for c in obj.get("choices", []):
                    if c.get("text"):
                        text += c["text"]
                        chunks += 1
                    finish = c.get("finish_reason") or finish
    return text, usage, chunks, finish


@pytest.mark.slow
@pytest.mark.heavy_engine
def test_real_openvino_streams_greedy_completions_equal_to_transformers(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from adapters.telemetry.effective import read_effective
    from adapters.runtime.process import group_members, port_is_free
    from harness.app.core.model import resolve_model

    adapter = OpenVinoAdapter()
    probe = adapter.probe()
    if not probe.available:
        pytest.skip(f"{probe.reason} (`bench engines setup openvino` installs it)")
    model_dir = resolve_model(None)
    config = LaunchConfig(model_dir=model_dir, run_dir=tmp_path, threads=1, startup_timeout_s=600)
    tokens = 16

    async def all_at_once(ep):
        return await asyncio.gather(*(_complete(ep.base_url, ep.model_name, p, tokens) for p in PROMPTS))

    with adapter.launch(config) as ep:
        answers = asyncio.run(all_at_once(ep))  # three requests batched together
        settings = read_effective("openvino", ep, "cpu")
        port, pgid = ep.effective_config["port"], ep.pgid
        assert ep.effective_config["numerics"] == "reference"
    tok = AutoTokenizer.from_pretrained(model_dir)
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    for prompt, (text, usage, chunks, finish) in zip(PROMPTS, answers):
        ids = tok(prompt, return_tensors="pt")
        with torch.no_grad():
            out = hf.generate(**ids, max_new_tokens=tokens, do_sample=False)
        ref = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
        n_ref = out.shape[1] - ids["input_ids"].shape[1]
        assert text == ref, (prompt, text, ref)
        assert usage["completion_tokens"] == n_ref and usage["prompt_tokens"] == ids["input_ids"].shape[1]
        assert finish == ("length" if n_ref == tokens else "stop") and chunks >= 2  # streamed, not one block
    assert settings.dtype == "float32" and settings.threads == 1 and settings.prefix_caching is True
    assert settings.kv_capacity_tokens == 23_296 and settings.chunked_prefill is True
    assert port_is_free(port) and group_members(pgid) == []  # nothing left behind
    facts = json.loads((ir_dir(model_dir) / "bench_export.json").read_text())
    assert set(facts["weight_types"]) <= {"f32", "i64", "i32"}, facts  # fp32 weights, none compressed
