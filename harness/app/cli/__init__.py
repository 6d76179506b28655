"""``bench``: the command-line interface (typer + rich), one module per command group.

Every user-facing error is one line on stderr and exit code 2 (bad input) or 1 (the run
found no usable engine); no traceback reaches the user.
"""

from __future__ import annotations

import sys

import typer

from harness import __version__
from harness.app.cli import engines as cli_engines, model as cli_model, report as cli_report, results as cli_results
from harness.app.cli import search as cli_search, workloads as cli_workloads
from harness.app.cli.common import OneLineErrors, make_console
from harness.app.cli.compare import compare_cmd
from harness.app.cli.imports import import_cmd
from harness.app.cli.run import run_cmd
from harness.app.cli.serve import serve_cmd
from harness.app.core.signals import install_handlers
from harness.app.settings.tune_options import tune_help

app = typer.Typer(
    name="bench",
    cls=OneLineErrors,  # every usage error of every command: one line, exit 2
    help="Benchmark LLM serving engines with one client, one workload and one set of metric "
    "definitions, then recommend an engine and name the deciding constraint.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("run", help="Replay a workload against engines, store the results, report and recommend.",
            epilog=tune_help())(run_cmd)
app.add_typer(cli_model.app, name="model")
app.add_typer(cli_results.app, name="results")
app.add_typer(cli_workloads.app, name="workloads")
app.add_typer(cli_engines.app, name="engines")
app.command("recommend", help="Score stored runs for a target deployment, SLOs and priorities; name the deciding constraint.")(cli_report.recommend_cmd)
app.command("compare", help="Compare each engine's capacity at the SLO between two stored runs (B over A, with its "
            "interval: moved, equivalent, within the noise or not separated), list what differed, and gate a CI job "
            "(--fail-below).")(compare_cmd)
app.command("serve", help="Start the engine of a recipe.json as the run measured it, outside a benchmark, on a host "
            "and port of your choosing, until Ctrl-C.")(serve_cmd)
app.command("report", help="Write report.md and a self-contained report.html for one run, or compare several.")(cli_report.report_cmd)
app.command("search", help="Find each engine's capacity: the highest load (rate or concurrency) at which every SLO holds, by bracketing and bisection.")(cli_search.search_cmd)
app.command("import", help="Read another tool's result file (vllm bench serve, SGLang bench_serving, AIPerf, GuideLLM) into a run, each metric recomputed under our definitions or marked as copied.")(import_cmd)
app.command("calibrate", help="Measure the client's own overhead and max request rate against a local null server. "
            "Ctrl-C or SIGTERM stops it within about a second (exit 130).")(cli_model.calibrate_cmd)

console = make_console()


def _version(value: bool) -> None:
    if value:
        console.print(f"bench {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Benchmark LLM serving engines and recommend one."""
    install_handlers()  # every command cleans up its child processes on SIGTERM/SIGHUP as on Ctrl-C


def entrypoint() -> None:  # pragma: no cover - console script shim
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
