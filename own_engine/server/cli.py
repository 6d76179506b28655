"""``python -m own_engine --model DIR [...]``: serve the reference engine over the OpenAI API.

Binds 127.0.0.1:8000 by default (``--port 0`` picks a free port). Logs one line
``own_engine ready: http://HOST:PORT model=NAME ...`` on stderr once the socket accepts
requests, and exits with status 0 on SIGTERM or SIGINT (after uvicorn's graceful shutdown,
which stops the engine thread). Bad flags print one ``error: ...`` line and exit with status
2; a model that fails to load exits with status 1.

Flags map one-to-one onto :class:`own_engine.config.EngineConfig` fields (``--no-prefix-caching``
→ ``enable_prefix_caching=False`` etc.); ``--num-kv-blocks`` and ``--kv-cache-bytes`` are
alternatives (default: 256 MiB of KV cache). ``--max-body-bytes`` is the server's own: the
largest request body accepted (HTTP 413 beyond it); by default the largest body whose prompt
can still fit ``max_model_len`` (:func:`own_engine.server.validation.default_max_body_bytes`,
about 5 MB for SmolLM2 at 4,096 tokens).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import typer
from typer.exceptions import TyperException

logger = logging.getLogger("own_engine")


class Batching(str, enum.Enum):
    continuous = "continuous"
    static = "static"


class KVAllocation(str, enum.Enum):
    paged = "paged"
    naive = "naive"


class Speculative(str, enum.Enum):
    none = "none"
    ngram = "ngram"
    draft = "draft"


class Device(str, enum.Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class AttentionBackend(str, enum.Enum):
    auto = "auto"
    triton = "triton"
    native = "native"
    torch = "torch"


class LinearBackend(str, enum.Enum):
    auto = "auto"
    dense = "dense"


class DType(str, enum.Enum):
    auto = "auto"
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class _Exit(Exception):
    """Stop with a one-line message and an exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class _Shutdown(Exception):
    """SIGTERM/SIGINT received (raised by our handler, outside uvicorn's own signal capture)."""


cli = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


@cli.command(help="Serve the own_engine reference engine over an OpenAI-compatible HTTP API.")
def serve(
    model: Path = typer.Option(
        ..., "--model", exists=True, file_okay=False, dir_okay=True, help="Hugging Face model folder (Llama arch)."
    ),
    host: str = typer.Option("127.0.0.1", help="Interface to bind (default: loopback only)."),
    port: int = typer.Option(8000, min=0, max=65535, help="TCP port; 0 picks a free one."),
    served_model_name: str | None = typer.Option(None, help="Model name clients send (default: folder name)."),
    threads: int = typer.Option(1, min=1, help="torch intra-op threads."),
    block_size: int = typer.Option(16, min=1, help="Tokens per KV block."),
    num_kv_blocks: int | None = typer.Option(None, min=1, help="KV pool size in blocks."),
    kv_cache_bytes: int | None = typer.Option(None, min=1, help="KV pool size in bytes (default 256 MiB)."),
    max_num_seqs: int | None = typer.Option(
        None, min=1, help="Most sequences per step (default: the KV pool's tokens / 256, at most 256)."),
    max_num_batched_tokens: int = typer.Option(512, min=1, help="Per-step token budget."),
    max_model_len: int | None = typer.Option(None, min=1, help="Prompt + output limit in tokens."),
    prefix_caching: bool = typer.Option(True, "--prefix-caching/--no-prefix-caching", help="Prefix caching."),
    chunked_prefill: bool = typer.Option(True, "--chunked-prefill/--no-chunked-prefill", help="Chunked prefill."),
    batching: Batching = typer.Option(Batching.continuous, help="continuous (iteration-level) or static."),
    kv_allocation: KVAllocation = typer.Option(KVAllocation.paged, help="paged or naive (one max_len slab/seq)."),
    speculative: Speculative = typer.Option(Speculative.none, help="Speculative decoding proposer."),
    num_speculative_tokens: int = typer.Option(4, min=1, help="Tokens proposed per speculative step."),
    draft_num_layers: int = typer.Option(8, min=1, help="Layers of the self-draft model (--speculative draft)."),
    speculative_model: Path | None = typer.Option(
        None, "--speculative-model", help="Draft model folder (Llama, same vocabulary) for --speculative draft "
        "instead of the layer-truncated self-draft."
    ),
    adaptive_speculation: bool = typer.Option(
        True, "--adaptive-speculation/--no-adaptive-speculation",
        help="Choose each step's draft tokens (0..--num-speculative-tokens) from the acceptance rate."
    ),
    spec_cost_per_token: float | None = typer.Option(
        None, min=0.0, help="Cost of one more draft token relative to a decode step, for adaptive speculation "
        "(default: 0.1 for ngram, 0.1 + draft/target weight ratio for draft)."
    ),
    device: Device = typer.Option(Device.auto, help="auto picks CUDA when available."),
    attention_backend: AttentionBackend = typer.Option(
        AttentionBackend.auto, help="auto: the Triton kernel on CUDA, the native C kernels on CPU (each when it works), "
        "else PyTorch; torch: PyTorch attention (add --linear-backend dense for the all-PyTorch baseline)."),
    linear_backend: LinearBackend = typer.Option(
        LinearBackend.auto, help="auto, on CPU: the native panel GEMM (AVX-512, 1 thread), else oneDNN-prepacked "
        "weights; dense: F.linear (ablation)."),
    dtype: DType = typer.Option(
        DType.auto, help="Weights and KV cache: auto = float32; bfloat16/float16 on CUDA only."),
    cuda_graphs: bool = typer.Option(
        True, "--cuda-graphs/--no-cuda-graphs",
        help="On CUDA with the Triton kernel, replay decode steps from CUDA graphs captured at start (ignored on CPU)."),
    seed: int = typer.Option(0, help="Seed for requests without their own."),
    log_level: str = typer.Option("info", help="Server log level (debug, info, warning, error)."),
    max_body_bytes: int | None = typer.Option(
        None, min=1, help="Largest request body in bytes, HTTP 413 beyond it "
        "(default: 12 x the longest token's characters x max_model_len + 1 MiB)."
    ),
) -> None:
    if num_kv_blocks is not None and kv_cache_bytes is not None:
        raise _Exit("--num-kv-blocks and --kv-cache-bytes are alternatives; pass only one", 2)
    if log_level.lower() not in ("debug", "info", "warning", "error", "critical"):
        raise _Exit(f"--log-level must be debug, info, warning, error or critical, got {log_level!r}", 2)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One engine thread per core we were given; must be set before torch is imported.
    os.environ["OMP_NUM_THREADS"] = str(threads)
    options: dict[str, Any] = dict(
        model_dir=model,
        block_size=block_size,
        num_kv_blocks=num_kv_blocks,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        enable_prefix_caching=prefix_caching,
        enable_chunked_prefill=chunked_prefill,
        batching=batching.value,
        kv_allocation=kv_allocation.value,
        speculative=speculative.value,
        num_speculative_tokens=num_speculative_tokens,
        draft_num_layers=draft_num_layers,
        speculative_model=speculative_model,
        adaptive_speculation=adaptive_speculation,
        spec_cost_per_token=spec_cost_per_token,
        threads=threads,
        device=device.value,
        seed=seed,
        attention_backend=attention_backend.value,
        linear_backend=linear_backend.value,
        dtype=dtype.value,
        cuda_graphs=cuda_graphs,
    )
    if kv_cache_bytes is not None:
        options["kv_cache_bytes"] = kv_cache_bytes
    engine = _load_engine(options)
    from own_engine.server.app import create_app

    app = create_app(engine, served_model_name=served_model_name, max_body_bytes=max_body_bytes)
    _run_server(app, engine, host, port, log_level.lower(), served_model_name or model.name)


