"""The per-engine progress bar of a measured phase (rich)."""

from __future__ import annotations

from typing import Callable

from results.schema import RequestRecord
from workloads.base import Workload
from rich.console import Console


def engine_progress(console: Console, name: str, workload: Workload) -> tuple[Callable[[RequestRecord], None], Callable[[], None]]:
    """Start a bar for engine ``name`` on ``workload``; returns ``(on_record, stop)``: feed every
    record to ``on_record`` (only measured ones count), call ``stop`` when the phase ends."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    total = int(workload.stats.get("requests") or workload.stats.get("turns") or len(workload.sessions))
    prog = Progress(TextColumn("  {task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                    TimeElapsedColumn(), console=console, transient=False)
    task = prog.add_task(f"{name} {workload.name}", total=total, info="")
    prog.start()
    counts = {"ok": 0, "failed": 0}

    def on_record(record: RequestRecord) -> None:
        if record.phase != "measured":
            return
        counts["ok" if record.success else "failed"] += 1
        done = counts["ok"] + counts["failed"]
        prog.update(task, completed=done, total=max(total, done), info=f"failed {counts['failed']}" if counts["failed"] else "")

    return on_record, prog.stop
