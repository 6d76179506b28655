"""What every ``bench`` command shares: the one-line error exit and option parsing helpers."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn, Optional
from urllib.parse import urlsplit

import typer
from typer.core import TyperGroup
from rich.console import Console
from rich.markup import escape

from harness.app.core.signals import exit_code, interrupt_cause

try:  # typer >= 0.2x parses with its own copy of click, whose exceptions are not click's
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older typer: click itself
    from click import exceptions as click_errors  # type: ignore[no-redef]

NON_TTY_WIDTH = 160  # tables stay readable in pipes, logs and CI (rich would use 80 columns)


def make_console(stderr: bool = False) -> Console:
    """A rich Console; when the stream is not a terminal and ``COLUMNS`` is unset, 160 columns
    wide instead of rich's 80 so result tables are not truncated in logs."""
    stream = sys.stderr if stderr else sys.stdout
    wide = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=stderr, width=NON_TTY_WIDTH if wide else None)


err_console = make_console(stderr=True)


def _print_error(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {escape(' '.join(message.splitlines()))}", highlight=False, soft_wrap=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: message`` (one line, markup-escaped) on stderr and exit with ``code``
    (2 = bad input, 1 = the command ran but found nothing usable)."""
    _print_error(message)
    raise typer.Exit(code)


def usage_error_line(exc: click_errors.ClickException) -> str:
    """The message of a click/typer usage error on one line (every newline folded; typer's box
    and click's three-line form carry the same text)."""
    return " ".join(exc.format_message().split())


class OneLineErrors(TyperGroup):
    """The ``bench`` root group: every option-parsing error of every command (unknown option,
    bad int, missing argument, bad choice) is printed as one line ``error: ...`` plus at most
    one ``Try 'bench run --help' for help.`` line on stderr, exit code 2, instead of typer's
    rich box. Errors of subcommands are raised while the root parses or invokes them, so
    wrapping the root's ``make_context`` and ``invoke`` covers them all. ``bench`` alone still
    prints its help (click's NoArgsIsHelpError)."""

    def make_context(self, info_name: Optional[str], args: list[str], parent: Optional[typer.Context] = None,
                     **extra: Any) -> typer.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click_errors.ClickException as exc:
            _usage_exit(exc)

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click_errors.ClickException as exc:
            _usage_exit(exc)


def _usage_exit(exc: click_errors.ClickException) -> NoReturn:
    if isinstance(exc, click_errors.NoArgsIsHelpError):
        raise exc  # `bench` / `bench results` alone: the help text, as before
    _print_error(usage_error_line(exc))
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click_errors.UsageError) and ctx is not None:
        err_console.print(f"Try '{ctx.command_path} --help' for help.", highlight=False, soft_wrap=True, markup=False)
    raise typer.Exit(exc.exit_code if exc.exit_code else 2)


def check_base_url(url: Optional[str], option: str = "--base-url") -> Optional[str]:
    """Validate an endpoint URL at parse time: ``http://`` or ``https://``, a host, a numeric
    port when one is given. Returns it unchanged; exits with a one-line error (code 2) naming
    the fix otherwise (a URL without a scheme used to pass and fail later as an engine)."""
    if url is None:
        return None
    text = url.strip()
    shown = redact_url(text)
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError for a non-numeric or out-of-range port
    except ValueError as exc:
        fail(f"{option} {shown!r} is not a URL ({exc}): give e.g. http://host:8000")
    if parts.scheme not in ("http", "https"):
        fail(f"{option} {shown!r} needs a scheme: give http://{shown} or https://{shown}" if "://" not in text
             else f"{option} {shown!r}: the scheme must be http or https, got {parts.scheme!r}")
    if not parts.hostname:
        fail(f"{option} {shown!r} has no host: give e.g. http://host:8000")
    del port
    return text


def check_workload(options: Any) -> Any:
    """Resolve a run's :class:`workloads.options.WorkloadOptions` into its spec the way the
    builder will (``workloads.registry.resolve_spec``: options that do not apply, spec files,
    upper bounds) and check the trace a trace workload names exists, so none of these is found
    only after engines started. Returns the spec; raises ``WorkloadError`` (one line)."""
    from workloads.errors import WorkloadError
    from workloads.registry import resolve_spec
    from workloads.trace import resolve_trace

    spec = resolve_spec(options)
    if getattr(spec, "kind", None) == "trace":
        _, path, _ = resolve_trace(spec.trace)
        if not path.is_file():
            raise WorkloadError(f"--trace {spec.trace}: no such file {path}: pass a trace name or an existing file")
    return spec


def endpoint_options(engines: list[str], model: Optional[str], base_url: Optional[str],
                     tokenizer: Optional[str] = None) -> tuple[Optional[str], Optional[str]]:
    """``(served model name, model folder)`` for the engines of a run: with ``--engine openai``
    ``--model`` is the served name and the folder is ``--tokenizer`` (None = the default
    model's, only to build prompts). Exits with one line (code 2) for ``--base-url`` without
    ``openai`` or without a scheme/host, ``openai`` without ``--base-url``, ``--tokenizer``
    without ``openai`` alone, or a ``--tokenizer`` that is not a model folder with a tokenizer
    transformers can load."""
    if "openai" not in engines:
        if base_url is not None:
            fail("--base-url is the endpoint of --engine openai: add --engine openai, or drop --base-url")
        if tokenizer is not None:
            fail("--tokenizer names the endpoint's tokenizer for --engine openai; local engines tokenize with --model DIR")
        return None, model
    if not base_url:
        fail("--engine openai needs --base-url URL (and --model NAME, the served model name)")
    check_base_url(base_url)
    if tokenizer is not None:
        if engines != ["openai"]:
            fail("--tokenizer is for an --engine openai run alone: the local engines serve --model's folder and the "
                 "workload is built with its tokenizer; measure the endpoint in its own run")
        check_tokenizer_dir(tokenizer)
    return model, tokenizer


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")


def check_tokenizer_dir(folder: str, option: str = "--tokenizer") -> Path:
    """A local Hugging Face model folder whose ``config.json`` and tokenizer (``tokenizer.json``,
    ``tokenizer.model`` or ``tokenizer_config.json``) load; weights are not needed. Returns the
    resolved path; exits with one line (code 2) saying what is missing otherwise."""
    path = Path(folder).expanduser()
    if not path.exists():
        fail(f"{option} {folder}: no such folder: pass the local folder of the model the endpoint serves "
             "(config.json and tokenizer files; e.g. `hf download ORG/MODEL --exclude '*.safetensors' --local-dir DIR`)")
    if not path.is_dir():
        fail(f"{option} {folder} is a file: pass the model folder that holds it")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        fail(f"{option} {folder} has no tokenizer ({', '.join(TOKENIZER_FILES)}): pass a Hugging Face model folder")
    if not (path / "config.json").is_file():
        fail(f"{option} {folder} has no config.json: pass the model's Hugging Face folder (config.json and tokenizer "
             "files; the weights are not needed)")
    try:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(path))
    except Exception as exc:  # transformers raises many types for a damaged folder
        fail(f"{option} {folder}: the tokenizer does not load ({type(exc).__name__}: {' '.join(str(exc).split())[:160]})")
    return path.resolve()


