"""``bench recommend`` and ``bench report``: typer commands generated from their settings
(:mod:`harness.app.settings.recommend`: options declared once, with bench run's), which the main app registers
(``app.command("recommend")(recommend_cmd)``, ``app.command("report")(report_cmd)``), and
:func:`print_recommendation`, which ``bench run`` reuses.

Exit codes: 0 = done; 1 = no engine survives the hard constraints (``recommend``); 2 = bad input
(unknown run, hardware, preset, malformed ``--slo``/``--weights``), reported as one line on stderr.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path


import typer

from harness.app.cli.common import err_console, fail, make_console, note
from harness.app.cli.options import command_from
from harness.app.settings.recommend import RecommendSettings, ReportSettings
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from adapters.telemetry.hardware import get_profile
from harness.metrics import SLO, SLOError, slo_table
from harness.scoring import Recommendation, ScorerError, parse_weights, recommend
from results.hardware import HardwareProfile, profile_from_manifest
from results.recommendation import question_name, write_decision
from harness.app.run.rebuild import load_or_rebuild
from results.store import ResultsError, Run, resolve_run
from results.schema import LadderSummary
from results.schema.metric_registry import metric_figure, tps_figure
from results.schema.metric_registry import usd_figure


def _load_runs(refs: list[str], output_dir: Path) -> list[Run]:
    """The runs named by ``refs``; several must be alike (one workload, one model:
    :func:`harness.app.run.reporting.unlike_runs`), else one line and exit 2: an engine ranked above
    another that was measured on other requests or another model would be a wrong answer."""
    if not refs:
        fail("give at least one run (a folder, a run id under --output-dir, or 'latest')")
    runs = []
    for ref in refs:
        try:
            runs.append(load_or_rebuild(resolve_run(ref, output_dir), note=note))
        except ResultsError as exc:
            fail(str(exc))
    from harness.app.run.reporting import unlike_runs

    why = unlike_runs(runs) if len(runs) > 1 else None
    if why:
        fail(f"cannot rank these runs together: {why}; report or score each run on its own, or measure the "
              "engines in one bench run")
    return runs


def _hardware(name: str, gpus: int | None, runs: list[Run]) -> HardwareProfile:
    if name.strip().lower() == "recorded":
        prof = profile_from_manifest(runs[0].manifest.hardware)
        if prof is None:
            fail(f"run {runs[0].run_id} has no recorded hardware: pass --hardware with a profile name or 'detected'")
        return prof.with_devices(gpus) if gpus else prof
    try:
        return get_profile(name, gpus)
    except ValueError as exc:
        fail(f"{exc} (or 'recorded' for the run's own hardware)")


def _usd(v: object) -> str:
    """USD with 4 significant digits ("$0.1855"), "—" when there is none."""
    return usd_figure(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else "—"


def _ms(v: object, key: str) -> str:
    """A metric value (``key``: ``"tpot_p99_ms"``) in its one printed form (``metric_registry.metric_figure``)."""
    return metric_figure(key, float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else "—"


def _tps(v: object) -> str:
    return tps_figure(float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else "—"


def print_recommendation(rec: Recommendation, console: Console) -> None:
    """Print the ranking (rich table), the deciding constraint, eliminations, and sensitivity."""
    console.print(
        f"[bold]Target:[/bold] {rec.hardware['num_devices']} × {rec.hardware['name']} ({rec.hardware['kind']}); "
        f"preset {rec.preset}; weights "
        + ", ".join(f"{k}={v:g}" for k, v in rec.weights.items())
        + "; SLOs "
        + (", ".join(f"{k} ≤ {v:g} ms" for k, v in rec.slos.items()) or "none"),
        highlight=False,
    )
    if rec.ranking:
        table = Table(title="Ranking (survivors of the hard constraints)")
        for col, just in [("#", "right"), ("engine", "left"), ("score", "right"), ("per-repeat score [95%]", "right"),
                          ("tie", "left"), ("output tok/s", "right"), ("TTFT p99 ms", "right"),
                          ("TPOT p99 ms", "right"), ("$/1M out", "right"), ("condition", "left")]:
            table.add_column(col, justify=just)  # type: ignore[arg-type]
        group_of = {name: i for i, group in enumerate(rec.tie_groups) for name in group}
        for r in rec.ranking:
            ci = r.score_interval
            interval = f"{ci.point:.3f} [{ci.low:.3f}, {ci.high:.3f}]" if ci is not None else "–"
            group = group_of.get(r.engine)
            tied = group is not None and len(rec.tie_groups[group]) > 1
            marked = r.reference and "reference" not in r.display_name
            name = escape(r.display_name) + (" [dim](reference engine: a yardstick)[/dim]" if marked else "")
            table.add_row(str(r.rank), name, f"{r.score:.3f}", interval, f"tie {group + 1}" if tied else "",
                          _tps(r.metrics.get("output_throughput")), _ms(r.metrics.get("ttft_p99_ms"), "ttft_p99_ms"),
                          _ms(r.metrics.get("tpot_p99_ms"), "tpot_p99_ms"), _usd(r.metrics.get("cost_per_1m_output_tokens")),
                          r.condition)
        console.print(table)
        if rec.score_repeats < 2 and rec.on_ladder:
            console.print("[dim]score intervals: none (this lens reads each engine's ladder point pooled; the "
                          "verdict's capacity intervals carry the noise)[/dim]")
        elif rec.score_repeats < 2:
            console.print("[dim]score intervals: none (one repeat: run-to-run noise not measured; use --repeats 2+)[/dim]")
        else:
            console.print(f"[dim]score: of the median metrics over repeats; per-repeat score: the median of the "
                          f"{rec.score_repeats} interleaved repeats each scored on its own (every criterion normalised "
                          "to that repeat's best), with its 95% bootstrap interval; engines sharing a 'tie' number "
                          "overlap and are tied within the noise; the metrics here are the median over repeats of each repeat's "
                          "value (the run's summary table pools all requests instead)[/dim]")
    if rec.eliminated:
        elim = Table(title="Eliminated / not measured")
        elim.add_column("engine")
        elim.add_column("stage")
        elim.add_column("reason", overflow="fold")
        for name, reason in rec.eliminated.items():
            elim.add_row(name, rec.elimination_stage.get(name, ""), escape(reason))
        console.print(elim)
    style = "bold green" if rec.winner else "bold red"
    console.print(f"[{style}]Deciding constraint:[/{style}] {escape(rec.deciding_constraint)}", highlight=False)
    if rec.yardstick:
        console.print(f"[bold]Reference engine:[/bold] {escape(rec.yardstick)}", highlight=False)
    if rec.message:
        console.print(f"[bold red]{escape(rec.message)}[/bold red]", highlight=False)
    if rec.sensitivity:
        console.print("[bold]Sensitivity:[/bold]")
        for s in rec.sensitivity:
            console.print(f"  • {escape(s)}", highlight=False)
    for n in rec.notes:
        if n != rec.yardstick:  # printed above
            console.print(f"[dim]note: {escape(n)}[/dim]", highlight=False)


def recommend_runs(settings: RecommendSettings) -> None:
    """Rank the engines of one or more runs for a deployment target and name the deciding constraint.

    Exit code 1 when no engine survives the hard constraints, 2 on bad input.
    """
    o = settings
    run, hardware, gpus, slos, preset, weights, feature = o.run, o.hardware, o.gpus, o.slos, o.preset, o.weights, o.feature
    output_dir, json_out, max_failure_rate, price_per_hour = o.output_dir, o.json_out, o.max_failure_rate, o.price_per_hour
    runs = _load_runs(run, output_dir)
    if gpus is not None and gpus < 1:
        fail(f"--gpus must be at least 1, got {gpus}")
    target = _hardware(hardware, gpus, runs)
    target = target if price_per_hour is None else target.with_price(price_per_hour)
    if slos:  # a metric a run did not record is computed from its records, never read as failed requests
        from harness.app.run.rebuild import with_slo_metrics

        try:
            runs = [with_slo_metrics(r, slos) for r in runs]
        except ResultsError as exc:
            fail(str(exc))
    try:
        w = parse_weights(weights) if weights is not None else None
        ladder = _ladder_decided(runs[0], slos, target) if slos and len(runs) == 1 and runs[0].ladder is not None else None
        scored = [_re_decided(runs[0], ladder, slos)] if ladder is not None else runs  # its gates and points: these SLOs'
        rec = recommend(scored, hardware=target, slos=slos, weights=w, preset=preset, required_features=feature or (),
                        max_failure_rate=max_failure_rate)
    except (SLOError, ScorerError) as exc:
        fail(str(exc))
    where = None
    if len(runs) == 1:  # beside the run's own answer, never over it (a multi-run ranking belongs to no one folder)
        slo = ",".join(sorted(f"{s.key}={s.threshold_ms:g}" for s in slos)) if slos else None  # one name per question
        where = write_decision(runs[0].run_dir, question_name(slo=slo, hardware=None if hardware == "detected" else hardware,
                                                              gpus=gpus, preset=None if preset == "balanced" else preset,
                                                              weights=weights, feature=",".join(feature or []) or None,
                                                              max_failure_rate=None if max_failure_rate == 0.05 else max_failure_rate,
                                                              price_per_hour=price_per_hour,
                                                              **_map_question(settings)), rec, ladder)
    if json_out:
        typer.echo(rec.model_dump_json(indent=2))
    else:
        if ladder is not None:  # the ladders decided again under these SLOs: the answer first
            _print_ladder_verdict(ladder, make_console())
        print_recommendation(rec, make_console())
        mapped = ladder if ladder is not None else runs[0].ladder if _map_question(settings) else None
        if where is not None and mapped is not None:  # where the answer changes around these SLOs
            from harness.app.cli.verdict import print_map_line
            from harness.app.run.reporting import store_winner_map
            from results.schema import WINNER_MAP_FILE

            grid = {k: v for k, v in (("tpot", settings.map_tpot), ("ttft", settings.map_ttft)) if v}
            store_winner_map(runs[0], where, mapped, grid=grid, percentile=settings.map_percentile)
            print_map_line(where / WINNER_MAP_FILE, make_console())
        if where is not None:
            make_console().print(f"Stored in {where} (the run's own recommendation.json and ladder.json are unchanged)",
                                 markup=False, highlight=False, soft_wrap=True)
    # a ladder run asked other SLOs: its verdict is the answer (1 only when no engine meets them)
    code = (1 if ladder.decision is None or ladder.decision.outcome == "none" else 0) if ladder is not None else rec.exit_code
    if code:
        if json_out:
            err_console.print(f"[bold red]{escape(rec.message)}[/bold red]", highlight=False)
        raise typer.Exit(code)


def _map_question(settings: RecommendSettings) -> dict[str, str]:
    """The winner-map options given, as the decision folder's name takes them ({} when none)."""
    asked = (("map_tpot", settings.map_tpot), ("map_ttft", settings.map_ttft), ("map_p", settings.map_percentile))
    return {k: ",".join(f"{x:g}" for x in v) if isinstance(v, list) else f"{v:g}" for k, v in asked if v is not None}


