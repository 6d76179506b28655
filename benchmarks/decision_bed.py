"""The decision test bed's table: how the main job's decision behaves on scripted engines whose
truth is known (harness/loadgen/simulated.py), over seeded trials on a simulated clock.

For engine pairs whose capacities differ by a known factor (0 % … 30 %), each trial climbs both
ladders exactly as ``bench run`` does (harness/app/run/ladder.py: doubling, bisection, two more
measurements of the bracketing points) and decides (harness/scoring/verdict.py). Printed per
factor: how often the truly better engine won, a tie was reported, or the worse one won. Then
each engine profile's capacity against the analytic steady state (median and range of the
relative error over trials).

    python benchmarks/decision_bed.py [--trials 40] [--jitter 0.08]

The same model drives tests/test_decision_bed.py (which asserts the thresholds); this script
prints the numbers a closing note quotes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.app.run import testbed  # noqa: E402
from harness.app.run.testbed import faster  # noqa: E402
from harness.loadgen.simulated import SimEngine, true_capacity  # noqa: E402
from harness.metrics import parse_slos  # noqa: E402
from harness.scoring.verdict import Candidate, decide  # noqa: E402

SLOS = parse_slos("ttft_p90=1000,tpot_p90=60")
OUTPUT_TOKENS = 32


def candidate(engine: SimEngine, trial: int) -> Candidate:
    return testbed.candidate(engine, trial, SLOS, OUTPUT_TOKENS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--jitter", type=float, default=0.08, help="lognormal sigma of each request's times")
    args = ap.parse_args()
    base = SimEngine("base", slots=16, prefill_ms=80, tpot_ms=25, batch_slowdown=0.08, jitter=args.jitter)
    t0 = time.monotonic()
    print(f"Decision test bed: {args.trials} seeded trials per row, jitter {args.jitter:g}, "
          f"SLOs p90 TTFT <= 1 s, p90 TPOT <= 60 ms\n")
    print("| better by | better wins | tie reported | worse wins |")
    print("|---:|---:|---:|---:|")
    for pct in (0, 3, 8, 15, 30):
        better = faster(base, "better", 1 + pct / 100)
        wins = ties = wrong = 0
        for t in range(args.trials):
            v = decide([candidate(better, 2 * t), candidate(base, 2 * t + 1)])
            ties += v.tie
            wins += v.winner == "better" and not v.tie
            wrong += v.winner == "base" and not v.tie
        n = args.trials
        print(f"| {pct} % | {wins / n:.0%} ({wins}) | {ties / n:.0%} ({ties}) | {wrong / n:.0%} ({wrong}) |")
    print("\n| engine | truth (output tok/s) | measured median | relative error median [min..max] |")
    print("|---|---:|---:|---:|")
    profiles = [base, SimEngine("tpot_bound", slots=64, prefill_ms=60, tpot_ms=20, batch_slowdown=0.1, jitter=args.jitter),
                SimEngine("few_slots", slots=4, prefill_ms=40, tpot_ms=15, batch_slowdown=0.05, jitter=args.jitter)]
    for engine in profiles:
        truth = true_capacity(engine, OUTPUT_TOKENS, 1000, 60)
        got = [c.output_tps for t in range(max(5, args.trials // 4))
               if (c := testbed.climb(engine, t, SLOS, OUTPUT_TOKENS).capacity(seed=t))]
        errors = [(g - truth) / truth for g in got]
        print(f"| {engine.name} | {truth:,.1f} | {statistics.median(got):,.1f} | {statistics.median(errors):+.1%} "
              f"[{min(errors):+.1%}..{max(errors):+.1%}] |")
    print(f"\n({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
