"""``bench run``: replay a workload against engines, store, report and recommend."""

from __future__ import annotations

from harness.app.cli import report as cli_report
from harness.app.cli.common import exit_if_interrupted, fail, guarded, make_console, print_outputs, reuse_run_folder
from harness.app.cli.options import command_from
from harness.app.cli.verdict import print_verdict
from reports.frontier import caveats
from harness.app.settings.run import RunSettings
from results.schema import LadderSummary, RunSummary

console = make_console()


def run(settings: RunSettings) -> None:
    """Replay a workload against engines, store the results, report and recommend."""
    from harness.app.run.orchestrator import Orchestrator

    executor = None
    if settings.executor.kind == "ray":  # each trial a Ray task (harness/app/executors/ray.py)
        from harness.app.executors.ray import RayExecutor as executor  # type: ignore[assignment]
    reuse_run_folder(settings.output.output_dir, settings.output.run_id)
    result = guarded(lambda: Orchestrator(settings, console, executor=executor).run())
    if result.ladder is not None:  # the answer first: the verdict and the capacity table, then the details
        from results.store import read_replay

        print_verdict(result.ladder, console, result.run_dir, caveats(result.summary, read_replay(result.run_dir)))
        if settings.engine.config:  # a recipe measured again: against the capacity it stored
            _print_recipe_check(settings.engine.config, result.ladder)
        console.rule("Details")
    _print_summary(result.summary)
    if settings.token_note:
        console.print(f"note: {settings.token_note}", markup=False, highlight=False)
    if result.recommendation is not None and result.ladder is None:
        console.rule("Recommendation")
        cli_report.print_recommendation(result.recommendation, console)
    elif result.recommendation is not None:  # another question than the verdict's: on request only
        console.print(f"Weighted score (a secondary view): bench recommend {result.run_dir}", markup=False)
    print_outputs(console, result.run_dir, [("Report", "report.md"), ("Report", "report.html")])
    exit_if_interrupted(result.interrupted, "results")
    if not result.summary.ok_engines():
        fail("no engine produced a measurement (see the reasons above)", code=1)


run_cmd = command_from(RunSettings, run)  # the options: RunSettings' fields (harness/app/settings/run.py)


def _print_summary(summary: RunSummary) -> None:
    """The console table of a :class:`results.schema.RunSummary` (harness/app/cli/summary.py)."""
    from harness.app.cli.summary import print_summary

    print_summary(summary, console)


def _print_recipe_check(path: str, ladder: LadderSummary) -> None:
    """``--engine-config``: this run's capacity against the recipe's (:func:`reports.tuning.recipe_check`)."""
    from pathlib import Path

    from reports.tuning import recipe_check
    from results.schema import Recipe

    try:  # validated before the run; gone since only when the run replaced the folder it lay in
        recipe = Recipe.model_validate_json(Path(str(path)).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        console.print(f"The recipe {path} could not be read again to compare ({exc}).", markup=False, highlight=False)
        return
    console.print(recipe_check(recipe, ladder), markup=False, highlight=False, soft_wrap=True)
