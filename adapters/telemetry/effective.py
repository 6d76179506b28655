"""What each engine itself reports it runs with → one typed :class:`EffectiveSettings`.

Read once per engine per run, after health and before the measured phase
(:func:`read_effective`), for the parity audit (``harness.scoring.checks.parity``). Each field keeps its
source; what an engine does not report stays None (never a guessed value), and a value taken
from our own command line is marked :data:`results.schema.FLAG_SOURCE`. Each engine's adapter
class names its reader (``effective_reader``: one of the ``read_*`` below, or its own). The first
source that gives a field wins, in this order per engine:

- ``vllm``: its startup log (``Initializing a V1 LLM engine ... with config: ...``,
  ``CPU KV cache size: 23,296 tokens``, ``Explicitly set (1.0/23.54) GiB for KV cache``,
  ``non-default args: {...}``, ``core ids=[1]``), then ``/metrics`` ``vllm:cache_config_info``
  (an info gauge whose labels are vLLM's ``CacheConfig``), then our flags;
- ``sglang``: ``GET /server_info`` (``/get_server_info`` on older versions: its resolved
  ``server_args`` plus ``max_total_num_tokens`` and the scheduler's
  ``effective_max_running_requests_per_dp``), then its log (``KV Cache is allocated. dtype: ...,
  #tokens: ...``, ``max_total_num_tokens=..., chunked_prefill_size=...``, ``server_args={...}``);
  its radix cache is prefix caching unless ``disable_radix_cache``;
- ``own``: the reference engine's ``GET /v1/server_info`` (``own_engine.server.app.server_info``);
- the shims (``transformers``, ``onnxruntime``, ``deepspeed``): the shim's ``GET /v1/server_info``
  (static batches: no shared KV budget, no prefix caching, no chunked prefill);
- ``transformers_serve``: it reports none of these, so our flags (``--cb-num-blocks`` ×
  ``--cb-block-size``, ``--dtype``, ``OMP_NUM_THREADS``), marked as such;
- ``llamacpp`` (and ``llamacpp_q8_0``): ``GET /props``, ``GET /slots`` and its start-up log
  (:func:`adapters.engines.llamacpp.read_settings`);
- ``openvino``: its shim's ``GET /v1/server_info`` (the ``SchedulerConfig`` the
  ``ContinuousBatchingPipeline`` was built with: KV tokens and bytes, block size, prefix caching,
  dynamic split-fuse and its per-step budget, max_num_seqs; the compile properties: dtype, threads);
- ``openai``: ``GET /v1/models`` (``max_model_len``), the rest unknown;
- any other engine: our flags only.
"""

from __future__ import annotations

import ast
import json
import re
import urllib.request
from pathlib import Path
from typing import Any, Callable

from adapters import registry
from adapters.base import Endpoint
from adapters.telemetry.prom import labelled_samples
from results.schema import EFFECTIVE_FIELDS, FLAG_SOURCE, EffectiveSettings

GIB = 1 << 30
LOG_TAIL_BYTES = 4 << 20  # the start of a log holds the settings; never read more than 4 MiB


class _Settings:
    """Fields as they are found: the first value (or the first "has none" source) wins."""

    def __init__(self, hardware: str | None) -> None:
        self.values: dict[str, Any] = {}
        self.sources: dict[str, str] = {}
        self.notes: list[str] = []
        self.hardware = hardware

    def set(self, name: str, value: Any, source: str) -> None:
        assert name in EFFECTIVE_FIELDS, name
        if value is None or name in self.values:
            return
        self.values[name] = value
        self.sources.setdefault(name, source)

    def has_none(self, name: str, source: str) -> None:
        """The engine says it has no such thing (a shim's KV budget): None, with the source."""
        if name not in self.values:
            self.sources.setdefault(name, source)

    def build(self) -> EffectiveSettings:
        return EffectiveSettings(**self.values, hardware=self.hardware, sources=dict(self.sources),
                                 notes=list(self.notes))


def _int(value: Any) -> int | None:
    try:
        return int(str(value).replace(",", ""))
    except (TypeError, ValueError):
        return None


def _bool(value: Any) -> bool | None:
    low = str(value).strip().lower()
    return True if low == "true" else False if low == "false" else None


def _dtype(value: Any) -> str | None:
    """``torch.float32`` / ``fp32`` / ``float32`` → ``float32``; ``auto`` and None → None."""
    if value is None:
        return None
    text = str(value).removeprefix("torch.").strip().lower()
    return {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "half": "float16", "float": "float32",
            "": None, "auto": None, "none": None}.get(text, text)


