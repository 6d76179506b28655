"""What every job does before its first measurement: the tokenizer and the workload, built while
the engines start, and the run's facts recorded in the manifest."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

from results.store import RunWriter
from workloads.base import Workload

from harness.app.trial.manifest import fill_manifest
from harness.app.settings.run import RunSettings
from rich.console import Console


def build_or_discard(model_dir: Path, build: Callable[[Any], Workload], writer: RunWriter,
                     stop_engines: Callable[[], None]) -> tuple[Any, Workload]:
    """The model's tokenizer and ``build(tokenizer)``; on failure (a bad spec, Ctrl-C) the
    engines already starting are stopped (``stop_engines``) and the run folder, which holds no
    measurement yet, is removed before the error propagates."""
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        return tokenizer, build(tokenizer)
    except BaseException:
        stop_engines()
        writer.close()
        shutil.rmtree(writer.run_dir, ignore_errors=True)
        raise


def announce(console: Console, job: str, writer: RunWriter) -> None:
    """``Run ID → FOLDER``, said once the folder is sure to be kept (after :func:`build_or_discard`:
    a job that fails before it removes the folder, and must not have named it)."""
    from rich.markup import escape

    console.print(f"{job} [bold]{escape(writer.run_dir.name)}[/] → {escape(str(writer.run_dir))}")


def record_run_facts(writer: RunWriter, cfg: RunSettings, model_dir: Path, workload: Workload, threads: int) -> None:
    """Fill and write the manifest (model, workload, seed, SLOs, threads, hardware; the
    ``--price-per-hour`` of the settings ``cfg`` over the hardware profile's price)."""
    fill_manifest(writer.manifest, model_dir, workload, cfg.workload.seed, cfg.decision.slos, threads,
                  token_note=cfg.token_note, describe_model=cfg.model_described)
    if cfg.decision.price_per_hour is not None and writer.manifest.hardware is not None:  # --price-per-hour
        writer.manifest.hardware.price_per_hour = cfg.decision.price_per_hour
        writer.manifest.hardware.price_source = "--price-per-hour"
    writer.write_manifest()


def context_overflow(cfg: RunSettings, workload: Workload, tokenizer: Any, context: int | None) -> str | None:
    """The warning line, before anything is measured, when requests of the workload need more
    tokens (prompt + ``max_tokens``) than the model's context window ``context`` (tokens, its
    config.json ``max_position_embeddings``): an engine refuses them, so they are found only by
    failing (the reliability gate then judges the engine on them). An agentic workload is checked
    over its whole trace (every session once, :func:`workloads.replay_stats.trace_sessions`), the
    sessions a ladder's points draw from; another over the requests built. None when every request
    fits or the context is unknown."""
    if not context:
        return None
    if workload.name == "agentic":
        from workloads.registry import resolve_spec
        from workloads.replay_stats import offered_statistics, trace_sessions
        from workloads.tokens import as_kit

        spec = resolve_spec(cfg.workload)
        stats = offered_statistics(trace_sessions(spec, as_kit(tokenizer)), spec.cache_block_tokens, spec.cache_blocks)
        needs = [i + o for i, o in zip(stats["input_tokens"], stats["output_tokens"])]
    else:
        needs = [len(s.first_request().prompt_token_ids or []) + s.first_request().max_tokens for s in workload.sessions]
    over = [n for n in needs if n > context]
    if not over:
        return None
    return (f"{len(over):,} of {len(needs):,} requests of the workload need more than the model's {context:,}-token "
            f"context (prompt + max_tokens; the longest {max(over):,}): every engine will refuse them and is judged "
            "on those failures; shrink the prompts (--scale for a trace, --input-len) or the outputs (--output-len)")
