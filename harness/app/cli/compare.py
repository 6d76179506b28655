"""``bench compare RUN_A RUN_B`` (the regression guard) and ``bench results history ENGINE``
(an engine's capacity over the stored runs), issue 41.

Both read stored ladders and decide them again from their records at one set of SLOs
(:mod:`harness.scoring.verdict.compare`); nothing is measured and no run folder is written. Exit codes of
``compare``: 0 = compared (and the gate held), 1 = ``--fail-below`` failed for an engine, 2 = bad
input (one line).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import typer
from rich.markup import escape
from rich.table import Table

from harness.app.cli.common import fail, make_console, note
from harness.app.cli.options import command_from
from harness.app.settings.recommend import CompareSettings, HistorySettings
from harness.metrics import SLO, slo_table, slos_of
from results.pairs import split_list
from results.store import ResultsError, Run
from results.schema.ladder import tps_interval_text
from results.schema.metric_registry import tps_figure


def _load(ref: str, output_dir: Path) -> Run:
    from harness.app.run.rebuild import load_or_rebuild
    from results.store import resolve_run

    try:
        run = load_or_rebuild(resolve_run(ref, output_dir), note=note)
    except ResultsError as exc:
        fail(str(exc))
    if run.ladder is None:
        fail(f"run {run.run_id} measured load points, not load ladders: bench compare reads capacities at the SLO; "
             "compare runs of bench run without -n/--request-rate")
    return run


def _capacity(cap) -> str:  # type: ignore[no-untyped-def]
    """A capacity as the run's capacity table prints it (output tok/s per device, 95 % interval)."""
    if cap is None:
        return "–"
    if cap.never_met or cap.output_tps <= 0:
        return "0 (misses the SLO at its lowest load)"
    return f"{'≥ ' if cap.open else ''}{tps_figure(cap.output_tps)} {tps_interval_text(cap.interval) or '[–]'}"


def compare_runs(settings: CompareSettings) -> None:
    """Compare each engine's capacity at the SLO between two stored runs (B over A, with its 95 %
    interval): moved up, moved down, equivalent (the 90 % interval inside ±--margin, 5 %), within the
    noise (the 95 % interval holds 1) or not separated; and list what differed between the runs (engine version and args, harness, model
    digest, hardware, workload). Nothing is measured."""
    from harness.scoring.verdict.compare import compare, fails

    o = settings
    run_a, run_b, engine, fail_below, output_dir, json_out = o.run_a, o.run_b, o.engine, o.fail_below, o.output_dir, o.json_out
    if fail_below is not None and not 0 < fail_below < float("inf"):
        fail(f"--fail-below is a capacity ratio B/A > 0 (0.95 = fail on a drop of more than 5 %), got {fail_below:g}")
    if not 0 < o.margin < 1:
        fail(f"--margin is a fraction in (0, 1) (0.05 = a change of 5 % counts), got {o.margin:g}")
    a, b = _load(run_a, output_dir), _load(run_b, output_dir)
    if a.run_dir.resolve() == b.run_dir.resolve():
        fail(f"RUN_A and RUN_B are the same run ({a.run_id}): give two runs")
    if (wa := _source(a)) != (wb := _source(b)):
        fail(f"run {a.run_id} replayed {wa!r} and run {b.run_id} {wb!r}: capacities "
             "on other workloads are not comparable; compare runs of one workload")
    slos = o.slos or slos_of(a.ladder.slos if a.ladder else {})
    names = split_list(engine)
    if engine is not None and not names:
        fail(f"--engine {engine!r} names no engine: give engine names separated by commas (own,vllm), or leave it out")
    try:
        changes = compare((a.ladder, a.records), (b.ladder, b.records), slos, names,  # type: ignore[arg-type]
                          margin=o.margin)
    except KeyError as exc:
        fail(f"{exc.args[0]}: choose engines a run measured (--engine), or leave --engine out")
    if not changes or all(c.moved == "no_capacity" for c in changes):
        fail(f"runs {a.run_id} and {b.run_id} measured no engine in common (and none failed in run B): "
             "nothing to compare; see bench results show for what each measured")
    gated = [c.engine for c in changes if fail_below is not None and fails(c, fail_below)]
    _print(a, b, changes, slos, gated, fail_below, json_out, o.margin)
    if gated:
        raise typer.Exit(1)


