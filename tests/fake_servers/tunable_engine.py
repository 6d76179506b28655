"""A scripted engine the harness starts and can tune (``bench run --tune``): a paced server
(tests/fake_servers/paced_server.py) with FIFO slots, whose every configured slot costs 0.25 ms
of each token's time (a static reservation): ``--slots S`` serves S streams at ``4 + S / 4`` ms
per token after a 30 ms first token. Its search space is ``slots`` 2, 8, 64; its defaults are 1
slot; it refuses more than 16 slots (the start fails with one line, as a real engine's flag
check does). At the tests' SLO (TPOT p90 <= 25 ms, TTFT p90 <= 150 ms) the best setting of its
space is 8 slots: at 4 in flight about 440 output tok/s against 260 with 2 slots and 130 with
the defaults, and more at 8 in flight, where the others are saturated.

:class:`PrecisionEngine`: the same server whose only knob lowers precision (``kv_dtype``, a
:class:`~adapters.base.Knob` with ``precision``): its KV cache in ``fp8`` fits twice the sequences
(4 slots against the defaults' 2) and answers the fidelity reference wrong at every 20th token
(top-1 agreement about 0.95: below the strict floor 0.99, above the default floor for other
numerics 0.90); ``int4`` fits 8 and errs at every 4th token (0.75: below both). Its defaults answer
exactly. So with lower precision allowed the best faithful setting is ``fp8``; ``int4`` measures
more but must never be chosen."""

from __future__ import annotations

import sys
from pathlib import Path

from adapters.base import Capabilities, Knob, ProbeResult
from adapters.runtime.server import LaunchPlan, ServerAdapter

SERVER = Path(__file__).resolve().parent / "paced_server.py"
DEFAULT_SLOTS = 1
MOST_SLOTS = 16


class TunableEngine(ServerAdapter):
    """The scripted engine of the module docstring, under ``name``."""

    display_name = "tunable paced fake"
    capabilities = Capabilities(hardware=("cpu",))
    stop_grace_s = 2.0
    search_space = {"cpu": (Knob("slots", ("2", "8", "64"), "FIFO slots; each costs 0.25 ms of every token"),)}

    def __init__(self, name: str = "vllm") -> None:
        self.name = name

    def probe(self) -> ProbeResult:
        return ProbeResult(True, "fake", "0")

    def build_command(self, config, port: int) -> LaunchPlan:
        slots = int(config.engine_args.get("slots", DEFAULT_SLOTS))
        return self._plan(slots, port, [])

    def _plan(self, slots: int, port: int, extra: list[str]) -> LaunchPlan:
        if slots > MOST_SLOTS:
            raise ValueError(f"--slots {slots} is more than this engine accepts (at most {MOST_SLOTS})")
        cmd = [sys.executable, str(SERVER), "--port", str(port), "--ttft-ms", "30", "--itl-ms", str(4 + slots / 4),
               "--slots", str(slots), *extra]
        return LaunchPlan(cmd=cmd, env={}, model_name="paced", display_name=self.display_name)


KV_DTYPES = {"fp8": (4, 20), "int4": (8, 4)}  # kv_dtype -> (slots, a wrong token every N-th)


class PrecisionEngine(TunableEngine):
    """The precision-only scripted engine of the module docstring; ``reference``: the fidelity
    reference file its answers follow."""

    display_name = "precision paced fake"
    search_space = {"cpu": (Knob("kv_dtype", ("int4", "fp8"), "a quantised KV cache (more sequences fit)",
                                 precision=True),)}

    def __init__(self, name: str, reference: Path) -> None:
        super().__init__(name)
        self.reference = reference

    def build_command(self, config, port: int) -> LaunchPlan:
        kv = config.engine_args.get("kv_dtype")
        slots, every = KV_DTYPES[kv] if kv else (2, None)
        script = ["--fidelity", str(self.reference)] + (["--flip-every", str(every)] if every else [])
        return self._plan(slots, port, script)
