"""The workload's options of ``bench run`` (and ``bench search``, ``bench workloads show``):
one :class:`Cli` per field of :class:`workloads.options.WorkloadOptions`, flat on the command line."""

from __future__ import annotations

from typing import Any

from workloads.options import WorkloadOptions, parse_options

from harness.app.settings import checks
from harness.app.settings.fields import Cli, CliGroup

# The workload's options, by field of workloads.options.WorkloadOptions (None = the workload's
# default, or the --workload-spec file's). `bench workloads show` uses the same declarations.
WORKLOAD_OPTIONS = CliGroup({
    "name": Cli("--workload", "-w", help="Workload name. See `bench workloads`."),
    "num_requests": Cli("--num-requests", "-n", help="Number of measured requests (agentic: turns, branches included). Default: the workload's."),
    "input_len": Cli("--input-len", help="random workload: prompt tokens."),
    "output_len": Cli("--output-len", help="random workload: output tokens (sent with ignore_eos)."),
    "range_ratio": Cli("--range-ratio", help="random workload: lengths uniform from len*(1-r) to len*(1+r) (vLLM convention)."),
    "request_rate": Cli("--request-rate", "-r", type=str, parse=checks.parse_rate, help="Offered rate in requests/s (agentic: session starts/s); 'inf' sends all at once. Default: the workload's (agentic 0.5 sessions/s, others inf)."),
    "burstiness": Cli("--burstiness", help="Gamma arrival shape: 1 = Poisson, <1 burstier, >1 smoother."),
    "max_concurrency": Cli("--max-concurrency", help="Cap on in-flight requests (closed loop)."),
    "seed": Cli("--seed", range=True, help="Seed for the workload and arrivals: same seed, same requests (default: the spec file's, else 0)."),
    "scale": Cli("--scale", help="Shrink trace prompt lengths by this factor, in (0, 1] (default: the workload's CPU profile)."),
    "api": Cli("--api", type=str, help="'chat' or 'completions' (default: the workload's)."),
    "trace": Cli("--trace", help="trace workload: azure-code, azure-conv, mooncake, servegen-language, servegen-reason or a file. agentic: your agents' trace (README: agent traces) or swe-agent."),
    "trace_format": Cli("--trace-format", type=str, help="agentic --trace: auto (detected), agent, swe-agent, mooncake, otel (OTLP JSON GenAI spans) or chat-log."),
    "time_scale": Cli("--time-scale", help="trace workload and agentic --trace: replay speed-up; timestamps and tool times are divided by it (2 = twice as fast)."),
    "spec_file": Cli("--workload-spec", help="YAML workload spec (see workloads/specs/); flags override its fields."),
    # duration-based runs: times as 60, 60s, 5m or 1h (workloads.options.parse_seconds)
    "duration_s": Cli("--duration", type=str, help="Run for a time instead of a request count: 60, 60s, 5m or 1h. Arrivals are scheduled for the duration at the rate (with an unlimited rate: from a pool of -n requests), sent until the time is up, then the run drains for --drain-timeout; requests still in flight are cancelled and counted incomplete (neither ok nor failed, in no latency). -n caps it: whichever ends first."),
    "drain_timeout_s": Cli("--drain-timeout", type=str, help="With --duration: how long to wait after the time is up for requests in flight before cancelling them as incomplete (default 30s)."),
    "warmup_window_s": Cli("--warmup-window", type=str, help="With --duration: requests sent in the first this long (e.g. 10s) are sent and stored but left out of the metrics (unlike --warmup N, which sends N separate warm-up requests before measuring)."),
    "cooldown_window_s": Cli("--cooldown-window", type=str, help="With --duration: requests sent in the last this long (e.g. 5s) of the duration are sent and stored but left out of the metrics."),
    "ramp_up_strategy": Cli("--ramp-up-strategy", type=str, help="'linear' or 'exponential': the request rate ramps from --ramp-up-start-rps to --ramp-up-end-rps over the run (vLLM bench serve's convention: request i of n arrives at the rate at progress i/(n-1)); replaces --request-rate."),
    "ramp_up_start_rps": Cli("--ramp-up-start-rps", help="With --ramp-up-strategy: the first request's rate, requests/s (agentic: session starts/s), > 0."),
    "ramp_up_end_rps": Cli("--ramp-up-end-rps", help="With --ramp-up-strategy: the last request's rate, requests/s, >= the start rate."),
    "prompt_salt": Cli("--prompt-salt", help="Text put at the very start of every session's first prompt (one salt for the whole run, so sharing within the run is kept) so an endpoint's prefix cache, warm from an earlier run, serves none of this run's prompts; 'auto' draws a random salt for this run (recorded in manifest.json); 'none' sends none (with --endpoint, whose default is 'auto': an endpoint just started, its cache cold). Default: no salt."),
}, panel="Workload")


def workload_from(group: CliGroup, values: dict[str, Any]) -> WorkloadOptions:
    """The workload's options from a command line's values for ``group`` (by field, the raw text
    of an option with a ``parse`` through it), checked together (:func:`workloads.options.parse_options`).
    Raises ``ValueError`` (a :class:`workloads.errors.WorkloadError`) with one line."""
    return parse_options(**{k: group.options[k].parse(v) if k in group.options and group.options[k].parse else v
                            for k, v in values.items()})


# `bench workloads show NAME`: the workload built offline, with the options that shape it
SHOW_OPTIONS = CliGroup({
    "name": Cli("name", argument=True, default=..., help="Workload name (see `bench workloads`)."),
    "seed": Cli("--seed", help="Seed (default 0): same seed, same requests."),
    **{k: WORKLOAD_OPTIONS.options[k] for k in ("scale", "num_requests", "request_rate", "burstiness", "max_concurrency",
                                               "input_len", "output_len", "range_ratio", "api", "trace", "time_scale",
                                               "spec_file")},
})
