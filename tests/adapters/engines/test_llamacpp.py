"""llama.cpp's llama-server (``adapters.engines.llamacpp``, ``adapters.engines.llamacpp_build``): the command
line from a launch config, the q8_0 variant as other numerics, the build steps with a fake runner,
the GGUF conversion cache, the effective configuration from recorded ``/props``, ``/slots`` and log
samples, availability when not installed - and, when ``bench engines setup llamacpp`` has built it,
the real server streaming a greedy completion of the embedded default model."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import sys
import tarfile
from pathlib import Path

import pytest

from adapters.runtime import envs

from adapters.engines import llamacpp_build, llamacpp_gguf
from adapters.base import EngineError, LaunchConfig
from adapters.telemetry.effective import _Settings
from adapters.engines.llamacpp import LlamaCppAdapter, LlamaCppQ8Adapter, read_settings, slot_layout
from adapters.parity import ParityTarget
from adapters.telemetry.prom import common_metrics, parse_prometheus
from adapters import registry
from adapters.registry import all_adapters, get_adapter, parse_engine_args
from results.schema import FLAG_SOURCE, EffectiveSettings

FIXTURES = Path(__file__).parents[2] / "fixtures" / "effective"
KV_TOKENS = 23_301  # 1 GiB of f32 KV at SmolLM2-135M's 46,080 bytes per token


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
                                                    "num_key_value_heads": 3, "hidden_size": 576}))
    (folder / "model.safetensors").write_bytes(b"weights")
    return folder


def fake_install(base: Path) -> None:
    """What a finished `bench engines setup llamacpp` leaves: marker, venv python, binary, converter."""
    (base / "llamacpp" / "venv" / "bin").mkdir(parents=True)
    (base / "llamacpp" / "venv" / "bin" / "python").symlink_to(sys.executable)
    (base / "llamacpp" / "installed.json").write_text(json.dumps({"engine": "llamacpp", "version": "b6790"}))
    binary = llamacpp_build.server_binary()
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    conv = llamacpp_build.converter()
    conv.parent.mkdir(parents=True)
    conv.write_text("")


def cfg(model: Path, tmp_path: Path, **kw) -> LaunchConfig:
    return LaunchConfig(model_dir=model, run_dir=tmp_path / "run", **kw)


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------
def test_server_command_from_launch_config(engines_dir, model, tmp_path):
    plan = LlamaCppAdapter(hardware="cpu").build_command(cfg(model, tmp_path, threads=2, model_name="smol"), 8123)
    cmd = plan.cmd
    assert cmd[0] == str(engines_dir / "llamacpp" / "build" / "bin" / "llama-server")
    assert flag(cmd, "--host") == "127.0.0.1" and flag(cmd, "--port") == "8123"
    assert flag(cmd, "--threads") == "2" and flag(cmd, "--threads-batch") == "2"
    # 1 GiB of f32 KV = 23,301 tokens: 11 slots of 2,048 tokens, all slots' context together in --ctx-size
    assert flag(cmd, "--parallel") == "11" and flag(cmd, "--ctx-size") == str(11 * 2048)
    assert flag(cmd, "--cache-type-k") == "f32" and flag(cmd, "--cache-type-v") == "f32"
    assert flag(cmd, "--alias") == "smol" == plan.model_name and "--metrics" in cmd
    assert flag(cmd, "--cache-ram") == "0"  # no prompt cache in RAM beyond the KV budget
    gguf = Path(flag(cmd, "--model"))
    assert gguf.parent == model.parent / "SmolLM2-gguf" and gguf.name.startswith("SmolLM2-f32-")
    assert plan.metrics_path == "/metrics" and plan.health_paths == ("/health",)
    assert plan.env["OMP_NUM_THREADS"] == "2"
    assert plan.extra_config["slot_context"] == plan.extra_config["max_model_len"] == 2048
    assert plan.extra_config["outtype"] == "f32" and plan.extra_config["numerics"] == "reference"


def test_slots_and_context_follow_the_kv_budget(engines_dir, model, tmp_path):
    assert slot_layout(KV_TOKENS) == (11, 2048, 22528)
    assert slot_layout(KV_TOKENS, slots=8) == (8, 2816, 22528)  # the budget split, in 256-token pieces
    assert slot_layout(KV_TOKENS, slots=2, ctx_size=4096) == (2, 2048, 4096)
    assert slot_layout(4096) == (2, 2048, 4096)
    # a slot never beyond the model's own length (llama-server caps it there; the rest would idle)
    assert slot_layout(KV_TOKENS, slots=2, max_len=8192) == (2, 8192, 16384)
    assert slot_layout(KV_TOKENS, max_len=1024) == (22, 1024, 22528)
    for kv_tokens, slots in ((KV_TOKENS, 100), (100, None)):
        with pytest.raises(ValueError, match="no context per slot"):
            slot_layout(kv_tokens, slots=slots)
    args = parse_engine_args(["llamacpp:parallel=4", "llamacpp:batch_size=512", "llamacpp:env.FOO=1"])["llamacpp"]
    plan = LlamaCppAdapter(hardware="cpu").build_command(cfg(model, tmp_path, engine_args=args), 1)
    assert flag(plan.cmd, "--parallel") == "4" and flag(plan.cmd, "--ctx-size") == str(4 * 5632)
    assert flag(plan.cmd, "--batch-size") == "512" and plan.env["FOO"] == "1"
    for bad, match in (({"port": "1"}, "set by the harness"), ({"alias": "x"}, "set by the harness"),
                       ({"parallel": "0"}, "whole number >= 1"), ({"outtype": "q4_k"}, "choose from")):
        with pytest.raises(ValueError, match=match):
            LlamaCppAdapter(hardware="cpu").build_command(cfg(model, tmp_path, engine_args=bad), 1)


def test_q8_0_is_a_separately_named_configuration_with_other_numerics(engines_dir, model, tmp_path):
    q8 = get_adapter("llamacpp_q8_0", "cpu")
    assert isinstance(q8, LlamaCppQ8Adapter) and q8.name == "llamacpp_q8_0" and "other numerics" in q8.display_name
    plan = q8.build_command(cfg(model, tmp_path), 1)
    assert "-q8_0-" in Path(flag(plan.cmd, "--model")).name
    assert flag(plan.cmd, "--cache-type-k") == "f32"  # only the weights differ
    assert plan.extra_config["numerics"] == "q8_0 weights"  # what the run's fidelity check holds to its floor
    f16_kv = LlamaCppAdapter(hardware="cpu").build_command(cfg(model, tmp_path, engine_args={"cache_type_k": "f16"}), 1)
    assert f16_kv.extra_config["numerics"] == "f16 KV cache"
    # it reports q8_0 weights, which the parity audit flags next to an f32 engine
    s = _Settings("cpu")
    read_settings(None, None, "print_info: file type   = Q8_0\n", s)
    from harness.scoring.checks.parity import audit

    flags = audit({"own": EffectiveSettings(dtype="float32"), "llamacpp_q8_0": s.build()}, "cpu").flags
    assert [f.setting for f in flags] == ["dtype"] and "numerics" in flags[0].reason
    # measured only when named: --engine all leaves it out, but not the f32 engine
    names = [a.name for a in all_adapters("cpu")]
    assert "llamacpp" in names and "llamacpp_q8_0" not in names
    assert parse_engine_args(["llamacpp_q8_0:parallel=2"]) == {"llamacpp_q8_0": {"parallel": "2"}}


def test_parity_strict_args():
    args, could_not = LlamaCppAdapter(hardware="cpu").parity_args(ParityTarget(model_dir=Path("."), prefix_caching=False))
    assert args == {"parallel": "32", "batch_size": "2048", "cache_prompt": "false"}
    assert "no paged KV cache" in could_not[0]


# ---------------------------------------------------------------------------------------------
# availability
# ---------------------------------------------------------------------------------------------
def test_not_installed_names_the_one_setup_command(engines_dir, model, tmp_path):
    for adapter in (LlamaCppAdapter(hardware="cpu"), LlamaCppQ8Adapter(hardware="cpu")):
        probe = adapter.probe()
        assert not probe.available and probe.cause == "not_installed"
        assert "`bench engines setup llamacpp`" in probe.reason and probe.reason.startswith(adapter.name)
    with pytest.raises(EngineError, match="bench engines setup llamacpp"):
        with LlamaCppAdapter(hardware="cpu").launch(cfg(model, tmp_path)):
            pass
    gpu = LlamaCppAdapter(hardware="nvidia").probe()
    assert not gpu.available and gpu.cause == "hardware"
    fake_install(engines_dir)
    probe = LlamaCppAdapter(hardware="cpu").probe()
    assert probe.available and probe.version == "b6790" and "f32" in probe.reason
    llamacpp_build.server_binary().unlink()
    assert "--force" in LlamaCppAdapter(hardware="cpu").probe().reason
    assert "llamacpp" in registry.setup_cpu() and registry.setup_shared() == {"llamacpp_q8_0": "llamacpp"}


def test_setup_cli_maps_the_q8_0_variant_to_the_one_build(monkeypatch):
    from typer.testing import CliRunner

    from harness.app.cli import engines as cli

    seen = []
    monkeypatch.setattr(cli, "setup_engine", lambda name, **kw: seen.append((name, kw["recipe"].name)))
    result = CliRunner().invoke(cli.app, ["setup", "llamacpp_q8_0"])
    assert result.exit_code == 0, result.output
    assert seen == [("llamacpp", "llamacpp")] and "builds llama-server from source" in result.output


# ---------------------------------------------------------------------------------------------
# the build, with a fake runner
# ---------------------------------------------------------------------------------------------
def _sdist(dest: Path) -> None:
    """A stand-in sdist: the folder layout of llama-cpp-python's, with the files the build reads."""
    dest.mkdir(parents=True, exist_ok=True)
    top = f"llama_cpp_python-{llamacpp_build.SDIST_VERSION}/vendor/llama.cpp"
    with tarfile.open(dest / f"llama_cpp_python-{llamacpp_build.SDIST_VERSION}.tar.gz", "w:gz") as tar:
        for name, text in ((f"{top}/CMakeLists.txt", b"project(llama.cpp)\n"), (f"{top}/convert_hf_to_gguf.py", b"")):
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))