def _ladder_decided(run: Run, slos: list[SLO], target: HardwareProfile) -> LadderSummary:
    """A ladder run's verdict decided again from its records (the decision core,
    :func:`harness.scoring.verdict.decision.judge`) under other SLOs: a copy of its ladder summary; the
    stored ``ladder.json`` keeps the run's own."""
    from harness.scoring.verdict.decision import judge

    ladder = run.ladder.model_copy(deep=True)
    ladder.slos, ladder.slos_default = slo_table(slos), False
    judge(ladder, run.records, slos, price_per_hour=target.price_per_hour,
          target_tps=(ladder.target_load or {}).get("output_tps"))
    return ladder


def _re_decided(run: Run, ladder: LadderSummary, slos: list[SLO]) -> Run:
    """``run`` as the weighted view scores it under other SLOs: the re-decided ``ladder`` (its
    gates) and each engine's summary entry on its re-decided capacity point."""
    from harness.app.run.ladder_run import repoint

    return dataclasses.replace(run, ladder=ladder, summary=repoint(run.summary, ladder, run.records, slos))


def _print_ladder_verdict(ladder: LadderSummary, console: Console) -> None:
    """The verdict and capacity table as ``bench run`` prints them, then, for each engine whose
    every measured point meets these SLOs (its capacity is only a lower bound here), how to
    measure it further."""
    from harness.app.cli.verdict import print_verdict

    print_verdict(ladder, console)
    slo = ",".join(f"{k}={v:g}" for k, v in ladder.slos.items())
    for name, e in ladder.engines.items():
        cap = e.capacity
        if cap is None or not cap.open or not e.points or e.reference:
            continue
        top = max(p.load for p in e.points)
        console.print(f"{name}: every point measured (up to {top:g} in flight) meets these SLOs, so the stored ladder "
                      f"cannot say where it stops: bench run --engine {name} --slo {slo} --max-load {int(top) * 4} "
                      "measures it further", markup=False, highlight=False, soft_wrap=True)
    console.rule("Weighted score (a secondary view)")


