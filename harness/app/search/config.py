"""What ``bench search`` is asked for (:class:`SearchSettings`, ``bench run``'s settings and
the search's own), and the defaults it fills in (SLOs, probe sizes)."""

from __future__ import annotations

import math
from typing import Annotated, Any, Optional

from pydantic import Field, ValidationInfo, field_validator, model_validator

from workloads.options import RATE_KINDS, WorkloadOptions

from harness.app.settings import checks
from harness.app.settings.fields import Cli
from harness.app.settings.groups import DecisionSettings, MeasureSettings
from harness.app.settings.run import RunSettings
from harness.app.settings.shared import SLOS, Slos, default_slos_text
from harness.app.settings.workload import WORKLOAD_OPTIONS
from harness.metrics import SLO, parse_slos

SEARCH_VARS = ("rate", "concurrency")
DEFAULT_PROBE_REQUESTS = 24  # requests per probe of a single-turn workload without --num-requests
MAX_REPEATS = 10  # ``--repeats`` per probe at most

def SLO_HELP() -> str:
    """``bench search --slo``'s help: the defaults read off bench run's one table (no Python path in a help text)."""
    return ("SLOs in ms, e.g. 'ttft_p90=500,tpot_p90=50'; the capacity is the load at which all of them just hold. "
            f"Default: bench run's, {default_slos_text()}. On a CPU that is a 2 s first-token wait and 5 tokens/s "
            "(about reading speed) on the reference 2-core machine and the embedded 135M model. "
            "The SLOs used are printed and stored.")


def _search_slos(text: Optional[str]) -> list[SLO]:
    """``--slo`` of a search: left out = the hardware's defaults (an empty list here); given, it
    must name at least one SLO."""
    slos = parse_slos(text)
    if text is not None and not slos:
        raise ValueError("--slo is empty: give e.g. ttft_p99=500,tpot_p99=50, or leave it out for the defaults")
    return slos


class SearchDecision(DecisionSettings):
    """bench run's decision settings, ``--slo`` left out = the defaults for the hardware: its text
    names them and an empty ``--slo`` is refused."""

    slos: Annotated[Slos, SLOS.replace(parse=_search_slos, help=SLO_HELP)] = Field(default_factory=list)


class SearchMeasure(MeasureSettings):
    """bench run's measuring settings, ``repeats`` counting measurements of one probe point, back to
    back on one engine (1 .. :data:`MAX_REPEATS`; bench run: rounds of every engine)."""

    repeats: Annotated[int, Cli("--repeats", help="Measure every probe point this many times (1-10) back to back on the same engine, each repeat on a fresh seed (no prompt reused); the verdict is judged on the pooled metrics (a p99 over N times the requests), each repeat's own verdict and the 95% intervals are stored. A probe takes N times as long: size --budget for it.")] = 1

    @field_validator("repeats")
    @classmethod
    def _repeats(cls, value: int) -> int:
        if not 1 <= value <= MAX_REPEATS:
            raise ValueError(f"--repeats must be between 1 and {MAX_REPEATS}, got {value}")
        return value