def _count_cpus(spec: str) -> int | None:
    """``"1"`` → 1, ``"0,2"`` → 2, ``"0-3"`` → 4 (a CPU list as engines log it)."""
    n = 0
    for part in spec.replace(" ", "").split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return None
        n += int(hi) - int(lo) + 1 if hi else 1
    return n or None


def _fetch(url: str, timeout_s: float, api_key: str | None = None) -> str | None:
    """The body of ``GET url`` (None on any error: a reader never fails a run)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout_s) as resp:
            return resp.read().decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return None


def _fetch_json(url: str, timeout_s: float, api_key: str | None = None) -> dict[str, Any] | None:
    text = _fetch(url, timeout_s, api_key)
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _log_text(path: Path | None) -> str:
    if path is None or not Path(path).is_file():
        return ""
    with open(path, "rb") as fh:
        return fh.read(LOG_TAIL_BYTES).decode("utf-8", errors="replace")


def argv_options(argv: list[str]) -> dict[str, str]:
    """``[..., "--max-num-seqs", "32", "--enforce-eager", "--no-x"]`` → ``{"max_num_seqs": "32",
    "enforce_eager": "true", "x": "false"}`` (render_flags' convention read back)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("--"):
            key = tok[2:].replace("-", "_")
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[key] = argv[i + 1]
                i += 1
            elif key.startswith("no_"):
                out[key[3:]] = "false"
            else:
                out[key] = "true"
        i += 1
    return out


# --------------------------------------------------------------------------------------------
# vLLM
_VLLM_KV_TOKENS = re.compile(r"\b(?:CPU|GPU|XPU|TPU|HPU)[\w +]* KV cache size: ([\d,]+) tokens")
_VLLM_KV_GIB = re.compile(r"(?:Explicitly|Auto) set \(([\d.]+)/[\d.]+\) GiB for KV cache|Available KV cache memory: ([\d.]+) GiB")
_VLLM_CONFIG = re.compile(r"Initializing a V1 LLM engine \(v[^)]*\) with config: (.*)$", re.M)
_VLLM_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$", re.M)


def parse_vllm_log(text: str, s: _Settings) -> None:
    """vLLM's startup lines (see the module docstring) into ``s``."""
    if m := _VLLM_KV_TOKENS.search(text):
        s.set("kv_capacity_tokens", _int(m[1]), f"log: {m[0]}")
    if m := _VLLM_KV_GIB.search(text):
        s.set("kv_capacity_bytes", round(float(m[1] or m[2]) * GIB), f"log: {m[0]}")
    if m := _VLLM_CONFIG.search(text):
        cfg = m[1]

        def key(pattern: str) -> re.Match[str] | None:
            return re.search(r"(?:^|[\s,])" + pattern, cfg)

        for name, pattern in (("prefix_caching", r"(enable_prefix_caching)=(True|False)"),
                              ("chunked_prefill", r"((?:enable_chunked_prefill|chunked_prefill_enabled))=(True|False)")):
            if k := key(pattern):
                s.set(name, k[2] == "True", f"log: engine config {k[1]}={k[2]}")
        if k := key(r"dtype=(torch\.\w+)"):
            s.set("dtype", _dtype(k[1]), f"log: engine config dtype={k[1]}")
        if k := key(r"max_seq_len=(\d+)"):
            s.set("max_model_len", int(k[1]), f"log: engine config max_seq_len={k[1]}")
        if k := key(r"enforce_eager=True"):
            s.set("cuda_graphs", False, "log: engine config enforce_eager=True")
        elif k := re.search(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)", cfg):
            s.set("cuda_graphs", k[1] != "NONE", f"log: engine config cudagraph_mode={k[1]}")
        if k := key(r"speculative_config=(None|\w+\([^)]*\))"):
            s.set("speculative", "off" if k[1] == "None" else k[1][:120], f"log: engine config speculative_config={k[1][:60]}")
    if m := _VLLM_NON_DEFAULT.search(text):
        try:
            args = ast.literal_eval(m[1])
        except (ValueError, SyntaxError):
            args = {}
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "max_model_len"):
            if name in args:
                s.set(name, _int(args[name]), f"log: non-default args {name}={args[name]}")
    if m := re.search(r"local_rank=0, core ids=(\[[\d, ]*\])", text):
        s.set("threads", len(ast.literal_eval(m[1])) or None, f"log: OpenMP thread binding core ids={m[1]}")
    if m := re.search(r"Using max model len (\d+)", text):
        s.set("max_model_len", int(m[1]), f"log: {m[0]}")


