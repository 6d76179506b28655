"""``bench search``: each engine's capacity under SLOs (typer command the main app registers,
``app.command("search")(search_cmd)``). The search itself: :mod:`harness.app.search.orchestrator`.

Exit codes: 0 = searched (an engine with capacity 0 is a result, not an error); 1 = no engine
could be searched; 2 = bad input (one line on stderr); 130 = interrupted (results kept).
"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from harness.app.cli.common import exit_if_interrupted, fail, guarded, make_console, print_outputs, reuse_run_folder
from harness.app.cli.options import command_from
from harness.app.search.config import SearchSettings

console = make_console()


def search(settings: SearchSettings) -> None:
    """Find each engine's capacity: the load at which every SLO just holds (bracket, bisect, read where the SLO margin crosses 1)."""
    from harness.app.search.orchestrator import SearchOrchestrator

    reuse_run_folder(settings.output.output_dir, settings.output.run_id)
    result = guarded(lambda: SearchOrchestrator(settings, console).run())
    print_search(result.summary)
    print_outputs(console, result.run_dir, [("Report", "search.md"), ("Plot", "search_latency_vs_load.png")])
    exit_if_interrupted(result.interrupted, "probes")
    rec = result.summary.capacity_recommendation
    if rec is None or not rec.ranking:
        fail("no engine could be searched (see the reasons above)", code=1)


search_cmd = command_from(SearchSettings, search)  # the options: SearchSettings' fields (harness/app/search/config.py)


def print_search(summary) -> None:  # type: ignore[no-untyped-def]
    """The console table of a :class:`results.schema.SearchSummary` and its deciding sentence."""
    from harness.scoring.verdict.capacity_ranking import capacity_text

    rec = summary.capacity_recommendation
    ranks = {r.engine: r for r in rec.ranking} if rec else {}
    t = Table(title=escape(f"Capacity search {summary.run_id}: {summary.workload}, {summary.search_var} ({summary.unit})"))
    for col in ("rank", "engine", "capacity", "bracket [pass, fail)", "stopped", "probes", "search s"):
        t.add_column(col, justify="left" if col in ("engine", "stopped") else "right")
    order = sorted(summary.engines, key=lambda n: (ranks[n].rank if n in ranks else len(ranks) + 1))
    for name in order:  # by rank; unranked (skipped, failed) last
        e, r = summary.engines[name], ranks.get(name)
        cap = capacity_text(e)
        lo, hi = e.bracket
        bracket = f"[{'–' if lo is None else f'{lo:.4g}'}, {'–' if hi is None else f'{hi:.4g}'})"
        label = name + (" (yardstick)" if r is not None and r.reference else "")
        t.add_row(str(r.rank) if r else "–", escape(label), cap, bracket, escape(e.stopped or e.status.value),
                  str(len(e.probes)), f"{e.elapsed_s:.1f}")
    console.print(t)
    slos = ", ".join(f"{k} ≤ {v:g} ms" for k, v in summary.slos.items())
    reps = (f"; {summary.repeats} repeats per probe, judged pooled (seeds base + i * {summary.repeats} + k)"
            if summary.repeats > 1 else "")
    console.print(f"SLOs: {slos}{' (defaults)' if summary.slos_default else ''}{reps}; budget {summary.budget_s:g} s "
                  f"({summary.budget_per_engine_s:.0f} s per engine); wall time {summary.wall_s:.0f} s",
                  markup=False, highlight=False)
    if rec is not None:
        console.print(f"Decision: {rec.sentence}", markup=False, highlight=False)
