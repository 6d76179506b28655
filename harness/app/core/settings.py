"""What ``bench run`` was asked for, validated by the CLI before the orchestrator gets it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from workloads.options import WorkloadOptions

from harness.metrics import SLO


@dataclass
class RunConfig:
    """Everything ``bench run`` was asked for (validated by the CLI before it gets here)."""

    engines: list[str]
    workload: WorkloadOptions = field(default_factory=WorkloadOptions)  # validated once, by the CLI
    model: str | None = None
    slos: list[SLO] = field(default_factory=list)
    warmup: int = 2
    repeats: int = 1  # rounds of every engine, interleaved (A B C, C B A, ...), each on a fresh start
    output_dir: Path = Path("results")
    run_id: str | None = None
    base_url: str | None = None
    served_model_name: str | None = None
    engine_args: dict[str, dict[str, str]] = field(default_factory=dict)
    parity: str = "report"  # --parity: "report" (audit only) or "strict" (equalise through flags, adapters/parity.py)
    threads: int | None = None
    request_timeout_s: float = 600.0
    startup_timeout_s: float = 600.0
    check_equivalence: bool = True
    calibrate: bool = True
    client_workers: int = 1  # --client-workers: client processes measuring each engine (harness/loadgen/workers.py)
    feature_probes: bool = True  # probe each engine's features once, after its first measured phase (feature_phase.py)
    hardware: str = "detected"
    preset: str = "balanced"
    report: bool = True
    setup_engines: bool = False  # install missing CPU engine environments before measuring them
    parallel_start: bool = True  # start every engine at once, frozen until its turn (harness/startup.py)
    ignore_eos: bool = True  # send ignore_eos where the workload and engine allow; False = --no-ignore-eos
    max_failure_rate: float = 0.05  # above it an engine is eliminated / a probe fails (harness/metrics/failures.py)
    tokenizer: str | None = None  # --engine openai: the endpoint's model folder (also in ``model``); None = not given
    price_per_hour: float | None = None  # --price-per-hour: USD per device-hour for the cost; None = the hardware profile's
    executor: str = "local"  # --executor: "local" (this process) or "ray" (each trial a Ray task, harness/app/executors/ray.py)
    ray_address: str | None = None  # --ray-address: the cluster to join; None = a local Ray instance
    ray_resources: dict[str, float] = field(default_factory=dict)  # --ray-resources: per-trial overrides and custom resources

    @property
    def token_note(self) -> str | None:
        """What the token counts of an ``--engine openai`` run without ``--tokenizer`` rest on
        (printed, and stored in the manifest's workload section the report shows); None when
        there is no endpoint or its tokenizer was given."""
        if "openai" not in self.engines or self.tokenizer:
            return None
        return ("token counts of the openai endpoint come from the server's usage only: no --tokenizer was given, "
                "so its prompts were built and their lengths planned with the default model's tokenizer "
                "(SmolLM2-135M-Instruct), which need not be the endpoint's; pass --tokenizer DIR (the served "
                "model's folder) to build them with its own")

    @property
    def model_described(self) -> bool:
        """Whether the run's model folder is the one served: False for an ``--engine openai``
        run alone without ``--tokenizer`` (the manifest then describes no model, and the
        memory fit says it was not checked)."""
        return not (self.engines == ["openai"] and not self.tokenizer)


# Engines whose environment `--setup-engines` creates on a CPU-only machine, in run order.
# Not DeepSpeed: on a CPU its inference path is Hugging Face `generate` underneath (no kernel
# injection), so it measures what the transformers baseline already measures, at ~40 s of a
# default run; `bench engines setup deepspeed` adds it and `--engine all` then measures it.
AUTO_SETUP_CPU = ("vllm", "sglang", "transformers_serve", "onnxruntime")


def default_threads() -> int:
    """Engine threads: all cores but one (the client's), at least 1 (DESIGN.md)."""
    return max(1, (os.cpu_count() or 2) - 1)
