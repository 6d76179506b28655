"""``bench run``'s settings by concern, one group each (a :class:`CliModel` with a ``cli_panel``):
the engines and their start-up, the deployments that already run, the load ladder and time,
the decision and its SLOs, the measuring, the output. A setting is declared once, on its
group's field, with its option (:class:`Cli`); :class:`harness.app.settings.run.RunSettings`
holds one of each (``cfg.engine.names``, ``cfg.load.max_load``, ``cfg.measure.repeats`` ...)
and a function is handed the group it reads. The options stay flat on the command line, in
the panels :attr:`RunSettings.cli_panels` orders; a group's checks of one value are its own,
how values of several groups combine is :meth:`RunSettings._check`'s.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Optional

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from results.pairs import split_list

from harness.app.settings import checks
from harness.app.settings.fields import Cli, CliModel, cli_of
from harness.app.settings.shared import (EngineArgs, Hardware, MaxFailureRate, Model, OutputDir, Preset, PricePerHour,
                                         Slos)


class ParityMode(str, Enum):
    """``--parity``: ``report`` audits only, ``strict`` also equalises (adapters/parity.py)."""

    report = "report"
    strict = "strict"


def _flag(model: type[BaseModel], info: ValidationInfo) -> str:
    cli = cli_of(model.model_fields[str(info.field_name)])
    return cli.flag if isinstance(cli, Cli) else str(info.field_name)


def _positive(model: type[BaseModel], value: Any, info: ValidationInfo) -> Any:
    checks.check_positive(_flag(model, info), value)
    return value


def _recipe_file(text: Optional[str]) -> Optional[str]:
    from harness.app.settings.tune_options import check_recipe_file

    return check_recipe_file(text)


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


def _setup_engines_help() -> str:
    """``--setup-engines``'s help, read off the engine registry (``auto_setup_cpu`` and
    ``setup_note`` on each adapter class), so a new engine is listed without an edit here."""
    from adapters import registry

    left = "; ".join(f"not {n}{f', as {note}' if note else ''}: `bench engines setup {n}` adds it"
                     for n, note in registry.manual_setup_cpu().items())
    return (f"Install missing CPU engine environments ({', '.join(registry.auto_setup_cpu())}"
            f"{'; ' + left if left else ''}) before measuring them; a failed install is recorded as a failed engine.")


class EngineSettings(CliModel):
    """The engines a run starts and how: ``names`` (engine names or ``["all"]``), the ``model``
    folder (None = the embedded model; ``--engine openai``: the served model name until
    :meth:`RunSettings._check` swaps it for ``--tokenizer``), ``args`` {engine: {key: value}}, a
    recipe file ``config``, CPU ``threads`` per engine (None = cores - 1), ``parity`` (report or
    strict), ``setup`` (install missing CPU engines), ``startup_timeout_s`` (s) and
    ``parallel_start`` (all start at once, frozen until their turn: harness/app/trial/startup.py)."""

    cli_panel: ClassVar[str | None] = "Engines"

    names: Annotated[list[str], Cli("--engine", "-e", type=str, parse=split_list, default="all", help="Comma-separated engines, or 'all' (every engine that can run here). See `bench engines`.")] = Field(default_factory=lambda: ["all"])
    model: Model = None
    args: EngineArgs = Field(default_factory=dict)
    config: Annotated[Optional[str], Cli("--engine-config", type=str, parse=_recipe_file, help="A recipe.json a run wrote (the winner's configuration: engine, engine args, threads): run that engine with it again (--engine defaults to the recipe's, and must name it when given); --engine-arg and --threads given on the command line win over the recipe's.")] = None
    threads: Annotated[Optional[int], Cli("--threads", help="CPU threads per engine (default: cores - 1, one core left for the client).")] = None
    # "report" (audit only) or "strict" (equalise through flags, adapters/parity.py)
    parity: Annotated[Literal["report", "strict"], Cli("--parity", type=ParityMode, help="report (default): read what every engine reports it runs with (KV capacity, prefix caching, chunked prefill, max_num_seqs, dtype, CUDA graphs ...) and flag unfair differences; strict: also equalise what each engine's own flags can (prefix caching on, max_num_seqs 32, a 2048-token step/chunk budget; the KV budget is already shared) and list what could not be; an explicit --engine-arg wins.")] = "report"
    setup: Annotated[bool, Cli("--setup-engines", help=_setup_engines_help)] = False
    startup_timeout_s: Annotated[float, Cli("--startup-timeout", help="Engine start-up (health) timeout, seconds.")] = 600.0
    parallel_start: Annotated[bool, Cli("--sequential-start", invert=True, help="Start each engine just before its turn instead of all at once. By default every engine starts in parallel and is frozen (SIGSTOP) once ready until its turn, so start-up overlaps but never runs during a measurement; this needs memory for all of them at once (checked first).")] = True

    @field_validator("names")
    @classmethod
    def _names(cls, engines: list[str]) -> list[str]:
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

    @field_validator("threads", "startup_timeout_s")
    @classmethod
    def _positive(cls, value: Any, info: ValidationInfo) -> Any:
        return _positive(cls, value, info)


class DeploymentSettings(CliModel):
    """Deployments that already run, compared as engines the harness does not start: named
    ``endpoints`` {name: URL}, ``--engine openai``'s ``base_url``, the served model's local
    ``tokenizer`` folder (None = not given), ``devices`` per deployment {name: GPUs} and
    ``served_model_name`` (``--engine openai``: the ``--model`` given, set by ``from_cli``)."""

    cli_panel: ClassVar[str | None] = "Deployments that already run"

    endpoints: Annotated[dict[str, str], Cli("--endpoint", type=list[str], parse=_endpoints, default=[], help="An OpenAI-compatible deployment that already runs, NAME=URL (repeatable), e.g. --endpoint prod=http://10.0.0.5:8000 --endpoint canary=http://10.0.0.6:8000: each is compared as an engine the harness does not start (--model: the served model name, --tokenizer: its folder, as for --engine openai); with --endpoint, --engine adds local engines (default none). The run's prompts are salted (--prompt-salt auto) so an endpoint's warm prefix cache serves none of them.")] = Field(default_factory=dict)
    base_url: Annotated[Optional[str], Cli("--base-url", help="--engine openai: the endpoint, e.g. http://host:8000 (API key from $OPENAI_API_KEY; credentials in the URL are masked in every file and message).")] = None
    tokenizer: Annotated[Optional[str], Cli("--tokenizer", help="--engine openai: the local folder of the model the endpoint serves (config.json + tokenizer, no weights needed): the workload is built with its tokenizer and the manifest and memory fit describe it. Without it token counts come from the server's usage only.")] = None
    devices: Annotated[dict[str, int], Cli("--devices", type=list[str], parse=checks.parse_devices, default=[], help="The devices (GPUs) one deployment of an engine or --endpoint uses, NAME=N (repeatable), e.g. --devices prod=8: throughput is per device and cost counts these devices. A started engine's come from its launch (tensor x pipeline x data parallel sizes in --engine-arg); an endpoint's are 1 unless told.")] = Field(default_factory=dict)
    served_model_name: Optional[str] = None


class LadderSettings(CliModel):
    """The load ladder and the main job's time (harness/app/run/ladder_mode.py): ``time_budget_s``
    (s, inf = unbounded) for the whole job, ``ladder_budget_s`` (s) for one climb, ``max_load``
    (requests in flight; agentic: sessions) a ladder climbs to, ``target_load`` (output tokens/s
    the deployment must serve; None = no capacity plan)."""

    cli_panel: ClassVar[str | None] = "Load ladder and time"

    time_budget_s: Annotated[float, Cli("--time-budget", type=str, parse=checks.parse_duration, help="The whole main job's time (900, 900s, 15m, 1h; inf = no bound): the engines' starts, checks, ladders and the measuring that decides between them. Every engine climbs its ladder once (its share, at most --ladder-budget); then the measuring goes where the verdict is uncertain (an engine that cannot reach the leader is measured no more) until the verdict is decided or the time is spent.")] = 900.0
    ladder_budget_s: Annotated[float, Cli("--ladder-budget", type=str, parse=checks.duration_of("--ladder-budget"), help="Measuring for one climb of a load ladder at most (150, 150s, 2m30s; within --time-budget; closed-loop concurrency doubling until an SLO breaks or throughput stops rising; start-up and warm-up not counted): each climb the main job makes after the engines' low ends, and the yardstick's first climb (its share of --time-budget otherwise). The main job climbs a ladder unless --num-requests, --request-rate, --max-concurrency, --duration or --ramp-up-strategy (on the command line or in --workload-spec) asks for one load point.")] = 150.0
    max_load: Annotated[int, Field(ge=1, le=4096), Cli("--max-load", range=True, help="Highest concurrency a load ladder climbs to (requests in flight; agentic: sessions).")] = 64
    target_load: Annotated[Optional[float], Cli("--target-load", help="Output tokens/s the deployment must serve: the capacity table then gives, per engine, the devices (replicas of what was measured) that load needs at the SLO and their cost per hour at --price-per-hour (or the hardware's list price).")] = None

    @field_validator("ladder_budget_s", "target_load")
    @classmethod
    def _positive(cls, value: Any, info: ValidationInfo) -> Any:
        return _positive(cls, value, info)


class DecisionSettings(CliModel):
    """What decides between the engines: ``slos`` (ms; empty = the defaults for the hardware and
    workload), ``max_failure_rate`` (a share of requests above which an engine is eliminated),
    the target ``hardware`` profile, the score's ``preset`` and ``price_per_hour`` (USD per
    device-hour; None = the hardware profile's)."""

    cli_panel: ClassVar[str | None] = "Decision and SLOs"

    slos: Slos = Field(default_factory=list)
    max_failure_rate: MaxFailureRate = 0.05
    hardware: Hardware = "detected"
    preset: Preset = "balanced"
    price_per_hour: PricePerHour = None


