"""``bench search``: each engine's capacity under SLOs (typer command the main app registers,
``app.command("search")(search_cmd)``). The search itself: :mod:`harness.app.search.orchestrator`.

Exit codes: 0 = searched (an engine with capacity 0 is a result, not an error); 1 = no engine
could be searched; 2 = bad input (one line on stderr); 130 = interrupted (results kept).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from harness.app.core.signals import exit_code
from harness.app.cli.common import (
    ApiOpt, BurstinessOpt, InputLenOpt, NumRequestsOpt, OutputLenOpt, RangeRatioOpt, ScaleOpt, TimeScaleOpt, TraceOpt,
    WorkloadSpecOpt, check_failure_rate, check_positive, check_run_target, check_workload, endpoint_options, err_console, fail,
    guarded, make_console,
)

console = make_console()

SLO_HELP = ("SLOs in ms, e.g. 'ttft_p99=500,tpot_p99=50'; the capacity is the highest load at which all of them hold. "
            "Default on a CPU machine: ttft_p99=2000,tpot_p99=200 (defaults for the reference 2-core CPU machine and "
            "the embedded 135M model: a 2 s first-token wait, 5 tokens/s ~ reading speed); on a GPU: "
            "ttft_p99=500,tpot_p99=50. The SLOs used are printed and stored.")


def search_cmd(
    engine: str = typer.Option("all", "--engine", "-e", help="Comma-separated engines, or 'all' (every engine that can run here)."),
    workload: str = typer.Option("random", "--workload", "-w", help="Workload name (agentic: the rate searched is session starts/s). See `bench workloads`."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Local Hugging Face model folder (default: the embedded SmolLM2-135M-Instruct). For --engine openai: the served model name."),
    num_requests: NumRequestsOpt = None,
    input_len: InputLenOpt = None,
    output_len: OutputLenOpt = None,
    range_ratio: RangeRatioOpt = None,
    burstiness: BurstinessOpt = None,
    scale: ScaleOpt = None,
    api: ApiOpt = None,
    trace: TraceOpt = None,
    time_scale: TimeScaleOpt = None,
    workload_spec: WorkloadSpecOpt = None,
    seed: Optional[int] = typer.Option(None, "--seed", min=0, help="Base seed: repeat k of probe i draws its workload with seed + i * repeats + k (no measurement reuses another's prompts)."),
    slo: Optional[str] = typer.Option(None, "--slo", help=SLO_HELP),
    search_var: str = typer.Option("rate", "--search-var", help="What to search: 'rate' (requests/s; agentic: session starts/s) or 'concurrency' (in-flight cap, all requests due at once)."),
    low: float = typer.Option(1.0, "--low", help="First (lowest) load probed, in the search variable's unit (> 0; a whole number >= 1 for concurrency)."),
    high: Optional[float] = typer.Option(None, "--high", help="Highest load ever probed (default: unbounded for a rate; the requests per probe for concurrency)."),
    tolerance: float = typer.Option(0.05, "--tolerance", help="Stop bisecting when (fail - pass) / pass <= this (0.05 = 5 %); concurrency is exact."),
    budget: float = typer.Option(600.0, "--budget", help="Seconds for the whole search, split evenly over the engines (probes only; start-up and warm-up not counted)."),
    max_probes: int = typer.Option(12, "--max-probes", help="Probes per engine at most."),
    repeats: int = typer.Option(1, "--repeats", help="Measure every probe point this many times (1-10) back to back on the same engine, each repeat on a fresh seed (no prompt reused); the verdict is judged on the pooled metrics (a p99 over N times the requests), each repeat's own verdict and the 95% intervals are stored. A probe takes N times as long: size --budget for it."),
    warmup: int = typer.Option(2, "--warmup", help="Warm-up requests once per engine (excluded, share no prefix with the workload)."),
    output_dir: Path = typer.Option(Path("results"), "--output-dir", "-o", help="Where run folders are written."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Run folder name (default: timestamp-search-workload)."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="--engine openai: the endpoint, e.g. http://host:8000."),
    engine_arg: list[str] = typer.Option([], "--engine-arg", help="Engine option passed through, NAME:key=value (repeatable)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads per engine (default: cores - 1)."),
    timeout: float = typer.Option(600.0, "--request-timeout", help="Per-request client timeout, seconds."),
    startup_timeout: float = typer.Option(600.0, "--startup-timeout", help="Engine start-up (health) timeout, seconds."),
    sequential_start: bool = typer.Option(False, "--sequential-start", help="Start each engine just before its turn instead of all at once (frozen until their turn)."),
    max_failure_rate: float = typer.Option(0.05, "--max-failure-rate", help="A probe that fails more than this share of its requests does not pass (0.05 = 5%)."),
    no_ignore_eos: bool = typer.Option(False, "--no-ignore-eos", help="Do not send ignore_eos (for endpoints that reject the field); replies may then stop early."),
) -> None:
    """Find each engine's capacity: the highest load at which every SLO still holds (bracket, then bisect)."""
    from harness.app.search.probe import MAX_REPEATS
    from harness.app.core.settings import RunConfig
    from harness.app.search.config import DEFAULT_PROBE_REQUESTS, SEARCH_VARS, SearchConfig
    from harness.app.search.orchestrator import SearchOrchestrator
    from harness.metrics import SLOError, parse_slos
    from workloads.errors import WorkloadError
    from workloads.options import RATE_KINDS, parse_options
    from workloads.registry import list_workloads

    if search_var not in SEARCH_VARS:
        fail(f"--search-var must be one of {', '.join(SEARCH_VARS)}, got {search_var!r}")
    for name, v in (("--low", low), ("--tolerance", tolerance), ("--budget", budget)):
        if not v > 0 or math.isinf(v) or math.isnan(v):
            fail(f"{name} must be a finite number > 0, got {v:g}")
    if search_var == "concurrency" and (low < 1 or low != int(low)):
        fail(f"--low must be a whole number >= 1 for a concurrency search, got {low:g}")
    if high is not None and (math.isnan(high) or high < low):
        fail(f"--high ({high:g}) must be >= --low ({low:g})")
    if tolerance >= 1:
        fail(f"--tolerance is relative (0.05 = 5 %) and must be < 1, got {tolerance:g}")
    if max_probes < 1:
        fail(f"--max-probes must be >= 1, got {max_probes}")
    if not 1 <= repeats <= MAX_REPEATS:
        fail(f"--repeats must be between 1 and {MAX_REPEATS}, got {repeats}")
    if warmup < 0:
        fail(f"--warmup must be >= 0, got {warmup}")
    for name, t in (("--threads", threads), ("--request-timeout", timeout), ("--startup-timeout", startup_timeout)):
        check_positive(name, t)
    names = [n for n, _ in list_workloads()]
    if workload not in names:
        fail(f"unknown workload {workload!r}: choose from {', '.join(names)}")
    if search_var == "rate" and workload not in RATE_KINDS:
        fail(f"the {workload} workload replays its own arrival times: search it with --search-var concurrency")
    engines = [e.strip() for e in engine.split(",") if e.strip()]
    from adapters.registry import ENGINE_NAMES, parse_engine_args

    unknown = [e for e in engines if e != "all" and e not in ENGINE_NAMES]
    if not engines or unknown:
        fail(f"unknown engine {unknown[0]!r}: choose from {', '.join(ENGINE_NAMES)} or 'all'" if unknown
             else "--engine is empty: name engines (e.g. own,vllm) or use 'all'")
    if "all" in engines and len(engines) > 1:
        fail("--engine all cannot be combined with other names")
    dup = next((e for e in engines if engines.count(e) > 1), None)
    if dup:
        fail(f"--engine lists {dup!r} twice: name each engine once")
    served_name, model_dir = endpoint_options(engines, model, base_url)  # --base-url checked here, as for bench run
    try:
        slos = parse_slos(slo)
        eargs = parse_engine_args(engine_arg)
        if num_requests is None and workload_spec is None and workload not in ("agentic", "trace"):
            num_requests = DEFAULT_PROBE_REQUESTS  # short probes: the search runs many
        options = parse_options(
            name=workload, spec_file=workload_spec, seed=seed, num_requests=num_requests, scale=scale,
            burstiness=burstiness, api=api, input_len=input_len, output_len=output_len, range_ratio=range_ratio,
            trace=trace, time_scale=time_scale)
        check_workload(options)  # an option the workload does not take, or an unknown trace, fails before any engine starts
    except (SLOError, WorkloadError, ValueError) as exc:
        fail(str(exc))
    if slo is not None and not slos:
        fail("--slo is empty: give e.g. ttft_p99=500,tpot_p99=50, or leave it out for the defaults")
    check_run_target("balanced", "detected", threads, output_dir, run_id)
    check_failure_rate(max_failure_rate)

    cfg = SearchConfig(
        engines=engines, workload=options, slos=slos, search_var=search_var, low=low, high=high, tolerance=tolerance,
        budget_s=budget, max_probes=max_probes, repeats=repeats,
        run=RunConfig(engines=engines, workload=options, model=model_dir, warmup=warmup, output_dir=output_dir,
                      run_id=run_id, base_url=base_url, served_model_name=served_name, engine_args=eargs,
                      threads=threads, request_timeout_s=timeout, startup_timeout_s=startup_timeout,
                      parallel_start=not sequential_start, max_failure_rate=max_failure_rate,
                      ignore_eos=not no_ignore_eos))
    result = guarded(lambda: SearchOrchestrator(cfg, console).run())
    print_search(result.summary)
    console.print(f"\nResults: {result.run_dir}", markup=False)
    for name in ("search.md", "search_latency_vs_load.png"):
        if (result.run_dir / name).exists():
            console.print(f"{'Report' if name.endswith('.md') else 'Plot'}:  {result.run_dir / name}", markup=False)
    if result.interrupted:
        err_console.print(f"[yellow]interrupted by {result.interrupted}: engines stopped; probes measured so far are kept[/]")
        raise typer.Exit(exit_code(result.interrupted))
    rec = result.summary.capacity_recommendation
    if rec is None or not rec.ranking:
        fail("no engine could be searched (see the reasons above)", code=1)


