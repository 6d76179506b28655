"""Engines for the Ray executor tests: real server processes (tests/fake_servers/paced_server.py)
started through the production launch path (``adapters.runtime.server.ServerAdapter``: own process
group, watchdog, log in the run folder), so a trial on a Ray worker starts, measures and stops
them exactly as it would a real engine. Pickled by value to the workers
(``cloudpickle.register_pickle_by_value``): the workers need not import ``tests.fake_servers``."""

from __future__ import annotations

import os
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from adapters.base import Capabilities, ProbeResult
from adapters.runtime.server import LaunchPlan, ServerAdapter

SERVER = Path(__file__).resolve().parent / "paced_server.py"


class PacedEngine(ServerAdapter):
    """``name`` served by a paced server; ``pid_dir``: where each server writes its pid."""

    display_name = "paced fake"
    capabilities = Capabilities(hardware=("cpu",))
    stop_grace_s = 2.0

    def __init__(self, name: str, pid_dir: str, stall_after: int | None = None) -> None:
        self.name = name
        self.pid_dir = pid_dir
        self.stall_after = stall_after

    def probe(self) -> ProbeResult:
        return ProbeResult(True, "fake", "0")

    def build_command(self, config, port: int) -> LaunchPlan:
        cmd = [sys.executable, str(SERVER), "--port", str(port), "--ttft-ms", "30", "--itl-ms", "10",
               "--pid-file", os.path.join(self.pid_dir, f"{self.name}-{port}.pid")]
        if self.stall_after is not None:
            cmd += ["--stall-after", str(self.stall_after)]
        return LaunchPlan(cmd=cmd, env={}, model_name="paced", display_name=self.display_name)


class DyingWorkerEngine(PacedEngine):
    """A paced engine whose Ray worker dies (``os._exit``) once ``stall_after`` requests were
    served and one more second passed (the trial's records were flushed): the server stalls
    every later request, so exactly ``stall_after`` measured requests complete."""

    @contextmanager
    def launch(self, config):
        with super().launch(config) as ep:
            def die() -> None:
                while True:
                    with urllib.request.urlopen(ep.base_url + "/_served", timeout=5) as r:
                        if b'"served": %d' % self.stall_after in r.read():
                            break
                    time.sleep(0.05)
                time.sleep(1.0)
                os._exit(1)

            threading.Thread(target=die, daemon=True).start()
            yield ep
