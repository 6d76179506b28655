"""The harness's own helper servers (the calibration's null server) die with it too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

HOLDER = """
import sys, time
sys.path.insert(0, {root!r})
from harness.loadgen.nullserver import null_server
with null_server() as url:
    print(url, flush=True)
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _null_servers_of(parent: int) -> set[int]:
    """The null servers that ``parent`` started (its children running the module): another test's,
    on another xdist worker, are none of this test's business."""
    out = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[1])
                if ppid == parent and b"harness.loadgen.nullserver" in Path(f"/proc/{entry.name}/cmdline").read_bytes():
                    out.add(int(entry.name))
            except (OSError, ValueError, IndexError):
                pass
    return out


def test_a_sigkilled_harness_leaves_no_null_server() -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER.format(root=str(ROOT))], stdout=subprocess.PIPE, text=True)
    mine: set[int] = set()
    try:
        assert holder.stdout is not None and holder.stdout.readline().startswith("http://127.0.0.1:")
        mine = _null_servers_of(holder.pid)
        assert len(mine) == 1
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in mine) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in mine), "the null server outlived the harness"
    finally:
        if holder.poll() is None:
            holder.kill()
        for pid in mine:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
