"""What every ``bench`` command shares: the one-line error exit and option parsing helpers."""

from __future__ import annotations

import math
import os
import sys
from typing import NoReturn, Optional

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