def reuse_run_folder(run_dir: Path) -> None:
    """An existing ``--run-id`` folder: removed when a killed run left it holding nothing
    (:func:`results.store.blocked_run_id`), else one line saying how to proceed (exit 2)."""
    import shutil

    from results.store import blocked_run_id

    why = blocked_run_id(run_dir)
    if why:
        fail(why)
    shutil.rmtree(run_dir)
    err_console.print(f"[yellow]note:[/] reusing {escape(str(run_dir))}: an interrupted run left it with no measurement",
                      highlight=False)


def redact_url(url: str) -> str:
    """``http://user:key@host`` → ``http://user:***@host`` (see adapters.openai_adapter.redact_credentials)."""
    from adapters.openai_adapter import redact_credentials

    return redact_credentials(url)


def parse_rate(text: Optional[str], option: str = "--request-rate") -> Optional[float]:
    """A request rate in requests/s: a positive number or ``inf``; None stays None (the
    workload's default). Exits with a one-line error (code 2) on anything else."""
    if text is None:
        return None
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    try:
        v = float(text)
    except ValueError:
        fail(f"{option} must be a number of requests/s or 'inf', got {text!r}")
    if not v > 0 or math.isnan(v):
        fail(f"{option} must be > 0 (or 'inf'), got {text!r}")
    return v


