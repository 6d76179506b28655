"""The engine-configuration parity audit (issue 13): readers of what each engine reports, the
audit's unfair flags, ``--parity strict``'s engine args, and where the audit shows up.

Readers run on real log lines (tests/fixtures/effective/, copied from a run on this machine)
and against scripted servers on a free port: a vLLM-style ``/metrics`` with
``vllm:cache_config_info`` (labels: vLLM's own CacheConfig.metrics_info()), an SGLang-style
``/server_info``, the own engine's real ``/v1/server_info`` over a tiny random model, and the
shim's ``/v1/server_info``. No engine is started.
"""

from __future__ import annotations

import ast
import asyncio
import json
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from typer.testing import CliRunner

from adapters.base import Endpoint
from adapters.telemetry.effective import _Settings, argv_options, parse_sglang_log, parse_vllm_log, read_effective
from adapters.parity import ParityTarget, strict_engine_args
from adapters.registry import get_adapter
from adapters.runtime.server import CPU_KV_CACHE_BYTES
from harness.scoring.checks.parity import audit, parity_notes
from results.schema import FLAG_SOURCE, EffectiveSettings, RunSummary, EngineResult, EngineStatus

FIX = Path(__file__).parents[1] / "fixtures" / "effective"


# --------------------------------------------------------------------------------------------
# scripted servers
@contextmanager
def scripted(routes: dict[str, tuple[int, str, str]]) -> Iterator[str]:
    """An HTTP server answering ``GET path`` with ``routes[path] = (status, content type, body)``
    (404 for anything else); yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            status, ctype, body = routes.get(self.path, (404, "text/plain", "not found"))
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join(10)


def vllm_metrics(**overrides: str) -> str:
    """``/metrics`` text with vLLM's cache_config_info gauge, exported the way vLLM does (a gauge
    set to 1 whose labels are CacheConfig.metrics_info() plus ``engine``)."""
    labels = {**json.loads((FIX / "vllm_cache_config_info.json").read_text()), **overrides, "engine": "0"}
    registry = CollectorRegistry()
    gauge = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", labelnames=list(labels),
                  registry=registry)
    gauge.labels(**labels).set(1)
    return generate_latest(registry).decode()


def sglang_server_info(**overrides) -> dict:
    """What SGLang 0.5.23's ``/server_info`` returns: its resolved server args (here the ones its
    log printed) + the scheduler's ``max_total_num_tokens`` + ``internal_states``."""
    line = next(ln for ln in (FIX / "sglang.log").read_text().splitlines() if "server_args=" in ln)
    args = ast.literal_eval(line.split("server_args=", 1)[1])
    return {**args, "max_total_num_tokens": 23301, "max_req_input_len": 8186, "status": "ready",
            "internal_states": [{"effective_max_running_requests_per_dp": 2048}], "version": "0.5.23", **overrides}


def endpoint(base: str, *, log: Path | None = None, metrics: bool = False, argv: list[str] | None = None,
             env: dict | None = None, threads: int = 1) -> Endpoint:
    return Endpoint(base_url=base, model_name="m", display_name="x", log_path=log,
                    metrics_url=base + "/metrics" if metrics else None,
                    effective_config={"argv": argv or [], "env": env or {}, "threads": threads})


# --------------------------------------------------------------------------------------------
# readers on the real log lines
def test_vllm_log_reader_on_real_lines() -> None:
    s = _Settings("cpu")
    parse_vllm_log((FIX / "vllm.log").read_text(), s)
    got = s.build()
    assert got.kv_capacity_tokens == 23296 and got.sources["kv_capacity_tokens"] == "log: CPU KV cache size: 23,296 tokens"
    assert got.kv_capacity_bytes == 1 << 30  # "Explicitly set (1.0/23.54) GiB for KV cache"
    assert (got.prefix_caching, got.chunked_prefill, got.dtype, got.max_model_len) == (True, True, "float32", 8192)
    assert got.cuda_graphs is False and got.sources["cuda_graphs"] == "log: engine config enforce_eager=True"
    assert got.speculative == "off" and got.threads == 1  # core ids=[1]
    # vLLM's log does not state these (and the non-default args did not set them): unknown, not guessed
    assert got.max_num_seqs is None and got.max_num_batched_tokens is None and got.block_size is None


