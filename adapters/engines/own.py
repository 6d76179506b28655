"""The reference engine (``own_engine``) as a server: ``python -m own_engine ...``.

It runs with the harness's own interpreter (``sys.executable``), on CPU and NVIDIA. Engine
args become its flags (``own:max_num_seqs=64`` → ``--max-num-seqs 64``,
``own:prefix_caching=false`` → ``--no-prefix-caching``). Health at ``/health``, Prometheus
metrics at ``/metrics`` (``own:*`` names, see ``own_engine/server/metrics.py``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from typing import TYPE_CHECKING

from adapters.base import Knob, Capabilities, LaunchConfig, ProbeResult
from adapters.registry import register
from adapters.telemetry import effective, prom
from adapters.runtime.server import (
    CPU_KV_CACHE_BYTES,
    PROJECT_ROOT, LaunchPlan, ServerAdapter, project_pythonpath, python_for_harness, render_flags,
    split_engine_args, thread_env,
)

if TYPE_CHECKING:
    from adapters.parity import ParityTarget

# Flags the harness sets itself: an engine arg may not move the server off 127.0.0.1:<port>.
RESERVED = ("host", "port", "model")
_RESERVED_WHY = {"host": "own:host is set by the harness (127.0.0.1: the engine serves this machine's client only): drop it",
                 "port": "own:port is set by the harness (a free port it picks per start): drop it",
                 "model": "own:model is set by the harness: drop it and pass the model with --model"}


@register("own", order=10)
class OwnAdapter(ServerAdapter):
    """Adapter for the reference engine's OpenAI-compatible server."""

    name = "own"
    display_name = "own (reference engine)"
    reference = True  # the yardstick: measured and ranked, never recommended (harness.scoring.gates)
    counters = staticmethod(prom.own_counters)
    series_parser = "own"  # its /metrics read into the time series by read_series
    read_series = staticmethod(prom.series_reader(
        ("own:kv_cache_usage_perc",), "own:num_requests_running", "own:num_requests_waiting",
        ("own:num_preemptions_total",), "own:prefix_cache_hits_total", "own:prefix_cache_queries_total",
        ("own:spec_decode_num_accepted_tokens_total", "own:spec_decode_num_draft_tokens_total")))
    effective_reader = staticmethod(effective.read_own)
    capabilities = Capabilities(
        hardware=("cpu", "nvidia"),
        features=("paged_kv", "prefix_caching", "chunked_prefill", "continuous_batching", "speculative_decoding"),
        api="server",
        complexity=1,
    )
    stop_grace_s = 10.0
    search_space = {  # bench run --tune (adapters.base.Knob); precision only with --tune-lower-precision
        "cpu": (Knob("max_num_seqs", ("32", "8", "128"), "sequences batched at once: throughput against each token's time"),
                Knob("speculative", ("ngram",), "n-gram (prompt lookup) speculative decoding"),
                Knob("max_num_batched_tokens", ("2048", "256"), "tokens per step (the prefill chunk): TTFT against TPOT")),
        "gpu": (Knob("max_num_seqs", ("32", "128", "256"), "sequences batched at once"),
                Knob("max_num_batched_tokens", ("2048", "8192"), "tokens per step (the prefill chunk)"),
                Knob("speculative", ("ngram",), "n-gram (prompt lookup) speculative decoding"),
                Knob("cuda_graphs", ("false",), "CUDA graphs off (eager decode steps)"),
                Knob("block_size", ("32",), "KV cache block size (tokens)"),
                Knob("dtype", ("bfloat16",), "weights and KV cache in bf16 (the baseline is fp32)", precision=True,
                     lowered=("float16",))),
    }

    def probe(self) -> ProbeResult:
        """Available when ``own_engine/__main__.py`` (the server entry point) is present."""
        if importlib.util.find_spec("own_engine") is None or not (PROJECT_ROOT / "own_engine" / "__main__.py").is_file():
            return ProbeResult(False, "own: the reference engine's server (own_engine/__main__.py) is missing from this "
                                      "checkout: update the project (git pull)")
        return ProbeResult(True, "own: reference engine, runs with the harness's Python", version="0.1.0")

    def known_flags(self) -> tuple[frozenset[str], str]:
        """The server's flags, generated from ``EngineConfig``'s declarations (:mod:`own_engine.server.options`)."""
        from own_engine.server.options import declared_flags

        return declared_flags(), ""

    def refused_args(self, engine_args: dict[str, str]) -> str | None:
        """A key the harness sets itself (:data:`RESERVED`), or a value the server's generated
        options refuse (their types, choices and bounds: :func:`own_engine.server.cli.check_flags`)."""
        flags, _, _ = split_engine_args(engine_args)
        reserved = next((key for key in RESERVED if key in flags), None)
        if reserved is not None:
            return _RESERVED_WHY[reserved]
        if self.unknown_args(engine_args):
            return None  # a name the server does not have: unknown_args says so
        from own_engine.server.cli import check_flags

        why = check_flags(render_flags(flags))
        return None if why is None else f"own: {why.replace('Value error, ', '')} (see python -m own_engine --help)"

    def build_command(self, config: LaunchConfig, port: int) -> LaunchPlan:
        """``[python, -m, own_engine, --model DIR, --host 127.0.0.1, --port P, --served-model-name M,
        --threads N, <engine args as flags>]``. Raises ValueError for a reserved engine arg."""
        flags, env_extra, _ = split_engine_args(config.engine_args)
        why = self.refused_args(config.engine_args)
        if why is not None:
            raise ValueError(f"engine arg {why}")
        model_name = self.served_name(config)
        opts = {"served_model_name": model_name, "threads": str(config.threads),
                "kv_cache_bytes": str(CPU_KV_CACHE_BYTES), **flags}
        if "num_kv_blocks" in flags:  # an explicit block count wins over the byte budget
            del opts["kv_cache_bytes"]
        cmd = [python_for_harness(), "-m", "own_engine", "--model", str(Path(config.model_dir)),
               "--host", "127.0.0.1", "--port", str(port), *render_flags(opts)]
        env = {**thread_env(config.threads), "PYTHONPATH": project_pythonpath(), **env_extra}
        return LaunchPlan(cmd=cmd, env=env, model_name=model_name, display_name=self.display_name,
                          health_paths=("/health",), metrics_path="/metrics", cwd=PROJECT_ROOT)

    def parity_args(self, target: "ParityTarget") -> tuple[dict[str, str], list[str]]:
        """``--parity strict``: prefix caching, chunked prefill, ``max_num_seqs`` and the per-step
        budget (which is also its chunk size) as flags; the KV budget is already
        ``--kv-cache-bytes`` = :data:`CPU_KV_CACHE_BYTES` (on a GPU too). Nothing it cannot set."""
        return ({"prefix_caching": "true" if target.prefix_caching else "false", "chunked_prefill": "true",
                 "max_num_seqs": str(target.max_num_seqs),
                 "max_num_batched_tokens": str(target.max_num_batched_tokens)}, [])