# Workload options shared by `bench run` and `bench workloads show` (one definition, one help
# text). None everywhere = keep the workload's own default (or the --workload-spec file's).
ScaleOpt = Annotated[Optional[float], typer.Option("--scale", help="Shrink trace prompt lengths by this factor, in (0, 1] (default: the workload's CPU profile).")]
NumRequestsOpt = Annotated[Optional[int], typer.Option("--num-requests", "-n", help="Number of measured requests (agentic: turns, branches included). Default: the workload's.")]
RequestRateOpt = Annotated[Optional[str], typer.Option("--request-rate", "-r", help="Offered rate in requests/s (agentic: session starts/s); 'inf' sends all at once. Default: the workload's (agentic 0.5 sessions/s, others inf).")]
BurstinessOpt = Annotated[Optional[float], typer.Option("--burstiness", help="Gamma arrival shape: 1 = Poisson, <1 burstier, >1 smoother.")]
MaxConcurrencyOpt = Annotated[Optional[int], typer.Option("--max-concurrency", help="Cap on in-flight requests (closed loop).")]
InputLenOpt = Annotated[Optional[int], typer.Option("--input-len", help="random workload: prompt tokens.")]
OutputLenOpt = Annotated[Optional[int], typer.Option("--output-len", help="random workload: output tokens (sent with ignore_eos).")]
RangeRatioOpt = Annotated[Optional[float], typer.Option("--range-ratio", help="random workload: lengths uniform from len*(1-r) to len*(1+r) (vLLM convention).")]
ApiOpt = Annotated[Optional[str], typer.Option("--api", help="'chat' or 'completions' (default: the workload's).")]
TraceOpt = Annotated[Optional[str], typer.Option("--trace", help="trace workload: azure-code, azure-conv, mooncake, servegen-language, servegen-reason or a file.")]
TimeScaleOpt = Annotated[Optional[float], typer.Option("--time-scale", help="trace workload: replay speed-up; timestamps are divided by it (2 = twice as fast).")]
WorkloadSpecOpt = Annotated[Optional[Path], typer.Option("--workload-spec", help="YAML workload spec (see workloads/specs/); flags override its fields.")]
# Duration-based runs (`bench run`): times as 60, 60s, 5m or 1h (workloads.options.parse_seconds).
DurationOpt = Annotated[Optional[str], typer.Option("--duration", help="Run for a time instead of a request count: 60, 60s, 5m or 1h. Arrivals are scheduled for the duration at the rate (with an unlimited rate: from a pool of -n requests), sent until the time is up, then the run drains for --drain-timeout; requests still in flight are cancelled and counted incomplete (neither ok nor failed, in no latency). -n caps it: whichever ends first.")]
DrainTimeoutOpt = Annotated[Optional[str], typer.Option("--drain-timeout", help="With --duration: how long to wait after the time is up for requests in flight before cancelling them as incomplete (default 30s).")]
RampStrategyOpt = Annotated[Optional[str], typer.Option("--ramp-up-strategy", help="'linear' or 'exponential': the request rate ramps from --ramp-up-start-rps to --ramp-up-end-rps over the run (vLLM bench serve's convention: request i of n arrives at the rate at progress i/(n-1)); replaces --request-rate.")]
RampStartOpt = Annotated[Optional[float], typer.Option("--ramp-up-start-rps", help="With --ramp-up-strategy: the first request's rate, requests/s (agentic: session starts/s), > 0.")]
RampEndOpt = Annotated[Optional[float], typer.Option("--ramp-up-end-rps", help="With --ramp-up-strategy: the last request's rate, requests/s, >= the start rate.")]
WarmupWindowOpt = Annotated[Optional[str], typer.Option("--warmup-window", help="With --duration: requests sent in the first this long (e.g. 10s) are sent and stored but left out of the metrics (unlike --warmup N, which sends N separate warm-up requests before measuring).")]
CooldownWindowOpt = Annotated[Optional[str], typer.Option("--cooldown-window", help="With --duration: requests sent in the last this long (e.g. 5s) of the duration are sent and stored but left out of the metrics.")]


