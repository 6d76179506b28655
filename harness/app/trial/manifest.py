"""The run manifest: what was run, on what, with which code (``results.schema.Manifest``)."""

from __future__ import annotations

import math

import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from adapters.telemetry.hardware import detect_hardware
from harness import __version__
from harness.metrics import SLO, slo_table
from results.schema import Manifest, ModelSummary, WorkloadStats
from workloads.base import Workload


def git_sha() -> str | None:
    """The harness checkout's commit, or None outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=5
        )
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def fill_manifest(manifest: Manifest, model_dir: Path, workload: Workload, seed: int | None,
                  slos: Sequence[SLO], threads: int, *, token_note: str | None = None,
                  describe_model: bool = True) -> None:
    """Record the command, versions, hardware, model, workload (spec, seed, statistics), SLOs,
    threads and the metric definitions in ``manifest`` (in place).

    ``describe_model=False`` (an ``--engine openai`` run without ``--tokenizer``): ``model`` is
    left empty, since ``model_dir`` only built the prompts and is not what the endpoint serves.
    ``token_note``: what the token counts rest on, stored as ``workload.token_counts`` (the
    report prints every workload field). Credentials in URLs of the command line are masked
    (``http://user:***@host``)."""
    import harness.metrics as metrics_module
    from harness.app.trial.measure import condition_of

    from results.redact import redact_credentials
    from harness.app.core.model import model_summary

    manifest.command = [redact_credentials(arg) for arg in sys.argv]
    manifest.harness_version = __version__
    manifest.git_sha = git_sha()
    manifest.created_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    manifest.python = platform.python_version()
    manifest.platform = platform.platform()
    manifest.hardware = detect_hardware().to_facts()
    manifest.model = ModelSummary.model_validate(model_summary(model_dir)) if describe_model else None
    manifest.workload = {**workload.spec, **({"token_counts": token_note} if token_note else {})}
    rates = {key: rate for key in ("offered_rate", "requested_rate")
             if (rate := getattr(workload, key, None)) is not None and math.isfinite(rate)}
    manifest.workload_stats = WorkloadStats.model_validate({**workload.stats, **rates})
    manifest.condition = condition_of(workload).facts()  # a killed run is summarised later with the same inputs
    manifest.seed = workload.spec.get("seed", seed)
    manifest.slos = slo_table(slos)
    manifest.threads = {"engine": threads, "client": 1}
    manifest.metric_definitions = (metrics_module.__doc__ or "").strip()