class MeasureSettings(CliModel):
    """How each engine is measured: ``warmup`` requests (excluded), ``repeats`` (bench run: rounds
    of every engine, interleaved A B C, C B A ..., each on a fresh start), ``request_timeout_s``
    (s, per request), ``client_workers`` (client processes, harness/loadgen/workers.py),
    ``calibrate`` (the client against a null server) and ``ignore_eos`` (sent where the workload
    and engine allow)."""

    cli_panel: ClassVar[str | None] = "Measuring"

    warmup: Annotated[int, Cli("--warmup", help="Warm-up requests per engine (excluded, share no prefix with the workload).")] = 2
    repeats: Annotated[int, Field(ge=1, le=20), Cli("--repeats", range=True, help="At one load point (--request-rate, --max-concurrency, --duration): measure every engine this many times, interleaved in alternating order (A B C, C B A, A B C, ...), each time freshly started on the same workload and seed; headline numbers get 95% intervals over the repeats and the ranking reports ties within the noise. With load ladders (the default): the bracket points of a leader and runner-up not yet separated are measured again up to max(3, N) times each, interleaved, on fresh starts.")] = 1
    request_timeout_s: Annotated[float, Cli("--request-timeout", help="Per-request client timeout, seconds.")] = 600.0
    client_workers: Annotated[int, Field(ge=1, le=64), Cli("--client-workers", range=True, help="Client processes measuring each engine: the arrival schedule is computed once and split over them (whole sessions), each sends its share on the same absolute schedule and the records merge into one requests.jsonl. More than 1 when one client process cannot send the offered rate (the calibration line says how many it needs).")] = 1
    calibrate: Annotated[bool, Cli("--no-calibration", invert=True, help="Skip the client calibration against a null server.")] = True
    ignore_eos: Annotated[bool, Cli("--no-ignore-eos", invert=True, help="Do not send ignore_eos (for endpoints that reject the field, e.g. the hosted OpenAI API); replies may then stop before the workload's output length, which the summary reports as output shortfall.")] = True

    @field_validator("warmup")
    @classmethod
    def _warmup(cls, warmup: int) -> int:
        if warmup < 0:
            raise ValueError(f"--warmup must be >= 0, got {warmup}")
        return warmup

    @field_validator("request_timeout_s")
    @classmethod
    def _positive(cls, value: Any, info: ValidationInfo) -> Any:
        return _positive(cls, value, info)


class OutputSettings(CliModel):
    """Where the run is written: ``output_dir`` (the folder of run folders), ``run_id`` (the run
    folder's name; None = timestamp-workload) and whether to score and ``report`` at the end."""

    cli_panel: ClassVar[str | None] = "Output"

    output_dir: OutputDir = Path("results")
    run_id: Annotated[Optional[str], Cli("--run-id", help="Run folder name (default: timestamp-workload; bench search: timestamp-search-workload).")] = None
    report: bool = True

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, run_id: Optional[str]) -> Optional[str]:
        return checks.check_run_id(run_id)
