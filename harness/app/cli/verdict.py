"""The console's first screen after ``bench run`` with load ladders (and ``bench results show``):
the verdict sentence, the capacity table (the same rows as the report's,
:func:`reports.frontier.capacity_rows`), with ``--tune`` each engine's configuration and gain
(:func:`reports.tuning.gain_line`) and the recipe's file."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from rich.markup import escape
from rich.table import Table

from reports.energy import energy_note
from reports.series import why_lines
from reports.frontier import capacity_rows, race_note, spread_note, yardstick_note
from reports.tuning import gain_line, no_recipe_reason
from results.schema import RECIPE_FILE, WINNER_MAP_FILE, LadderSummary
from rich.console import Console


def print_verdict(ladder: LadderSummary, console: Console, run_dir: Path | None = None, notes: Sequence[str] = ()) -> None:
    """The verdict, then one compact table, the tuning's gain lines and the recipe's file when
    ``--tune`` ran, then where the frontier chart is; ``notes``: caveats printed under the verdict
    (:func:`reports.frontier.caveats`)."""
    d = ladder.decision
    console.rule("Verdict")
    console.print(f"[bold]{escape(d.sentence if d else 'No decision was made.')}[/]", highlight=False)
    for line in notes:  # caveats beside the answer (configuration parity's unfair flags)
        console.print(line, markup=False, highlight=False)
    if run_dir is not None and (what := _shim_line(ladder, run_dir)):
        console.print(what, markup=False, highlight=False, soft_wrap=True)
    unit = "sessions" if d is not None and d.unit == "sessions" else "requests"
    t = Table(title=f"Capacity at the SLO ({', '.join(f'{k} ≤ {v:g} ms' for k, v in ladder.slos.items())})")
    target = (ladder.target_load or {}).get("output_tps")
    rows = capacity_rows(ladder)
    energy = any(r["energy"] not in ("–", "n/a") for r in rows)  # none read: the note under the table says why
    jobs = any(r["jobs"] != "–" for r in rows)  # agentic: jobs (sessions) per hour per device at the capacity
    cols = [("engine", False), ("output tok/s per device", True), ("95% interval", True), (f"{unit} in flight", True),
            ("rate (closed loop)", True)] + ([("jobs/h per device", True)] if jobs else []) + \
        ([("J / output token", True)] if energy else []) + [("$/1M out", True)] + \
        ([(f"devices for {target:g} tok/s", True)] if target else []) + [("gates", False)]
    for col, right in cols:
        t.add_column(col, justify="right" if right else "left", overflow="fold")
    for r in rows:
        t.add_row(escape(r["engine"]), r["capacity"], r["interval"], r["load"], r["rate"], *([r["jobs"]] if jobs else []),
                  *([r["energy"]] if energy else []), r["usd"], *([r["devices"]] if target else []), escape(r["gates"]))
    console.print(t)
    if note := spread_note(ladder):
        console.print(note, markup=False, highlight=False, soft_wrap=True)
    if note := energy_note(ladder):
        console.print(note, markup=False, highlight=False, soft_wrap=True)
    for line in why_lines(ladder):  # where each capacity ended, as the engine's own series shows it
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if note := yardstick_note(ladder):
        console.print(note, markup=False, highlight=False)
    if note := race_note(ladder):
        console.print(note, markup=False, highlight=False)
    for name, tuning in ladder.tuning.items():
        console.print(escape(gain_line(name, tuning)), highlight=False)
    if run_dir is not None and (run_dir / RECIPE_FILE).exists():
        console.print(f"Recipe: {run_dir / RECIPE_FILE} (bench run --engine-config FILE runs it again)", markup=False)
    elif run_dir is not None and ladder.tuning:
        console.print(f"No {RECIPE_FILE}: {no_recipe_reason(ladder)}.", markup=False, highlight=False)
    if run_dir is not None and (run_dir / "report-plots" / "frontier.png").exists():
        console.print(f"Frontier: {run_dir / 'report-plots' / 'frontier.png'}", markup=False)
    if run_dir is not None and (run_dir / "report-plots" / "job_frontier.png").exists():
        console.print(f"Job frontier: {run_dir / 'report-plots' / 'job_frontier.png'}", markup=False)
    if run_dir is not None and (run_dir / WINNER_MAP_FILE).is_file():
        print_map_line(run_dir / WINNER_MAP_FILE, console)


def print_map_line(path: Path, console: Console) -> None:
    """The winner map's nearest boundary in one line, and where its chart is (a map that cannot
    be read is passed over: the verdict above stands without it)."""
    from pydantic import ValidationError

    from results.schema import WinnerMap

    try:
        found = WinnerMap.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, ValidationError):
        return
    chart = path.parent / "report-plots" / "winner_map.png"
    console.print(f"Winner map: {found.boundary}" + (f" ({chart})" if chart.exists() else ""), markup=False,
                  highlight=False, soft_wrap=True)


def _shim_line(ladder: LadderSummary, run_dir: Path) -> str:
    """:func:`reports.frontier.shim_note` from the run's manifest ("" when it cannot be read)."""
    from pydantic import ValidationError

    from reports.frontier import shim_note
    from results.schema import Manifest

    try:
        manifest = Manifest.model_validate_json((run_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, ValidationError):
        return ""
    return shim_note(ladder, manifest)
