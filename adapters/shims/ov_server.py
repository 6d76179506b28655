"""OpenVINO GenAI as an OpenAI server: its ``ContinuousBatchingPipeline``, stepped by the shim.

``python -m adapters.shims.ov_server --model HF_DIR --ir-dir IR --port P [--threads N
--kv-cache-bytes B --max-num-seqs N --max-num-batched-tokens N --enable-prefix-caching
--dynamic-split-fuse ...]`` - runs in ``.engines/openvino/venv``; ``IR`` is the model exported
by :mod:`adapters.shims.ov_export` (the adapter exports it before the server starts).

The pipeline is OpenVINO GenAI's serving engine: paged KV cache, continuous batching with
dynamic split-fuse (prompts chunked into each step's token budget next to the decodes), prefix
caching. The shim owns one thread (:class:`StepWorker`) that alone touches the pipeline: it
adds each new request (``add_request`` with the prompt's token ids from the Hugging Face
tokenizer, the same ids as every other engine), runs ``step()`` - one scheduler iteration over
every running request - and after each step reads every request's new tokens from its
``GenerationHandle`` and hands them to the shared OpenAI front-end
(:mod:`adapters.shims.openai_shim`) at once, so TTFT is the step that produced the first token.
A row ended by a stop string or a client that left is stopped in the engine (its KV blocks
freed) before the next step.

Precision: the CPU plugin would run bf16 on a CPU with AVX512-BF16/AMX and keep the KV cache in
u8 by default; the shim asks for ``INFERENCE_PRECISION_HINT=f32`` and an f32 KV cache (the
precision of every other CPU engine) and reports what it set. Threads:
``INFERENCE_NUM_THREADS``. KV budget: ``SchedulerConfig.cache_size`` (whole GiB) or, for a budget
that is not, ``num_kv_blocks`` at the CPU block size. ``GET /v1/server_info`` reports the
effective configuration (read from the ``SchedulerConfig`` the pipeline was built with).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any, Callable

from adapters.shims.openai_shim import GenRequest, create_app, emit_token

logger = logging.getLogger("adapters.shims.ov_server")

GIB = 1 << 30
CPU_BLOCK_SIZE = 32  # OpenVINO GenAI's KV block size on the CPU plugin (tokens)
FLUSH_TIMEOUT_S = 0.05  # most a step waits for the event loop to send the last step's tokens
FLUSH_ITERATIONS = 3  # loop iterations a flush lets pass (a token's chunk is written in the 2nd)
LOW_PRECISION_TYPES = ("i8", "u8", "i4", "u4", "nf4", "f4e2m1", "f8e4m3", "f8e5m2")


def kv_bytes_per_token(hf_dir: str | Path, dtype_bytes: int = 4) -> int:
    """KV-cache bytes per token of the model (``2 x layers x kv heads x head dim x dtype``), from
    its ``config.json`` (the shim runs without the harness's packages)."""
    cfg = json.loads((Path(hf_dir) / "config.json").read_text())
    cfg = cfg.get("text_config", cfg)
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    return 2 * cfg["num_hidden_layers"] * cfg.get("num_key_value_heads", heads) * head_dim * dtype_bytes


def kv_layout(kv_bytes: int, bytes_per_token: int, block_size: int = CPU_BLOCK_SIZE) -> dict[str, int]:
    """How a KV budget of ``kv_bytes`` is passed to the ``SchedulerConfig``: ``cache_size`` in
    whole GiB when the budget is one, else ``num_kv_blocks`` (the blocks that fit). Returns the
    fields to set plus ``tokens`` and ``bytes`` it holds."""
    if kv_bytes < bytes_per_token * block_size:
        raise ValueError(f"a KV budget of {kv_bytes} bytes holds no {block_size}-token block "
                         f"({bytes_per_token} bytes a token)")
    tokens = kv_bytes // bytes_per_token // block_size * block_size
    if kv_bytes % GIB == 0:
        return {"cache_size": kv_bytes // GIB, "tokens": tokens, "bytes": tokens * bytes_per_token}
    return {"num_kv_blocks": tokens // block_size, "tokens": tokens, "bytes": tokens * bytes_per_token}


def engine_properties(threads: int, precision: str = "f32", kv_precision: str = "f32") -> dict[str, Any]:
    """The CPU plugin properties the pipeline compiles with (module docstring)."""
    return {"INFERENCE_NUM_THREADS": int(threads), "INFERENCE_PRECISION_HINT": precision,
            "KV_CACHE_PRECISION": kv_precision, "KEY_CACHE_PRECISION": kv_precision,
            "VALUE_CACHE_PRECISION": kv_precision}


def generation_config(genai: Any, row: GenRequest, eos_token_ids: set[int]) -> Any:
    """An ``openvino_genai.GenerationConfig`` for one request: ``max_new_tokens``, EOS (its ids
    as stop token ids, unless ``ignore_eos``), the request's stop token ids, greedy or sampled."""
    cfg = genai.GenerationConfig()
    cfg.max_new_tokens = int(row.max_tokens)
    cfg.ignore_eos = bool(row.ignore_eos)
    if eos_token_ids:
        cfg.eos_token_id = int(min(eos_token_ids))
    stops = set(int(t) for t in row.stop_token_ids)
    if not row.ignore_eos:
        stops |= set(int(t) for t in eos_token_ids)
    cfg.stop_token_ids = stops
    if row.temperature > 0:
        cfg.do_sample = True
        cfg.temperature = float(row.temperature)
        cfg.top_p = float(row.top_p)
        if row.seed is not None:
            cfg.rng_seed = int(row.seed)
    else:
        cfg.do_sample = False
    return cfg


def _name(value: Any) -> str:
    """An OpenVINO enum member's name (``GenerationStatus.FINISHED`` → ``"FINISHED"``)."""
    name = getattr(value, "name", None)
    return str(name if name is not None else value).rsplit(".", 1)[-1].upper()


class StepWorker:
    """The one thread that drives the pipeline (module docstring).

    ``pipe``: a ``ContinuousBatchingPipeline`` (or a stand-in with ``add_request(id, input,
    config)`` → handle, ``step()``); ``make_request(row)`` → ``(input, config)`` for
    ``add_request``; ``eos_token_ids``: the model's EOS ids (the per-row stop rules of
    :func:`adapters.shims.openai_shim.emit_token`). Handles answer ``can_read()``, ``read()``
    (a dict of ``GenerationOutput`` with the new ``generated_ids`` and ``finish_reason``),
    ``get_status()`` and ``stop()``.
    """

    def __init__(self, pipe: Any, make_request: Callable[[GenRequest], tuple[Any, Any]],
                 eos_token_ids: set[int]) -> None:
        self.pipe = pipe
        self.make_request = make_request
        self.eos = set(eos_token_ids)
        self.q: "queue.Queue[GenRequest | None]" = queue.Queue()
        self.active: dict[int, tuple[GenRequest, Any]] = {}
        self._next_id = 0
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="ov-step-worker", daemon=True)
        self.steps_run = 0
        self.requests_added = 0
        self.max_running = 0
        self.step_seconds = 0.0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop taking requests, end the running ones in the engine, wait for the thread."""
        self.q.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def submit(self, req: GenRequest) -> None:
        """Queue a request; the worker adds it to the pipeline before its next step."""
        self.q.put(req)

    # ------------------------------------------------------------------ the loop
    def _take(self, block: bool) -> bool:
        """Move queued requests into the pipeline; False once shut down."""
        while True:
            try:
                item = self.q.get(block=block and not self.active)
            except queue.Empty:
                return True
            block = False
            if item is None:
                self._stopping = True
                return False
            if item.cancelled:
                continue
            self._add(item)

    def _add(self, row: GenRequest) -> None:
        rid = self._next_id
        self._next_id += 1
        try:
            inp, cfg = self.make_request(row)
            handle = self.pipe.add_request(rid, inp, cfg)
        except Exception as exc:  # a request the engine refuses: that request's error, keep serving
            row.finish_reason = "error"
            row.push(("error", f"{type(exc).__name__}: {exc}"))
            return
        self.active[rid] = (row, handle)
        self.requests_added += 1

    def _run(self) -> None:
        while True:
            if not self._take(block=True):
                break
            self._drop_cancelled()
            if not self.active:
                continue
            self.max_running = max(self.max_running, len(self.active))
            started = time.perf_counter()
            try:
                self.pipe.step()
            except Exception as exc:  # report to every running row, keep serving
                self._fail_all(f"{type(exc).__name__}: {exc}")
                continue
            finally:
                self.step_seconds += time.perf_counter() - started
                self.steps_run += 1
            touched = set()
            for rid, (row, _) in list(self.active.items()):
                if self._collect(rid):
                    touched.add(row.loop)
            self._flush(touched)
        for rid in list(self.active):
            self._stop_handle(self.active.pop(rid)[1])

    def run_once(self) -> None:
        """One iteration without the thread (tests): take what is queued, step, collect."""
        self._take(block=False)
        self._drop_cancelled()
        if self.active:
            self.pipe.step()
            self.steps_run += 1
            for rid in list(self.active):
                self._collect(rid)

    def _flush(self, loops: set[Any]) -> None:
        """Let the event loops send what the last step produced before the next step starts.

        ``step()`` holds the GIL for the whole step (measured: a Python thread gets no time
        during a 28 ms decode step), so a token handed over with ``call_soon_threadsafe`` would
        otherwise wait for the end of the next step before its chunk is written, adding a step
        to every TTFT and ITL. Each loop gets a marker queued behind the tokens' callbacks that
        re-queues itself for :data:`FLUSH_ITERATIONS` loop iterations, so the stream tasks those
        callbacks wake (next iteration) have written their chunks before it fires; the worker
        waits for the markers (GIL released) for at most :data:`FLUSH_TIMEOUT_S`."""

        def marker(loop: Any, done: threading.Event, left: int) -> None:
            if left <= 0:
                done.set()
            else:
                loop.call_soon(marker, loop, done, left - 1)

        events = []
        for loop in loops:
            if loop is None or loop.is_closed() or not loop.is_running():
                continue
            done = threading.Event()
            try:
                loop.call_soon_threadsafe(marker, loop, done, FLUSH_ITERATIONS)
            except RuntimeError:  # the loop closed meanwhile
                continue
            events.append(done)
        for done in events:
            done.wait(FLUSH_TIMEOUT_S)

    # ------------------------------------------------------------------ per request
    def _collect(self, rid: int) -> bool:
        """Hand the request's new tokens to its stream; finish it when the engine did. True when
        anything went to the stream (tokens, its end or an error)."""
        row, handle = self.active[rid]
        pushed = False
        engine_reason = None
        while handle.can_read():
            outputs = handle.read()
            for out in (outputs.values() if isinstance(outputs, dict) else outputs):
                for token in out.generated_ids:
                    pushed = pushed or row.finish_reason is None
                    emit_token(row, int(token), self.eos)
                reason = _name(out.finish_reason)
                if reason != "NONE":
                    engine_reason = reason
        status = _name(handle.get_status())
        if row.finish_reason is not None or row.cancelled:  # our stop rules ended it (or the client left)
            if status == "RUNNING":
                self._stop_handle(handle)
            del self.active[rid]
            return pushed
        if status == "IGNORED":
            row.finish_reason = "error"
            row.push(("error", "the engine could not schedule the request: its prompt does not fit in the KV cache "
                               "(status IGNORED)"))
        elif engine_reason is not None or status != "RUNNING":
            self._finish(row, engine_reason or status)
        else:
            return pushed
        del self.active[rid]
        return True

    def _finish(self, row: GenRequest, reason: str) -> None:
        """The engine ended a row our stop rules did not: EOS/stop id not reported (STOP) → counted
        as one generated EOS, as the engine sampled it; else its length limit."""
        if reason == "STOP" and not row.ignore_eos and self.eos:
            row.generated.append(min(self.eos))
            row.finish_reason = "stop"
            row.push(("done", "stop"))
        else:
            row.finish_reason = "length"
            row.push(("done", "length"))

    def _drop_cancelled(self) -> None:
        for rid in [r for r, (row, _) in self.active.items() if row.cancelled]:
            self._stop_handle(self.active.pop(rid)[1])

    def _fail_all(self, message: str) -> None:
        for rid in list(self.active):
            row, handle = self.active.pop(rid)
            if row.finish_reason is None:
                row.finish_reason = "error"
                row.push(("error", message))
            self._stop_handle(handle)

    @staticmethod
    def _stop_handle(handle: Any) -> None:
        """End a request in the engine (its KV blocks are freed at the next step)."""
        for name in ("stop", "drop", "cancel"):
            fn = getattr(handle, name, None)
            if fn is not None:
                try:
                    fn()
                except Exception:  # already finished: nothing to end
                    pass
                return

    def stats(self) -> dict[str, Any]:
        return {"steps_run": self.steps_run, "requests_added": self.requests_added, "running": len(self.active),
                "max_running": self.max_running, "step_seconds": round(self.step_seconds, 3)}


class OVBackend:
    """The pipeline, its tokenizer and what it was built with.

    ``pipe``: the ``ContinuousBatchingPipeline``; ``genai``: the ``openvino_genai`` module (its
    ``GenerationConfig``); ``tensor``: token ids → the pipeline's input (an ``ov.Tensor`` of
    shape ``[1, n]``); ``tokenizer``: the Hugging Face tokenizer; ``config``: what
    ``/v1/server_info`` reports.
    """

    model_label = "openvino-genai ContinuousBatchingPipeline"

    def __init__(self, pipe: Any, genai: Any, tensor: Callable[[list[int]], Any], tokenizer: Any,
                 eos_token_ids: set[int], config: dict[str, Any]) -> None:
        self.pipe = pipe
        self.genai = genai
        self.tensor = tensor
        self.tokenizer = tokenizer
        self.eos_token_ids = set(eos_token_ids)
        self.config = config

    def make_request(self, row: GenRequest) -> tuple[Any, Any]:
        return self.tensor(row.prompt_ids), generation_config(self.genai, row, self.eos_token_ids)

    def metrics(self) -> dict[str, Any]:
        """The pipeline's own counters (``get_metrics()``), where it has them."""
        try:
            m = self.pipe.get_metrics()
        except Exception:
            return {}
        out = {}
        for key in ("requests", "scheduled_requests", "cache_usage", "max_cache_usage", "avg_cache_usage",
                    "inference_duration"):
            value = getattr(m, key, None)
            if isinstance(value, (int, float)):
                out[key] = value
        return out


def scheduler_config(genai: Any, kv: dict[str, int], max_num_seqs: int | None, max_num_batched_tokens: int | None,
                     enable_prefix_caching: bool, dynamic_split_fuse: bool) -> Any:
    """The ``SchedulerConfig``: the KV budget (:func:`kv_layout`), the batch limits where given
    (else the engine's defaults), prefix caching and dynamic split-fuse."""
    sc = genai.SchedulerConfig()
    if "cache_size" in kv:
        sc.cache_size = int(kv["cache_size"])
    else:
        sc.num_kv_blocks = int(kv["num_kv_blocks"])
    if max_num_seqs is not None:
        sc.max_num_seqs = int(max_num_seqs)
    if max_num_batched_tokens is not None:
        sc.max_num_batched_tokens = int(max_num_batched_tokens)
    sc.enable_prefix_caching = bool(enable_prefix_caching)
    sc.dynamic_split_fuse = bool(dynamic_split_fuse)
    return sc


def effective_info(sc: Any, kv: dict[str, int], props: dict[str, Any], max_model_len: int | None,
                   ir_facts: dict[str, Any], block_size: int = CPU_BLOCK_SIZE) -> dict[str, Any]:
    """``GET /v1/server_info``: the effective configuration in the parity audit's field names
    (``adapters.telemetry.effective`` reads them), from the ``SchedulerConfig`` the pipeline was built
    with and the properties it compiled with."""
    split_fuse = bool(getattr(sc, "dynamic_split_fuse", False))
    budget = int(getattr(sc, "max_num_batched_tokens", 0)) or None
    dtype = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}.get(str(props.get("INFERENCE_PRECISION_HINT")))
    kv_type = str(props.get("KV_CACHE_PRECISION", "default"))
    return {
        "engine": "openvino-genai ContinuousBatchingPipeline",
        "batching": "continuous (dynamic split-fuse)" if split_fuse else "continuous",
        "kv_capacity_tokens": kv["tokens"], "kv_capacity_bytes": kv["bytes"], "block_size": block_size,
        "kv_cache_precision": kv_type, "prefix_caching": bool(getattr(sc, "enable_prefix_caching", False)),
        "chunked_prefill": split_fuse, "chunked_prefill_tokens": budget if split_fuse else None,
        "max_num_seqs": int(getattr(sc, "max_num_seqs", 0)) or None, "max_num_batched_tokens": budget,
        "dtype": dtype, "threads": props.get("INFERENCE_NUM_THREADS"), "device": "cpu", "speculative": "off",
        "cuda_graphs": None, "max_model_len": max_model_len, "numerics": "reference" if dtype == "float32" else dtype,
        "weights": ir_facts.get("weight_types"), "openvino_genai": ir_facts.get("openvino_genai"),
        "scheduler_config": {k: kv.get(k) for k in ("cache_size", "num_kv_blocks") if k in kv},
    }


