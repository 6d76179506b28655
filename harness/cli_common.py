"""What every ``bench`` command shares: the one-line error exit and option parsing helpers."""

from __future__ import annotations

import math
from typing import NoReturn, Optional

import typer
from rich.console import Console
from rich.markup import escape

err_console = Console(stderr=True)


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
