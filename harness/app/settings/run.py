"""What ``bench run`` is asked for: one pydantic model, its validation and its command line.

:class:`RunSettings` holds every setting of a run (the orchestrators read ``cfg.threads``,
``cfg.workload``, ``cfg.slos`` ...) and declares each option beside its field (:class:`Cli`
metadata, :mod:`harness.app.settings.fields`): ``bench run`` and ``bench search``
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
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Optional

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from results.pairs import split_list
from workloads.options import WorkloadOptions, parse_options

from harness.app.settings import checks
from harness.app.settings.energy import EnergyGroup, EnergyOptions
from harness.app.settings.fields import Cli, CliGroup, CliModel, cli_of, given_paths, option_flag
from harness.app.settings.ray_options import ExecutorSettings
from harness.app.settings.shared import (EngineArgs, Hardware, MaxFailureRate, Model, OutputDir, Preset, PricePerHour,
                                         Slos)
from harness.app.settings.workload import WORKLOAD_OPTIONS
from harness.app.settings.tune_options import TuneSettings


class ParityMode(str, Enum):
    """``--parity``: ``report`` audits only, ``strict`` also equalises (adapters/parity.py)."""

    report = "report"
    strict = "strict"


def _endpoints(items: list[str]) -> dict[str, str]:
    """``--endpoint NAME=URL`` items → {name: url} (checked: a plain name, not an engine's, once
    each; an http(s) URL with a host)."""
    from adapters.registry import ENGINE_NAMES

    out: dict[str, str] = {}
    for item in items:
        name, sep, url = item.partition("=")
        name = name.strip()
        if not sep or not name or not url.strip():
            raise ValueError(f"--endpoint {item!r} is not NAME=URL, e.g. --endpoint prod=http://10.0.0.5:8000")
        if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise ValueError(f"--endpoint {name!r}: a name of letters, digits, '-', '_' or '.', e.g. prod or vllm-canary")
        if name in ENGINE_NAMES or name == "all":
            raise ValueError(f"--endpoint {name!r}: that is an engine's name; call the endpoint something else "
                             f"(e.g. {name}-prod)")
        if name in out:
            raise ValueError(f"--endpoint {name!r} is given twice: name each endpoint once")
        out[name] = checks.check_base_url(url.strip(), option=f"--endpoint {name}") or url.strip()
    return out


def _accuracy_set(text: Optional[str]) -> Optional[str]:
    """``--accuracy FILE``: the path, once the file reads as an accuracy set (else its one-line error)."""
    if not text:
        return None
    from workloads.accuracy import load_accuracy_set

    load_accuracy_set(text)
    return str(text)


def _recipe_file(text: Optional[str]) -> Optional[str]:
    from harness.app.settings.tune_options import check_recipe_file

    return check_recipe_file(text)


class CheckSettings(CliModel):
    """``bench run``'s checks of the engines' outputs, outside the measured phase: ``equivalence``
    (greedy output-equivalence across engines), ``fidelity_prompts`` (0-512; 0 = no output-fidelity
    check against transformers fp32, harness/loadgen/fidelity.py) of ``fidelity_tokens`` greedy
    tokens (1-1024), ``fidelity_floor`` in [0, 1] for other numerics, ``allow_unchecked`` (an
    engine whose check could not run competes), ``accuracy`` (a JSONL set's path, None = none),
    ``feature_probes`` (after each engine's first measured phase, feature_phase.py)."""

    cli_panel: ClassVar[str | None] = "Output checks"

    equivalence: Annotated[bool, Cli("--no-equivalence", invert=True, help="Skip the greedy output-equivalence check across engines.")] = True
    fidelity_prompts: Annotated[int, Field(ge=0, le=512), Cli("--fidelity-prompts", range=True, envvar="BENCH_FIDELITY_PROMPTS", help="Prompts of the output-fidelity check (0 = skip it): drawn from the run's own workload, each answered greedily by every engine after its warm-up, outside the measured phase, and compared token by token with Hugging Face transformers at fp32 on the same weights (run once per model, cached), resumed on the reference's prefix after each divergence. An engine below the fidelity floor is excluded from the recommendation, and so is one whose check could not run or answered fewer than 90 % of the prompts (--allow-unchecked lets it compete).")] = 32
    fidelity_tokens: Annotated[int, Field(ge=1, le=1024), Cli("--fidelity-tokens", range=True, help="Greedy tokens per prompt of the output-fidelity check.")] = 64
    fidelity_floor: Annotated[float, Field(ge=0.0, le=1.0), Cli("--fidelity-floor", help="The fidelity floor for configurations of other numerics (a quantised KV cache or weights): the 95 % upper bound of their top-1 agreement with the reference outside near-ties (a bootstrap interval that resamples the prompts) must reach it. Engines at the reference's precision always face the strict floor, 0.99.")] = 0.90
    allow_unchecked: Annotated[bool, Cli("--allow-unchecked", help="Let an engine whose output-fidelity check could not run (it refused or failed the check's requests) or answered fewer than 90 % of its prompts compete; the verdict and the capacity table still say its fidelity was not checked. Without it such an engine is excluded with one line why. Never lets a lower-precision configuration --tune tries through: that one must pass its check.")] = False
    accuracy: Annotated[Optional[str], Cli("--accuracy", type=str, parse=_accuracy_set, help="Task accuracy on your own set: a JSONL file, one question a line ({\"prompt\" or \"messages\", \"expected\", \"match\": \"exact\" or \"regex\", \"max_tokens\"}), answered greedily by every engine through the same client after its warm-up, outside the measured phase; reported per engine with a 95 % interval. A sample set ships in workloads/data (accuracy_sample).")] = None
    feature_probes: Annotated[bool, Cli("--no-feature-probes", invert=True, help="Skip the feature probes (structured output, tool calling, n>1, stop strings, logprobs, a prompt near the maximum context), sent to each engine once after its first measured phase; without them the scorer counts no feature as verified.")] = True


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

    engines: Annotated[list[str], Cli("--engine", "-e", type=str, parse=split_list, default="all", help="Comma-separated engines, or 'all' (every engine that can run here). See `bench engines`.")]
    workload: Annotated[WorkloadOptions, WORKLOAD_OPTIONS] = Field(default_factory=WorkloadOptions)
    # (in the order bench run checked them before: an input with several bad values names the same first)
    threads: Annotated[Optional[int], Cli("--threads", help="CPU threads per engine (default: cores - 1, one core left for the client).")] = None
    request_timeout_s: Annotated[float, Cli("--request-timeout", help="Per-request client timeout, seconds.")] = 600.0
    startup_timeout_s: Annotated[float, Cli("--startup-timeout", help="Engine start-up (health) timeout, seconds.")] = 600.0
    warmup: Annotated[int, Cli("--warmup", help="Warm-up requests per engine (excluded, share no prefix with the workload).")] = 2
    slos: Slos = Field(default_factory=list)
    model: Model = None
    # rounds of every engine, interleaved (A B C, C B A, ...), each on a fresh start
    repeats: Annotated[int, Field(ge=1, le=20), Cli("--repeats", range=True, help="At one load point (--request-rate, --max-concurrency, --duration): measure every engine this many times, interleaved in alternating order (A B C, C B A, A B C, ...), each time freshly started on the same workload and seed; headline numbers get 95% intervals over the repeats and the ranking reports ties within the noise. With load ladders (the default): the bracket points of a leader and runner-up not yet separated are measured again up to max(3, N) times each, interleaved, on fresh starts.")] = 1
    output_dir: OutputDir = Path("results")
    run_id: Annotated[Optional[str], Cli("--run-id", help="Run folder name (default: timestamp-workload; bench search: timestamp-search-workload).")] = None
    base_url: Annotated[Optional[str], Cli("--base-url", help="--engine openai: the endpoint, e.g. http://host:8000 (API key from $OPENAI_API_KEY; credentials in the URL are masked in every file and message).")] = None
    served_model_name: Optional[str] = None  # --engine openai: the --model given (from_cli); ``model`` is then --tokenizer
    engine_args: EngineArgs = Field(default_factory=dict)
    # "report" (audit only) or "strict" (equalise through flags, adapters/parity.py)
    parity: Annotated[Literal["report", "strict"], Cli("--parity", type=ParityMode, help="report (default): read what every engine reports it runs with (KV capacity, prefix caching, chunked prefill, max_num_seqs, dtype, CUDA graphs ...) and flag unfair differences; strict: also equalise what each engine's own flags can (prefix caching on, max_num_seqs 32, a 2048-token step/chunk budget; the KV budget is already shared) and list what could not be; an explicit --engine-arg wins.")] = "report"
    # the checks of the engines' outputs beside the measuring: equivalence, fidelity, accuracy, features
    check: CheckSettings = Field(default_factory=lambda: CheckSettings())
    calibrate: Annotated[bool, Cli("--no-calibration", invert=True, help="Skip the client calibration against a null server.")] = True
    # client processes measuring each engine (harness/loadgen/workers.py)
    client_workers: Annotated[int, Field(ge=1, le=64), Cli("--client-workers", range=True, help="Client processes measuring each engine: the arrival schedule is computed once and split over them (whole sessions), each sends its share on the same absolute schedule and the records merge into one requests.jsonl. More than 1 when one client process cannot send the offered rate (the calibration line says how many it needs).")] = 1
    hardware: Hardware = "detected"
    preset: Preset = "balanced"
    report: bool = True
    setup_engines: Annotated[bool, Cli("--setup-engines", help="Install missing CPU engine environments (vLLM-CPU, SGLang-CPU, transformers serve, ONNX Runtime GenAI, OpenVINO GenAI; not llama.cpp, whose llama-server build takes 10–25 minutes: `bench engines setup llamacpp` adds it; not DeepSpeed, which on a CPU is Hugging Face generate underneath: `bench engines setup deepspeed` adds it) before measuring them; a failed install is recorded as a failed engine.")] = False
    # start every engine at once, frozen until its turn (harness/app/trial/startup.py)
    parallel_start: Annotated[bool, Cli("--sequential-start", invert=True, help="Start each engine just before its turn instead of all at once. By default every engine starts in parallel and is frozen (SIGSTOP) once ready until its turn, so start-up overlaps but never runs during a measurement; this needs memory for all of them at once (checked first).")] = True
    # send ignore_eos where the workload and engine allow
    ignore_eos: Annotated[bool, Cli("--no-ignore-eos", invert=True, help="Do not send ignore_eos (for endpoints that reject the field, e.g. the hosted OpenAI API); replies may then stop before the workload's output length, which the summary reports as output shortfall.")] = True
    # above it an engine is eliminated / a probe fails (harness/metrics/failures.py)
    max_failure_rate: MaxFailureRate = 0.05
    # --engine openai: the endpoint's model folder (also in ``model``); None = not given
    tokenizer: Annotated[Optional[str], Cli("--tokenizer", help="--engine openai: the local folder of the model the endpoint serves (config.json + tokenizer, no weights needed): the workload is built with its tokenizer and the manifest and memory fit describe it. Without it token counts come from the server's usage only.")] = None
    # USD per device-hour for the cost; None = the hardware profile's
    energy: EnergyGroup = Field(default_factory=EnergyOptions)  # --watts, --price-per-kwh
    price_per_hour: PricePerHour = None
    # where trials run: here, one after another, or each a Ray task (harness/app/executors/ray.py)
    executor: ExecutorSettings = Field(default_factory=lambda: ExecutorSettings())

    # deployments that already run, compared as engines the harness does not start
    devices: Annotated[dict[str, int], Cli("--devices", type=list[str], parse=checks.parse_devices, default=[], help="The devices (GPUs) one deployment of an engine or --endpoint uses, NAME=N (repeatable), e.g. --devices prod=8: throughput is per device and cost counts these devices. A started engine's come from its launch (tensor x pipeline x data parallel sizes in --engine-arg); an endpoint's are 1 unless told.")] = Field(default_factory=dict)
    endpoints: Annotated[dict[str, str], Cli("--endpoint", type=list[str], parse=_endpoints, default=[], help="An OpenAI-compatible deployment that already runs, NAME=URL (repeatable), e.g. --endpoint prod=http://10.0.0.5:8000 --endpoint canary=http://10.0.0.6:8000: each is compared as an engine the harness does not start (--model: the served model name, --tokenizer: its folder, as for --engine openai); with --endpoint, --engine adds local engines (default none). The run's prompts are salted (--prompt-salt auto) so an endpoint's warm prefix cache serves none of them.")] = Field(default_factory=dict)
    # the load ladder (the main job when no load point is asked for; harness/app/run/ladder_mode.py)
    ladder_budget_s: Annotated[float, Cli("--ladder-budget", type=str, parse=checks.duration_of("--ladder-budget"), help="Measuring for one climb of a load ladder at most (150, 150s, 2m30s; within --time-budget; closed-loop concurrency doubling until an SLO breaks or throughput stops rising; start-up and warm-up not counted): each climb the main job makes after the engines' low ends, and the yardstick's first climb (its share of --time-budget otherwise). The main job climbs a ladder unless --num-requests, --request-rate, --max-concurrency, --duration or --ramp-up-strategy (on the command line or in --workload-spec) asks for one load point.")] = 150.0
    time_budget_s: Annotated[float, Cli("--time-budget", type=str, parse=checks.parse_duration, help="The whole main job's time (900, 900s, 15m, 1h; inf = no bound): the engines' starts, checks, ladders and the measuring that decides between them. Every engine climbs its ladder once (its share, at most --ladder-budget); then the measuring goes where the verdict is uncertain (an engine that cannot reach the leader is measured no more) until the verdict is decided or the time is spent.")] = 900.0
    max_load: Annotated[int, Field(ge=1, le=4096), Cli("--max-load", range=True, help="Highest concurrency a load ladder climbs to (requests in flight; agentic: sessions).")] = 64
    target_load: Annotated[Optional[float], Cli("--target-load", help="Output tokens/s the deployment must serve: the capacity table then gives, per engine, the devices (replicas of what was measured) that load needs at the SLO and their cost per hour at --price-per-hour (or the hardware's list price).")] = None
    # bench run --tune: each engine's configuration search before the main job (harness/app/run/tune.py)
    tune: TuneSettings = Field(default_factory=lambda: TuneSettings())
    engine_config: Annotated[Optional[str], Cli("--engine-config", type=str, parse=_recipe_file, help="A recipe.json a run wrote (the winner's configuration: engine, engine args, threads): run that engine with it again (--engine defaults to the recipe's, and must name it when given); --engine-arg and --threads given on the command line win over the recipe's.")] = None

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
            value = parse_options(**{k: group.options[k].parse(v) if k in group.options and group.options[k].parse
                                     else v for k, v in value.items()})
        if isinstance(value, WorkloadOptions):
            names = [n for n, _ in list_workloads()]
            if value.name not in names:
                raise ValueError(f"unknown workload {value.name!r}: choose from {', '.join(names)}")
            if _from_cli(info):
                checks.check_workload(value)
        return value

    @field_validator("engines")
    @classmethod
    def _engines(cls, engines: list[str]) -> list[str]:
        from adapters.registry import ENGINE_NAMES

        if not engines:
            raise ValueError("--engine is empty: name engines (e.g. own,transformers) or use 'all'")
        unknown = [e for e in engines if e != "all" and e not in ENGINE_NAMES]
        if unknown:
            raise ValueError(f"unknown engine {unknown[0]!r}: choose from {', '.join(ENGINE_NAMES)} or 'all'")
        if "all" in engines and len(engines) > 1:
            raise ValueError("--engine all cannot be combined with other names")
        dup = next((e for e in engines if engines.count(e) > 1), None)
        if dup:
            raise ValueError(f"--engine lists {dup!r} twice: name each engine once")
        return engines

    @field_validator("threads", "request_timeout_s", "startup_timeout_s", "ladder_budget_s", "target_load")
    @classmethod
    def _positive(cls, value: Any, info: ValidationInfo) -> Any:
        checks.check_positive(_flag(cls, info), value)
        return value

    @field_validator("warmup")
    @classmethod
    def _warmup(cls, warmup: int) -> int:
        if warmup < 0:
            raise ValueError(f"--warmup must be >= 0, got {warmup}")
        return warmup

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, run_id: Optional[str]) -> Optional[str]:
        return checks.check_run_id(run_id)

    # -- how values combine, then the machine ----------------------------------------------------
    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> RunSettings:
        cli = _from_cli(info)
        if self.engine_config:
            from harness.app.settings.tune_options import apply_recipe

            self.engines, self.engine_args, self.threads = apply_recipe(self.engine_config, self.engines,
                                                                        self.engine_args, self.threads)
        if self.endpoints:
            if self.engines == ["all"]:  # with --endpoint the local engines are the ones named (default: none)
                self.engines = []
            if self.workload.prompt_salt is None:  # a deployment's warm prefix cache must serve none of the prompts
                self.workload = self.workload.model_copy(update={"prompt_salt": "auto"})
        checks.check_endpoint(self.engines, self.base_url, self.tokenizer, bool(self.endpoints))
        if self.check.allow_unchecked and not self.check.fidelity_prompts:
            raise ValueError("--allow-unchecked lets an engine whose output-fidelity check could not run compete, and "
                             "--fidelity-prompts 0 runs no check: drop one or the other")
        checks.check_devices(self.devices, self.endpoints, self.engine_args)
        checks.check_engine_args(self.engines, self.engine_args)
        given = info.context.get("given") if info.context else None  # typed (from_cli), else set explicitly
        self._check_ladder_options(given_paths(self) if given is None else set(given))
        cap = self.workload.max_concurrency
        if cap is not None and cap < self.client_workers:
            raise ValueError(f"--max-concurrency {cap} is smaller than --client-workers {self.client_workers}: each "
                             f"worker needs at least one request in flight; use --client-workers {cap} or fewer")
        if not cli:
            return self
        if self.external:  # the command line's --model names the served model; the folder is --tokenizer
            self.served_model_name, self.model = self.model, self.tokenizer
            if self.tokenizer is not None:
                checks.check_tokenizer_dir(self.tokenizer)
        checks.check_machine(self.threads, self.hardware)
        checks.check_output(self.output_dir, self.run_id)
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
                       ("ladder_budget_s", "time_budget_s", "max_load", "target_load", "tune.seconds") if path in given]
        if ladder_only and not self.ladder:
            raise ValueError(f"{' and '.join(ladder_only)} appl{'ies' if len(ladder_only) == 1 else 'y'} to load ladders, and this run "
                             "measures one load point "
                             "(--num-requests, --request-rate, --max-concurrency, --duration or --ramp-up-strategy): drop one or the other")
        if self.ladder and self.client_workers > self.max_load:
            raise ValueError(f"--client-workers {self.client_workers} is above --max-load {self.max_load}: a ladder starts at "
                             "one session in flight per worker; raise --max-load or use fewer workers")

    @property
    def external(self) -> bool:
        """Whether the run measures deployments it does not start (``--engine openai``, ``--endpoint``)."""
        return "openai" in self.engines or bool(self.endpoints)

    @property
    def token_note(self) -> str | None:
        """What the token counts of an ``--engine openai`` run without ``--tokenizer`` rest on
        (printed, and stored in the manifest's workload section the report shows); None when
        there is no endpoint or its tokenizer was given."""
        if not self.external or self.tokenizer:
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
        return not (set(self.engines) <= {"openai"} and self.external and not self.tokenizer)


def _from_cli(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get("cli"))


def _flag(model: type[BaseModel], info: ValidationInfo) -> str:
    cli = cli_of(model.model_fields[str(info.field_name)])
    return cli.flag if isinstance(cli, Cli) else str(info.field_name)


def default_threads() -> int:
    """Engine threads: all cores but one (the client's), at least 1 (DESIGN.md)."""
    return max(1, (os.cpu_count() or 2) - 1)
