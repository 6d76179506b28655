"""Does a fresh start's short ramp read the boundary as a full climb does? (issue 39, item 3)

The main job's repeats (harness/app/run/allocate.py) start the engine again, pass briefly
through the bracket's passing load (the ramp: its records stored with phase "ramp", judged
nowhere; until 2026-12-06 it was a measured point at half the boundary, pooled with that point),
then measure the bracket points: no climb from 1.
The reason the earlier design re-climbed from 1 was a fresh engine measured cold at the
boundary reading 15-25 % low. This script reads stored runs (no measuring): for every point an
engine measured in a climb (its first measurement) and again after a fresh start and the ramp
(its later measurements at a load above 1 whose requests did not fail: the repeats; a brief low
end's full re-measurement and a point re-measured for its failures are at load 1 or failed),
it prints each measurement's output tok/s and SLO margin (max over the run's SLOs of the
measured percentile / threshold; > 1 fails), the repeat / climb ratio of both, and the median
and range of the ratios over all such points. The figures are each measurement's whole-phase
metrics (ladder.json keeps those per measurement; the judge's steady-state window is kept only
pooled), so they differ a little from the console's per-measurement lines.

    python benchmarks/ramp_bias.py results/RUN_ID [results/RUN_ID ...]

A ratio of throughput near 1 and of margin near 1 says the ramp is enough; a fresh engine read
cold would show a throughput ratio well below 1 (0.75-0.85) and a margin ratio above it.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def margin(metrics: dict, slos: dict[str, float]) -> float:
    """max over ``slos`` ({"ttft_p90": ms, …}) of the measurement's percentile / threshold."""
    worst = 0.0
    for key, threshold in slos.items():
        metric, pct = key.rsplit("_p", 1)
        value = (metrics.get(f"{metric}_ms") or {}).get(f"p{pct}")
        if value is not None:
            worst = max(worst, value / threshold)
    return worst


def main() -> None:
    runs = [Path(a) for a in sys.argv[1:]]
    if not runs or any(not (r / "ladder.json").is_file() for r in runs):
        sys.exit("usage: python benchmarks/ramp_bias.py RUN_DIR [RUN_DIR ...] (each with a ladder.json)")
    tps_ratios, margin_ratios = [], []
    print("| run | engine | load | climb: tok/s, margin | fresh start + ramp: tok/s, margin | ratio tok/s | ratio margin |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for run in runs:
        ladder = json.loads((run / "ladder.json").read_text())
        slos = ladder["slos"]
        for name, engine in ladder["engines"].items():
            for point in engine.get("points", []):
                measured = point.get("repeats") or []
                if point["load"] <= 1 or len(measured) < 2:
                    continue
                if any((m.get("requests_failed") or 0) > 0 for m in measured):
                    continue
                first = measured[0]
                for later in measured[1:]:
                    rt = later["output_throughput"] / first["output_throughput"]
                    rm = margin(later, slos) / margin(first, slos)
                    tps_ratios.append(rt)
                    margin_ratios.append(rm)
                    print(f"| {run.name} | {name} | {point['load']} | {first['output_throughput']:,.1f}, "
                          f"{margin(first, slos):.2f} | {later['output_throughput']:,.1f}, {margin(later, slos):.2f} | "
                          f"{rt:.3f} | {rm:.3f} |")
    if not tps_ratios:
        print("\nno point was measured both in a climb and after a fresh start in these runs")
        return
    print(f"\n{len(tps_ratios)} repeats: throughput ratio median {statistics.median(tps_ratios):.3f} "
          f"[{min(tps_ratios):.3f}..{max(tps_ratios):.3f}], margin ratio median {statistics.median(margin_ratios):.3f} "
          f"[{min(margin_ratios):.3f}..{max(margin_ratios):.3f}]")


if __name__ == "__main__":
    main()