def _load_engine(options: dict[str, Any]) -> Any:
    from own_engine.config import ConfigError, EngineConfig

    config = EngineConfig(**options)
    try:
        config.validate()
    except ConfigError as exc:
        raise _Exit(str(exc), 2) from None
    try:
        from own_engine.engine import LLMEngine

        return LLMEngine(config)
    except ConfigError as exc:
        raise _Exit(str(exc), 2) from None
    except _Shutdown:
        raise
    except Exception as exc:  # unreadable weights, unsupported architecture, out of memory...
        raise _Exit(f"could not load the model from {options['model_dir']}: {type(exc).__name__}: {exc}", 1) from None


def _run_server(app: Any, engine: Any, host: str, port: int, log_level: str, model_name: str) -> None:
    import uvicorn

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=3,
    )
    class Server(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            # Stop the engine first: in-flight streams end at once with an SSE error event
            # ("the server is shutting down") instead of holding the graceful shutdown open.
            await asyncio.to_thread(app.state.worker.stop)
            await super().shutdown(sockets=sockets)

    server = Server(config)

    async def run() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        if server.started:
            bound_host, bound_port = server.servers[0].sockets[0].getsockname()[:2]
            stats = engine.stats()
            print(
                f"own_engine ready: http://{bound_host}:{bound_port} model={model_name} "
                f"max_model_len={engine.max_model_len} kv_blocks={stats.get('kv_blocks_total', '?')} "
                f"max_body_bytes={app.state.serving.max_body_bytes}",
                file=sys.stderr,
                flush=True,
            )
        await task

    asyncio.run(run())
    if not server.started:
        raise _Exit(f"the server could not start on {host}:{port} (see the log above)", 1)


def _on_signal(signum: int, frame: Any) -> None:
    raise _Shutdown(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit status (0 ok or stopped by a signal, 1 runtime error, 2 bad flags)."""
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    command = typer.main.get_command(cli)
    try:
        rv = command.main(args=argv, prog_name="python -m own_engine", standalone_mode=False)
    except (_Shutdown, typer.Abort, KeyboardInterrupt) as exc:  # a requested stop, not a problem: INFO
        logger.info("own_engine stopped (%s)", exc if isinstance(exc, _Shutdown) else "interrupted")
        return 0
    except _Exit as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except TyperException as exc:  # bad flags (click usage errors, vendored by typer)
        fmt = getattr(exc, "format_message", None)
        message = fmt() if callable(fmt) else str(exc)
        print(f"error: {' '.join(message.split())} (see --help)", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if isinstance(rv, int):  # --help
        return rv
    logger.info("own_engine stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