def parse_vllm_cache_info(metrics_text: str, s: _Settings) -> None:
    """``vllm:cache_config_info``'s labels (vLLM's CacheConfig as strings) into ``s``."""
    samples = labelled_samples(metrics_text, "vllm:cache_config_info")
    if not samples:
        return
    lab = samples[0]
    src = "/metrics vllm:cache_config_info"
    block = _int(lab.get("block_size"))
    s.set("kv_capacity_tokens", _int(lab.get("kv_cache_size_tokens")), f"{src} kv_cache_size_tokens")
    blocks = _int(lab.get("num_gpu_blocks"))
    if blocks and block:
        s.set("kv_capacity_tokens", blocks * block, f"{src} num_gpu_blocks × block_size")
    s.set("kv_capacity_bytes", _int(lab.get("kv_cache_memory_bytes")), f"{src} kv_cache_memory_bytes")
    s.set("block_size", block, f"{src} block_size")
    s.set("prefix_caching", _bool(lab.get("enable_prefix_caching")), f"{src} enable_prefix_caching")


def read_vllm(ep: Endpoint, s: _Settings, timeout_s: float) -> None:
    parse_vllm_log(_log_text(ep.log_path), s)
    if ep.metrics_url and (text := _fetch(ep.metrics_url, timeout_s)):
        try:
            parse_vllm_cache_info(text, s)
        except ValueError as exc:
            s.notes.append(f"/metrics: {exc}")
    if s.values.get("chunked_prefill") and "max_num_batched_tokens" in s.values:
        # vLLM chunks a prefill into whatever of max_num_batched_tokens the step has left
        s.set("chunked_prefill_tokens", s.values["max_num_batched_tokens"], s.sources["max_num_batched_tokens"])
    flags = argv_options(ep.effective_config.get("argv") or [])
    env = ep.effective_config.get("env") or {}
    if (space := _int(env.get("VLLM_CPU_KVCACHE_SPACE"))) is not None:
        s.set("kv_capacity_bytes", space * GIB, f"{FLAG_SOURCE}: VLLM_CPU_KVCACHE_SPACE={space} (GiB)")
    _common_flags(flags, s, ("dtype", "max_num_seqs", "max_num_batched_tokens", "block_size", "max_model_len"))
    _threads_flag(ep, s)


# --------------------------------------------------------------------------------------------
# SGLang
_SGL_KV = re.compile(r"KV Cache is allocated\. dtype: ([\w.]+), #tokens: (\d+), K size: ([\d.]+) GB, V size: ([\d.]+) GB")
_SGL_LIMITS = re.compile(r"max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+|None), max_prefill_tokens=(\d+), "
                         r"max_running_requests=(\d+), context_len=(\d+)")


def from_sglang_args(args: dict[str, Any], s: _Settings, src: str) -> None:
    """SGLang's (resolved) server args - ``/server_info`` or the ``server_args={...}`` log line -
    into ``s``; ``src`` names where they came from."""
    states = args.get("internal_states") or [{}]
    state = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    s.set("kv_capacity_tokens", _int(args.get("max_total_num_tokens")), f"{src} max_total_num_tokens")
    s.set("max_num_seqs", _int(state.get("effective_max_running_requests_per_dp")),
          f"{src} internal_states.effective_max_running_requests_per_dp")
    s.set("max_num_seqs", _int(args.get("max_running_requests")), f"{src} max_running_requests")
    s.set("block_size", _int(args.get("page_size")), f"{src} page_size")
    if "disable_radix_cache" in args:
        s.set("prefix_caching", not args["disable_radix_cache"], f"{src} disable_radix_cache={args['disable_radix_cache']}")
    if "chunked_prefill_size" in args:
        chunk = _int(args["chunked_prefill_size"])
        on = chunk is not None and chunk > 0
        s.set("chunked_prefill", on, f"{src} chunked_prefill_size={args['chunked_prefill_size']}")
        s.set("chunked_prefill_tokens", chunk if on else None, f"{src} chunked_prefill_size")
    s.set("max_num_batched_tokens", _int(args.get("max_prefill_tokens")), f"{src} max_prefill_tokens")
    s.set("dtype", _dtype(args.get("dtype")), f"{src} dtype")
    s.set("max_model_len", _int(args.get("context_length")), f"{src} context_length")
    if "speculative_algorithm" in args:
        algo = args["speculative_algorithm"]
        s.set("speculative", "off" if algo in (None, "", "NONE") else str(algo), f"{src} speculative_algorithm={algo}")
    graphs = args.get("cuda_graph_config") or {}
    decode = graphs.get("decode") if isinstance(graphs, dict) else None
    if args.get("disable_cuda_graph") is True:
        s.set("cuda_graphs", False, f"{src} disable_cuda_graph=True")
    elif isinstance(decode, dict) and decode.get("backend") == "disabled":
        s.set("cuda_graphs", False, f"{src} cuda_graph_config.decode.backend=disabled")
    elif args.get("device") == "cpu":
        s.set("cuda_graphs", False, f"{src} device=cpu")
    elif args.get("disable_cuda_graph") is False and args.get("device") in ("cuda", None):
        s.set("cuda_graphs", True, f"{src} disable_cuda_graph=False")