def report(settings: ReportSettings) -> None:
    """Write report.md and a self-contained report.html into the run folder.

    With several runs, a comparison is written into the FIRST run's folder as report-compare.md
    and report-compare.html.
    """
    from harness.app.run.reporting import write_run_reports

    runs = _load_runs(settings.run, settings.output_dir)
    console = make_console()
    if len(runs) == 1 and (runs[0].run_dir / "search.json").is_file():
        # a bench search folder: its report is the capacity search, not a re-scored load point
        from reports.search import write_search_report

        md, plot = write_search_report(runs[0].run_dir)
        console.print(f"Search report: {md}", highlight=False, soft_wrap=True)
        if plot is not None:
            console.print(f"Plot:          {plot}", highlight=False, soft_wrap=True)
        return
    md, html = write_run_reports(runs[0].run_dir, compare_runs=runs[1:] or None)
    console.print(f"Markdown report: {md}", highlight=False, soft_wrap=True)
    console.print(f"HTML report:     {html}", highlight=False, soft_wrap=True)
    from reports.imported import caveat_lines

    for line in caveat_lines(runs):  # imported runs (bench import): the metrics under another tool's definition
        console.print(line, markup=False, highlight=False, soft_wrap=True)


recommend_cmd = command_from(RecommendSettings, recommend_runs)  # the options: harness/app/settings/recommend.py
report_cmd = command_from(ReportSettings, report)
