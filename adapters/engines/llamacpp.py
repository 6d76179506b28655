"""llama.cpp's ``llama-server``: built once by ``bench engines setup llamacpp`` (:mod:`adapters.engines.llamacpp_build`).

Two configurations of the same engine:

- ``llamacpp``: the model converted to GGUF at the precision of every other CPU engine (``f32``
  weights) with an ``f32`` KV cache (``--cache-type-k f32 --cache-type-v f32``; llama.cpp's default
  is f16);
- ``llamacpp_q8_0``: the same with ``q8_0`` weights (the KV cache stays f32): other numerics, so
  its effective dtype is ``q8_0`` and the parity audit flags it next to the f32 engines. It is
  measured only when named (``--engine all`` leaves it out).

The command line (engine args follow :mod:`adapters.runtime.server`'s conventions: ``key=value`` →
``--key value``, so ``llamacpp:batch_size=512`` → ``--batch-size 512``): ``llama-server --model
GGUF --host 127.0.0.1 --port P --alias NAME --threads N --threads-batch N --parallel S --ctx-size
C --batch-size 2048 --cache-type-k f32 --cache-type-v f32 --cache-ram 0 --metrics``. Slots and
context follow the harness's KV budget: ``--ctx-size`` is all slots' context together (llama.cpp
gives each slot C / S tokens of its own KV cache), so C = S × the per-slot context and C never
exceeds the 1 GiB f32 KV budget (:data:`adapters.runtime.server.CPU_KV_CACHE_BYTES`) every CPU engine
gets; by default S slots of 2,048 tokens (11 for the default model). ``llamacpp:parallel=S`` sets
the slots (the budget split among them in whole 256-token pieces, at most the model's
``max_position_embeddings`` each), ``llamacpp:ctx_size=C`` the total instead. ``--cache-ram 0``:
llama-server would otherwise keep up to 8 GiB of extra prompt cache in RAM, outside the KV budget
(``llamacpp:cache_ram=8192`` turns it back on); a slot still reuses its previous prompt's prefix.
``--batch-size 2048`` is llama.cpp's default, passed so the per-step budget is on record.

The effective configuration comes from the engine: ``GET /props`` (``total_slots``, a slot's
context, the weights' file type), ``GET /slots`` (each slot's ``n_ctx``, speculative decoding)
and its start-up log (slots, threads; with ``llamacpp:verbosity=4`` also libllama's KV-cache cells
and bytes and ``n_batch``), then our flags for what it does not report; Prometheus counters from
``/metrics`` (``llamacpp:*``).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from adapters.engines import llamacpp_build, llamacpp_gguf
from adapters.base import Knob, Capabilities, Endpoint, EngineError, LaunchConfig, ProbeResult
from adapters.runtime.envs import engine_python
from adapters.telemetry.hardware import detect_kind
from adapters.runtime.server import (
    LaunchPlan, ServerAdapter, cpu_kv_tokens, render_flags, split_engine_args, thread_env,
)
from adapters.registry import register
from adapters.runtime.recipes import EngineRecipe, InstallStep
from adapters.runtime.venv_engine import installed_version, probe_installed
from adapters.telemetry import effective, prom
from results.model_geometry import read_model_summary
from results.schema import FLAG_SOURCE

if TYPE_CHECKING:
    from adapters.parity import ParityTarget

ENGINE = llamacpp_build.ENGINE
RESERVED = ("host", "port", "model", "alias", "m", "a")
SLOT_ALIGN = 256  # per-slot context in whole 256-token pieces (llama.cpp pads its context the same way)
DEFAULT_SLOT_CTX = 2048  # default per-slot context: the budget's slots are budget // this
SETUP_HINT = f"run `bench engines setup {ENGINE}` (builds llama-server from source, ~10-25 min)"


def slot_layout(kv_tokens: int, slots: int | None = None, ctx_size: int | None = None,
                max_len: int | None = None) -> tuple[int, int, int]:
    """``(slots, per-slot context, total context)`` for a KV budget of ``kv_tokens`` tokens.

    Default: as many slots of :data:`DEFAULT_SLOT_CTX` tokens as the budget holds (at least 1);
    ``slots`` given: the budget split among them in whole :data:`SLOT_ALIGN` pieces (llama.cpp
    pads a slot's context up to them: a split that is not whole would exceed the budget);
    ``ctx_size`` given: that total split among the slots. A slot never gets more than ``max_len``
    (the model's ``max_position_embeddings``: llama-server caps a slot there and the rest of its
    KV cache would lie idle). Raises ValueError when a slot would get no context."""
    limit = (max_len // SLOT_ALIGN * SLOT_ALIGN or max_len) if max_len else None
    default_ctx = min(DEFAULT_SLOT_CTX, limit) if limit else DEFAULT_SLOT_CTX
    if ctx_size is not None:
        slots = slots or max(1, ctx_size // default_ctx)
        per_slot, total = ctx_size // slots, ctx_size
    else:
        slots = slots or max(1, kv_tokens // default_ctx)
        per_slot = (kv_tokens // slots) // SLOT_ALIGN * SLOT_ALIGN
        per_slot = min(per_slot, limit) if limit else per_slot
        total = slots * per_slot
    if slots < 1 or per_slot < 1:
        raise ValueError(f"llamacpp: {slots} slot(s) leave no context per slot (KV budget {kv_tokens:,} tokens, "
                         f"ctx_size {ctx_size}): use fewer slots (llamacpp:parallel=N)")
    return slots, (min(per_slot, max_len) if max_len else per_slot), total


def numerics(outtype: str, cache_type_k: str = "f32", cache_type_v: str = "f32") -> str:
    """``"reference"`` for f32 weights with an f32 KV cache (the precision every CPU engine runs),
    else what differs: ``"q8_0 weights"``, ``"f16 KV cache"`` (the run's fidelity check holds other
    numerics to a lower floor and reports them as such)."""
    other = [f"{outtype} weights"] if outtype != "f32" else []
    kv = sorted({str(cache_type_k), str(cache_type_v)} - {"f32"})
    if kv:
        other.append(f"{'/'.join(kv)} KV cache")
    return ", ".join(other) or "reference"


def _positive(flags: dict[str, str], key: str) -> int | None:
    if key not in flags:
        return None
    try:
        value = int(flags[key])
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"engine arg llamacpp:{key}={flags[key]!r} must be a whole number >= 1")
    return value


@register("llamacpp", order=80)
class LlamaCppAdapter(ServerAdapter):
    """llama.cpp's ``llama-server`` on the CPU, serving the model converted to GGUF (f32)."""

    name = ENGINE
    display_name = "llama.cpp llama-server (f32 GGUF)"
    recipe = EngineRecipe(
        name="llamacpp",
        version_dist="llama-server",  # its build number (llama-server --version), not a distribution
        approx="~1 GB, builds llama-server from source: ~10-25 min",
        steps=(
            # what the tree's convert_hf_to_gguf.py imports (gguf-py itself comes from the tree, on
            # PYTHONPATH); torch pinned: 2.13.0 is the local CPU build (unpinned pulls a CUDA build)
            InstallStep("install the GGUF converter's packages: torch==2.13.0 (CPU), transformers, numpy, sentencepiece",
                        ("torch==2.13.0", "transformers>=5.20,<6", "numpy", "sentencepiece", "pyyaml", "tqdm",
                         "safetensors", "protobuf")),
        ),
    )
    setup_rank, in_setup_cpu = 6, True  # not by `make bench`: building llama-server takes 10-25 min
    setup_note = "its llama-server build takes 10–25 minutes"
    counters = staticmethod(prom.llamacpp_counters)
    # llama-server (--metrics): slots busy and requests deferred; no preemption (a slot keeps its context)
    series_parser = "llamacpp"  # its /metrics read into the time series by read_series
    read_series = staticmethod(prom.series_reader(
        ("llamacpp:kv_cache_usage_ratio",), "llamacpp:requests_processing", "llamacpp:requests_deferred", (), None, None))

    @staticmethod
    def effective_reader(ep: Endpoint, s: Any, timeout_s: float) -> None:
        """Its settings from ``GET /props``, ``GET /slots``, its start-up log and our flags (:func:`read_settings`)."""
        effective.read_props_slots_log(ep, s, timeout_s, read_settings)

    @staticmethod
    def after_setup(recipe: EngineRecipe, *, console: Any = None, force: bool = False) -> str | None:
        """llama-server itself, built from the llama-cpp-python sdist's llama.cpp tree; its build number."""
        return llamacpp_build.build_server(console=console, force=force)
    capabilities = Capabilities(
        hardware=("cpu",),
        features=("prefix_caching", "chunked_prefill", "continuous_batching", "speculative_decoding",
                  "structured_output", "lora"),
        quantization=("q8_0", "q4_0", "q4_k", "q5_k", "q6_k"),
        api="server",
        complexity=3,  # a source build, then a model conversion
    )
    adapter_keys = ("outtype",)
    outtype = "f32"
    stop_grace_s = 10.0
    search_space = {  # bench run --tune (adapters.base.Knob); the GGUF type only with --tune-lower-precision
        "cpu": (Knob("parallel", ("8", "4", "16"), "slots (its max_num_seqs); each gets --ctx-size / slots tokens"),
                Knob("batch_size", ("512", "8192"), "tokens per step (logical batch)"),
                Knob("outtype", ("q8_0",), "q8_0 GGUF weights (the baseline is f32)", precision=True),
                Knob("cache_type_k", ("q8_0",), "a q8_0 K cache (the baseline is f32)", precision=True)),
    }

    def __init__(self, hardware: str | None = None) -> None:
        self._hardware = hardware

    def probe(self) -> ProbeResult:
        """Available on a CPU machine once ``bench engines setup llamacpp`` has built
        ``.engines/llamacpp`` (the converter's venv and ``build/bin/llama-server``)."""
        hw = self._hardware or detect_kind()
        if hw != "cpu":
            return ProbeResult(False, cause="hardware", reason=f"{self.name}: this adapter builds llama.cpp for the "
                               "CPU only (GGML_NATIVE, no CUDA/ROCm backend); on this machine the GPU engines run")
        missing = probe_installed(ENGINE)
        if missing is not None:
            return ProbeResult(False, f"{self.name}: not installed - {SETUP_HINT}", cause="not_installed")
        binary = llamacpp_build.server_binary()
        if not binary.is_file():
            return ProbeResult(False, f"{self.name}: {binary} is missing - rerun `bench engines setup {ENGINE} --force`",
                               cause="not_installed")
        if not llamacpp_build.converter().is_file():
            return ProbeResult(False, f"{self.name}: the GGUF converter {llamacpp_build.converter()} is missing - "
                                      f"rerun `bench engines setup {ENGINE} --force`", cause="not_installed")
        return ProbeResult(True, f"{self.name}: llama-server {installed_version(ENGINE) or ''} built from the "
                                 f"{llamacpp_build.SDIST}=={llamacpp_build.SDIST_VERSION} sdist, "
                                 f"{self.outtype} GGUF weights".replace("  ", " "),
                           version=installed_version(ENGINE))

    def _outtype(self, config: LaunchConfig) -> str:
        _, _, own = split_engine_args(config.engine_args, self.adapter_keys)
        outtype = own.get("outtype", self.outtype)
        if outtype not in llamacpp_gguf.OUTTYPES:
            raise ValueError(f"engine arg {self.name}:outtype={outtype!r}: choose from "
                             f"{', '.join(llamacpp_gguf.OUTTYPES)}")
        return outtype

    @contextmanager
    def launch(self, config: LaunchConfig) -> Iterator[Endpoint]:
        """Convert the model to GGUF when it is not cached (before the server's start-up is timed,
        in its own watched process group, output in the engine's log), then start
        ``llama-server`` like every server engine (:meth:`ServerAdapter.launch`)."""
        probe = config.probe or self.probe_for_launch(config)
        if not probe.available:
            raise EngineError(f"{self.name}: {probe.reason}")
        try:
            outtype = self._outtype(config)
        except ValueError as exc:
            raise EngineError(f"{self.name}: {exc}") from exc
        _, seconds = llamacpp_gguf.ensure_gguf(engine_python(ENGINE), Path(config.model_dir), outtype,
                                                self.log_path(config), env=thread_env(config.threads),
                                                cancel=config.cancel)
        with super().launch(replace(config, probe=probe)) as endpoint:
            endpoint.effective_config["gguf_conversion_s"] = round(seconds, 1)
            yield endpoint

    def build_command(self, config: LaunchConfig, port: int) -> LaunchPlan:
        """The ``llama-server`` command (module docstring). Raises ValueError for an engine arg the
        harness sets itself (host, port, model, alias) or a bad slot/context count."""
        flags, env_extra, _ = split_engine_args(config.engine_args, self.adapter_keys)
        for key in RESERVED:
            if key in flags:
                raise ValueError(f"engine arg {self.name}:{key} is set by the harness: remove it")
        outtype = self._outtype(config)
        slots, per_slot, total = slot_layout(cpu_kv_tokens(Path(config.model_dir)), _positive(flags, "parallel"),
                                             _positive(flags, "ctx_size"),
                                             read_model_summary(Path(config.model_dir)).max_position_embeddings)
        model_name = self.served_name(config)
        gguf = llamacpp_gguf.gguf_path(Path(config.model_dir), outtype)
        opts = {"alias": model_name, "threads": str(config.threads), "threads_batch": str(config.threads),
                "parallel": str(slots), "ctx_size": str(total), "batch_size": "2048", "cache_type_k": "f32",
                "cache_type_v": "f32", "cache_ram": "0", "metrics": "true", **flags}
        opts["parallel"], opts["ctx_size"] = str(slots), str(total)
        cmd = [str(llamacpp_build.server_binary()), "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port),
               *render_flags(opts)]
        env = {**thread_env(config.threads), **env_extra}
        display = self.display_name if outtype == self.outtype else \
            f"llama.cpp llama-server ({outtype} GGUF{'' if outtype == 'f32' else ', other numerics'})"
        return LaunchPlan(cmd=cmd, env=env, model_name=model_name, display_name=display,
                          health_paths=("/health",), metrics_path="/metrics",
                          extra_config={"hardware": "cpu", "gguf": str(gguf), "outtype": outtype, "slots": slots,
                                        "slot_context": per_slot, "max_model_len": per_slot,
                                        "numerics": numerics(outtype, opts["cache_type_k"], opts["cache_type_v"])})

    def help_argvs(self) -> tuple[tuple[str, ...], ...]:
        """``llama-server --help`` of the built server (none before it is built)."""
        binary = llamacpp_build.server_binary()
        return ((str(binary), "--help"),) if binary.is_file() else ()

    def parity_args(self, target: "ParityTarget") -> tuple[dict[str, str], list[str]]:
        """``--parity strict``: ``max_num_seqs`` as its slots (``--parallel``), the per-step budget
        as ``--batch-size`` (how many tokens of prompts and decodes one step takes); the KV budget
        is already its context. Prefix caching is its per-slot prompt cache, on by default
        (``--no-cache-prompt`` to turn it off)."""
        args = {"parallel": str(target.max_num_seqs), "batch_size": str(target.max_num_batched_tokens)}
        if not target.prefix_caching:
            args["cache_prompt"] = "false"
        return args, [f"{self.name}: no paged KV cache: each slot keeps its own context of --ctx-size / --parallel "
                      "tokens, so a request longer than that is refused instead of sharing the budget"]


@register("llamacpp_q8_0", order=90)
class LlamaCppQ8Adapter(LlamaCppAdapter):
    """The same engine serving ``q8_0`` weights: other numerics than the f32 engines (flagged)."""

    name = f"{ENGINE}_q8_0"
    display_name = "llama.cpp llama-server (q8_0 GGUF, other numerics)"
    # set up by llamacpp's setup (the same build, other weights); left out of --engine all: it serves
    # quantised weights (other numerics than every other engine), so it is measured only when named
    setup_by, in_all = ENGINE, False
    outtype = "q8_0"
    search_space = {"cpu": tuple(k for k in LlamaCppAdapter.search_space["cpu"] if k.key != "outtype")}  # q8_0 already


# ------------------------------------------------------------------------------------------
# the effective configuration (adapters.telemetry.effective's reader calls this with its settings object)
_FILE_TYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
_FTYPE = re.compile(r"(?:\(guessed\) )?(?:all )?([A-Za-z0-9_]+)")  # llama_ftype_name(): "all F32", "Q8_0"
# at the default verbosity (3)
_SLOTS = re.compile(r"initializing, n_slots = (\d+), n_ctx_slot = (\d+), kv_unified = '(true|false)'")
_THREADS = re.compile(r"threadpool init, n_threads = (\d+)|system_info: n_threads = (\d+)")
# at verbosity 4 (--engine-arg llamacpp:verbosity=4): libllama's own start-up lines
_KV = re.compile(r"llama_kv_cache: size =\s*([\d.]+) MiB \(\s*(\d+) cells,\s*\d+ layers,\s*(\d+)/(\d+) seqs\), "
                 r"K \((\w+)\):\s*[\d.]+ MiB, V \((\w+)\)")
_FILE_TYPE = re.compile(r"file type\s*=\s*(?:\(guessed\) )?(?:all )?([A-Za-z0-9_]+)")
_N_BATCH = re.compile(r"llama_context: n_batch\s*=\s*(\d+)")
_CHUNKS = "llama-server adds prompt tokens beside the decodes of a step up to n_batch: chunked prefill"


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_props(props: dict[str, Any] | None, slots: list[Any] | None, s: Any, unified: bool = False) -> None:
    """``GET /props`` (slots, a slot's context, the weights' file type) and ``GET /slots`` (each
    slot's context and speculation) into ``s`` (``adapters.telemetry.effective``'s settings: ``s.set(field,
    value, source)``, ``s.notes``). Each slot keeps its own KV cache unless ``unified``, so their
    contexts summed are the KV capacity in tokens."""
    props = props or {}
    s.set("max_num_seqs", _as_int(props.get("total_slots")), "GET /props total_slots")
    settings = props.get("default_generation_settings")
    if isinstance(settings, dict):
        s.set("max_model_len", _as_int(settings.get("n_ctx")), "GET /props default_generation_settings.n_ctx")
    ftype = props.get("model_ftype")
    if isinstance(ftype, str) and (m := _FTYPE.fullmatch(ftype.strip())):
        s.set("dtype", _FILE_TYPES.get(m[1].upper(), m[1].lower()), f"GET /props model_ftype={ftype!r}")
    slot_list = [x for x in (slots or []) if isinstance(x, dict)]
    if not slot_list:
        return
    s.set("max_num_seqs", len(slot_list), "GET /slots (one entry per slot)")
    n_ctx = [_as_int(x.get("n_ctx")) for x in slot_list]
    if all(n is not None for n in n_ctx):
        s.set("max_model_len", max(n_ctx), "GET /slots n_ctx")  # type: ignore[type-var]
        if not unified:
            s.set("kv_capacity_tokens", sum(n_ctx), f"GET /slots: the {len(n_ctx)} slots' n_ctx summed "  # type: ignore[arg-type]
                                                    "(each slot keeps its own KV cache)")
    spec = {bool(x.get("speculative")) for x in slot_list if "speculative" in x}
    if spec:
        s.set("speculative", "on" if True in spec else "off", f"GET /slots speculative={True in spec}")


def parse_log(text: str, s: Any) -> None:
    """llama-server's start-up lines into ``s``. At the default verbosity: slots, a slot's context,
    whether the slots share one KV pool (``kv_unified``) and threads; at verbosity 4 also libllama's
    KV cache (cells × streams = tokens, MiB, K/V types), the weights' file type and ``n_batch``."""
    if m := _SLOTS.search(text):
        s.set("max_num_seqs", int(m[1]), f"log: {m[0]}")
        s.set("max_model_len", int(m[2]), f"log: {m[0]}")
        s.notes.append(f"KV cache {'one pool shared by' if m[3] == 'true' else 'split among'} the slots "
                       f"(kv_unified = {m[3]})")
    if m := _THREADS.search(text):
        s.set("threads", int(m[1] or m[2]), f"log: {m[0]}")
    if m := _KV.search(text):
        src = f"log: {m[0]}"
        s.set("kv_capacity_tokens", int(m[2]) * int(m[4]), src)  # cells per stream × streams
        s.set("kv_capacity_bytes", round(float(m[1]) * (1 << 20)), src)
        s.notes.append(f"KV cache K {m[5]}, V {m[6]} (log)")
    if m := _FILE_TYPE.search(text):
        kind = m[1].upper()
        s.set("dtype", _FILE_TYPES.get(kind, kind.lower()), f"log: {m[0].strip()}")
    if m := _N_BATCH.search(text):
        for name in ("max_num_batched_tokens", "chunked_prefill_tokens"):
            s.set(name, int(m[1]), f"log: {m[0]} ({_CHUNKS})")
        s.set("chunked_prefill", True, f"log: {m[0]} ({_CHUNKS})")


def parse_flags(argv: list[str], s: Any) -> None:
    """What llama-server does not report at its default verbosity, from our command line (marked
    so): its per-step budget ``--batch-size``, prompt caching (on unless ``--no-cache-prompt``)
    and the KV cache types."""
    def value(flag: str) -> str | None:
        return argv[argv.index(flag) + 1] if flag in argv and argv.index(flag) + 1 < len(argv) else None

    if (batch := value("--batch-size")) is not None and batch.isdigit():
        for name in ("max_num_batched_tokens", "chunked_prefill_tokens"):
            s.set(name, int(batch), f"{FLAG_SOURCE}: --batch-size {batch} ({_CHUNKS})")
        s.set("chunked_prefill", True, f"{FLAG_SOURCE}: --batch-size {batch} ({_CHUNKS})")
    off = "--no-cache-prompt" in argv
    s.set("prefix_caching", not off, f"{FLAG_SOURCE}: " + ("--no-cache-prompt" if off else
                                                            "no --no-cache-prompt (llama-server's default: on)"))
    if not any(n.startswith("KV cache K ") for n in s.notes):
        s.notes.append(f"KV cache K {value('--cache-type-k') or 'f16'}, V {value('--cache-type-v') or 'f16'} (our flags)")


def read_settings(props: dict[str, Any] | None, slots: list[Any] | None, log_text: str, s: Any,
                  argv: list[str] | None = None) -> None:
    """Everything llama-server says about itself - ``GET /props``, ``GET /slots`` and its start-up
    log - then our command line (``argv``) for what it does not say, into ``s``."""
    found = _SLOTS.search(log_text)
    unified = found[3] == "true" if found else "--kv-unified" in (argv or [])
    parse_props(props, slots, s, unified=unified)
    parse_log(log_text, s)
    if argv is not None:
        parse_flags(argv, s)
    if hasattr(s, "has_none"):
        s.has_none("block_size", "llama.cpp: KV cache in per-token cells, no blocks")
    if props is None:
        s.notes.append("GET /props answered nothing usable")
    if slots is None:
        s.notes.append("GET /slots answered nothing usable (started with --no-slots?)")


__all__ = ["LlamaCppAdapter", "LlamaCppQ8Adapter", "numerics", "parse_flags", "parse_log", "parse_props",
           "read_settings", "slot_layout"]