def parse_sglang_log(text: str, s: _Settings) -> None:
    """SGLang's startup lines (see the module docstring) into ``s``."""
    if m := _SGL_KV.search(text):
        s.set("kv_capacity_tokens", int(m[2]), f"log: {m[0]}")
        s.set("kv_capacity_bytes", round((float(m[3]) + float(m[4])) * GIB), f"log: {m[0]}")  # SGLang's GB = 2**30
    if m := _SGL_LIMITS.search(text):
        src = f"log: {m[0]}"
        s.set("kv_capacity_tokens", int(m[1]), src)
        chunk = _int(m[2])
        s.set("chunked_prefill", chunk is not None and chunk > 0, src)
        s.set("chunked_prefill_tokens", chunk if chunk and chunk > 0 else None, src)
        s.set("max_num_batched_tokens", int(m[3]), src)
        s.set("max_num_seqs", int(m[4]), src)
        s.set("max_model_len", int(m[5]), src)
    if m := re.search(r"server_args=(\{.*\})\s*$", text, re.M):
        try:
            from_sglang_args(ast.literal_eval(m[1]), s, "log: server_args")
        except (ValueError, SyntaxError):
            s.notes.append("log: server_args={...} could not be read as a Python literal")
    if m := re.search(r"init_threads_binding: .*local_omp_cpuid=([\d,\- ]+)", text):
        s.set("threads", _count_cpus(m[1].strip()), f"log: init_threads_binding local_omp_cpuid={m[1].strip()}")
    if m := re.search(r"Cuda graph is disabled because [^\n]*", text):
        s.set("cuda_graphs", False, f"log: {m[0]}")


def read_sglang(ep: Endpoint, s: _Settings, timeout_s: float) -> None:
    for route in ("/server_info", "/get_server_info"):
        if (info := _fetch_json(ep.base_url + route, timeout_s)) is not None:
            from_sglang_args(info, s, f"GET {route}")
            break
    else:
        s.notes.append("GET /server_info and /get_server_info answered nothing usable")
    parse_sglang_log(_log_text(ep.log_path), s)
    _common_flags(argv_options(ep.effective_config.get("argv") or []), s, ("dtype",))
    _threads_flag(ep, s)


# --------------------------------------------------------------------------------------------
# engines that report a server_info JSON of our own format (own engine, shims)
def from_server_info(info: dict[str, Any], s: _Settings, src: str) -> None:
    """Our ``/v1/server_info`` (own engine: :func:`own_engine.server.app.server_info`; shims:
    ``adapters.shims.openai_shim``) into ``s``."""
    for name in EFFECTIVE_FIELDS:
        if name in ("threads", "dtype") or info.get(name) is None:
            continue
        s.set(name, info[name], src)
    if "max_batch_size" in info:  # a static batch: at most this many sequences at once
        s.set("max_num_seqs", _int(info["max_batch_size"]), f"{src} max_batch_size (static batch)")
    if "kv_cache" in info:
        s.has_none("kv_capacity_tokens", f"{src}: {info['kv_cache']}")
        s.has_none("kv_capacity_bytes", f"{src}: {info['kv_cache']}")
    s.set("dtype", _dtype(info.get("dtype")), src)
    s.set("threads", _int(info.get("threads")), src)


def read_own(ep: Endpoint, s: _Settings, timeout_s: float) -> None:
    if (info := _fetch_json(ep.base_url + "/v1/server_info", timeout_s)) is not None:
        from_server_info(info, s, "own engine /v1/server_info")
        if info.get("attention_backend") or info.get("linear_kernels"):  # which code paths ran (e.g. no gcc: torch)
            s.notes.append(f"own engine kernels: attention {info.get('attention_backend') or 'not reported'}, "
                           f"linears {info.get('linear_kernels') or 'not reported'}")
    else:
        s.notes.append("GET /v1/server_info answered nothing usable")
    _threads_flag(ep, s)


