"""What a run takes in of earlier runs' spread between measurements
(harness/app/run/spread_history.py): only ladder runs of the same machine, newest first, at most
MAX_RUNS; frozen into ladder.json, so a stored run decided again gives the same interval whatever
the folder holds later. Runs are scripted engines whose every measurement runs on a machine a
lognormal factor faster or slower (``SimEngine.drift``), stored as bench run stores them."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from harness.app.run import spread_history
from harness.app.run.spread_history import prior_spread, spread_line
from harness.loadgen.simulated import SimEngine
from harness.metrics import parse_slos
from harness.scoring.capacity.spread import estimate
from harness.scoring.verdict.decision import engine_capacity, judge
from results.schema import LADDER_FILE
from results.store import load_run, read_records, write_model_atomic
from tests.helpers import sim_ladder_run

HERE = {"name": "CPU", "kind": "cpu", "memory_bytes": 8 * 1024 ** 3, "num_devices": 1}
ELSEWHERE = {**HERE, "memory_bytes": 16 * 1024 ** 3}
PLATFORM = "Linux-test-x86_64"
DRIFTING = SimEngine("e", slots=16, prefill_ms=80, tpot_ms=25, batch_slowdown=0.08, jitter=0.05, drift=0.1)
LOADS = (1, 2, 4, 8)


def _run(root: Path, run_id: str, hardware: dict, *, seed: int, age_s: float = 0.0) -> Path:
    d = sim_ladder_run(root, run_id, {"e": DRIFTING}, loads=LOADS, repeats=2, seed=seed, hardware=hardware,
                       platform=PLATFORM)
    when = 1_800_000_000 - age_s  # mtimes order the runs: created_at falls back to them
    for name in os.listdir(d):
        os.utime(d / name, (when, when))
    return d


def test_a_run_takes_in_only_the_same_machines_ladder_runs_newest_first(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    _run(tmp_path, "old", HERE, seed=10, age_s=300)
    _run(tmp_path, "other", ELSEWHERE, seed=20, age_s=200)
    _run(tmp_path, "new", HERE, seed=30, age_s=100)
    mine = _run(tmp_path, "mine", HERE, seed=40)
    manifest = load_run(mine).manifest
    prior = prior_spread(tmp_path, manifest, exclude="mine", now=1_800_000_000)
    assert prior.runs == ["new", "old"]  # not the other machine's, not its own
    # every point of both, measured twice in each (within a run), then each point across the two (their first
    # measurements: one engine set up alike at the same load)
    assert len(prior.groups) == 2 * len(LOADS) + len(LOADS)
    assert all(len(g) == 2 for g in prior.groups)
    monkeypatch.setattr(spread_history, "MAX_RUNS", 1)
    assert prior_spread(tmp_path, manifest, exclude="mine", now=1_800_000_000).runs == ["new"]
    # none older than MAX_AGE_DAYS
    later = 1_800_000_000 + spread_history.MAX_AGE_DAYS * 86_400 - 150
    monkeypatch.setattr(spread_history, "MAX_RUNS", 8)
    assert prior_spread(tmp_path, manifest, exclude="mine", now=later).runs == ["new"]
    # the newest MAX_READ folders only (its own, then new, other, old): reading three reaches "other", not "old"
    monkeypatch.setattr(spread_history, "MAX_READ", 3)
    assert prior_spread(tmp_path, manifest, exclude="mine", now=1_800_000_000).runs == ["new"]


def test_points_measured_in_several_runs_are_evidence_of_the_spread_between_runs(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """Five runs of one engine, each point measured once, on a machine whose state moves every
    time of a run by a known factor (a run-to-run effect no repeat within a run sees): within runs
    there is no evidence at all; across runs, each load's first measurements in the five runs are
    one group, and the estimate finds the factors' spread. A run of another engine version, and a
    measurement cut short of the requests it planned, are not evidence of that point."""
    import dataclasses
    import json

    factors = (0.85, 1.0, 1.15, 0.92, 1.08)
    steady = dataclasses.replace(DRIFTING, drift=0.0, jitter=0.02)
    for i, f in enumerate(factors):
        engine = dataclasses.replace(steady, prefill_ms=steady.prefill_ms / f, tpot_ms=steady.tpot_ms / f)
        d = sim_ladder_run(tmp_path, f"run{i}", {"e": engine}, loads=LOADS, seed=10 * i, hardware=HERE, platform=PLATFORM)
        when = 1_800_000_000 - 100 * (i + 1)
        for name in os.listdir(d):
            os.utime(d / name, (when, when))
    mine = sim_ladder_run(tmp_path, "mine", {"e": steady}, loads=LOADS, seed=99, hardware=HERE, platform=PLATFORM)
    manifest = load_run(mine).manifest
    assert prior_spread(tmp_path, manifest, exclude="mine", now=1_800_000_000, across=False).groups == []
    prior = prior_spread(tmp_path, manifest, exclude="mine", now=1_800_000_000)
    assert prior.runs == ["run0", "run1", "run2", "run3", "run4"]
    assert sorted(len(g) for g in prior.groups) == [5] * len(LOADS)
    truth = float(np.std(np.log(factors), ddof=1))  # 0.117
    spread = estimate(prior.groups)
    assert truth * 0.75 < spread.tau < truth * 1.25, (spread, truth)
    # worth one degree of freedom per run beyond the first (each run's state moves all its points), not one per point
    assert spread.df == 4 * len(LOADS) and prior.df == len(factors) - 1
    # another version of the engine measures something else; a first measurement cut short is no evidence
    m = json.loads((tmp_path / "run0" / "manifest.json").read_text())
    m.setdefault("engines", {})["e"] = {**m.get("engines", {}).get("e", {}), "version": "2.0"}
    (tmp_path / "run0" / "manifest.json").write_text(json.dumps(m))
    ladder = json.loads((tmp_path / "run3" / LADDER_FILE).read_text())
    ladder["engines"]["e"]["points"][0]["planned_requests"] = [1000]  # it measured 24 of them
    (tmp_path / "run3" / LADDER_FILE).write_text(json.dumps(ladder))
    prior = prior_spread(tmp_path, manifest, exclude="mine", now=1_800_000_000)
    assert sorted(len(g) for g in prior.groups) == [3] + [4] * (len(LOADS) - 1)
    assert prior.runs == ["run1", "run2", "run3", "run4"] and prior.df == 3  # the newest adds nothing: not counted
    # ... nor does it take one of the MAX_RUNS places
    monkeypatch.setattr(spread_history, "MAX_RUNS", 2)
    assert prior_spread(tmp_path, manifest, exclude="mine", now=1_800_000_000).runs == ["run1", "run2"]


def test_the_prior_is_frozen_into_the_run_and_decides_it_again_the_same(tmp_path) -> None:  # noqa: ANN001
    _run(tmp_path, "old", HERE, seed=10, age_s=300)
    mine = _run(tmp_path, "mine", HERE, seed=40)
    run = load_run(mine)
    prior = prior_spread(tmp_path, run.manifest, exclude="mine", now=1_800_000_000)
    summary = run.ladder
    assert summary is not None
    slos = parse_slos("ttft_p90=1000,tpot_p90=60")
    alone = engine_capacity(summary, "e", run.records, slos)[0]
    summary.spread_prior = prior
    judge(summary, run.records, slos)
    write_model_atomic(mine / LADDER_FILE, summary)
    cap = summary.engines["e"].capacity
    assert cap is not None and alone is not None
    assert cap.spread_df == alone.spread.df + len(prior.groups)  # a pair is one degree of freedom
    assert cap.spread == pytest.approx(estimate([*prior.groups, *_own(mine)]).tau, abs=1e-6)
    # the folder changes (the earlier run deleted): deciding the stored run again gives the same interval
    shutil.rmtree(tmp_path / "old")
    again = load_run(mine)
    assert again.ladder is not None and again.ladder.spread_prior == prior
    redone, _ = engine_capacity(again.ladder, "e", read_records(mine / "requests.jsonl"), slos)
    assert redone is not None and redone.interval == pytest.approx(cap.interval)


def _own(run_dir: Path) -> list:
    from harness.scoring.capacity.spread import groups_of
    from harness.scoring.verdict.decision import run_points

    run = load_run(run_dir)
    assert run.ladder is not None
    return groups_of([[p.repeats for p in pts] for pts in run_points(run.ladder, run.records).values()])


def test_the_console_line_says_what_was_taken_in(tmp_path) -> None:  # noqa: ANN001
    from results.schema import SpreadPrior

    assert spread_line(SpreadPrior()).startswith("Spread between measurements: no earlier run on this machine")
    prior = SpreadPrior(runs=["a", "b"], groups=[[(0.0, 0.001), (0.2, 0.001)], [(1.0, 0.001), (1.1, 0.001)]])
    line = spread_line(prior)
    assert line == (f"Spread between measurements: {estimate(prior.groups).text()} from 2 earlier runs on this machine "
                    "(points measured twice within a run, or in several runs), pooled with this run's repeated points")
    assert "(ν = 2)" in line


def test_the_capacity_table_says_what_noise_its_intervals_hold(tmp_path) -> None:  # noqa: ANN001
    from reports.frontier import spread_note

    once = load_run(sim_ladder_run(tmp_path, "once", {"e": DRIFTING}, loads=LOADS)).ladder
    assert once is not None
    assert spread_note(once) == ("Intervals hold the requests' noise only: the spread between measurements (a machine's, "
                                 "run to run) was not estimated (no point measured twice in whole, within this run or "
                                 "across the earlier runs on this machine it took in; (1 run) beside each).")
    _run(tmp_path, "old", HERE, seed=10, age_s=300)
    mine = _run(tmp_path, "mine", HERE, seed=40)
    run = load_run(mine)
    summary = run.ladder
    assert summary is not None
    summary.spread_prior = prior_spread(tmp_path, run.manifest, exclude="mine", now=1_800_000_000)
    judge(summary, run.records, parse_slos("ttft_p90=1000,tpot_p90=60"))
    cap = summary.engines["e"].capacity
    assert cap is not None and cap.spread is not None
    assert spread_note(summary) == (
        f"Intervals hold the spread between measurements: ±{100 * (math.exp(cap.spread) - 1):.1f} % per measurement "
        f"(ν = {cap.spread_df}; from this run's points measured twice and 1 earlier run on this machine: old), moving "
        "each point's latency and throughput in every resample.")


def test_an_endpoint_served_elsewhere_and_an_imported_run_are_not_taken_in(tmp_path) -> None:  # noqa: ANN001
    import json

    endpoint = _run(tmp_path, "endpoint", HERE, seed=10, age_s=300)
    m = json.loads((endpoint / "manifest.json").read_text())
    m.setdefault("engines", {})["e"] = {"base_url": "http://gpu-box:8000/v1"}
    (endpoint / "manifest.json").write_text(json.dumps(m))
    imported = _run(tmp_path, "imported", HERE, seed=20, age_s=200)
    m = json.loads((imported / "manifest.json").read_text())
    m["imported_from"] = {"tool": "aiperf", "label": "aiperf profile", "file": "profile_export.jsonl"}
    (imported / "manifest.json").write_text(json.dumps(m))
    broken = _run(tmp_path, "broken", HERE, seed=30, age_s=100)
    (broken / "ladder.json").write_text("{not json")
    mine = _run(tmp_path, "mine", HERE, seed=40)
    assert prior_spread(tmp_path, load_run(mine).manifest, exclude="mine", now=1_800_000_000).runs == []