def _print(a: Run, b: Run, changes: Sequence, slos: Sequence[SLO], gated: list[str],  # type: ignore[type-arg]
           fail_below: float | None, json_out: bool, margin: float = 0.05) -> None:
    from harness.scoring.verdict.compare import WORDS, ratio_text
    from harness.scoring.verdict.decision import slos_text
    from results.differences import run_differences, unrecorded

    diffs = run_differences(a.manifest, b.manifest, [c.engine for c in changes])
    if json_out:
        typer.echo(json.dumps({"run_a": a.run_id, "run_b": b.run_id, "slos": slo_table(slos), "margin": margin,
                               "engines": [{"engine": c.engine, "before": _cap_json(c.before), "after": _cap_json(c.after),
                                            "ratio": _num(c.ratio), "interval": _pair(c.interval),
                                            "equivalence_interval": _pair(c.equivalence), "moved": c.moved, "why": c.why,
                                            "failed_gate": c.engine in gated} for c in changes],
                               "differences": diffs}, indent=2, allow_nan=False))
        return
    console = make_console()
    t = Table(title=f"Capacity at {slos_text(slos)}: run B ({b.run_id}) over run A ({a.run_id})")
    for col, right in (("engine", False), ("A: output tok/s per device [95%]", True),
                       ("B: output tok/s per device [95%]", True), ("B / A [95%]", True), ("", False), ("why", False)):
        t.add_column(col, justify="right" if right else "left", overflow="fold")
    for c in changes:
        t.add_row(escape(c.engine), _capacity(c.before), _capacity(c.after), ratio_text(c), WORDS[c.moved], escape(c.why))
    console.print(t)
    m = f"[{1 / (1 + margin):.3g}×, {1 + margin:.3g}×] (--margin {margin:g}: {100 * (1 / (1 + margin) - 1):+.3g} % / +{100 * margin:.3g} %)"
    console.print(f"moved: the 95 % interval of B/A lies wholly outside {m}; equivalent: its 90 % interval lies "
                  "inside it (two one-sided tests); within the noise: neither, and the 95 % interval holds 1 (no change "
                  "these runs can see, not a claim that none happened); not separated: a change beyond the noise not "
                  "shown to exceed the margin, or a lower bound; failed in run B: it failed to start or stay up there "
                  "(a --fail-below gate fails on it where it had a capacity in run A); not compared: not measured in "
                  "both runs, or 0 in both.", markup=False, highlight=False)
    console.print("What differed: " + ("; ".join(diffs) if diffs else "nothing recorded differs"), markup=False,
                  highlight=False, soft_wrap=True)
    if missing := unrecorded(a.manifest, b.manifest):
        console.print(f"Not recorded by one of the runs (not compared): {', '.join(missing)}", markup=False)
    if fail_below is not None:
        console.print((f"Gate failed (--fail-below {fail_below:g}): {', '.join(gated)}" if gated else
                       f"Gate held (--fail-below {fail_below:g}): no capacity fell below it beyond the noise"),
                      markup=False, highlight=False)


def _num(v: float | None) -> float | str | None:
    """A JSON number, or the strings results.schema writes for the ones JSON lacks (``"Infinity"``:
    a ratio over a capacity whose draws reached 0)."""
    from results.schema.base import _bound_json

    return None if v is None else _bound_json(float(v))


def _pair(p: tuple[float, float] | None) -> list[float | str | None] | None:
    return None if p is None else [_num(p[0]), _num(p[1])]


def _cap_json(cap) -> dict | None:  # type: ignore[no-untyped-def, type-arg]
    """One run's capacity for ``--json``: output tok/s per device with its 95 % interval, and
    whether it is a lower bound (``open``: no SLO broke) or 0 (``never_met``)."""
    if cap is None:
        return None
    return {"output_tps": _num(cap.output_tps), "interval": _pair(cap.interval), "open": cap.open,
            "never_met": cap.never_met, "lowest_fails": _num(cap.lowest_fails)}