def test_sglang_log_reader_on_real_lines() -> None:
    s = _Settings("cpu")
    parse_sglang_log((FIX / "sglang.log").read_text(), s)
    got = s.build()
    assert got.kv_capacity_tokens == 23301 and got.sources["kv_capacity_tokens"].startswith(
        "log: KV Cache is allocated. dtype: torch.float32, #tokens: 23301")
    assert got.kv_capacity_bytes == 1 << 30  # K 0.50 GB + V 0.50 GB, SGLang's GB = 2**30
    assert (got.chunked_prefill, got.chunked_prefill_tokens, got.max_num_batched_tokens) == (True, 4096, 16384)
    assert (got.max_num_seqs, got.max_model_len, got.dtype, got.block_size) == (2048, 8192, "float32", 1)
    assert got.prefix_caching is True and "disable_radix_cache=False" in got.sources["prefix_caching"]
    assert got.cuda_graphs is False and got.speculative == "off" and got.threads == 1


def test_argv_options_reads_render_flags_back() -> None:
    argv = ["python", "-m", "x", "--max-num-seqs", "32", "--enforce-eager", "--no-prefix-caching", "--dtype", "float32"]
    assert argv_options(argv) == {"max_num_seqs": "32", "enforce_eager": "true", "prefix_caching": "false",
                                  "dtype": "float32"}


