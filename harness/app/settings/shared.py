"""Options several commands take, declared once: each an ``Annotated`` type carrying its
:class:`Cli` (flags, help, parse) and its check, used as a field's type by every settings model
that has the option (``bench run``, ``bench search``, ``bench recommend``, ``bench report``).
A command whose option means something narrower redeclares only its help
(``Annotated[Slos, SLOS.replace(help=...)]``: the last :class:`Cli` of a field wins).

Every check raises ``ValueError`` with the one line the CLI prints (exit 2).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

from pydantic import AfterValidator

from harness.app.settings.checks import check_price
from harness.app.settings.fields import Cli
from harness.metrics import SLO, parse_slos


def _failure_rate(value: float) -> float:
    if math.isnan(value) or not 0 <= value < 1:
        raise ValueError(f"--max-failure-rate is a share of requests in [0, 1) (0.05 = 5%), got {value:g}")
    return value


def _preset(preset: str) -> str:
    from harness.scoring import PRESETS

    if preset not in PRESETS:
        raise ValueError(f"unknown --preset {preset!r}: choose from {', '.join(PRESETS)}")
    return preset


def _engine_args(items: list[str]) -> dict[str, dict[str, str]]:
    from adapters.registry import parse_engine_args

    return parse_engine_args(items)


def _price(price: Optional[float]) -> Optional[float]:
    check_price(price)
    return price


def default_slos_text() -> str:
    """The default SLOs as ``--help`` says them, read off the one table
    (``harness.scoring.verdict.decision.DEFAULT_SLOS``): ``"on a CPU ttft_p90=2000,tpot_p90=200
    (agentic ttft_p90=4000), on a GPU …"``, a workload's own row by what differs."""
    from harness.scoring.verdict.decision import DEFAULT_SLOS

    parts = []
    for kind, where in (("cpu", "a CPU"), ("gpu", "a GPU")):
        base = DEFAULT_SLOS[kind, ""]
        own = [f"{w} {','.join(p for p in text.split(',') if p not in base.split(','))}"
               for (k, w), text in DEFAULT_SLOS.items() if k == kind and w and text != base]
        parts.append(f"on {where} {base}" + (f" ({'; '.join(own)})" if own else ""))
    return ", ".join(parts)


def _slo_help() -> str:
    """``--slo``'s help: the SLO metrics and their percentiles read off the metric registry
    (:func:`harness.metrics.slo.slo_choices_text`), so a new metric is listed without an edit here."""
    from harness.metrics.slo import slo_choices_text

    return ("SLOs in ms, e.g. 'ttft_p90=500,tpot_p90=50' (each a metric and its percentile: "
            f"{slo_choices_text()}; a bare 'ttft=500' is refused); the verdict's capacity, goodput and the "
            f"recommendation use them. Default (one table, shared with bench search): {default_slos_text()}.")


SLOS = Cli("--slo", type=str, parse=parse_slos, help=_slo_help)
Slos = Annotated[list[SLO], SLOS]
"""``--slo``: SLO thresholds in ms (:func:`harness.metrics.parse_slos`; empty = the defaults)."""

HARDWARE = Cli("--hardware", help="Target hardware of the recommendation: 'detected' (this machine) or a profile: H100-80GB, H200-141GB, A100-80GB, L4-24GB, MI300X, CPU (bench recommend: also 'recorded', the run's).")
Hardware = Annotated[str, HARDWARE]
"""``--hardware``: a hardware profile's name, 'detected' or (bench recommend) 'recorded'."""

Preset = Annotated[str, Cli("--preset", help="Weight preset of the score: latency, throughput, balanced, agentic, cost."),
                   AfterValidator(_preset)]
"""``--preset``: one of :data:`harness.scoring.PRESETS`."""

MaxFailureRate = Annotated[float, Cli("--max-failure-rate", help="The share of a measured condition's requests that may fail (0.05 = 5%; 0 = none may fail): above it the engine is eliminated (bench run, bench recommend; its reason the count and the server's first messages) and a bench search probe does not pass."),
                           AfterValidator(_failure_rate)]
"""``--max-failure-rate``: a share of requests in [0, 1)."""

PRICE_PER_HOUR = Cli("--price-per-hour", help="USD per device-hour of the hardware measured on, for the cost per 1M output tokens (default: the hardware profile's on-demand list price; CPU: an assumed $0.0335 per vCPU-hour). Overrides the price of the recommendation's target too.")
PricePerHour = Annotated[Optional[float], PRICE_PER_HOUR, AfterValidator(_price)]
"""``--price-per-hour``: USD per device-hour, finite and > 0; None = the hardware profile's."""

OUTPUT_DIR = Cli("--output-dir", "-o", help="Where run folders are written.")
OutputDir = Annotated[Path, OUTPUT_DIR]
"""``--output-dir``: the folder of run folders (written by run and search, read by the others)."""

RUNS_DIR = OUTPUT_DIR.replace(help="Where run ids are looked up.")
"""``--output-dir`` of a command that reads runs."""

ENGINE_ARGS = Cli("--engine-arg", type=list[str], parse=_engine_args, default=[], help="Engine option passed through, NAME:key=value (repeatable), e.g. vllm:max_num_seqs=64.")
EngineArgs = Annotated[dict[str, dict[str, str]], ENGINE_ARGS]
"""``--engine-arg NAME:key=value`` (repeatable): {engine: {key: value}} (``adapters.registry.parse_engine_args``)."""

MODEL = Cli("--model", "-m", help="Local Hugging Face model folder (default: the embedded SmolLM2-135M-Instruct). For --engine openai: the served model name.")
Model = Annotated[Optional[str], MODEL]
"""``--model``: a local Hugging Face model folder; None = the embedded model."""
