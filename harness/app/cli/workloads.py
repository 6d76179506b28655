"""``bench workloads``: list the workloads and show the statistics of one (typer + rich).

Wired by the lead as ``app.add_typer(cli_workloads.app, name="workloads")``:

- ``bench workloads`` — a table of workload names and descriptions;
- ``bench workloads show NAME [--seed --scale --num-requests ...]`` — requests, sessions,
  turns, input/output length distributions, prefix-reuse ratio and offered rate of the
  workload as built on the model's tokenizer (default: the embedded SmolLM2-135M-Instruct).

Bad input → one line on stderr, exit status 2.
"""

from __future__ import annotations

import json
import math
from typing import Any

import typer
from rich.table import Table

from harness.app.cli.common import fail, make_console
from harness.app.cli.options import command_from
from harness.app.settings.commands import WorkloadShowSettings

app = typer.Typer(
    help="List the workloads and show their statistics.",
    invoke_without_command=True,
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = make_console()


@app.callback(invoke_without_command=True)
def workloads(ctx: typer.Context) -> None:
    """List the workloads (name and description)."""
    if ctx.invoked_subcommand is not None:
        return
    from workloads.registry import list_workloads

    table = Table(title="Workloads (bench run --workload NAME; details: bench workloads show NAME)")
    table.add_column("name", style="bold")
    table.add_column("description")
    for i, (name, desc) in enumerate(list_workloads()):
        table.add_row(name + (" (default)" if i == 0 else ""), desc)
    console.print(table)


def _fmt(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, float):
        if math.isinf(v):
            return "inf"
        return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def render_stats(name: str, spec: dict[str, Any], stats: dict[str, Any]) -> list[Table]:
    """Rich tables for a workload's statistics (summary, length distributions, spec)."""
    summary = Table(title=f"Workload {name}: offered load", show_header=False)
    summary.add_column("metric", style="bold")
    summary.add_column("value", justify="right")
    rate_unit = "sessions/s" if name == "agentic" else "requests/s"
    tps = stats.get("turns_per_session", {})
    rows = [
        ("requests", stats.get("requests")),
        ("sessions", stats.get("sessions")),
        ("turns per session (mean / p50 / max)", f"{_fmt(tps.get('mean', 0))} / {_fmt(tps.get('p50', 0))} / {_fmt(tps.get('max', 0))}"),
        ("branching sessions", stats.get("branching_sessions")),
        ("total input tokens", stats.get("total_input_tokens")),
        ("total output tokens (max_tokens)", stats.get("total_output_tokens")),
        ("prefix-reuse ratio (offered)", stats.get("prefix_reuse_ratio")),
        (f"offered rate ({rate_unit}, this schedule)", stats.get("offered_rate")),
        ("offered request rate (requests/s)", stats.get("offered_request_rate")),
        ("offered duration (s, zero service time)", stats.get("offered_duration_s")),
    ]
    for k, v in rows:
        summary.add_row(k, _fmt(v))
    lengths = Table(title="Length distributions (tokens)")
    for col in ("", "mean", "p50", "p90", "max"):
        lengths.add_column(col, justify="right" if col else "left", style="bold" if not col else None)
    for label, key in (("input (server-side, exact)", "input_tokens"), ("output (max_tokens)", "output_tokens")):
        d = stats.get(key, {})
        lengths.add_row(label, *(_fmt(float(d.get(c, 0))) for c in ("mean", "p50", "p90", "max")))
    spec_table = Table(title="Spec (written to the run manifest)", show_header=False)
    spec_table.add_column("field", style="bold")
    spec_table.add_column("value")
    for k, v in spec.items():
        spec_table.add_row(k, json.dumps(v) if not isinstance(v, str) else v)
    return [summary, lengths, spec_table]


def show(settings: WorkloadShowSettings) -> None:
    """Build a workload offline and print its statistics."""
    from harness.app.core.model import ModelError, resolve_model
    from workloads.errors import WorkloadError
    from workloads.registry import build_workload

    from harness.app.settings.checks import check_workload

    options, model, as_json = settings.workload, settings.model, settings.json_out
    try:
        check_workload(options)  # bounds, spec file, trace: before the tokenizer takes seconds to load
        model_dir = resolve_model(model, weights=False)  # the tokenizer builds the prompts
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        except Exception as exc:  # transformers raises many types for a bad folder
            fail(f"could not load the tokenizer from {model_dir} ({type(exc).__name__}): pass a Hugging Face model folder")
        w = build_workload(options, tokenizer)
    except (WorkloadError, ModelError) as exc:
        fail(str(exc))
        return
    if as_json:
        console.print_json(json.dumps({"spec": w.spec, "stats": w.stats}))
        return
    for t in render_stats(w.name, w.spec, w.stats):
        console.print(t)
    if w.stats.get("note"):
        console.print(f"[dim]note: {w.stats['note']}[/]")


app.command("show")(command_from(WorkloadShowSettings, show))  # the options: harness/app/settings/commands.py