# --------------------------------------------------------------------------------------------
# readers against scripted servers
def test_vllm_reader_takes_metrics_cache_config_info_where_the_log_is_silent(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("")  # nothing in the log: everything from /metrics, then our flags
    text = vllm_metrics(num_gpu_blocks="1024", kv_cache_size_tokens="16384", enable_prefix_caching="False")
    with scripted({"/metrics": (200, "text/plain", text)}) as base:
        got = read_effective("vllm", endpoint(base, log=log, metrics=True, argv=["--dtype", "bfloat16"],
                                              env={"VLLM_CPU_KVCACHE_SPACE": "1"}), "cpu")
    assert got.kv_capacity_tokens == 16384 and got.sources["kv_capacity_tokens"] == (
        "/metrics vllm:cache_config_info kv_cache_size_tokens")
    assert got.block_size == 16 and got.prefix_caching is False
    assert got.sources["prefix_caching"] == "/metrics vllm:cache_config_info enable_prefix_caching"
    assert got.dtype == "bfloat16" and got.sources["dtype"].startswith(FLAG_SOURCE)
    assert got.kv_capacity_bytes == 1 << 30 and got.sources["kv_capacity_bytes"].startswith(FLAG_SOURCE)


def test_vllm_log_wins_over_metrics(tmp_path: Path) -> None:
    with scripted({"/metrics": (200, "text/plain", vllm_metrics(kv_cache_size_tokens="999"))}) as base:
        got = read_effective("vllm", endpoint(base, log=FIX / "vllm.log", metrics=True), "cpu")
    assert got.kv_capacity_tokens == 23296 and got.sources["kv_capacity_tokens"].startswith("log: ")
    assert got.block_size == 16  # only /metrics says it


def test_sglang_reader_uses_server_info_then_the_old_route(tmp_path: Path) -> None:
    info = sglang_server_info(disable_radix_cache=True, max_total_num_tokens=16384)
    with scripted({"/server_info": (200, "application/json", json.dumps(info))}) as base:
        got = read_effective("sglang", endpoint(base), "cpu")
    assert got.prefix_caching is False and got.sources["prefix_caching"] == "GET /server_info disable_radix_cache=True"
    assert got.kv_capacity_tokens == 16384 and got.max_num_seqs == 2048
    assert got.sources["max_num_seqs"] == "GET /server_info internal_states.effective_max_running_requests_per_dp"
    assert (got.block_size, got.chunked_prefill_tokens, got.max_num_batched_tokens, got.dtype) == (1, 4096, 16384, "float32")
    with scripted({"/get_server_info": (200, "application/json", json.dumps(sglang_server_info()))}) as base:
        old = read_effective("sglang", endpoint(base), "cpu")
    assert old.kv_capacity_tokens == 23301 and old.sources["kv_capacity_tokens"].startswith("GET /get_server_info")
    with scripted({}) as base:  # nothing answers: the log is read, the failure said
        logged = read_effective("sglang", endpoint(base, log=FIX / "sglang.log"), "cpu")
    assert logged.kv_capacity_tokens == 23301 and any("server_info" in n for n in logged.notes)


@pytest.fixture(scope="module")
def tiny_engine(tmp_path_factory):
    from own_engine.config import EngineConfig
    from own_engine.engine import LLMEngine
    from own_engine.random_model import write_random_llama

    folder = write_random_llama(tmp_path_factory.mktemp("tiny") / "model")
    return LLMEngine(EngineConfig(model_dir=folder, block_size=16, num_kv_blocks=64, max_num_seqs=8,
                                  max_num_batched_tokens=128, max_model_len=256, threads=1, device="cpu"))


def test_own_engine_server_info_route_reports_its_config(tiny_engine) -> None:
    import uvicorn

    from own_engine.server.app import create_app

    app = create_app(tiny_engine, served_model_name="tiny")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    base = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    try:
        got = read_effective("own", endpoint(base), "cpu")
    finally:
        server.should_exit = True
        thread.join(20)
    # 64 blocks x 16 tokens; K and V of 2 layers, [64, 16, 2 kv heads, 32] float32 each
    assert got.kv_capacity_tokens == 1024 and got.kv_capacity_bytes == 2 * 2 * 64 * 16 * 2 * 32 * 4
    assert (got.block_size, got.prefix_caching, got.chunked_prefill, got.chunked_prefill_tokens) == (16, True, True, 128)
    assert (got.max_num_seqs, got.max_num_batched_tokens, got.dtype, got.threads) == (8, 128, "float32", 1)
    assert (got.cuda_graphs, got.speculative, got.max_model_len) == (False, "off", 256)
    assert set(got.sources.values()) == {"own engine /v1/server_info"}
    # which code paths served it is carried as a note (a machine without gcc runs the PyTorch path)
    assert [n for n in got.notes if n.startswith("own engine kernels")] == [
        f"own engine kernels: attention {tiny_engine.attention_backend}, linears {tiny_engine.runner.model.linear_kernels}"]


def test_shim_server_info_says_no_kv_budget_and_no_prefix_cache() -> None:
    import uvicorn

    from adapters.runtime.process import find_free_port
    from adapters.shims.openai_shim import BatchWorker, create_app

    from tests.adapters.shims.test_openai_shim import ScriptedBackend

    async def main() -> EffectiveSettings:
        worker = BatchWorker(ScriptedBackend(), max_batch_size=8, batch_window_ms=10)
        app = create_app(ScriptedBackend(), worker, "scripted", max_model_len=2048,
                         settings={"threads": 1, "dtype": "fp32", "device": "cpu"})
        port = find_free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        try:
            return await asyncio.to_thread(read_effective, "onnxruntime", endpoint(f"http://127.0.0.1:{port}"), "cpu")
        finally:
            server.should_exit = True
            await task

    got = asyncio.run(main())
    assert (got.prefix_caching, got.chunked_prefill, got.max_num_seqs, got.dtype) == (False, False, 8, "float32")
    assert got.sources["max_num_seqs"] == "shim /v1/server_info max_batch_size (static batch)"
    assert got.kv_capacity_tokens is None and "no shared KV budget" in got.sources["kv_capacity_tokens"]
    assert got.max_model_len == 2048


def test_transformers_serve_and_openai_report_what_they_can() -> None:
    argv = ["transformers", "serve", "--continuous-batching", "--dtype", "float32", "--cb-block-size", "16",
            "--cb-num-blocks", "1456", "--host", "127.0.0.1"]
    got = read_effective("transformers_serve", endpoint("http://127.0.0.1:9", argv=argv), "cpu")
    assert got.kv_capacity_tokens == 23296 and got.sources["kv_capacity_tokens"].startswith(FLAG_SOURCE)
    assert got.prefix_caching is None and got.max_num_seqs is None  # transformers serve reports neither
    models = {"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 4096}]}
    with scripted({"/v1/models": (200, "application/json", json.dumps(models))}) as base:
        ext = read_effective("openai", endpoint(base), None)
    assert ext.max_model_len == 4096 and ext.sources == {"max_model_len": "/v1/models max_model_len"}
    assert ext.kv_capacity_tokens is None and ext.prefix_caching is None


# --------------------------------------------------------------------------------------------
# the audit
def S(**kw) -> EffectiveSettings:
    return EffectiveSettings(**kw, sources={k: "scripted" for k in kw})


def flagged(engines: dict[str, EffectiveSettings], hardware: str = "cpu") -> set[str]:
    return {f.setting for f in audit(engines, hardware).flags}


BASE = dict(kv_capacity_tokens=23296, prefix_caching=True, dtype="float32", max_num_seqs=32, cuda_graphs=False,
            speculative="off")


def test_identical_settings_raise_no_flag() -> None:
    assert flagged({"a": S(**BASE), "b": S(**BASE)}) == set()


def test_prefix_caching_differs_is_flagged() -> None:
    result = audit({"vllm": S(**BASE), "sglang": S(**{**BASE, "prefix_caching": False})}, "cpu")
    assert [f.setting for f in result.flags] == ["prefix_caching"]
    assert "on: vllm; off: sglang" in result.flags[0].reason
    row = next(r for r in result.rows if r.setting == "prefix_caching")
    assert row.values == {"vllm": "on", "sglang": "off"} and row.unfair and row.differs


def test_kv_capacity_within_20_percent_is_fair_beyond_is_flagged() -> None:
    assert flagged({"vllm": S(**BASE), "sglang": S(**{**BASE, "kv_capacity_tokens": 23301})}) == set()
    result = audit({"vllm": S(**BASE), "own": S(**{**BASE, "kv_capacity_tokens": 16384})}, "cpu")
    assert [f.setting for f in result.flags] == ["kv_capacity_tokens"]
    assert "42%" in result.flags[0].reason and "vllm 23,296, own 16,384 tokens" in result.flags[0].reason
    kv_row = next(r for r in result.rows if r.setting == "kv_capacity_tokens")
    assert kv_row.values == {"vllm": "23,296", "own": "16,384"}
    # exactly 20 % more is still within the tolerance
    assert flagged({"a": S(**{**BASE, "kv_capacity_tokens": 1000}), "b": S(**{**BASE, "kv_capacity_tokens": 1200})}) == set()


def test_kv_bytes_that_round_to_the_same_gib_show_their_difference() -> None:
    # the reference engine's whole blocks of a 1 GiB budget (23,296 tokens x 46,080 bytes) vs vLLM's 1 GiB
    result = audit({"own": S(**BASE, kv_capacity_bytes=23296 * 46080), "vllm": S(**BASE, kv_capacity_bytes=1 << 30)},
                   "cpu")
    row = next(r for r in result.rows if r.setting == "kv_capacity_bytes")
    assert row.differs and not row.unfair
    assert row.values == {"own": "1,073,479,680 (1.00 GiB)", "vllm": "1,073,741,824 (1.00 GiB)"}


def test_dtype_differs_is_flagged() -> None:
    result = audit({"own": S(**BASE), "vllm": S(**{**BASE, "dtype": "bfloat16"})}, "cpu")
    assert [f.setting for f in result.flags] == ["dtype"]
    assert "float32: own; bfloat16: vllm" in result.flags[0].reason


def test_unknown_values_never_flag_and_read_not_reported() -> None:
    result = audit({"vllm": S(**BASE), "transformers_serve": S(kv_capacity_tokens=8000)}, "nvidia")
    assert [f.setting for f in result.flags] == ["kv_capacity_tokens"]  # the one value both reported
    assert set(result.not_reported["transformers_serve"]) >= {"prefix_caching", "dtype", "max_num_seqs", "cuda_graphs"}
    row = next(r for r in result.rows if r.setting == "prefix_caching")
    assert row.values == {"vllm": "on", "transformers_serve": None} and not row.unfair and not row.differs
    from harness.app.cli.parity import parity_lines

    summary = RunSummary(run_id="r", parity=result)
    assert any("prefix caching" in ln and "not reported" in ln for ln in parity_lines(summary))


def test_eager_next_to_cuda_graphs_is_flagged_on_a_gpu_only() -> None:
    engines = {"vllm": S(**{**BASE, "cuda_graphs": True}), "sglang": S(**BASE)}
    gpu = audit(engines, "nvidia")
    assert [f.setting for f in gpu.flags] == ["cuda_graphs"]
    assert "CUDA graphs: vllm; eager: sglang" in gpu.flags[0].reason
    assert flagged(engines, "cpu") == set()
    assert any("CUDA graphs are not compared on a CPU" in n for n in audit(engines, "cpu").notes)


def test_max_num_seqs_more_than_twice_apart_is_flagged_with_why() -> None:
    assert flagged({"a": S(**BASE), "b": S(**{**BASE, "max_num_seqs": 64})}) == set()
    result = audit({"own": S(**BASE), "sglang": S(**{**BASE, "max_num_seqs": 2048})}, "cpu")
    assert [f.setting for f in result.flags] == ["max_num_seqs"]
    assert "tail latency" in result.flags[0].reason and "saturation" in result.flags[0].reason


def test_speculative_on_for_one_engine_only_is_flagged() -> None:
    assert flagged({"own": S(**{**BASE, "speculative": "ngram, 4 tokens"}), "vllm": S(**BASE)}) == {"speculative"}


def test_scripted_servers_with_different_settings_end_to_end(tmp_path: Path) -> None:
    """A vLLM-style and an SGLang-style server report different settings: the table shows them
    and exactly the unfair ones are flagged (prefix caching, KV capacity); the report and the
    recommendation's notes carry them."""
    vlog = tmp_path / "vllm.log"
    vlog.write_text((FIX / "vllm.log").read_text())  # 23,296 tokens, prefix caching on, float32
    info = sglang_server_info(disable_radix_cache=True, max_total_num_tokens=16384, max_running_requests=32,
                              internal_states=[{"effective_max_running_requests_per_dp": 32}])
    with scripted({"/metrics": (200, "text/plain", vllm_metrics())}) as vbase, \
            scripted({"/server_info": (200, "application/json", json.dumps(info))}) as sbase:
        engines = {"vllm": read_effective("vllm", endpoint(vbase, log=vlog, metrics=True), "cpu"),
                   "sglang": read_effective("sglang", endpoint(sbase), "cpu")}
    result = audit(engines, "cpu")
    assert [f.setting for f in result.flags] == ["kv_capacity_tokens", "prefix_caching"]
    rows = {r.setting: r for r in result.rows}
    assert rows["kv_capacity_tokens"].values == {"vllm": "23,296", "sglang": "16,384"}
    assert rows["prefix_caching"].values == {"vllm": "on", "sglang": "off"}
    assert rows["dtype"].values == {"vllm": "float32", "sglang": "float32"} and not rows["dtype"].differs
    assert rows["max_num_seqs"].values == {"vllm": None, "sglang": "32"} and not rows["max_num_seqs"].unfair
    assert rows["block_size"].differs and not rows["block_size"].unfair  # 16 vs 1: shown, not unfair

    # stored in a run: the report's section, the console lines and the recommendation's notes
    from tests.helpers import CPU_ONLY, make_records, ok_entry, write_run
    from harness.app.cli.parity import parity_lines
    from harness.app.run.reporting import write_run_reports
    from harness.scoring import recommend
    from adapters.telemetry.hardware import get_profile
    from results.store import load_run, write_model_atomic

    rv, rs = make_records("vllm", 12, ttft_ms=100.0, tpot_ms=20.0), make_records("sglang", 12, ttft_ms=90.0, tpot_ms=20.0)
    run = write_run(tmp_path, "r1", {"vllm": ok_entry(rv, CPU_ONLY), "sglang": ok_entry(rs, CPU_ONLY)}, rv + rs)
    summary = run.summary
    for name, settings in engines.items():
        summary.engines[name].effective = settings
    from harness.scoring.checks.parity import audit_summary

    summary.parity = audit_summary(summary, "cpu")
    write_model_atomic(run.run_dir / "summary.json", summary)
    run = load_run(run.run_dir)
    assert run.summary.engines["sglang"].effective.kv_capacity_tokens == 16384  # round-trips through summary.json
    lines = parity_lines(run.summary)
    assert any(ln.startswith("✗ KV capacity (tokens)") and "23,296" in ln and "16,384" in ln for ln in lines)
    assert sum(ln.startswith("unfair: ") for ln in lines) == 2
    rec = recommend([run], hardware=get_profile("detected"))
    unfair = [n for n in rec.notes if n.startswith("unfair comparison")]
    assert len(unfair) == 2 and "prefix caching differs" in unfair[1]
    assert "vllm" in {r.engine for r in rec.ranking} | set(rec.eliminated)  # a caveat, not an elimination
    assert "vllm" not in rec.eliminated and "sglang" not in rec.eliminated
    md_path, html_path = write_run_reports(run.run_dir, rec)
    md = md_path.read_text()
    assert "## Configuration parity" in md
    assert "| ✗ KV capacity (tokens) | 23,296 | 16,384 |" in md and "| ✗ prefix caching | on | off |" in md
    assert "| max_num_seqs | not reported | 32 |" in md
    assert "- vllm KV capacity (tokens): log: CPU KV cache size: 23,296 tokens" in md
    assert "Configuration parity" in html_path.read_text()
    assert parity_notes([run]) == unfair


# --------------------------------------------------------------------------------------------
# --parity strict
@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    # SmolLM2-135M's attention sizes (what cpu_kv_tokens reads)
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 30, "hidden_size": 576,
        "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152,
        "max_position_embeddings": 8192, "torch_dtype": "float32"}))
    return folder


