"""``bench engines check``: the greedy output-equivalence check on its own, engine after engine.

Each engine is planned and started through the one launch path (:func:`plan_engine`, the
:class:`~harness.app.trial.startup.EngineStarter` with one slot: started at its turn, stopped
after it), answers the fixed prompts greedily (:func:`harness.loadgen.equivalence.greedy_outputs`)
and is compared token by token with the first engine that answered
(:func:`harness.loadgen.equivalence.prompt_agreements`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import aiohttp
from rich.console import Console

from adapters.base import EngineAdapter, EngineError, LaunchConfig

from harness.app.trial.plan import plan_engine
from harness.app.trial.startup import EngineStarter
from harness.loadgen.equivalence import DEFAULT_PROMPTS, greedy_outputs, prompt_agreements, summarize_agreements


def each_engine(adapters: Sequence[EngineAdapter], model_dir: Path, run_dir: Path, use: Callable[[Any], Any], *,
                threads: int = 1, engine_args: dict[str, dict[str, str]] | None = None, startup_timeout_s: float = 600.0,
                console: Console | None = None, hardware_kind: str = "cpu") -> Iterator[tuple[str, dict[str, Any]]]:
    """Start each adapter's engine in turn through the one launch path, call ``use(endpoint)``
    on it, stop it; yield ``(name, {"status": "ok" | "skipped" | "failed", "reason",
    "display_name", "value": use's return})``. Engine failures are yielded, not raised."""

    for adapter in adapters:
        entry: dict[str, Any] = {"status": "skipped", "reason": None, "display_name": None, "value": None}
        launch = LaunchConfig(model_dir=Path(model_dir), run_dir=Path(run_dir), threads=threads,
                              engine_args=(engine_args or {}).get(adapter.name, {}), startup_timeout_s=startup_timeout_s)
        plan = plan_engine(adapter, launch, hardware_kind)
        if not plan.available:
            entry["reason"] = plan.probe.reason
            yield adapter.name, entry
            continue
        if console is not None:
            console.print(f"checking {adapter.name} ...")
        starter = EngineStarter(console or Console(quiet=True), [plan.start_item()], 1)
        try:
            with starter.take(plan.name) as (ep, _):
                entry["display_name"] = ep.display_name
                entry["value"], entry["status"] = use(ep), "ok"
        except (EngineError, aiohttp.ClientError, asyncio.TimeoutError, KeyError) as exc:
            entry["status"], entry["reason"] = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            starter.close()
        yield adapter.name, entry


def check_equivalence(adapters: Sequence[EngineAdapter], model_dir: Path, run_dir: Path,
                      prompts: Sequence[str] = DEFAULT_PROMPTS, max_tokens: int = 32, threads: int = 1,
                      engine_args: dict[str, dict[str, str]] | None = None, startup_timeout_s: float = 600.0,
                      request_timeout_s: float = 300.0, console: Console | None = None, hardware_kind: str = "cpu") -> dict[str, Any]:
    """Run ``prompts`` greedily on every adapter and compare tokens with the reference.

    Returns ``{"reference": name | None, "prompts": [...], "max_tokens": n, "engines": {name:
    {"status": "ok" | "skipped" | "failed", "reason": str | None, "display_name": str | None,
    "outputs": [text], "per_prompt": [{"tokens", "prefix_tokens", "agreement"}],
    "token_agreement": float | None, "exact_matches": int | None}}}``.
    Engine failures are recorded, not raised. Raises ValueError for an empty prompt list or
    ``max_tokens < 1``.
    """
    if not prompts:
        raise ValueError("no prompts given: pass at least one prompt")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1 (got {max_tokens})")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    result: dict[str, Any] = {"reference": None, "prompts": list(prompts), "max_tokens": max_tokens, "engines": {}}
    ref_outputs: list[str] | None = None
    engines = each_engine(adapters, model_dir, run_dir, lambda ep: greedy_outputs(ep, prompts, max_tokens, request_timeout_s),
                          threads=threads, engine_args=engine_args, startup_timeout_s=startup_timeout_s, console=console,
                          hardware_kind=hardware_kind)
    for name, done in engines:
        outputs = done.pop("value") or []
        entry = {**done, "outputs": outputs, "per_prompt": [], "token_agreement": None, "exact_matches": None}
        result["engines"][name] = entry
        if entry["status"] != "ok":
            continue
        if ref_outputs is None:
            ref_outputs, result["reference"] = outputs, name
        per = prompt_agreements(tokenizer, ref_outputs, outputs)
        entry["per_prompt"] = [{"tokens": p["tokens"], "prefix_tokens": p["prefix_tokens"],
                                "agreement": round(p["agreement"], 4)} for p in per]
        summary = summarize_agreements(per)
        entry["token_agreement"], entry["exact_matches"] = summary.token_agreement, summary.exact_matches
    return result
