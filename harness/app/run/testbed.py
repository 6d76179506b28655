"""The decision test bed's driver: scripted engines (:mod:`harness.loadgen.simulated`) climbed
with the main job's ladder and judged by its verdict, on a simulated clock. Used by
``tests/test_decision_bed.py`` (the thresholds) and ``benchmarks/decision_bed.py`` (the table)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

from adapters.base import EngineError
from harness.loadgen.simulated import SimEngine, simulate
from harness.metrics import SLO
from harness.scoring.frontier import Requests
from harness.scoring.verdict import Candidate

from .ladder import Ladder


def faster(engine: SimEngine, name: str, factor: float) -> SimEngine:
    """``engine`` with every time divided by ``factor``: its capacity is ``factor`` times as high."""
    return dataclasses.replace(engine, name=name, prefill_ms=engine.prefill_ms / factor, tpot_ms=engine.tpot_ms / factor)


def climb(engine: SimEngine, trial: int, slos: Sequence[SLO], output_tokens: int, repeats: int = 2) -> Ladder:
    """``engine``'s ladder as the main job climbs it: at least 16 requests per point and 4 per unit
    of load, then ``repeats`` more measurements of the two points bracketing the boundary. An
    engine with ``crash_at`` dies (EngineError) at that load and stays dead."""
    def measure(load: int, seed: int, repeat: int) -> tuple[Requests, int | None]:
        if engine.crash_at is not None and load >= engine.crash_at:
            raise EngineError(f"{engine.name}: the server exited unexpectedly (code -9)")
        records, duration = simulate(engine, load, max(16, 4 * load), output_tokens, seed=trial * 100_003 + seed)
        return Requests.of(records, duration), None

    ladder = Ladder(measure, slos)
    ladder.climb()
    ladder.repeat_boundary(repeats)
    return ladder


def candidate(engine: SimEngine, trial: int, slos: Sequence[SLO], output_tokens: int) -> Candidate:
    """The engine as the verdict sees it after its climb in ``trial``, with its tie-breakers."""
    return Candidate(engine.name, climb(engine, trial, slos, output_tokens).capacity(seed=trial),
                     startup_s=engine.startup_s, processes=engine.processes, peak_memory_bytes=engine.peak_memory_bytes)