class SearchSettings(RunSettings):
    """Everything ``bench search`` was asked for: ``bench run``'s settings (model, engines,
    threads, timeouts ... same options, same text) and the search's. ``slos`` empty = the
    defaults for the detected hardware (:func:`default_slos`: bench run's table); ``low``/``high`` in the search
    variable's unit (``high`` None = unbounded for a rate, the probe's request count for a
    concurrency); ``budget_s``: seconds for the whole search, split evenly over the engines;
    ``repeats``: measurements per probe, back to back (1 .. :data:`MAX_REPEATS`)."""

    cli_panels = {
        "Engines": ("--engine", "--model", "--engine-arg", "--threads", "--startup-timeout", "--sequential-start",
                    "--base-url"),
        "Workload": ("--workload", "--num-requests", "--input-len", "--output-len", "--range-ratio", "--burstiness",
                     "--scale", "--api", "--trace", "--trace-format", "--time-scale", "--workload-spec", "--seed"),
        "Search": ("--slo", "--search-var", "--low", "--high", "--tolerance", "--budget", "--max-probes", "--repeats",
                   "--max-failure-rate"),
        "Measuring": ("--warmup", "--request-timeout", "--no-ignore-eos"),
        "Output": ("--output-dir", "--run-id"),
    }
    cli_order = tuple(flag for flags in cli_panels.values() for flag in flags)
    # a search shows only the options it reads (cli_panels above): the load is what it searches (no
    # rate, cap, duration or ramp; no salt: every probe draws fresh prompts), it measures one engine at
    # a time for its capacity (no equivalence check, calibration, feature probes, recommendation or
    # cost), locally; a setting added to bench run is not offered here until the search reads it
    cli_only_listed = True

    # Per-command overrides: where an option means something else for a search, its field is
    # redeclared here with the search's text, default or bounds.
    # --workload: the random workload by default (a search probes many short single-turn loads);
    # --seed: the base of every probe's and repeat's seed.
    workload: Annotated[WorkloadOptions, WORKLOAD_OPTIONS.replace(
        name=WORKLOAD_OPTIONS.options["name"].replace(default="random"),
        seed=WORKLOAD_OPTIONS.options["seed"].replace(help="Base seed: repeat k of probe i draws its workload with seed + i * repeats + k (no measurement reuses another's prompts)."),
    )] = Field(default_factory=lambda: WorkloadOptions(name="random"))
    # --slo: left out = defaults for the hardware, so the text names them and an empty --slo is refused.
    decision: SearchDecision = Field(default_factory=lambda: SearchDecision())
    # --repeats: measurements of one probe point, back to back on one engine (bench run: rounds of every engine).
    measure: SearchMeasure = Field(default_factory=lambda: SearchMeasure())

    search_var: Annotated[str, Cli("--search-var", help="What to search: 'rate' (requests/s; agentic: session starts/s) or 'concurrency' (in-flight cap, all requests due at once).")] = "rate"
    low: Annotated[float, Cli("--low", help="First (lowest) load probed, in the search variable's unit (> 0; a whole number >= 1 for concurrency).")] = 1.0
    high: Annotated[Optional[float], Cli("--high", help="Highest load ever probed (default: unbounded for a rate; the requests per probe for concurrency).")] = None
    tolerance: Annotated[float, Cli("--tolerance", help="Stop bisecting when (fail - pass) / pass <= this (0.05 = 5 %); concurrency is exact.")] = 0.05
    budget_s: Annotated[float, Cli("--budget", type=str, parse=checks.duration_of("--budget", unbounded=""), help="Probing time of the whole search (600, 600s, 10m; bench run's duration vocabulary), split evenly over the engines (probes only; start-up and warm-up not counted, unlike bench run's --time-budget).")] = 600.0
    max_probes: Annotated[int, Cli("--max-probes", help="Probes per engine at most.")] = 12

    @model_validator(mode="before")
    @classmethod
    def _probe_workload(cls, data: Any) -> Any:
        """The command line's workload: a rate search only of a workload with arrival rates, and
        short probes (:data:`DEFAULT_PROBE_REQUESTS`) of a single-turn workload given neither
        ``-n`` nor a spec file."""
        from workloads.registry import list_workloads

        if not (isinstance(data, dict) and isinstance(data.get("workload"), dict)):
            return data
        options = data["workload"]
        name = options.get("name", "random")
        if data.get("search_var", "rate") == "rate" and name in dict(list_workloads()) and name not in RATE_KINDS:
            raise ValueError(f"the {name} workload replays its own arrival times: search it with --search-var concurrency")
        if options.get("num_requests") is None and options.get("spec_file") is None and name not in ("agentic", "trace"):
            data = {**data, "workload": {**options, "num_requests": DEFAULT_PROBE_REQUESTS}}
        return data

    @field_validator("search_var")
    @classmethod
    def _search_var(cls, value: str) -> str:
        if value not in SEARCH_VARS:
            raise ValueError(f"--search-var must be one of {', '.join(SEARCH_VARS)}, got {value!r}")
        return value

    @field_validator("low", "tolerance", "budget_s")
    @classmethod
    def _finite(cls, value: float, info: ValidationInfo) -> float:
        """A finite number > 0 (``--budget`` from the command line is already one: :func:`checks.duration_of`)."""
        name = {"low": "--low", "tolerance": "--tolerance", "budget_s": "--budget"}[str(info.field_name)]
        if not value > 0 or math.isinf(value) or math.isnan(value):
            raise ValueError(f"{name} must be a finite number > 0, got {value:g}")
        if name == "--tolerance" and value >= 1:
            raise ValueError(f"--tolerance is relative (0.05 = 5 %) and must be < 1, got {value:g}")
        return value

    @field_validator("max_probes")
    @classmethod
    def _max_probes(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"--max-probes must be >= 1, got {value}")
        return value

    @model_validator(mode="after")
    def _bracket(self) -> SearchSettings:
        if self.search_var == "concurrency" and (self.low < 1 or self.low != int(self.low)):
            raise ValueError(f"--low must be a whole number >= 1 for a concurrency search, got {self.low:g}")
        if self.high is not None and (math.isnan(self.high) or self.high < self.low):
            raise ValueError(f"--high ({self.high:g}) must be >= --low ({self.low:g})")
        return self

    def run_config(self, workload: WorkloadOptions, slos: list[SLO]) -> RunSettings:
        """The run settings of a search whose first probe offers ``workload``, judged by ``slos``:
        without ``bench run``'s own steps (equivalence, calibration, report) and one round of the
        engines (``repeats`` here counts a probe's)."""
        check = self.check.model_copy(update=dict(equivalence=False, fidelity_prompts=0, accuracy=None))
        return self.model_copy(update=dict(
            workload=workload, check=check, decision=self.decision.model_copy(update=dict(slos=slos)),
            measure=self.measure.model_copy(update=dict(calibrate=False, repeats=1)),
            output=self.output.model_copy(update=dict(report=False))))


def search_unit(search_var: str, workload: str) -> str:
    """The load's unit: ``concurrent requests``, ``sessions/s`` (agentic rate) or ``req/s``."""
    if search_var == "concurrency":
        return "concurrent requests"
    return "sessions/s" if workload == "agentic" else "req/s"


def default_slos(hardware_kind: str, workload: str = "") -> list[SLO]:
    """The default SLOs for ``hardware_kind`` (``cpu``; anything else counts as a GPU) and
    ``workload``: bench run's, from its one table (:func:`harness.scoring.verdict.decision.default_slos`)."""
    from harness.scoring.verdict.decision import default_slos as deciding

    return deciding(hardware_kind, workload)
