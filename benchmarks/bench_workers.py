"""Client capacity with several client processes (``bench run --client-workers N``, issue 15).

Against the local null server (no inference), in one run, repeated (median [min–max]):

1. ``bench run`` itself with 1 and with 2 client workers: successful requests/s of the measured
   phase (``summary.json``'s ``request_throughput``: first send to last completion) for
   ``-n`` requests of 8 prompt / 4 output tokens at rate inf (every request in flight at once:
   a new connection each), and the ratio 2 workers / 1 worker (the issue's goal: >= 1.6);
2. the single client's ceiling on the calibration path (``harness.loadgen.calibrate``, the
   settings ``benchmarks/bench_client.py`` uses: 2,000 one-token requests, 64 in flight on
   reused connections, no records stored), next to ``bench run``'s single worker.

The null server is one process: on a machine with few cores it competes with the client(s) for
CPU, so the 2-worker ratio is bounded by what the server and the workers share (2 cores: the
server needs about one). Run it when the machine is otherwise idle:

    .venv/bin/python benchmarks/bench_workers.py [--repeats 3] [-n 2000]

Numbers from a loaded machine are not comparable across runs; the ratios within one run are.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.loadgen.calibrate import calibrate  # noqa: E402
from harness.loadgen.nullserver import null_server  # noqa: E402


def spread(xs: list[float]) -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "n/a"
    return f"{statistics.median(xs):9,.0f}  [{min(xs):,.0f}–{max(xs):,.0f}]"


def bench_run(url: str, workers: int, n: int, out: Path) -> float | None:
    """One ``bench run`` against the null server; its measured requests/s (None when it failed)."""
    run_id = f"w{workers}-{len(list(out.iterdir()))}"
    cmd = [sys.executable, "-m", "harness.app.cli", "run", "--engine", "openai", "--base-url", url,
           "--workload", "random", "--input-len", "8", "--output-len", "4", "-n", str(n), "--request-rate", "inf",
           "--no-calibration", "--no-equivalence", "--no-feature-probes", "--warmup", "0",
           "--client-workers", str(workers), "--output-dir", str(out), "--run-id", run_id, "--prompt-salt", "auto"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    summary = out / run_id / "summary.json"
    if not summary.exists():
        print(f"bench run --client-workers {workers} failed: {(p.stderr or p.stdout).strip().splitlines()[-1:]}")
        return None
    metrics = json.loads(summary.read_text())["engines"]["openai"].get("metrics") or {}
    return metrics.get("request_throughput")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("-n", type=int, default=2000, help="requests per bench run (default 2000)")
    args = ap.parse_args()
    rates: dict[str, list[float]] = {"bench run, 1 worker": [], "bench run, 2 workers": [], "calibration path": []}
    ratios: list[float] = []
    with null_server() as url, tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            one, two = bench_run(url, 1, args.n, Path(tmp)), bench_run(url, 2, args.n, Path(tmp))
            rates["bench run, 1 worker"].append(one)
            rates["bench run, 2 workers"].append(two)
            if one and two:
                ratios.append(two / one)
            cal = calibrate(sequential=20, burst=2000, concurrency=64, streams=0, base_url=url)
            rates["calibration path"].append(cal["max_rate_rps"])
    print(f"\nClient capacity vs the null server, {args.repeats} repeats, {args.n} requests, 8/4 tokens, "
          f"rate inf (req/s, median [min–max]); {os.cpu_count()} cores")
    for label, xs in rates.items():
        print(f"  {label:22s} {spread(xs)}")
    if ratios:
        print(f"  {'2 workers / 1 worker':22s} {statistics.median(ratios):9.2f}  "
              f"[{min(ratios):.2f}–{max(ratios):.2f}]  (goal >= 1.6)")
    one, cal = rates["bench run, 1 worker"], rates["calibration path"]
    if [x for x in one if x] and cal:
        print(f"  {'bench run / calibration':22s} {statistics.median([x for x in one if x]) / statistics.median(cal):9.2f}"
              "  (rate inf opens a connection per request; the calibration reuses 64)")


if __name__ == "__main__":
    main()
