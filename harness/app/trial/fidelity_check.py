"""``bench engines fidelity``: the output-fidelity check on its own, engine after engine, without
a benchmark: each engine is started through the one launch path
(:func:`harness.app.trial.equivalence_check.each_engine`), answers the reference's prompts
(:func:`harness.loadgen.fidelity.ask`) and is compared with transformers fp32
(:func:`harness.metrics.fidelity.compare`), exactly as ``bench run`` checks it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Sequence

from adapters.base import EngineAdapter
from results.schema import DEFAULT_OTHER_FLOOR, FidelityCheck, FidelityReference, FidelityResult

from harness.app.trial.equivalence_check import each_engine
from harness.loadgen.fidelity import ask
from harness.metrics.fidelity import compare, fidelity_check
from rich.console import Console


def check_fidelity_of(adapters: Sequence[EngineAdapter], model_dir: Path, run_dir: Path, reference: FidelityReference,
                      *, other_floor: float = DEFAULT_OTHER_FLOOR, threads: int = 1,
                      engine_args: dict[str, dict[str, str]] | None = None, request_timeout_s: float = 300.0,
                      console: Console | None = None, hardware_kind: str = "cpu") -> tuple[FidelityCheck, dict[str, str]]:
    """Every available adapter's :class:`FidelityResult` against ``reference``, and the engines
    that could not be checked (name → why: skipped or failed to start)."""
    def use(ep: Any) -> FidelityResult:
        numerics = str(ep.effective_config.get("numerics") or "reference")
        answers = asyncio.run(ask(ep, reference, numerics=numerics, timeout_s=request_timeout_s))
        return compare(reference, answers, other_floor=other_floor)

    results: dict[str, FidelityResult] = {}
    missing: dict[str, str] = {}
    for name, done in each_engine(adapters, model_dir, run_dir, use, threads=threads, engine_args=engine_args,
                                  console=console, hardware_kind=hardware_kind):
        if done["status"] == "ok":
            results[name] = done["value"]
        else:
            missing[name] = f"{done['status']}: {done['reason']}"
    return fidelity_check(reference, results, other_floor), missing
