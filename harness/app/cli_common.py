"""What every ``bench`` command shares: the one-line error exit and option parsing helpers."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer
from rich.console import Console
from rich.markup import escape

NON_TTY_WIDTH = 160  # tables stay readable in pipes, logs and CI (rich would use 80 columns)


def make_console(stderr: bool = False) -> Console:
    """A rich Console; when the stream is not a terminal and ``COLUMNS`` is unset, 160 columns
    wide instead of rich's 80 so result tables are not truncated in logs."""
    stream = sys.stderr if stderr else sys.stdout
    wide = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=stderr, width=NON_TTY_WIDTH if wide else None)


err_console = make_console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: message`` (one line, markup-escaped) on stderr and exit with ``code``
    (2 = bad input, 1 = the command ran but found nothing usable)."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def parse_rate(text: Optional[str], option: str = "--request-rate") -> Optional[float]:
    """A request rate in requests/s: a positive number or ``inf``; None stays None (the
    workload's default). Exits with a one-line error (code 2) on anything else."""
    if text is None:
        return None
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    try:
        v = float(text)
    except ValueError:
        fail(f"{option} must be a number of requests/s or 'inf', got {text!r}")
    if not v > 0 or math.isnan(v):
        fail(f"{option} must be > 0 (or 'inf'), got {text!r}")
    return v


# Workload options shared by `bench run` and `bench workloads show` (one definition, one help
# text). None everywhere = keep the workload's own default (or the --workload-spec file's).
ScaleOpt = Annotated[Optional[float], typer.Option("--scale", help="Shrink trace prompt lengths by this factor, in (0, 1] (default: the workload's CPU profile).")]
NumRequestsOpt = Annotated[Optional[int], typer.Option("--num-requests", "-n", help="Number of measured requests (agentic: turns, branches included). Default: the workload's.")]
RequestRateOpt = Annotated[Optional[str], typer.Option("--request-rate", "-r", help="Offered rate in requests/s (agentic: session starts/s); 'inf' sends all at once. Default: the workload's (agentic 0.5 sessions/s, others inf).")]
BurstinessOpt = Annotated[Optional[float], typer.Option("--burstiness", help="Gamma arrival shape: 1 = Poisson, <1 burstier, >1 smoother.")]
MaxConcurrencyOpt = Annotated[Optional[int], typer.Option("--max-concurrency", help="Cap on in-flight requests (closed loop).")]
InputLenOpt = Annotated[Optional[int], typer.Option("--input-len", help="random workload: prompt tokens.")]
OutputLenOpt = Annotated[Optional[int], typer.Option("--output-len", help="random workload: output tokens (sent with ignore_eos).")]
RangeRatioOpt = Annotated[Optional[float], typer.Option("--range-ratio", help="random workload: lengths uniform from len*(1-r) to len*(1+r) (vLLM convention).")]
ApiOpt = Annotated[Optional[str], typer.Option("--api", help="'chat' or 'completions' (default: the workload's).")]
TraceOpt = Annotated[Optional[str], typer.Option("--trace", help="trace workload: azure-code, azure-conv, mooncake, servegen-language, servegen-reason or a file.")]
TimeScaleOpt = Annotated[Optional[float], typer.Option("--time-scale", help="trace workload: replay speed-up; timestamps are divided by it (2 = twice as fast).")]
WorkloadSpecOpt = Annotated[Optional[Path], typer.Option("--workload-spec", help="YAML workload spec (see workloads/specs/); flags override its fields.")]
