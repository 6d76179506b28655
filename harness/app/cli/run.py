"""``bench run``: replay a workload against engines, store, report and recommend."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from harness.app.cli import parity as cli_parity
from harness.app.cli import report as cli_report
from harness.app.core.signals import exit_code
from harness.app.cli.common import (
    ApiOpt, BurstinessOpt, InputLenOpt, MaxConcurrencyOpt, NumRequestsOpt, OutputLenOpt, RangeRatioOpt, RequestRateOpt, ScaleOpt, TimeScaleOpt, TraceOpt, WorkloadSpecOpt,
    CooldownWindowOpt, DrainTimeoutOpt, DurationOpt, RampEndOpt, RampStartOpt, RampStrategyOpt, WarmupWindowOpt,
    check_failure_rate, check_positive, check_run_target, check_workload, endpoint_options, err_console, fail, guarded,
    make_console, parse_rate,
)

console = make_console()


def run_cmd(
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
    from harness.app.run.orchestrator import Orchestrator, RunConfig

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
        check_positive(name, v)
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
    check_run_target(preset, hardware, threads, output_dir, run_id)
    check_failure_rate(max_failure_rate)
    cli_report.check_price(price_per_hour)
    from harness.app.executors.ray import check_executor

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
    trials = None
    if executor == "ray":
        from harness.app.executors.ray import RayExecutor as trials  # type: ignore[assignment]
    result = guarded(lambda: Orchestrator(cfg, console, executor=trials).run())
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


def _print_summary(summary: Any) -> None:
    """The console table of a :class:`results.schema.RunSummary` (harness/app/cli/summary.py)."""
    from harness.app.cli.summary import print_summary

    print_summary(summary, console)


# --------------------------------------------------------------------------------------------
# bench model / calibrate