def test_strict_gives_each_adapter_its_flags_and_lists_what_it_cannot(model_dir: Path) -> None:
    names = ["own", "vllm", "sglang", "transformers_serve", "transformers", "onnxruntime", "openai", "tensorrt_llm"]
    adapters = [get_adapter(n, "cpu") for n in names]
    args, record = strict_engine_args(adapters, {}, ParityTarget(model_dir=model_dir, hardware="cpu"))
    assert args["own"] == {"prefix_caching": "true", "chunked_prefill": "true", "max_num_seqs": "32",
                           "max_num_batched_tokens": "2048"}
    assert args["vllm"] == {"enable_prefix_caching": "true", "enable_chunked_prefill": "true", "max_num_seqs": "32",
                            "max_num_batched_tokens": "2048"}  # the CPU KV budget is already VLLM_CPU_KVCACHE_SPACE
    assert args["sglang"] == {"max_running_requests": "32", "chunked_prefill_size": "2048", "max_prefill_tokens": "2048"}
    assert args["transformers_serve"] == {"cb_max_batch_tokens": "2048"}
    assert args["transformers"] == args["onnxruntime"] == {"max_batch_size": "32"}
    assert args["openai"] == {} and args["tensorrt_llm"] == {}
    assert [line.split(":")[0] for line in record.could_not] == [
        "transformers_serve", "transformers", "onnxruntime", "openai", "tensorrt_llm"]
    assert "no prefix caching" in record.could_not[2] and "no flag" in record.could_not[0]
    assert record.applied["own"] == args["own"] and "openai" not in record.applied
    assert record.target["max_num_seqs"] == 32 and record.target["kv_cache_bytes"] == CPU_KV_CACHE_BYTES