def read_shim(ep: Endpoint, s: _Settings, timeout_s: float) -> None:
    if (info := _fetch_json(ep.base_url + "/v1/server_info", timeout_s)) is not None:
        from_server_info(info, s, "shim /v1/server_info")
    else:
        s.notes.append("GET /v1/server_info answered nothing usable")
    _common_flags(argv_options(ep.effective_config.get("argv") or []), s, ("dtype",))
    _threads_flag(ep, s)


def read_transformers_serve(ep: Endpoint, s: _Settings, timeout_s: float) -> None:
    flags = argv_options(ep.effective_config.get("argv") or [])
    block, blocks = _int(flags.get("cb_block_size")), _int(flags.get("cb_num_blocks"))
    if block and blocks:
        s.set("kv_capacity_tokens", block * blocks,
              f"{FLAG_SOURCE}: --cb-num-blocks {blocks} × --cb-block-size {block}")
    s.set("block_size", block, f"{FLAG_SOURCE}: --cb-block-size")
    s.set("max_num_batched_tokens", _int(flags.get("cb_max_batch_tokens")), f"{FLAG_SOURCE}: --cb-max-batch-tokens")
    _common_flags(flags, s, ("dtype",))
    _threads_flag(ep, s)


def read_props_slots_log(ep: Endpoint, s: _Settings, timeout_s: float,
                         interpret: Callable[[dict[str, Any] | None, list[Any] | None, str, Any, list[str]], None]) -> None:
    """A llama-server's settings: ``GET /props`` (a dict or None), ``GET /slots`` (a list or None),
    its log text and its argv, read by ``interpret(props, slots, log_text, settings, argv)``."""
    text = _fetch(ep.base_url + "/slots", timeout_s)
    try:
        slots = json.loads(text) if text else None
    except ValueError:
        slots = None
    interpret(_fetch_json(ep.base_url + "/props", timeout_s), slots if isinstance(slots, list) else None,
              _log_text(ep.log_path), s, list(ep.effective_config.get("argv") or []))
    _threads_flag(ep, s)


def read_openai(ep: Endpoint, s: _Settings, timeout_s: float) -> None:
    data = _fetch_json(ep.base_url + "/v1/models", timeout_s, ep.api_key) or {}
    models = [m for m in data.get("data") or [] if isinstance(m, dict)]
    entry = next((m for m in models if m.get("id") == ep.model_name), models[0] if models else {})
    s.set("max_model_len", _int(entry.get("max_model_len")), "/v1/models max_model_len")
    s.notes.append("an external endpoint: only what /v1/models says is known")


def _flags_only(ep: Endpoint, s: _Settings, timeout_s: float) -> None:
    _common_flags(argv_options(ep.effective_config.get("argv") or []), s, ("dtype", "max_num_seqs"))
    _threads_flag(ep, s)


def _common_flags(flags: dict[str, str], s: _Settings, names: tuple[str, ...]) -> None:
    for name in names:
        if name in flags:
            value = _dtype(flags[name]) if name == "dtype" else _int(flags[name])
            s.set(name, value, f"{FLAG_SOURCE}: --{name.replace('_', '-')} {flags[name]}")


def _threads_flag(ep: Endpoint, s: _Settings) -> None:
    s.set("threads", _int(ep.effective_config.get("threads")), f"{FLAG_SOURCE}: --threads / OMP_NUM_THREADS")




def read_effective(engine: str, endpoint: Endpoint, hardware: str | None = None,
                   timeout_s: float = 5.0) -> EffectiveSettings:
    """The effective settings of ``engine`` serving at ``endpoint`` (``hardware``: the run's
    kind, "cpu" / "nvidia" / "amd"), by the ``effective_reader`` its adapter class declares (the
    command line's flags only for an engine without one or a name not registered); each HTTP read
    waits at most ``timeout_s`` s. Never raises: what could not be read is left None and said in ``notes``."""
    s = _Settings(hardware)
    try:
        (registry.declared(engine, "effective_reader") or _flags_only)(endpoint, s, timeout_s)
    except Exception as exc:  # informational: a reader never fails a run
        s.notes.append(f"reading the settings failed: {type(exc).__name__}: {exc}")
    return s.build()


__all__ = ["argv_options", "from_server_info", "from_sglang_args", "parse_sglang_log", "parse_vllm_cache_info",
           "parse_vllm_log", "read_effective", "read_openai", "read_own", "read_props_slots_log", "read_sglang",
           "read_shim", "read_transformers_serve", "read_vllm"]