def check_positive(name: str, v: Optional[int | float]) -> None:
    if v is not None and (not v > 0 or math.isinf(v)):
        fail(f"{name} must be > 0, got {v}")


def check_failure_rate(value: float) -> None:
    """``--max-failure-rate`` is a share in [0, 1)."""
    if math.isnan(value) or not 0 <= value < 1:
        fail(f"--max-failure-rate is a share of requests in [0, 1) (0.05 = 5%), got {value:g}")


def check_run_target(preset: str, hardware: str, threads: Optional[int], output_dir: Path, run_id: Optional[str]) -> None:
    """Everything the run would otherwise only trip over after measuring every engine."""
    import os

    from adapters.hardware import get_profile
    from harness.scoring import PRESETS

    if preset not in PRESETS:
        fail(f"unknown --preset {preset!r}: choose from {', '.join(PRESETS)}")
    try:
        get_profile(hardware)
    except ValueError as exc:
        fail(f"--hardware: {exc}")
    cores = os.cpu_count() or 1
    if threads is not None and threads > cores:
        fail(f"--threads {threads} exceeds the {cores} CPU cores here: use at most {cores} (default: cores - 1)")
    if output_dir.exists() and not output_dir.is_dir():
        fail(f"--output-dir {output_dir} is a file: pass a directory")
    if run_id is not None:
        if not run_id.strip() or run_id in (".", "..") or "/" in run_id or "\\" in run_id:
            fail(f"--run-id {run_id!r} must be a plain folder name (no '/', not empty)")
        if (output_dir / run_id).exists():
            reuse_run_folder(output_dir / run_id)
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe = output_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        fail(f"cannot write to --output-dir {output_dir} ({exc.strerror or exc}): pass a writable directory")


def guarded(fn: Any) -> Any:
    """Run ``fn`` turning the harness's known errors into one-line messages."""
    from adapters.base import EngineError
    from results.store import ResultsError

    from harness.app.core.model import ModelError

    known: tuple[type[BaseException], ...] = (ModelError, ResultsError, EngineError)
    try:
        from workloads.registry import WorkloadError

        known += (WorkloadError,)
    except ImportError:  # pragma: no cover
        pass
    try:
        return fn()
    except known as exc:
        fail(str(exc))
    except KeyboardInterrupt as exc:
        cause = interrupt_cause(exc)
        err_console.print(f"[yellow]interrupted by {cause}[/]")
        raise typer.Exit(exit_code(cause))
    except OSError as exc:
        fail(f"{exc.strerror or type(exc).__name__}: {exc.filename or exc} - check the path and its permissions")
    except Exception as exc:  # the last line of defence: one line for the user, details in a file
        import tempfile
        import traceback

        path = Path(tempfile.gettempdir()) / "bench-error.log"
        path.write_text(traceback.format_exc())
        fail(f"internal error: {type(exc).__name__}: {exc} (traceback in {path}; please report it)", code=1)