def test_strict_on_a_gpu_also_sets_the_kv_budget(model_dir: Path) -> None:
    target = ParityTarget(model_dir=model_dir, hardware="nvidia")
    vllm = get_adapter("vllm", "nvidia").parity_args(target)[0]
    sglang = get_adapter("sglang", "nvidia").parity_args(target)[0]
    assert vllm["kv_cache_memory_bytes"] == str(CPU_KV_CACHE_BYTES)
    # 1 GiB / (2 x 30 layers x 3 kv heads x 64 x 4 bytes of float32) = 23,301 tokens
    assert sglang["max_total_tokens"] == str(CPU_KV_CACHE_BYTES // (2 * 30 * 3 * 64 * 4)) == "23301"


def test_user_engine_arg_wins_over_strict_and_the_audit_says_so(model_dir: Path, tmp_path: Path) -> None:
    from adapters.base import LaunchConfig

    adapters = [get_adapter("own", "cpu"), get_adapter("vllm", "cpu")]
    user = {"vllm": {"max-num-seqs": "64"}}
    args, record = strict_engine_args(adapters, user, ParityTarget(model_dir=model_dir, hardware="cpu"))
    assert args["vllm"]["max-num-seqs"] == "64" and "max_num_seqs" not in args["vllm"]
    assert record.user_kept == ["vllm: --engine-arg vllm:max_num_seqs=64 kept over strict's 32"]
    # the args reach the command lines (render_flags)
    own_cmd = adapters[0].build_command(LaunchConfig(model_dir=model_dir, run_dir=tmp_path, engine_args=args["own"]), 1)
    assert "--prefix-caching" in own_cmd.cmd and own_cmd.cmd[own_cmd.cmd.index("--max-num-seqs") + 1] == "32"
    vllm_cmd = adapters[1].build_command(LaunchConfig(model_dir=model_dir, run_dir=tmp_path, engine_args=args["vllm"]), 1)
    assert vllm_cmd.cmd[vllm_cmd.cmd.index("--max-num-seqs") + 1] == "64"
    assert vllm_cmd.cmd[vllm_cmd.cmd.index("--max-num-batched-tokens") + 1] == "2048"
    assert "--enable-prefix-caching" in vllm_cmd.cmd
    result = audit({"own": S(**BASE), "vllm": S(**BASE)}, "cpu", "strict", record)
    assert result.mode == "strict" and result.strict == record
    assert any("max_num_seqs=64 kept over strict's 32 (your --engine-arg wins)" in n for n in result.notes)
    assert any(n.startswith("--parity strict added: own: prefix_caching=true") for n in result.notes)


def test_parity_run_reads_once_attaches_and_audits(model_dir: Path) -> None:
    from harness.app.trial.parity_run import ParityRun
    from harness.app.settings.run import EngineSettings, RunSettings

    run = ParityRun(RunSettings(engine=EngineSettings(names=["own", "vllm"], parity="strict",
                                                  args={"own": {"max_num_seqs": "8"}})))
    run.plan([get_adapter("own", "cpu"), get_adapter("vllm", "cpu")], model_dir, "cpu")
    assert run.engine_args("own")["max_num_seqs"] == "8" and run.engine_args("vllm")["max_num_seqs"] == "32"
    info = {"kv_capacity_tokens": 23296, "prefix_caching": True, "max_num_seqs": 8, "dtype": "float32"}
    from adapters.telemetry.effective import read_effective  # what an engine's first session reads (core/trial.py)

    with scripted({"/v1/server_info": (200, "application/json", json.dumps(info))}) as base:
        run.keep("own", read_effective("own", endpoint(base), "cpu"))
    with scripted({}) as base:
        run.keep("own", read_effective("own", endpoint(base), "cpu"))  # a later repeat keeps the first reading
    assert run.settings["own"].kv_capacity_tokens == 23296
    summary = RunSummary(run_id="r", engines={"own": EngineResult(status=EngineStatus.OK),
                                              "vllm": EngineResult(status=EngineStatus.FAILED)})
    run.attach("own", summary.engines["own"])
    result = run.audit(summary)
    assert result is not None and result.engines == ["own"] and result.mode == "strict"  # failed engines are not audited
    assert any("own: --engine-arg own:max_num_seqs=8 kept over strict's 32" in n for n in result.notes)


def test_bad_parity_value_is_one_line_exit_2(tmp_path: Path) -> None:
    from harness.app.cli import app

    res = CliRunner().invoke(app, ["run", "--engine", "own", "--parity", "fair", "-o", str(tmp_path)])
    assert res.exit_code == 2, res.output
    out = res.output.strip()
    # the value and the choices are named; the one-line framing is the app's usage-error group's
    assert "fair" in out and "report" in out and "strict" in out and "Traceback" not in out
