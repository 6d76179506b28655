"""Scoring and reporting a stored run: the one path ``bench run``, ``bench report`` and
``bench recommend`` share.

Load the run(s) → complete older runs' derived metrics (``harness.metrics.derive``) → score
(``harness.scoring``) unless a recommendation is given or stored → store it as
``recommendation.json`` → render the reports (``reports``), which only read these artefacts.
"""

from __future__ import annotations

from pathlib import Path

from adapters.hardware import get_profile, profile_from_manifest
from harness.metrics.derive import complete_metrics
from harness.scoring import Recommendation, recommend
from reports import write_reports
from results.recommendation import write_recommendation
from results.store import Run, load_run


def completed(run: Run) -> Run:
    """``run`` with every engine's metrics completed from its records where fields are missing,
    and the metric definitions (unchanged since schema 1) where the manifest lacks them."""
    import harness.metrics as metrics_module

    if run.manifest.metric_definitions is None:
        run.manifest.metric_definitions = (metrics_module.__doc__ or "").strip()
    for name, engine in run.summary.engines.items():
        if engine.metrics is not None:
            engine.metrics = complete_metrics(engine.metrics, run.records_for(name))
    return run


def default_recommendation(runs: list[Run]) -> Recommendation:
    """The recommendation a report shows when none is given: the hardware the first run was
    measured on (manifest; else this machine's CPU), the balanced preset, the runs' SLOs."""
    hardware = profile_from_manifest(runs[0].manifest.hardware) or get_profile("CPU")
    return recommend(runs, hardware=hardware)


def write_run_reports(
    run_dir: Path,
    recommendation: Recommendation | None = None,
    compare_runs: list[Run] | None = None,
) -> tuple[Path, Path]:
    """Write the report(s) of the run in ``run_dir`` (with ``compare_runs``: a comparison report
    in ``run_dir``); return the Markdown and HTML paths.

    Without ``recommendation``: the run's stored one, else :func:`default_recommendation`, which
    is then stored (single runs only). Raises ``results.store.ResultsError`` for a bad folder.
    """
    base = completed(load_run(run_dir))
    runs = [base]
    seen = {base.run_dir.resolve()}
    for other in compare_runs or []:
        if other.run_dir.resolve() not in seen:
            seen.add(other.run_dir.resolve())
            runs.append(completed(other))
    if recommendation is None and len(runs) == 1:
        recommendation = base.recommendation
    if recommendation is None:
        recommendation = default_recommendation(runs)
        if len(runs) == 1:
            write_recommendation(base.run_dir, recommendation)
    return write_reports(runs, recommendation, Path(run_dir))
