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
"""

from __future__ import annotations

import time
from pathlib import Path

from results.schema import SpreadPrior
from results.schema.facts import HardwareFacts
from results.schema.manifest import Manifest
from results.store import ResultsError, created_at, list_runs, load_run

from harness.scoring.capacity.spread import estimate, groups_of
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


def prior_spread(output_dir: Path, manifest: Manifest, *, exclude: str = "", now: float | None = None) -> SpreadPrior:
    """The :class:`SpreadPrior` for a run writing ``manifest`` into ``output_dir`` (module
    docstring); ``exclude``: its own run id. A run folder that cannot be read is passed over."""
    key = machine_key(manifest.hardware, manifest.platform)
    prior = SpreadPrior()
    if key is None:
        return prior
    oldest = (time.time() if now is None else now) - MAX_AGE_DAYS * 86_400
    for read, run_dir in enumerate(list_runs(output_dir)):
        if len(prior.runs) >= MAX_RUNS or read >= MAX_READ or created_at(run_dir) < oldest:
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
        groups = groups_of([[p.repeats for p in pts] for n, pts in run_points(run.ladder, run.records).items()
                            if n not in external])
        if groups:
            prior.runs.append(run.ladder.run_id)
            prior.groups.extend([(float(x), float(v)) for x, v in g] for g in groups)
    return prior


def _external(facts: object) -> bool:
    """Whether an engine of a stored run was an ``--endpoint`` (served elsewhere: its measurements
    show that machine's noise, not this one's)."""
    extra = getattr(facts, "model_extra", None) or {}
    return bool(getattr(facts, "base_url", None) or extra.get("base_url"))


def spread_line(prior: SpreadPrior) -> str:
    """The console's line on what a run took in: ``Spread between measurements: ±7.9 % (ν = 7) from
    3 earlier runs on this machine, pooled with this run's repeated points``."""
    if not prior.groups:
        return ("Spread between measurements: no earlier run on this machine in this results folder; it comes from "
                "this run's repeated points alone (few degrees of freedom: wide intervals)")
    s = estimate(prior.groups)
    runs = len(prior.runs)
    return (f"Spread between measurements: {s.text()} from {runs} earlier run{'s' if runs != 1 else ''} on this "
            "machine, pooled with this run's repeated points")
