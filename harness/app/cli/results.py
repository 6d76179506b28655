"""`bench results`: list, show, export and rebuild stored runs (the typer commands).

A killed run (records, no summary) is summarised from its records when read
(``harness.app.run.rebuild``); damaged folders give one line naming the file.
"""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from harness.app.cli.common import fail, make_console, note
from harness.app.cli.compare import history_cmd
from harness.app.cli.options import command_from
from harness.app.cli.summary import print_summary
from harness.app.settings.commands import RebuildSettings, RunsSettings, ShowSettings, StoredRunSettings

app = typer.Typer(help="Stored runs under the output directory.", no_args_is_help=True)
console = make_console()
app.command("history", help="An engine's capacity at one set of SLOs over the stored runs of one workload, oldest "
            "first, with intervals and whether it moved from the run before.")(history_cmd)


def results_list(settings: RunsSettings) -> None:
    """List stored runs, newest first (a killed run is summarised from its records first)."""
    from harness.app.run.rebuild import load_or_rebuild
    from results.store import ResultsError, list_runs

    output_dir = settings.output_dir

    runs = list_runs(output_dir)
    if not runs:
        console.print(f"no runs under {output_dir}", markup=False)
        return
    t = Table(title=f"Runs in {output_dir}")
    for col in ("run id", "workload", "engines (status)"):
        t.add_column(col)
    for p in runs:
        try:
            r = load_or_rebuild(p, note=note)
        except ResultsError as exc:
            t.add_row(escape(p.name), "?", escape(f"unreadable: {exc}"))
            continue
        engines = ", ".join(f"{n} ({e.status.value})" for n, e in r.summary.engines.items())
        t.add_row(escape(p.name), escape(r.summary.workload), escape(engines))
    console.print(t)


app.command("list")(command_from(RunsSettings, results_list))  # the options: harness/app/settings/commands.py


def results_show(settings: ShowSettings) -> None:
    """Show one run: its verdict and capacity table first when it climbed load ladders, then its
    summary table (a killed run is summarised from its records first)."""
    from harness.app.run.rebuild import load_or_rebuild
    from results.store import ResultsError, resolve_run

    try:
        r = load_or_rebuild(resolve_run(settings.run, settings.output_dir), note=note)
    except ResultsError as exc:
        fail(str(exc))
    if settings.json_out:
        console.print_json(r.summary.model_dump_json())
        return
    if r.ladder is not None:  # the answer first, as bench run printed it
        from harness.app.cli.verdict import print_verdict

        from reports.frontier import caveats

        print_verdict(r.ladder, console, r.run_dir, caveats(r.summary, r.replay))
        console.rule("Details")
    print_summary(r.summary, console)


app.command("show")(command_from(ShowSettings, results_show))


def results_export(settings: StoredRunSettings) -> None:
    """Write requests.parquet (one typed row per request record) and summary.csv (one row per
    engine x condition, headline metrics with intervals) for a stored run, e.g. an older one."""
    from harness.app.run.rebuild import load_or_rebuild
    from results.store import ResultsError, export_run, resolve_run

    try:
        run_dir = resolve_run(settings.run, settings.output_dir)
        load_or_rebuild(run_dir, note=note)
        paths = export_run(run_dir)
    except ResultsError as exc:
        fail(str(exc))
    for path in paths:
        console.print(f"wrote {path}", markup=False)


app.command("export")(command_from(StoredRunSettings, results_export))


def results_rebuild(settings: RebuildSettings) -> None:
    """Summarise a killed run from its request records: every engine with records but no entry
    in summary.json gets one (status failed, metrics from its stored requests; never ranked)."""
    from harness.app.run.rebuild import rebuild
    from results.store import ResultsError, resolve_run

    try:
        summary, names = rebuild(resolve_run(settings.run, settings.output_dir))
    except ResultsError as exc:
        fail(str(exc))
    if not names:
        console.print(f"{summary.run_id}: every engine with records is already summarised; nothing to do", markup=False)
        return
    console.print(f"{summary.run_id}: summarised {', '.join(names)} from the stored records", markup=False)
    print_summary(summary, console)


app.command("rebuild")(command_from(RebuildSettings, results_rebuild))
