"""A driver process for the client-workers tests: measures 2 workers against the null server at
``argv[1]`` on a long schedule (60 requests at 4 req/s), prints ``PIDS <pid> <pid>`` once both
workers sent their first record, then keeps going until interrupted; on the way out it prints
``STORED <n> <interrupted>`` (records stored, of which interrupted)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.loadgen.client import EndpointTarget  # noqa: E402
from harness.loadgen.runner import Runner, RunnerOptions  # noqa: E402
from harness.loadgen.workers import WorkerPool  # noqa: E402
from workloads.base import RequestSpec, SingleRequestSession, Workload  # noqa: E402


async def main(url: str) -> None:
    sessions = [SingleRequestSession(RequestSpec(f"r{i}", max_tokens=40, prompt="x"), i / 4) for i in range(60)]
    stored: list = []
    runner = Runner(EndpointTarget(url, "null"), "null", "t", stored.append, None, RunnerOptions())
    workers = WorkerPool(runner, 2)

    async def announce() -> None:
        while len({r.worker for r in stored}) < 2:
            await asyncio.sleep(0.05)
        print("PIDS", *(w.process.pid for w in workers._workers), flush=True)

    task = asyncio.create_task(announce())
    try:
        await workers.measure(Workload("t", sessions, spec={}))
    finally:
        task.cancel()
        print("STORED", len(stored), sum(r.error_class == "interrupted" for r in stored), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
