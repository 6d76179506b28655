"""Record-store benchmark: what storing one request record costs the event loop.

Side by side, in one run, repeated: the time ``RunWriter.add_record`` takes per record (the
caller is the load generator's event loop, which also stamps sends and chunk arrivals) for

1. ``fsync per record``: write, flush and fsync every record before returning (the store before
   issue 15: durable against power loss per record, ~28 % of the event loop at 665 req/s);
2. ``flush + background fsync``: write and flush to the OS (durable against the harness being
   killed), fsync'ed by the writer's thread at most once per second (``results.store``).

Prints per-record µs as median [min–max] over ``--repeats`` and the ratio 1 / 2. Run alone:

    .venv/bin/python benchmarks/bench_store.py [--records 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from results.schema import RequestRecord  # noqa: E402
from results.store import RunWriter  # noqa: E402


def make_record(i: int) -> RequestRecord:
    t = 1_000_000 * i
    return RequestRecord(request_id=f"r{i}", engine="bench", workload="chat", scheduled_ns=t, send_ns=t,
                         first_token_ns=t + 50_000_000, last_token_ns=t + 900_000_000, end_ns=t + 900_000_000,
                         chunk_times_ns=[t + 50_000_000 + k * 5_000_000 for k in range(170)],
                         output_tokens_server=170, input_tokens_server=512, success=True, finish_reason="length")


def per_record_us(records: list[RequestRecord], fsync_each: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        writer = RunWriter(Path(tmp) / "run", "run", "chat")
        t0 = time.perf_counter()
        for r in records:
            writer.add_record(r)
            if fsync_each:  # the previous behaviour, on the caller's thread
                os.fsync(writer._fh.fileno())
        elapsed = time.perf_counter() - t0
        writer.close()
    return elapsed / len(records) * 1e6


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):8.1f} [{min(xs):.1f}–{max(xs):.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    records = [make_record(i) for i in range(args.records)]
    old, new = [], []
    for _ in range(args.repeats):  # interleaved, so drift on a shared machine hits both
        old.append(per_record_us(records, fsync_each=True))
        new.append(per_record_us(records, fsync_each=False))
    ratios = [a / b for a, b in zip(old, new)]
    print(f"{args.records} records x {args.repeats} repeats, µs per add_record on the caller's thread")
    print(f"  fsync per record          {spread(old)}")
    print(f"  flush + background fsync  {spread(new)}")
    print(f"  ratio (old / new)         {spread(ratios)}")


if __name__ == "__main__":
    main()
