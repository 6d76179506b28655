"""What ``bench run`` is asked for: one pydantic model, its validation and its command line.

:class:`RunSettings` holds every setting of a run, one group per concern
(:mod:`harness.app.settings.groups`: the orchestrators read ``cfg.engine.threads``,
``cfg.workload``, ``cfg.decision.slos`` ...), and each group declares its options beside its
fields (:class:`Cli` metadata, :mod:`harness.app.settings.fields`): ``bench run`` and ``bench search``
(:class:`harness.app.search.config.SearchSettings`, a subclass) are generated from it by
:func:`harness.app.cli.options.command_from`, so an option is written once and every command
built from the model has it, with the same text.

Validation happens once, here: field validators for one value, ``_check`` for how values
combine; every bad value raises ``ValueError`` with the one line the CLI prints (exit 2).
:meth:`RunSettings.from_cli` validates what the command line gave: ``--model`` then names
the served model of an ``--engine openai`` run, and the checks that read the machine run
too (the workload's spec and trace files, the tokenizer folder, cores, hardware profile,
output folder, Ray installed). Settings built in code (tests, the search's copies) are
checked by value only.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, ClassVar

from pydantic import Field, ValidationInfo, field_validator, model_validator

from workloads.options import WorkloadOptions

from harness.app.settings import checks
from harness.app.settings.energy import EnergyGroup, EnergyOptions
from harness.app.settings.fields import CliGroup, CliModel, cli_of, given_paths, option_flag
from harness.app.settings.groups import (CheckSettings, DecisionSettings, DeploymentSettings, EngineSettings,
                                         LadderSettings, MeasureSettings, OutputSettings, ParityMode)
from harness.app.settings.ray_options import ExecutorSettings
from harness.app.settings.workload import WORKLOAD_OPTIONS, workload_from
from harness.app.settings.tune_options import TuneSettings

__all__ = ["CheckSettings", "DecisionSettings", "DeploymentSettings", "EngineSettings", "LadderSettings",
           "MeasureSettings", "OutputSettings", "ParityMode", "RunSettings", "default_threads"]


class RunSettings(CliModel):
    """Everything ``bench run`` was asked for, validated (see the module's docstring)."""

    # --help's panels, heading → its options' flags in order (an option listed in none goes last)
    cli_panels: ClassVar[dict[str, tuple[str, ...]]] = {
        "Engines": ("--engine", "--model", "--engine-arg", "--engine-config", "--threads", "--parity", "--setup-engines",
                    "--startup-timeout", "--sequential-start"),
        "Deployments that already run": ("--endpoint", "--base-url", "--tokenizer", "--devices"),
        "Workload": ("--workload", "--num-requests", "--input-len", "--output-len", "--range-ratio", "--scale", "--api",
                     "--trace", "--trace-format", "--time-scale", "--workload-spec", "--seed", "--prompt-salt"),
        "One load point": ("--request-rate", "--burstiness", "--max-concurrency", "--duration", "--drain-timeout",
                           "--warmup-window", "--cooldown-window", "--ramp-up-strategy", "--ramp-up-start-rps",
                           "--ramp-up-end-rps"),
        "Load ladder and time": ("--time-budget", "--ladder-budget", "--max-load", "--target-load"),
        "Decision and SLOs": ("--slo", "--max-failure-rate", "--hardware", "--preset", "--price-per-hour",
                              "--price-per-kwh", "--watts"),
        "Tuning": ("--tune", "--tune-configs", "--tune-lower-precision"),
        "Output checks": ("--no-equivalence", "--fidelity-prompts", "--fidelity-tokens", "--fidelity-floor",
                          "--allow-unchecked", "--accuracy", "--no-feature-probes"),
        "Measuring": ("--warmup", "--repeats", "--request-timeout", "--client-workers", "--no-calibration", "--no-ignore-eos"),
        "Executor": ("--executor", "--ray-address", "--ray-resources"),
        "Output": ("--output-dir", "--run-id"),
    }
    cli_order: ClassVar[tuple[str, ...]] = tuple(flag for flags in cli_panels.values() for flag in flags)
    cli_exclude: ClassVar[tuple[str, ...]] = ()  # options of the model a command built from it leaves out
    cli_only_listed: ClassVar[bool] = False  # True: a command shows only the options its cli_panels list

    engine: EngineSettings = Field(default_factory=lambda: EngineSettings())
    workload: Annotated[WorkloadOptions, WORKLOAD_OPTIONS] = Field(default_factory=WorkloadOptions)
    deployments: DeploymentSettings = Field(default_factory=lambda: DeploymentSettings())
    load: LadderSettings = Field(default_factory=lambda: LadderSettings())
    decision: DecisionSettings = Field(default_factory=lambda: DecisionSettings())
    energy: EnergyGroup = Field(default_factory=EnergyOptions)  # --watts, --price-per-kwh
    # bench run --tune: each engine's configuration search before the main job (harness/app/run/tune.py)
    tune: TuneSettings = Field(default_factory=lambda: TuneSettings())
    # the checks of the engines' outputs beside the measuring: equivalence, fidelity, accuracy, features
    check: CheckSettings = Field(default_factory=lambda: CheckSettings())
    measure: MeasureSettings = Field(default_factory=lambda: MeasureSettings())
    # where trials run: here, one after another, or each a Ray task (harness/app/executors/ray.py)
    executor: ExecutorSettings = Field(default_factory=lambda: ExecutorSettings())
    output: OutputSettings = Field(default_factory=lambda: OutputSettings())

    @property
    def ladder(self) -> bool:
        """Whether the run climbs load ladders (the main job) rather than measuring one load
        point: no request count, rate, concurrency, duration or ramp was asked for (whoever gives
        one wants that load point), and the workload does not replay a trace's own arrival times."""
        w = self.workload
        fields = ("num_requests", "request_rate", "max_concurrency", "duration_s", "ramp_up_strategy")
        spec = checks.spec_values(w.spec_file)
        return all(getattr(w, f) is None and spec.get(f) is None for f in fields) and w.name != "trace"

    # -- one value at a time --------------------------------------------------------------------
    @field_validator("workload", mode="before")
    @classmethod
    def _workload(cls, value: Any, info: ValidationInfo) -> Any:
        """The workload's options from the command line's values: parsed once into
        :class:`WorkloadOptions`, its name checked and (command line) its spec resolved and
        its trace found, so none of these fails after engines started."""
        from workloads.registry import list_workloads

        if isinstance(value, dict):
            group = cli_of(cls.model_fields["workload"])
            assert isinstance(group, CliGroup)
            value = workload_from(group, value)
        if isinstance(value, WorkloadOptions):
            names = [n for n, _ in list_workloads()]
            if value.name not in names:
                raise ValueError(f"unknown workload {value.name!r}: choose from {', '.join(names)}")
            if _from_cli(info):
                checks.check_workload(value)
        return value

    # -- how values combine, then the machine ----------------------------------------------------
    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> RunSettings:
        cli = _from_cli(info)
        engine, deployments, measure = self.engine, self.deployments, self.measure
        if engine.config:
            from harness.app.settings.tune_options import apply_recipe

            names, args, threads = apply_recipe(engine.config, engine.names, engine.args, engine.threads)
            self.engine = engine = engine.model_copy(update=dict(names=names, args=args, threads=threads))
        if deployments.endpoints:
            if engine.names == ["all"]:  # with --endpoint the local engines are the ones named (default: none)
                self.engine = engine = engine.model_copy(update=dict(names=[]))
            if self.workload.prompt_salt is None:  # a deployment's warm prefix cache must serve none of the prompts
                self.workload = self.workload.model_copy(update={"prompt_salt": "auto"})
        checks.check_endpoint(engine.names, deployments.base_url, deployments.tokenizer, bool(deployments.endpoints))
        if self.check.allow_unchecked and not self.check.fidelity_prompts:
            raise ValueError("--allow-unchecked lets an engine whose output-fidelity check could not run compete, and "
                             "--fidelity-prompts 0 runs no check: drop one or the other")
        checks.check_devices(deployments.devices, deployments.endpoints, engine.args)
        checks.check_engine_args(engine.names, engine.args)
        given = info.context.get("given") if info.context else None  # typed (from_cli), else set explicitly
        self._check_ladder_options(given_paths(self) if given is None else set(given))
        cap = self.workload.max_concurrency
        if cap is not None and cap < measure.client_workers:
            raise ValueError(f"--max-concurrency {cap} is smaller than --client-workers {measure.client_workers}: each "
                             f"worker needs at least one request in flight; use --client-workers {cap} or fewer")
        if not cli:
            return self
        if self.external:  # the command line's --model names the served model; the folder is --tokenizer
            self.deployments = deployments.model_copy(update=dict(served_model_name=engine.model))
            self.engine = engine.model_copy(update=dict(model=deployments.tokenizer))
            if deployments.tokenizer is not None:
                checks.check_tokenizer_dir(deployments.tokenizer)
        checks.check_machine(self.engine.threads, self.decision.hardware)
        checks.check_output(self.output.output_dir, self.output.run_id)
        if self.executor.kind == "ray":
            from harness.app.settings.ray_options import import_ray

            try:
                import_ray()
            except RuntimeError as exc:
                raise ValueError(str(exc)) from None
        return self

    def _check_ladder_options(self, given: set[str]) -> None:
        """The load ladder's options only with a ladder (``given``: the fields the user gave, at
        whatever value); a ladder starts at the client workers' count (each needs a session in flight)."""
        if 0 < self.tune.seconds < 1:
            raise ValueError(f"--tune {self.tune.seconds:g} is seconds of measuring per engine for the search: under 1 s no ladder "
                             "measures anything; give e.g. --tune 180 (0 = no search)")
        if "tune.configs" in given and not self.tune.seconds:
            raise ValueError("--tune-configs sets how many configurations --tune tries: add --tune SECONDS or drop it")
        if self.tune.lower_precision and not self.tune.seconds:
            raise ValueError("--tune-lower-precision lets --tune try lower precision: add --tune SECONDS or drop it")
        if self.tune.lower_precision and not self.check.fidelity_prompts:
            raise ValueError("--tune-lower-precision needs the output-fidelity check to gate what it lowers: drop "
                             "--fidelity-prompts 0 (or --tune-lower-precision)")
        ladder_only = [option_flag(type(self), tuple(path.split("."))) for path in
                       ("load.ladder_budget_s", "load.time_budget_s", "load.max_load", "load.target_load", "tune.seconds") if path in given]
        if ladder_only and not self.ladder:
            raise ValueError(f"{' and '.join(ladder_only)} appl{'ies' if len(ladder_only) == 1 else 'y'} to load ladders, and this run "
                             "measures one load point "
                             "(--num-requests, --request-rate, --max-concurrency, --duration or --ramp-up-strategy): drop one or the other")
        if self.ladder and self.measure.client_workers > self.load.max_load:
            raise ValueError(f"--client-workers {self.measure.client_workers} is above --max-load {self.load.max_load}: a ladder starts at "
                             "one session in flight per worker; raise --max-load or use fewer workers")

    @property
    def external(self) -> bool:
        """Whether the run measures deployments it does not start (``--engine openai``, ``--endpoint``)."""
        return "openai" in self.engine.names or bool(self.deployments.endpoints)

    @property
    def token_note(self) -> str | None:
        """What the token counts of an ``--engine openai`` run without ``--tokenizer`` rest on
        (printed, and stored in the manifest's workload section the report shows); None when
        there is no endpoint or its tokenizer was given."""
        if not self.external or self.deployments.tokenizer:
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
        return not (set(self.engine.names) <= {"openai"} and self.external and not self.deployments.tokenizer)


def _from_cli(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get("cli"))


def default_threads() -> int:
    """Engine threads: all cores but one (the client's), at least 1 (DESIGN.md)."""
    return max(1, (os.cpu_count() or 2) - 1)
