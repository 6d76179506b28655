"""Scoring and reporting a stored run: the one path ``bench run``, ``bench report`` and
``bench recommend`` share.

Load the run(s) → complete older runs' derived metrics (``harness.metrics.derive``) → score
(``harness.scoring``) unless a recommendation is given or stored → store it as
``recommendation.json`` → render the reports (``reports``), which only read these artefacts.
"""

from __future__ import annotations

from pathlib import Path


from adapters.telemetry.hardware import get_profile
from results.hardware import device_price
from results.hardware import profile_from_manifest
from harness.metrics.derive import complete_metrics
from harness.metrics.timeline import timelines
from harness.scoring import Recommendation, recommend
from reports import write_reports
from results.recommendation import write_recommendation
from results.schema import LadderSummary, WinnerMap
from results.store import Run, load_run
from harness.app.settings.run import RunSettings


# Workload spec fields that set the load, not what each request is: runs that differ only in
# these are one workload at other conditions, which the scorer ranks (each engine at its
# highest-load condition meeting the SLOs). ``tokenizer``, a path, is compared by its folder
# name (the same model lives under another path on another machine); ``token_counts`` is a note.
LOAD_FIELDS = frozenset({"seed", "num_requests", "num_sessions", "request_rate", "burstiness", "arrival",
                         "max_concurrency", "time_scale", "rate_scale", "start_window", "prompt_salt", "token_counts",
                         # a duration-based run's clock and ramp (workloads.spec.WorkloadSpec)
                         "duration_s", "drain_timeout_s", "warmup_window_s", "cooldown_window_s", "ramp_up_strategy",
                         "ramp_up_start_rps", "ramp_up_end_rps"})
MODEL_FIELDS = ("name", "architecture", "num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                "vocab_size", "dtype", "num_params")


def _workload_shape(run: Run) -> dict[str, object]:
    spec = dict(run.manifest.workload or {})
    if spec.get("tokenizer"):
        spec["tokenizer"] = Path(str(spec["tokenizer"])).name
    return {k: v for k, v in spec.items() if k not in LOAD_FIELDS}


def unlike_runs(runs: list[Run]) -> str | None:
    """Why ``runs`` cannot be ranked together, or None when they can: every run must have
    measured the same workload (name, and every spec field that shapes a request: lengths,
    scale, API, trace, tokenizer; the load fields of :data:`LOAD_FIELDS` may differ) on the same
    model (manifest ``model`` facts, :data:`MODEL_FIELDS`; the folder path may differ). A field
    one run did not record (an older run) is not compared. The reason names the two runs and the
    first difference (DESIGN.md: a comparison that is not like for like is flagged with the reason)."""
    base = runs[0]
    for other in runs[1:]:
        pair = f"runs {base.run_id} and {other.run_id}"
        if base.summary.workload != other.summary.workload:
            return (f"{pair} measured different workloads ({base.summary.workload} vs {other.summary.workload}); "
                    "a ranking across them compares unlike requests")
        mine, theirs = _workload_shape(base), _workload_shape(other)
        for key in sorted(set(mine) & set(theirs)):
            if mine[key] != theirs[key]:
                return (f"{pair} measured the {base.summary.workload} workload differently ({key} {mine[key]} vs "
                        f"{theirs[key]}); a ranking across them compares unlike requests")
        if base.manifest.model is not None and other.manifest.model is not None:
            a, b = base.manifest.model.model_dump(), other.manifest.model.model_dump()
            for key in MODEL_FIELDS:
                if a.get(key) is not None and b.get(key) is not None and a[key] != b[key]:
                    return (f"{pair} served different models ({a.get('name')} vs {b.get('name')}: {key} {a[key]} vs "
                            f"{b[key]}); a ranking across them compares unlike engines")
    return None


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
    if len(runs) == 1 and base.ladder is not None and base.ladder.decision is not None:
        base.winner_map = store_winner_map(base)
    lines = {(run.run_id, name): timelines(run.records_for(name)) for run in runs for name in run.summary.engines}
    return write_reports(runs, recommendation, Path(run_dir), timelines=lines)


def store_winner_map(run: Run, folder: Path | None = None, ladder: LadderSummary | None = None, *,
                     grid: dict[str, list[float]] | None = None, percentile: float | None = None) -> WinnerMap:
    """The winner map around ``ladder``'s SLOs (default: the run's own ladder), decided from the
    run's records (:func:`harness.scoring.verdict.winner_map.winner_map`; ``grid``: an axis's thresholds
    in ms by metric, ``percentile``: both axes'), written as ``winner_map.json`` into ``folder``
    (default: the run folder)."""
    from harness.metrics import slos_of
    from harness.scoring.verdict.winner_map import winner_map
    from results.schema import WINNER_MAP_FILE
    from results.store import write_model_atomic

    ladder = ladder or run.ladder
    assert ladder is not None
    kind = (run.manifest.hardware.kind if run.manifest.hardware is not None else None) or "cpu"
    found = winner_map(ladder, run.records, slos_of(ladder.slos), hardware_kind=kind, grid=grid, percentile=percentile)
    write_model_atomic((folder or run.run_dir) / WINNER_MAP_FILE, found)
    return found


def score_and_report(run_dir: Path, cfg: RunSettings) -> Recommendation:
    """Score a run ``bench run`` just wrote, under its settings ``cfg`` (hardware, price, SLOs,
    preset, failure bound), store ``recommendation.json`` and write its reports."""
    run = load_run(run_dir)
    # the profile the manifest recorded for this run (detected once), unless another was asked for
    detected = profile_from_manifest(run.manifest.hardware) if cfg.decision.hardware == "detected" else None
    hw = detected or get_profile(cfg.decision.hardware)
    hw = hw if cfg.decision.price_per_hour is None else hw.with_price(cfg.decision.price_per_hour)
    rec = recommend([run], hardware=hw, slos=cfg.decision.slos or None, preset=cfg.decision.preset, max_failure_rate=cfg.decision.max_failure_rate)
    write_recommendation(run_dir, rec)
    if run.ladder is not None:  # the ladder decision takes the declared-fact gates of the scorer
        regate_ladder(run, rec)
    write_run_reports(run_dir, rec)
    return rec


def regate_ladder(run: Run, rec: Recommendation) -> None:
    """Decide ``run``'s ladders again with the scorer's declared gates (hardware, a required
    feature, the memory fit: :data:`harness.scoring.gates.DECLARED_STAGES`; the measured ones the
    ladder judges itself) and store ``ladder.json``; nothing changes without one."""
    from harness.metrics import slos_of
    from harness.scoring.verdict.decision import judge
    from harness.scoring.gates import DECLARED_STAGES
    from results.schema import LADDER_FILE
    from results.store import write_model_atomic

    ladder = run.ladder
    assert ladder is not None
    gates = {name: (stage, rec.eliminated[name]) for name, stage in rec.elimination_stage.items()
             if stage in DECLARED_STAGES and name in ladder.engines}
    if not gates:
        return
    slos = slos_of(ladder.slos)
    price = device_price(run.manifest.hardware)
    target = (ladder.target_load or {}).get("output_tps")
    judge(ladder, run.records, slos, price_per_hour=price[0] if price else None, target_tps=target, extra_gates=gates)
    write_model_atomic(run.run_dir / LADDER_FILE, ladder)