def history(settings: HistorySettings) -> None:
    """List ENGINE's capacity at one set of SLOs over the stored runs of one workload, oldest first,
    each decided again from its records, with its 95 % interval, its version, and whether it moved
    from the run before (as bench compare reads it)."""
    from harness.scoring.verdict.compare import WORDS, compare_engine, run_capacity
    from harness.scoring.verdict.decision import slos_text
    from results.schema.engine import EngineStatus
    from results.store import list_runs, load_run

    engine, workload, output_dir = settings.engine, settings.workload, settings.output_dir
    runs = []
    for path in list_runs(output_dir):  # newest first
        try:
            run = load_run(path)
        except ResultsError:
            continue  # an unreadable or killed folder is listed by bench results list, not here
        lad = run.ladder.engines.get(engine) if run.ladder is not None else None
        if lad is not None and (lad.points or lad.status == EngineStatus.FAILED):
            runs.append(run)  # a run where it failed is history too
    if workload is not None:
        runs = [r for r in runs if r.summary.workload == workload]
    if not runs:
        fail(f"no stored run under {output_dir} climbed a ladder for {engine!r}"
             + (f" on {workload!r}" if workload else "") + ": see bench results list")
    source = _source(runs[0])  # the newest run's workload, its trace included: other traces are other workloads
    others = len([r for r in runs if _source(r) != source])
    runs = [r for r in runs if _source(r) == source][::-1]  # oldest first
    slos = settings.slos or slos_of(runs[-1].ladder.slos if runs[-1].ladder else {})
    t = Table(title=f"{engine} on {source}: capacity at {slos_text(slos)}, each run decided again")
    for col, right in (("run", False), ("created", False), ("version", False), ("output tok/s per device [95%]", True),
                       ("in flight", True), ("vs the run before", False)):
        t.add_column(col, justify="right" if right else "left", overflow="fold")
    before: Run | None = None
    for run in runs:
        lad = run.ladder.engines[engine]  # type: ignore[union-attr]
        cap = run_capacity((run.ladder, run.records), engine, slos, 0)[0] if lad.points else None  # type: ignore[arg-type]
        moved = (WORDS[compare_engine((before.ladder, before.records), (run.ladder, run.records),  # type: ignore[arg-type]
                                      engine, slos).moved] if before is not None else "")
        facts = run.manifest.engines.get(engine)
        load = "–" if cap is None or cap.never_met else f"{'≥ ' if cap.open else ''}{cap.load:.3g}"
        shown = _capacity(cap) if lad.status != EngineStatus.FAILED or (cap is not None and not cap.open) else \
            f"failed{': ' + (lad.crash or lad.reason) if (lad.crash or lad.reason) else ''}"
        t.add_row(escape(run.run_id), escape((run.manifest.created_at or "")[:16]), escape(str(facts.version or "?") if facts else "?"),
                  escape(shown), load, moved)
        before = run
    console = make_console()
    console.print(t)
    console.print("vs the run before: as bench compare RUN_BEFORE RUN reads it (--margin 0.05): moved when the 95 % "
                  "interval of the ratio lies wholly beyond ±5 %, equivalent when its 90 % interval lies inside, within "
                  "the noise when neither and its 95 % interval holds 1, failed in run B where it failed to start or "
                  "stay up, not compared where it has no capacity in either, else not separated (bench compare says why).",
                  markup=False, highlight=False)
    if others:
        console.print(f"{others} other run{'s' if others != 1 else ''} of {engine} replayed another workload or trace, "
                      f"not listed: the history is of the newest run's ({source})", markup=False, highlight=False)


def _source(run: Run) -> str:
    """What ``run`` replayed (:func:`results.differences.workload_source`)."""
    from results.differences import workload_source

    return workload_source(run.summary.workload, run.manifest)


compare_cmd = command_from(CompareSettings, compare_runs)  # the options: harness/app/settings/recommend.py
history_cmd = command_from(HistorySettings, history)
