"""The spread between measurements that earlier runs on this machine showed, taken in when a run
starts (:class:`results.schema.SpreadPrior`, stored in its ``ladder.json``).

One run alone often measures only its leader's bracket twice: two or three degrees of freedom
for the machine's noise between measurements (:mod:`harness.scoring.capacity.spread`), whose
estimate then reads 0 in about a fifth of runs (a true 8 % on the 2-core reference machine) and
whose t quantile is 4.3 where the normal's is 1.96. The runs kept beside it in the same results
folder measured the same machine: every point they measured more than once is evidence of the
same noise. A run takes in, newest first, the earlier ladder runs of the same folder whose
manifest names the same hardware (name, kind, devices, memory) and platform, at most
:data:`MAX_RUNS` of them, none older than :data:`MAX_AGE_DAYS` days, among the newest
:data:`MAX_READ` folders, reads their records
(nothing they declared), and freezes what it took into its own ``ladder.json``, so deciding it
again later (``bench report``, ``bench recommend``, ``bench compare``) gives the same intervals
whatever the folder holds by then. Imported runs (another client's measurements) are not taken in,
nor the engines of a run that were ``--endpoint`` deployments (served by another machine).

Two kinds of evidence, pooled by the one estimator:

- **within a run**: a point measured more than once in one run (a repeat on a fresh start,
  minutes later): its whole measurements, one group;
- **across runs**: one engine set up alike (name, version, engine args, threads, launch command
  with its port aside; the same model and workload spec, :func:`setup_key`) measured at one load
  with as many requests planned, in several runs: each run's first whole measurement of that
  point, one group (a first measurement may also count in its pair within its run; a brief
  low end only beside brief ones: the requests planned are in the key). Every point of a run
  shares that run's state, so the runs are the independent draws of it: these groups are worth
  one degree of freedom per run beyond the first (``SpreadPrior.df``), not one per point. On
  the 2-core reference machine (2026-12-07) pairs within a run spread about 4 %, the same
  points across eight runs of a day about 10 %: a run's state (CPU steal, the time of day, a
  fresh start) moves all of its measurements, and only evidence across runs holds that, which a
  re-run of the same recipe meets. Decided again with the other runs' evidence
  (``benchmarks/stored_run_checks.py coverage``), openvino's interval held the other runs' mean
  in 7 of 8 of those runs from pairs within runs alone (±4.4 %, ν = 2), and in 8 of 8 with the
  points across runs too (±10.5 %, ν = 8 for the newest).

Left as they are: the key holds no harness version (eight runs of one version spanned six
commits), and a stored run without engine, model or workload facts groups by engine name and
load alone.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from results.differences import launch_command
from results.schema import LadderSummary, SpreadPrior
from results.schema.facts import HardwareFacts
from results.schema.manifest import Manifest
from results.store import ResultsError, created_at, list_runs, load_run

from harness.scoring.capacity.spread import WHOLE, Spread, estimate, groups_of, measurement_log_rate
from harness.scoring.verdict.decision import run_points

MAX_RUNS = 8  # earlier runs taken in, at most (the newest on the same machine)
MAX_AGE_DAYS = 30  # ... and none older than this
MAX_READ = 32  # run folders read at most (each one's records are read: a folder of hundreds stays a second's work)


def machine_key(hardware: HardwareFacts | None, platform: str | None) -> tuple[object, ...] | None:
    """What makes two runs' machines the same one for their noise: hardware name, kind,
    devices, memory (bytes) and platform string; None when the manifest does not say."""
    if hardware is None or platform is None:
        return None
    return hardware.name, hardware.kind, hardware.num_devices, hardware.memory_bytes, platform


def prior_spread(output_dir: Path, manifest: Manifest, *, exclude: str = "", now: float | None = None,
                 across: bool = True) -> SpreadPrior:
    """The :class:`SpreadPrior` for a run writing ``manifest`` into ``output_dir`` (module
    docstring): the groups of points measured more than once within a run, then those measured
    in several runs (``across=False``: not those, the rule before them); ``exclude``: its own run
    id. A run folder that cannot be read is passed over."""
    key = machine_key(manifest.hardware, manifest.platform)
    prior = SpreadPrior()
    if key is None:
        return prior
    oldest = (time.time() if now is None else now) - MAX_AGE_DAYS * 86_400
    read: list[tuple[str, list[list[tuple[float, float]]], dict]] = []  # newest first: (run id, groups within it, firsts)
    for count, run_dir in enumerate(list_runs(output_dir)):
        if count >= MAX_READ or created_at(run_dir) < oldest:
            break
        if run_dir.name == exclude:
            continue
        try:
            run = load_run(run_dir)
        except (ResultsError, OSError, ValueError):
            continue
        if run.ladder is None or run.manifest is None or run.manifest.imported_from:
            continue
        if machine_key(run.manifest.hardware, run.manifest.platform) != key:
            continue
        external = {n for n, f in (run.manifest.engines or {}).items() if _external(f)}  # another machine's noise
        points = {n: pts for n, pts in run_points(run.ladder, run.records).items() if n not in external}
        groups = [[(float(x), float(v)) for x, v in g] for g in groups_of([[p.repeats for p in pts] for pts in points.values()])]
        firsts = _first_measurements(run.manifest, run.ladder, points) if across else {}
        read.append((run.ladder.run_id, groups, firsts))
    # the newest MAX_RUNS runs that add evidence: a point measured twice in it, or one measured alike in another run
    measured_in: dict[tuple[object, ...], int] = {}
    for _, _, firsts in read:
        for point in firsts:
            measured_in[point] = measured_in.get(point, 0) + 1
    kept = [r for r in read if r[1] or any(measured_in[p] >= 2 for p in r[2])][:MAX_RUNS]
    shared: dict[tuple[object, ...], list[tuple[str, tuple[float, float]]]] = {}
    for run_id, _, firsts in kept:
        for point, m in firsts.items():
            shared.setdefault(point, []).append((run_id, m))
    across_runs = [g for g in shared.values() if len(g) >= 2]
    for run_id, groups, _ in kept:
        prior.runs.append(run_id)
        prior.groups.extend(groups)
    prior.groups.extend([m for _, m in g] for g in across_runs)
    # degrees of freedom: one per measurement beyond the first within a run; across runs, one per run beyond the
    # first (every point a run measured shares its state: the runs are the independent draws of it)
    within = sum(len(g) - 1 for _, groups, _ in kept for g in groups)
    runs_across = len({run_id for g in across_runs for run_id, _ in g})
    prior.df = within + max(runs_across - 1, 0)
    return prior


def setup_key(manifest: Manifest, engine: str) -> tuple[object, ...]:
    """What makes one engine's measurements in two runs measurements of the same thing: its
    name, version, engine args, threads and launch command (its port aside), the model (its
    digest, else its name) and the workload spec (its tokenizer path aside)."""
    facts = (manifest.engines or {}).get(engine)
    command = getattr(facts, "command", None)
    model = manifest.model
    workload = {k: v for k, v in (manifest.workload or {}).items() if k != "tokenizer"}
    return (engine, getattr(facts, "version", None), json.dumps(getattr(facts, "engine_args", None) or {}, sort_keys=True),
            getattr(facts, "threads", None), launch_command(command),
            (model.digest or model.name) if model is not None else None, json.dumps(workload, sort_keys=True, default=str))


def _first_measurements(manifest: Manifest, ladder: LadderSummary,
                        points: dict[str, list]) -> dict[tuple[object, ...], tuple[float, float]]:
    """Per engine and point of ``points`` (an engine's :func:`run_points`), its first measurement's
    ``(log X, v)`` when it is whole (no failed request, and at least :data:`WHOLE` of the requests
    planned for it; of the point's largest measurement where no plan was recorded), keyed by
    :func:`setup_key`, the load, the requests planned and the devices."""
    out: dict[tuple[object, ...], tuple[float, float]] = {}
    for name, pts in points.items():
        planned = {float(p.load): p.planned_requests for p in ladder.engines[name].points}
        setup = setup_key(manifest, name)
        for p in pts:
            first = p.repeats[0]
            plan = planned.get(p.load) or []
            expected = plan[0] if plan else max(r.n for r in p.repeats)
            if first.n == 0 or not bool(first.ok.all()) or first.n < WHOLE * expected:
                continue
            m = measurement_log_rate(first)
            if m is not None:
                out[(setup, p.load, expected, p.devices)] = m
    return out


def _external(facts: object) -> bool:
    """Whether an engine of a stored run was an ``--endpoint`` (served elsewhere: its measurements
    show that machine's noise, not this one's)."""
    extra = getattr(facts, "model_extra", None) or {}
    return bool(getattr(facts, "base_url", None) or extra.get("base_url"))


def spread_line(prior: SpreadPrior) -> str:
    """The console's line on what a run took in: ``Spread between measurements: ±10.5 % between
    measurements (ν = 8) from 7 earlier runs on this machine (points measured twice within a run,
    or in several runs), pooled with this run's repeated points``."""
    if not prior.groups:
        return ("Spread between measurements: no earlier run on this machine in this results folder; it comes from "
                "this run's repeated points alone (few degrees of freedom: wide intervals)")
    s = estimate(prior.groups)
    s = Spread(s.tau, min(s.df, prior.df) if prior.df is not None else s.df, s.points)
    runs = len(prior.runs)
    return (f"Spread between measurements: {s.text()} from {runs} earlier run{'s' if runs != 1 else ''} on this "
            "machine (points measured twice within a run, or in several runs), pooled with this run's repeated points")
