"""Every engine at its best on the 2-core machine (issue 27): ``bench run --tune`` over the
reference engine, vLLM-CPU and SGLang-CPU on the default agentic workload and SLOs, then the
winner's stored recipe measured again (``bench run --engine-config recipe.json``), read back from
the stored results (``ladder.json``; never the printed text).

Prints, per engine: its defaults' capacity at the SLO with its 95 % interval (the defaults climbed
as the main job climbs, when the search moved off them), the configuration
the search chose and its (tuned) capacity with its interval, the gain with its interval ("none"
inside the noise), the configurations tried and the seconds of measuring used (the search's of its budget, + the
defaults' climb); the
verdict, tuned against tuned; and the reproducibility check: the recipe's capacity each time it is
measured again (``--reruns``, each a fresh start), and whether it lies inside the tuned result's interval.

Run (about 45-55 minutes on the 2-core reference machine: each configuration is an engine start,
vLLM-CPU's about a minute; let nothing else run meanwhile):

    .venv/bin/python benchmarks/tune_cpu.py [--out DIR] [--tune 180] [--configs 3] [--reruns 3]
    .venv/bin/python benchmarks/tune_cpu.py --out DIR --print-only      # the table of runs already made
    .venv/bin/python benchmarks/tune_cpu.py --dry-run

Exit status 0 when the table was printed, 1 when a run failed, 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

COMMON = ["--workload", "agentic", "--ladder-budget", "75", "--no-feature-probes", "--threads", "1"]


def commands(out: Path, engines: str, tune_s: float, configs: int, reruns: int) -> list[list[str]]:
    """The tuned run, then ``reruns`` runs of its recipe (run ids tune-recipe, tune-recipe-2, ...)."""
    bench = str(Path(sys.executable).with_name("bench"))
    return [[bench, "run", "--engine", engines, *COMMON, "--tune", f"{tune_s:g}", "--tune-configs", str(configs),
             "-o", str(out), "--run-id", "tune-cpu"]] + [
            [bench, "run", "--engine-config", str(out / "tune-cpu" / "recipe.json"), *COMMON, "-o", str(out),
             "--run-id", _rerun_id(k)] for k in range(reruns)]


def _rerun_id(k: int) -> str:
    return "tune-recipe" if k == 0 else f"tune-recipe-{k + 1}"


def _cap(cap: dict[str, Any] | None) -> str:
    if not cap:
        return "–"
    if cap.get("never_met"):
        return "misses the SLO"
    lo, hi = cap.get("interval") or (None, None)
    return f"{'≥ ' if cap.get('open') else ''}{cap['output_tps']:,.1f}" + (f" [{lo:,.1f}–{hi:,.1f}]" if lo is not None else "")


def table(tuned: dict[str, Any]) -> str:
    """The report's table of the search (:func:`reports.tuning.tuning_rows`) as markdown."""
    from reports.tuning import tuning_rows
    from results.schema import LadderSummary

    lines = ["| engine | defaults: capacity [95 %] | configuration chosen | tuned: capacity [95 %] | gain [95 %] | "
             "configurations | s of measuring: search (budget) + defaults' climb |", "|---|---:|---|---:|---|---:|---:|"]
    for r in tuning_rows(LadderSummary.model_validate(tuned)):
        chosen = r["chosen"] if r["chosen"] != "–" else f"not tuned: {r['note']}"
        lines.append(f"| {r['engine']} | {r['defaults']} | {chosen} | {r['tuned']} | {r['gain']} | {r['tried']} | "
                     f"{r['seconds']} |")
    return "\n".join(lines)


def reproducibility(tuned: dict[str, Any], agains: list[dict[str, Any]]) -> str:
    """One line per re-run of the winner's recipe and whether its capacity lies inside the tuned
    result's 95 % interval, then how many did."""
    winner = (tuned.get("decision") or {}).get("winner", "")
    if not winner:
        return "no winner: no recipe to measure again"
    first = tuned["engines"][winner].get("capacity") or {}
    lo, hi = first.get("interval") or (float("nan"), float("nan"))
    lines, inside = [f"tuned {winner}: {_cap(first)} output tok/s per device"], 0
    for k, again in enumerate(agains, 1):
        second = (again["engines"].get(winner) or {}).get("capacity") or {}
        ok = lo <= second.get("output_tps", float("nan")) <= hi
        inside += ok
        lines.append(f"recipe of {winner} measured again ({k}): {_cap(second)}; "
                     f"{'inside' if ok else 'OUTSIDE'} the tuned result's interval")
    lines.append(f"{inside} of {len(agains)} re-runs inside the tuned result's interval")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("results/tune-cpu"), help="where the two run folders go")
    ap.add_argument("--engines", default="own,vllm,sglang", help="engines to tune, comma-separated")
    ap.add_argument("--tune", type=float, default=180.0, help="seconds of measuring per engine for the search")
    ap.add_argument("--configs", type=int, default=3, help="most configurations per engine, defaults included")
    ap.add_argument("--reruns", type=int, default=3, help="times the winner's recipe is measured again")
    ap.add_argument("--dry-run", action="store_true", help="print the two commands and exit")
    ap.add_argument("--print-only", action="store_true", help="print the table of runs already made in --out")
    args = ap.parse_args()
    if not (args.tune > 0 and args.tune < float("inf")) or args.configs < 2 or args.reruns < 1:
        print("error: --tune must be a positive number of seconds, --configs 2 or more and --reruns 1 or more",
              file=sys.stderr)
        return 2
    cmds = commands(args.out, args.engines, args.tune, args.configs, args.reruns)
    if args.dry_run:
        print("\n".join(shlex.join(c) for c in cmds))
        return 0
    if not args.print_only:
        args.out.mkdir(parents=True, exist_ok=True)
        for cmd, name in zip(cmds, ["tune-cpu"] + [_rerun_id(k) for k in range(args.reruns)]):
            if name != "tune-cpu" and not (args.out / "tune-cpu" / "recipe.json").is_file():
                print("the tuned run names no winner (see its verdict): no recipe to measure again", flush=True)
                break
            print("+", shlex.join(cmd), flush=True)
            with (args.out / f"{name}.console.log").open("w") as f:
                if subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT) != 0:
                    print(f"error: {name} failed; its console: {args.out / (name + '.console.log')}", file=sys.stderr)
                    return 1
    try:
        tuned = json.loads((args.out / "tune-cpu" / "ladder.json").read_text())
        agains = [json.loads(f.read_text()) for k in range(args.reruns)
                  if (f := args.out / _rerun_id(k) / "ladder.json").is_file()]
    except OSError as exc:
        print(f"error: no tuned run in {args.out} ({exc.strerror}): run without --print-only first", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"error: a ladder.json in {args.out} is not one bench run wrote ({exc})", file=sys.stderr)
        return 2
    if not tuned.get("tuning"):
        print(f"error: {args.out / 'tune-cpu'} was not made with --tune: nothing to compare", file=sys.stderr)
        return 2
    print(table(tuned))
    print("verdict (tuned vs tuned):", (tuned.get("decision") or {}).get("sentence", "–"))
    print(reproducibility(tuned, agains) if agains else "recipe not measured again")
    return 0


if __name__ == "__main__":
    sys.exit(main())