class FakeRunner:
    """Plays pip download, cmake configure and a ninja build; ``fail_build`` makes the build fail."""

    def __init__(self, fail_build: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail_build = fail_build

    def __call__(self, cmd, cwd, env, on_line) -> int:
        self.calls.append(cmd)
        if "download" in cmd:
            _sdist(Path(cmd[cmd.index("-d") + 1]))
            on_line("Saved ./llama_cpp_python-0.3.36.tar.gz\n")
            return 0
        if "--build" in cmd:
            for i in (1, 2, 212):
                on_line(f"[{i}/212] Building CXX object tools/server/CMakeFiles/llama-server.dir/server.cpp.o\n")
            if self.fail_build:
                on_line("server.cpp:12:1: error: boom\n")
                return 1
            binary = Path(cmd[cmd.index("--build") + 1]) / "bin" / "llama-server"
            binary.parent.mkdir(parents=True)
            binary.write_text("#!/bin/sh\necho 'version: 0.5.0-dev (build 1, commit 0c1e570)' >&2\n")
            binary.chmod(0o755)
            return 0
        on_line("-- Configuring done\n")
        return 0


@pytest.fixture
def tools(monkeypatch):
    """cmake, ninja and a compiler 'installed', whatever the machine has."""
    monkeypatch.setattr(llamacpp_build.shutil, "which", lambda name: f"/usr/bin/{name}")


def test_build_steps_with_progress_and_log(engines_dir, tools):
    from rich.console import Console

    out = io.StringIO()
    runner = FakeRunner()
    version = llamacpp_build.build_server(console=Console(file=out, width=120, force_terminal=True), runner=runner,
                                          pip_python="py")
    base = engines_dir / "llamacpp"
    # the sdist's tree has no git: its own version and the vendored commit
    assert version == "0.5.0-dev" and json.loads((base / "built.json").read_text())["commit"] == "0c1e570"
    download, configure, build = runner.calls
    assert download == ["py", "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "llama-cpp-python==0.3.36",
                        "-d", str(base / "sdist")]
    assert configure[:2] == ["cmake", "-S"] and configure[2] == str(llamacpp_build.source_dir())
    assert {"-G", "Ninja", "-DLLAMA_CURL=OFF", "-DGGML_NATIVE=ON", "-DCMAKE_BUILD_TYPE=Release"} <= set(configure)
    assert build == ["cmake", "--build", str(base / "build"), "--target", "llama-server", "-j", "2"]
    log = (base / "build.log").read_text()
    assert "build step 4/4: build llama-server (-j2)" in log and "[212/212] Building" in log
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # the terminal's text without its escapes
    assert "extract the llama.cpp source" in log and "build step 4/4: build llama-server (-j2): done" in shown
    assert "212/212" in shown  # the progress bar followed ninja's steps
    assert llamacpp_build.parse_progress("[17/212] Building CXX object x.o") == (17, 212)
    assert llamacpp_build.parse_progress("[ 45%] Building CXX object x.o") == (45, 100)
    assert llamacpp_build.parse_progress("-- Configuring done") is None
    # built once: a second setup runs nothing; --force builds again (the sdist is kept)
    again = FakeRunner()
    assert llamacpp_build.build_server(runner=again) == "0.5.0-dev" and again.calls == []
    assert llamacpp_build.build_server(runner=again, force=True) == "0.5.0-dev"
    assert [c[:2] for c in again.calls] == [["cmake", "-S"], ["cmake", "--build"]]


def test_server_version_of_a_git_build_and_of_the_sdist(tmp_path):
    for printed, want in (("version: 6790 (0b1bad14f)", ("b6790", "0b1bad14f")),
                          ("version: 0.5.0-dev (build 1, commit 0c1e570)", ("0.5.0-dev", "0c1e570")),
                          ("no version here", (None, None))):
        binary = tmp_path / "llama-server"
        binary.write_text(f"#!/bin/sh\necho '{printed}' >&2\n")
        binary.chmod(0o755)
        assert llamacpp_build.server_version(binary) == want
    assert llamacpp_build.server_version(tmp_path / "missing") == (None, None)


def test_failed_build_reports_the_log_tail(engines_dir, tools):
    with pytest.raises(EngineError, match=r"build step 4/4: build llama-server \(-j2\) failed \(exit 1\); "
                                          r"full log: .*build.log") as ei:
        llamacpp_build.build_server(runner=FakeRunner(fail_build=True))
    assert "error: boom" in ei.value.log_tail
    assert llamacpp_build.built_info() is None  # nothing counts as built


def test_missing_tools_are_named(engines_dir, monkeypatch):
    monkeypatch.setattr(llamacpp_build.shutil, "which", lambda name: None)
    with pytest.raises(EngineError, match="needs cmake and a C.. compiler"):
        llamacpp_build.build_server(runner=FakeRunner())


def test_setup_engine_builds_after_the_venv_and_marks_it_installed(engines_dir, monkeypatch):
    monkeypatch.setattr(envs, "_run_step", lambda cmd, *a: None)  # the venv steps (uv) pretend to succeed
    (engines_dir / "llamacpp" / "venv" / "bin").mkdir(parents=True)
    (engines_dir / "llamacpp" / "venv" / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.setattr(llamacpp_build, "build_server", lambda **kw: "b6790")
    envs.setup_engine("llamacpp", recipe=registry.cpu_recipes()["llamacpp"])
    info = envs.installed_info("llamacpp")
    assert info["version"] == "b6790" and info["dist"] == "llama-server"
    packages = registry.cpu_recipes()["llamacpp"].steps[0].packages
    assert "torch==2.13.0" in packages and "sentencepiece" in packages


# ---------------------------------------------------------------------------------------------
# the GGUF conversion
# ---------------------------------------------------------------------------------------------
FAKE_CONVERTER = """
import sys, pathlib
args = sys.argv[1:]
if "fail" in pathlib.Path(args[0], "config.json").read_text():
    print("converter: boom", flush=True); sys.exit(3)
out = pathlib.Path(args[args.index("--outfile") + 1])
out.write_text("GGUF " + args[args.index("--outtype") + 1])
print("wrote", out, flush=True)
"""


def test_gguf_conversion_is_cached_by_content(engines_dir, model, tmp_path):
    conv = llamacpp_build.converter()
    conv.parent.mkdir(parents=True)
    conv.write_text(FAKE_CONVERTER)
    log = tmp_path / "logs" / "llamacpp.log"
    path, seconds = llamacpp_gguf.ensure_gguf(Path(sys.executable), model, "f32", log, env={})
    assert path.read_text() == "GGUF f32" and seconds > 0 and path == llamacpp_gguf.gguf_path(model, "f32")
    assert llamacpp_gguf.ensure_gguf(Path(sys.executable), model, "f32", log, env={}) == (path, 0.0)
    assert "convert_hf_to_gguf.py" in log.read_text() and "wrote" in log.read_text()
    q8, _ = llamacpp_gguf.ensure_gguf(Path(sys.executable), model, "q8_0", log, env={})
    assert q8 != path and q8.read_text() == "GGUF q8_0"
    (model / "model.safetensors").write_bytes(b"other weights")  # new content: a new file name
    assert llamacpp_gguf.gguf_path(model, "f32") != path
    (model / "config.json").write_text('{"fail": 1}')
    with pytest.raises(EngineError, match="converting the model to GGUF failed") as ei:
        llamacpp_gguf.ensure_gguf(Path(sys.executable), model, "f32", log, env={})
    assert "converter: boom" in ei.value.log_tail
    assert not list(path.parent.glob(".*.tmp"))  # no half-written file left
    with pytest.raises(ValueError, match="choose from"):
        llamacpp_gguf.gguf_path(model, "q3")


# ---------------------------------------------------------------------------------------------
# the effective configuration and metrics, from recorded samples (tests/fixtures/effective/SOURCE.md)
# ---------------------------------------------------------------------------------------------
def _recorded(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_effective_settings_from_props_slots_and_log():
    log = _recorded("llamacpp.log")
    argv = log.splitlines()[0][2:].split()  # the log's first line is our command
    s = _Settings("cpu")
    read_settings(json.loads(_recorded("llamacpp_props.json")), json.loads(_recorded("llamacpp_slots.json")), log, s, argv)
    got = s.build()
    assert registry.declared("llamacpp", "effective_reader") is registry.declared("llamacpp_q8_0", "effective_reader")
    assert got.max_num_seqs == 11 and got.sources["max_num_seqs"] == "GET /props total_slots"
    assert got.max_model_len == 2048 and got.sources["max_model_len"] == "GET /props default_generation_settings.n_ctx"
    assert got.kv_capacity_tokens == 11 * 2048 and got.sources["kv_capacity_tokens"].startswith("GET /slots")
    assert got.kv_capacity_bytes is None  # only its verbose log states bytes: not reported, never guessed
    assert got.dtype == "float32" and got.sources["dtype"] == "GET /props model_ftype='all F32'"
    assert got.threads == 1 and got.sources["threads"] == "log: threadpool init, n_threads = 1"
    assert got.speculative == "off" and got.prefix_caching is True
    assert got.max_num_batched_tokens == 2048 == got.chunked_prefill_tokens and got.chunked_prefill is True
    assert got.sources["max_num_batched_tokens"].startswith(FLAG_SOURCE)
    assert got.block_size is None and "no blocks" in got.sources["block_size"]
    assert "KV cache K f32, V f32 (our flags)" in got.notes
    assert "KV cache split among the slots (kv_unified = false)" in got.notes
    empty = _Settings("cpu")
    read_settings(None, None, "", empty)
    assert empty.build().max_num_seqs is None and len(empty.notes) == 2


def test_effective_settings_from_the_verbose_log():
    s = _Settings("cpu")
    read_settings(None, None, _recorded("llamacpp_verbose.log"), s, ["--no-cache-prompt"])
    got = s.build()
    assert got.kv_capacity_tokens == 11 * 2048 and got.kv_capacity_bytes == 990 << 20  # 2,048 cells × 11 streams
    assert got.dtype == "float32" and got.sources["dtype"] == "log: file type   = all F32"
    assert got.max_num_batched_tokens == 2048 and got.sources["max_num_batched_tokens"].startswith("log: ")
    assert got.max_num_seqs == 11 and got.max_model_len == 2048 and got.prefix_caching is False
    assert "KV cache K f32, V f32 (log)" in got.notes


def test_metrics_map_to_the_common_keys():
    parsed = parse_prometheus(_recorded("llamacpp_metrics.txt"))
    got = common_metrics("llamacpp", parsed)
    # 36 prompt tokens reused of 38 processed + 36 reused
    assert got["prefix_cache_hit_rate"] == pytest.approx(36 / 74)
    assert got["num_preemptions"] is None and got["kv_cache_usage"] is None and got["spec_acceptance_rate"] is None
    assert common_metrics("llamacpp_q8_0", parsed) == got


# ---------------------------------------------------------------------------------------------
# the real engine (after `bench engines setup llamacpp`)
# ---------------------------------------------------------------------------------------------
async def _stream(base_url: str, model_name: str) -> tuple[str, dict | None, int]:
    import aiohttp

    body = {"model": model_name, "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 8, "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
            "ignore_eos": True}
    text, usage, chunks = "", None, 0
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url + "/v1/chat/completions", json=body) as resp:
            assert resp.status == 200, await resp.text()
            async for raw in resp.content:
                line = raw.decode().strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                obj = json.loads(line[5:])
                usage = obj.get("usage") or usage
                for choice in obj.get("choices", []):
                    if (choice.get("delta") or {}).get("content"):
                        text += choice["delta"]["content"]
                        chunks += 1
    return text, usage, chunks


@pytest.mark.slow
@pytest.mark.heavy_engine
def test_real_llama_server_streams_a_greedy_completion(tmp_path):
    from adapters.telemetry.effective import read_effective
    from adapters.runtime.process import group_members, port_is_free
    from harness.app.core.model import resolve_model

    adapter = LlamaCppAdapter()
    probe = adapter.probe()
    if not probe.available:
        pytest.skip(probe.reason)
    config = LaunchConfig(model_dir=resolve_model(None), run_dir=tmp_path, threads=1, startup_timeout_s=600,
                          engine_args={"parallel": "2"})
    with adapter.launch(config) as ep:
        first = asyncio.run(_stream(ep.base_url, ep.model_name))
        second = asyncio.run(_stream(ep.base_url, ep.model_name))
        settings = read_effective("llamacpp", ep, "cpu")
        port, pgid = ep.effective_config["port"], ep.pgid
        metrics = parse_prometheus(__import__("urllib.request").request.urlopen(ep.metrics_url, timeout=10).read().decode())
    text, usage, chunks = first
    assert "Paris" in text and chunks >= 2 and usage["completion_tokens"] == 8
    assert second[0] == text  # greedy: the same reply again
    assert settings.max_num_seqs == 2 and settings.dtype == "float32" and settings.threads == 1
    assert settings.max_model_len == 8192 and settings.kv_capacity_tokens == 2 * 8192  # capped at the model's length
    assert ep.effective_config["slot_context"] == 8192 and "--ctx-size" in ep.effective_config["argv"]
    assert metrics.get("llamacpp:tokens_predicted_total", 0) >= 16
    assert port_is_free(port) and group_members(pgid) == []  # nothing left behind
    assert (tmp_path / "logs" / "llamacpp.log").stat().st_size > 0
    assert os.path.getsize(llamacpp_gguf.gguf_path(config.model_dir, "f32")) > 100 << 20
