"""``python -m own_engine --model DIR [...]``: serve the reference engine over the OpenAI API.

Binds 127.0.0.1:8000 by default (``--port 0`` picks a free port). Logs one line
``own_engine ready: http://HOST:PORT model=NAME ...`` on stderr once the socket accepts
requests, and exits with status 0 on SIGTERM or SIGINT (after uvicorn's graceful shutdown,
which stops the engine thread). Bad flags print one ``error: ...`` line and exit with status
2; a model that fails to load exits with status 1.

The flags are generated from the declarations beside the settings (:mod:`own_engine.server.options`):
one per :class:`own_engine.config.EngineConfig` field (``--no-prefix-caching`` →
``enable_prefix_caching=False`` etc.) and one per :class:`own_engine.server.options.ServerOptions`
field; ``--num-kv-blocks`` and ``--kv-cache-bytes`` are alternatives (default: 256 MiB of KV
cache). ``--max-body-bytes`` is the server's own: the
largest request body accepted (HTTP 413 beyond it); by default the largest body whose prompt
can still fit ``max_model_len`` (:func:`own_engine.server.validation.default_max_body_bytes`,
about 5 MB for SmolLM2 at 4,096 tokens).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import typer
from typer.exceptions import TyperException

logger = logging.getLogger("own_engine")


class _Exit(Exception):
    """Stop with a one-line message and an exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class _Shutdown(Exception):
    """SIGTERM/SIGINT received (raised by our handler, outside uvicorn's own signal capture)."""


def serve(values: dict[str, Any]) -> None:
    """Serve the engine: ``values`` are the parsed options by field name (:func:`own_engine.server.options.split`)."""
    from own_engine.server.options import split

    options, server = split(values)
    if options.get("num_kv_blocks") is not None and "kv_cache_bytes" in options:
        raise _Exit("--num-kv-blocks and --kv-cache-bytes are alternatives; pass only one", 2)
    logging.basicConfig(level=server.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One engine thread per core we were given; must be set before torch is imported.
    os.environ["OMP_NUM_THREADS"] = str(options["threads"])
    engine = _load_engine(options)
    from own_engine.server.app import create_app

    app = create_app(engine, served_model_name=server.served_model_name, max_body_bytes=server.max_body_bytes)
    _run_server(app, engine, server.host, server.port, server.log_level,
                server.served_model_name or Path(options["model_dir"]).name)


def _command() -> Any:
    """The click command of :func:`serve`, its options generated from the settings' declarations
    (:mod:`own_engine.server.options`)."""
    from own_engine.server.options import signature

    def command(**values: Any) -> None:
        serve(values)

    command.__signature__ = signature()  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in command.__signature__.parameters.values()}  # type: ignore[attr-defined]
    cli = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
    cli.command(help="Serve the own_engine reference engine over an OpenAI-compatible HTTP API.")(command)
    return typer.main.get_command(cli)


def check_flags(argv: list[str]) -> str | None:
    """Why the server would refuse ``argv`` (flags after ``--model``: an unknown flag, a value of
    the wrong type, out of its bounds or not among its choices), as one line; None when it would
    parse them. Nothing is loaded or started (the command line is parsed, not run)."""
    try:
        _command().make_context("own_engine", ["--model", str(Path(__file__).resolve().parent), *argv])
    except TyperException as exc:  # click's usage errors, vendored by typer
        return _usage_line(exc)
    return None


# what a flag takes, by the pydantic error typer's coercion raised (this package stands alone:
# harness's results.messages says the same for the harness's own options)
_TAKES = {"int": "a whole number", "float": "a number", "bool": "true or false"}


def _usage_line(exc: Exception) -> str:
    """A usage error on one line; a value typer's pydantic coercion refused says what the flag
    takes (``--max-num-seqs takes a whole number, got 'abc'``), not pydantic's "Input should be ..."."""
    cause, param = exc.__cause__, getattr(exc, "param", None)
    errors = cause.errors() if hasattr(cause, "errors") else []
    if errors and param is not None and getattr(param, "opts", None):
        flag, err = max(param.opts, key=len), errors[0]
        kind, ctx = str(err.get("type", "")), err.get("ctx") or {}
        bound = next(((sign, ctx[key]) for key, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
                      if key in ctx), None)
        if bound is not None:
            return f"{flag} must be {bound[0]} {bound[1]}, got {err.get('input')}"
        what = next((v for k, v in _TAKES.items() if kind.startswith(k)), None)
        if what is not None:
            return f"{flag} takes {what}, got {err.get('input')!r}"
    fmt = getattr(exc, "format_message", None)
    return " ".join((fmt() if callable(fmt) else str(exc)).split())


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
    command = _command()
    try:
        rv = command.main(args=argv, prog_name="python -m own_engine", standalone_mode=False)
    except (_Shutdown, typer.Abort, KeyboardInterrupt) as exc:  # a requested stop, not a problem: INFO
        logger.info("own_engine stopped (%s)", exc if isinstance(exc, _Shutdown) else "interrupted")
        return 0
    except _Exit as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except TyperException as exc:  # bad flags (click usage errors, vendored by typer)
        print(f"error: {_usage_line(exc)} (see --help)", file=sys.stderr)
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
