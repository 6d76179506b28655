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
