"""Does the stored run answer as a fresh run would? (issue 41's checks, against real engines)

Two checks, each printing one table, measured with the ``bench`` of this checkout:

``redecide RUN --slo S [--slo S …] [--engines E1,E2] [--time-budget 6m]``
    For each SLO: the run's ladders decided again from its records (``bench recommend RUN --slo S
    --json``: the verdict stored in ``RUN/decisions/<question>/ladder.json``) beside a fresh
    ``bench run --engine E1,E2 --slo S`` on the same engines (default: the run's ranked
    production engines), and whether they agree: the same winner, or no winner on both (not
    separated, undecided or none), the issue's bar.

``serve RUN [--port 8301] [--time-budget 6m]``
    The run's ``recipe.json`` served by ``bench serve`` on another port, measured through
    ``bench run --endpoint ENGINE-served=http://127.0.0.1:PORT`` at the recipe's SLOs, and whether that
    capacity lies inside the recipe's 95 % interval. The endpoint was just started, so its cache
    is cold: it is measured unsalted (``--prompt-salt none``), as the run that wrote the recipe was
    (a salted run read OpenVINO 20-25 % lower at 4 and 8 in flight on 2026-12-06).

``coverage DIR [--engine openvino]``
    Measures nothing: each ladder run of ``DIR`` on one machine, its ``--engine`` capacity decided
    again at the run's own SLOs with the spread the other runs of ``DIR`` give it
    (``harness.app.run.spread_history``, the run itself left out), once with the evidence within
    runs only (the rule before the evidence across runs) and once with both; whether each interval
    holds the mean of the other runs' capacities, and how many of them it holds. A run of the
    same recipe is what an interval is checked against.

    python benchmarks/stored_run_checks.py redecide results/RUN --slo ttft_p90=4000,tpot_p90=140
    python benchmarks/stored_run_checks.py serve results/RUN
    python benchmarks/stored_run_checks.py coverage results --engine openvino

Fresh runs go to ``--output-dir`` (default ``/tmp/stored-run-checks``). Run nothing else on the
machine meanwhile: the fresh runs are measurements.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

BENCH = [sys.executable, "-m", "harness.app.cli"]


def _verdict(ladder_json: Path) -> dict:
    d = json.loads(ladder_json.read_text())["decision"]
    return {"outcome": d["outcome"], "winner": d["winner"], "leader": d["leader"], "sentence": d["sentence"]}


def _agree(a: dict, b: dict) -> bool:
    return a["winner"] == b["winner"] if a["winner"] or b["winner"] else True


def _fresh(engines: str, slo: str, budget: str, out: Path) -> Path:
    before = set(out.glob("*")) if out.is_dir() else set()
    subprocess.run([*BENCH, "run", "--engine", engines, "--workload", "agentic", "--slo", slo, "--time-budget", budget,
                    "--no-feature-probes", "--output-dir", str(out)], check=False)
    return max(set(out.glob("*")) - before, key=lambda p: p.stat().st_mtime)


def redecide(run: Path, slos: list[str], engines: str | None, budget: str, out: Path) -> None:
    stored = json.loads((run / "ladder.json").read_text())
    engines = engines or ",".join(stored["decision"]["ranking"])
    rows = []
    for slo in slos:
        subprocess.run([*BENCH, "recommend", str(run), "--slo", slo, "--hardware", "recorded", "--json"],
                       check=False, stdout=subprocess.DEVNULL)
        folder = max((run / "decisions").iterdir(), key=lambda f: (f / "ladder.json").stat().st_mtime)  # just written
        again = _verdict(folder / "ladder.json")
        t0 = time.monotonic()
        fresh_dir = _fresh(engines, slo, budget, out)
        fresh = _verdict(fresh_dir / "ladder.json")
        rows.append((slo, again, fresh, time.monotonic() - t0, fresh_dir.name))
    print(f"\nre-decided from {run.name} vs a fresh bench run --engine {engines} (--time-budget {budget})")
    for slo, again, fresh, wall, name in rows:
        print(f"- {slo}: stored → {again['outcome']} {again['winner'] or again['leader']}; fresh ({name}, {wall:.0f} s) → "
              f"{fresh['outcome']} {fresh['winner'] or fresh['leader']}; {'agree' if _agree(again, fresh) else 'DISAGREE'}")
        print(f"    stored: {again['sentence']}\n    fresh:  {fresh['sentence']}")


def _healthy(port: int, deadline_s: float) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2):
                return True
        except OSError:
            time.sleep(1.0)
    return False


def serve(run: Path, port: int, budget: str, out: Path) -> None:
    recipe = json.loads((run / "recipe.json").read_text())
    engine, slos = recipe["engine"], ",".join(f"{k}={v:g}" for k, v in recipe["slos"].items())
    server = subprocess.Popen([*BENCH, "serve", str(run / "recipe.json"), "--port", str(port)], start_new_session=True)
    try:
        if not _healthy(port, 900):
            raise SystemExit(f"bench serve did not answer on port {port}")
        model = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models").read())["data"][0]["id"]
        before = set(out.glob("*")) if out.is_dir() else set()
        tokenizer = json.loads((run / "manifest.json").read_text())["model"]["path"]
        subprocess.run([*BENCH, "run", "--endpoint", f"{engine}-served=http://127.0.0.1:{port}", "--model", model,
                        "--tokenizer", tokenizer, "--workload", "agentic", "--slo", slos, "--time-budget", budget,
                        "--no-feature-probes", "--prompt-salt", "none", "--output-dir", str(out)], check=False)
        fresh_dir = max(set(out.glob("*")) - before, key=lambda p: p.stat().st_mtime)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=120)
    cap = json.loads((fresh_dir / "ladder.json").read_text())["engines"][f"{engine}-served"]["capacity"]
    lo, hi = recipe["capacity_interval"]
    inside = lo <= cap["output_tps"] <= hi
    print(f"\nrecipe of {run.name}: {engine} {recipe['capacity_tps']:.1f} [{lo:.1f}–{hi:.1f}] output tok/s at {slos}; "
          f"served by bench serve on port {port} and measured through --endpoint ({fresh_dir.name}): "
          f"{'≥ ' if cap['open'] else ''}{cap['output_tps']:.1f} [{cap['interval'][0]:.1f}–{cap['interval'][1]:.1f}]: "
          f"{'inside' if inside else 'OUTSIDE'} the recipe's interval")


def coverage(folder: Path, engine: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from harness.app.run.spread_history import prior_spread, spread_line
    from harness.metrics import parse_slos
    from harness.scoring.verdict.decision import engine_capacity
    from harness.app.run.spread_history import machine_key
    from results.store import created_at, list_runs, load_run

    runs = [r for d in list_runs(folder) if (r := load_run(d)).ladder is not None and r.manifest is not None
            and engine in r.ladder.engines and r.ladder.engines[engine].points and not r.manifest.imported_from]
    machine = machine_key(runs[0].manifest.hardware, runs[0].manifest.platform) if runs else None
    runs = [r for r in runs if machine is not None and machine_key(r.manifest.hardware, r.manifest.platform) == machine]
    if len(runs) < 2:
        raise SystemExit(f"coverage needs at least 2 ladder runs of {engine} on one machine in {folder}: found {len(runs)}")
    newest = max(created_at(folder / r.ladder.run_id) for r in runs)  # as of the newest run: the same answer later on
    caps = {}
    for run in runs:
        slos = parse_slos(",".join(f"{k}={v:g}" for k, v in run.ladder.slos.items()))
        for across in (False, True):
            prior = prior_spread(folder, run.manifest, exclude=run.ladder.run_id, now=newest, across=across)
            run.ladder.spread_prior = prior
            cap, _ = engine_capacity(run.ladder, engine, run.records, slos)
            if cap is None:
                raise SystemExit(f"{run.ladder.run_id}: no capacity of {engine} at its SLOs")
            caps[run.ladder.run_id, across] = (cap, spread_line(prior))
    print(f"\n{engine}'s capacity in each run of {folder}, with the spread the other runs give it")
    print("| run | capacity (tok/s) | within runs only: interval | holds others' mean / others | with across runs: "
          "interval | holds others' mean / others |")
    print("|---|---:|---|---|---|---|")
    held = {False: 0, True: 0}
    for run in runs:
        rid = run.ladder.run_id
        others = [caps[r.ladder.run_id, True][0].output_tps for r in runs if r is not run]
        mean = sum(others) / len(others)
        cells = []
        for across in (False, True):
            cap = caps[rid, across][0]
            lo, hi = cap.interval
            inside = lo <= mean <= hi
            held[across] += inside
            cells.append(f"[{lo:.1f}–{hi:.1f}] | {'yes' if inside else 'no'} {mean:.1f} / "
                         f"{sum(lo <= o <= hi for o in others)} of {len(others)}")
        print(f"| {rid} | {caps[rid, True][0].output_tps:.1f} | {cells[0]} | {cells[1]} |")
    print(f"\nholds the others' mean: within runs only {held[False]} of {len(runs)}; with across runs {held[True]} of "
          f"{len(runs)}")
    for run in runs[:1]:
        print(f"{run.ladder.run_id}: {caps[run.ladder.run_id, False][1]}\n{' ' * len(run.ladder.run_id)}  "
              f"{caps[run.ladder.run_id, True][1]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="check", required=True)
    r = sub.add_parser("redecide")
    r.add_argument("run", type=Path)
    r.add_argument("--slo", action="append", required=True)
    r.add_argument("--engines")
    r.add_argument("--time-budget", default="6m")
    r.add_argument("--output-dir", type=Path, default=Path("/tmp/stored-run-checks"))
    s = sub.add_parser("serve")
    s.add_argument("run", type=Path)
    s.add_argument("--port", type=int, default=8301)
    s.add_argument("--time-budget", default="6m")
    s.add_argument("--output-dir", type=Path, default=Path("/tmp/stored-run-checks"))
    c = sub.add_parser("coverage")
    c.add_argument("folder", type=Path)
    c.add_argument("--engine", default="openvino")
    a = p.parse_args()
    if a.check == "redecide":
        redecide(a.run, a.slo, a.engines, a.time_budget, a.output_dir)
    elif a.check == "coverage":
        coverage(a.folder, a.engine)
    else:
        serve(a.run, a.port, a.time_budget, a.output_dir)


if __name__ == "__main__":
    main()
