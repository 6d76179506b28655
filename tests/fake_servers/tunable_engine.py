"""A scripted engine the harness starts and can tune (``bench run --tune``): a paced server
(tests/fake_servers/paced_server.py) with FIFO slots, whose every configured slot costs 1 ms of
each token's time (a static reservation): ``--slots S`` serves S streams at ``4 + S`` ms per
token after a 30 ms first token. Its search space is ``slots`` 1, 8, 64; its defaults are 2
slots; it refuses more than 16 slots (the start fails with one line, as a real engine's flag
check does). At the tests' SLO (TPOT p90 <= 25 ms, TTFT p90 <= 300 ms) and up to 8 in flight,
the best setting is 8 slots: about four times the defaults' capacity."""

from __future__ import annotations

import sys
from pathlib import Path

from adapters.base import Capabilities, Knob, ProbeResult
from adapters.server import LaunchPlan, ServerAdapter

SERVER = Path(__file__).resolve().parent / "paced_server.py"
DEFAULT_SLOTS = 2
MOST_SLOTS = 16


class TunableEngine(ServerAdapter):
    """The scripted engine of the module docstring, under ``name``."""

    display_name = "tunable paced fake"
    capabilities = Capabilities(hardware=("cpu",))
    stop_grace_s = 2.0
    search_space = {"cpu": (Knob("slots", ("1", "8", "64"), "FIFO slots; each costs 1 ms of every token"),)}

    def __init__(self, name: str = "vllm") -> None:
        self.name = name

    def probe(self) -> ProbeResult:
        return ProbeResult(True, "fake", "0")

    def build_command(self, config, port: int) -> LaunchPlan:
        slots = int(config.engine_args.get("slots", DEFAULT_SLOTS))
        if slots > MOST_SLOTS:
            raise ValueError(f"--slots {slots} is more than this engine accepts (at most {MOST_SLOTS})")
        cmd = [sys.executable, str(SERVER), "--port", str(port), "--ttft-ms", "30", "--itl-ms", str(4 + slots),
               "--slots", str(slots)]
        return LaunchPlan(cmd=cmd, env={}, model_name="paced", display_name=self.display_name)