def load_pipeline(ir_dir: Path, sc: Any, props: dict[str, Any]) -> Any:
    """The ``ContinuousBatchingPipeline`` of ``ir_dir`` on the CPU with ``props``."""
    import openvino_genai as genai

    return genai.ContinuousBatchingPipeline(str(ir_dir), sc, "CPU", props)


def read_ir_facts(ir_dir: Path) -> dict[str, Any]:
    """What the export recorded (``bench_export.json``: weight element types, versions)."""
    try:
        return json.loads((Path(ir_dir) / "bench_export.json").read_text())
    except (OSError, ValueError):
        return {}


def main(argv: list[str] | None = None) -> None:
    """Parse flags, build the pipeline (before health turns 200), serve."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="Hugging Face model folder (tokenizer, chat template)")
    parser.add_argument("--ir-dir", required=True, help="the OpenVINO IR export of --model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--threads", type=int, default=1, help="INFERENCE_NUM_THREADS")
    parser.add_argument("--kv-cache-bytes", type=int, default=GIB, help="KV-cache budget (bytes)")
    parser.add_argument("--max-num-seqs", type=int, default=None, help="default: the engine's")
    parser.add_argument("--max-num-batched-tokens", type=int, default=None, help="tokens per step; default: the engine's")
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--dynamic-split-fuse", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--precision", default="f32", choices=["f32", "bf16", "f16"], help="INFERENCE_PRECISION_HINT")
    parser.add_argument("--kv-cache-precision", default="f32", choices=["f32", "f16", "bf16", "u8"])
    parser.add_argument("--max-model-len", type=int, default=None, help="default: the model's, capped by the KV budget")
    args = parser.parse_args(argv)

    import numpy as np
    import openvino as ov
    import openvino_genai as genai
    import uvicorn
    from transformers import AutoTokenizer

    ir_dir = Path(args.ir_dir)
    ir_facts = read_ir_facts(ir_dir)
    kv_bytes = {"f32": 4, "f16": 2, "bf16": 2, "u8": 1}[args.kv_cache_precision]
    kv = kv_layout(args.kv_cache_bytes, kv_bytes_per_token(args.model, kv_bytes))
    sc = scheduler_config(genai, kv, args.max_num_seqs, args.max_num_batched_tokens, args.enable_prefix_caching,
                          args.dynamic_split_fuse)
    props = engine_properties(args.threads, args.precision, args.kv_cache_precision)
    started = time.perf_counter()
    pipe = load_pipeline(ir_dir, sc, props)
    print(f"openvino: ContinuousBatchingPipeline loaded in {time.perf_counter() - started:.1f} s from {ir_dir} "
          f"(openvino-genai {genai.get_version()}, properties {props}, "
          f"KV {kv})", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    cfg = json.loads((Path(args.model) / "config.json").read_text())
    eos = cfg.get("eos_token_id")
    eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        eos_ids.add(int(tokenizer.eos_token_id))
    ctx = int(cfg.get("max_position_embeddings") or kv["tokens"])
    max_model_len = args.max_model_len or min(ctx, kv["tokens"])
    info = effective_info(sc, kv, props, max_model_len, ir_facts)

    backend = OVBackend(pipe, genai, lambda ids: ov.Tensor(np.asarray([ids], dtype=np.int64)), tokenizer, eos_ids, info)
    worker = StepWorker(pipe, backend.make_request, eos_ids)
    worker.start()
    name = args.served_model_name or args.model.rstrip("/").split("/")[-1]
    app = create_app(backend, worker, name, max_model_len=max_model_len, info=lambda: dict(info),
                     stats=lambda: {**worker.stats(), **backend.metrics()})
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    worker.stop()


if __name__ == "__main__":
    main()