def print_search(summary) -> None:  # type: ignore[no-untyped-def]
    """The console table of a :class:`results.schema.SearchSummary` and its deciding sentence."""
    from harness.scoring.capacity_ranking import capacity_text

    rec = summary.capacity_recommendation
    ranks = {r.engine: r for r in rec.ranking} if rec else {}
    t = Table(title=escape(f"Capacity search {summary.run_id}: {summary.workload}, {summary.search_var} ({summary.unit})"))
    for col in ("rank", "engine", "capacity", "bracket [pass, fail)", "stopped", "probes", "search s"):
        t.add_column(col, justify="left" if col in ("engine", "stopped") else "right")
    order = sorted(summary.engines, key=lambda n: (ranks[n].rank if n in ranks else len(ranks) + 1))
    for name in order:  # by rank; unranked (skipped, failed) last
        e, r = summary.engines[name], ranks.get(name)
        cap = capacity_text(e)
        lo, hi = e.bracket
        bracket = f"[{'–' if lo is None else f'{lo:.4g}'}, {'–' if hi is None else f'{hi:.4g}'})"
        label = name + (" (yardstick)" if r is not None and r.reference else "")
        t.add_row(str(r.rank) if r else "–", escape(label), cap, bracket, escape(e.stopped or e.status.value),
                  str(len(e.probes)), f"{e.elapsed_s:.1f}")
    console.print(t)
    slos = ", ".join(f"{k} ≤ {v:g} ms" for k, v in summary.slos.items())
    reps = (f"; {summary.repeats} repeats per probe, judged pooled (seeds base + i * {summary.repeats} + k)"
            if summary.repeats > 1 else "")
    console.print(f"SLOs: {slos}{' (defaults)' if summary.slos_default else ''}{reps}; budget {summary.budget_s:g} s "
                  f"({summary.budget_per_engine_s:.0f} s per engine); wall time {summary.wall_s:.0f} s",
                  markup=False, highlight=False)
    if rec is not None:
        console.print(f"Decision: {rec.sentence}", markup=False, highlight=False)
