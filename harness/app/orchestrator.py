"""Run orchestration: one workload, every requested engine, one after another.

Flow (one way): build the workload → for each engine: probe → launch (adapter) → warm-up →
equivalence prompts → measure (runner) → metrics → store; then scorer → reports. An engine
that fails to start or crashes is recorded as ``failed`` with its log tail and the run goes
on; Ctrl-C stops the current engine (the adapter's context manager kills its process group),
marks it ``failed`` ("interrupted"), keeps every record already written, and re-raises.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import platform
import shutil
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from rich.markup import escape

from results.schema import RequestRecord
from results.store import RunWriter, new_run_id
from workloads.base import RequestSpec, Workload

from harness import __version__
from harness.loadgen.client import EndpointTarget
from harness.metrics import SLO, compute_metrics
from harness.loadgen.runner import Runner, RunnerOptions

EQUIVALENCE_PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):",
    "List three primary colors:",
)
EQUIVALENCE_MAX_TOKENS = 16
DRIFT_WARN = 0.05  # warn when server usage and re-tokenization disagree by more than 5 % on average


@dataclass
class RunConfig:
    """Everything ``bench run`` was asked for (validated by the CLI before it gets here)."""

    engines: list[str]
    workload: str = "agentic"
    model: str | None = None
    num_requests: int | None = None
    input_len: int | None = None
    output_len: int | None = None
    range_ratio: float | None = None
    request_rate: float | None = None  # None: the workload's default
    burstiness: float | None = None
    max_concurrency: int | None = None
    seed: int | None = None  # None: the workload spec file's seed, else 0
    slos: list[SLO] = field(default_factory=list)
    warmup: int = 2
    output_dir: Path = Path("results")
    run_id: str | None = None
    scale: float | None = None
    api: str | None = None
    trace: str | None = None
    time_scale: float | None = None
    spec_file: Path | None = None
    base_url: str | None = None
    served_model_name: str | None = None
    engine_args: dict[str, dict[str, str]] = field(default_factory=dict)
    threads: int | None = None
    request_timeout_s: float = 600.0
    startup_timeout_s: float = 600.0
    check_equivalence: bool = True
    calibrate: bool = True
    hardware: str = "detected"
    preset: str = "balanced"
    report: bool = True
    setup_engines: bool = False  # install missing CPU engine environments before measuring them
    parallel_start: bool = True  # start every engine at once, frozen until its turn (harness/startup.py)


# Engines whose environment `--setup-engines` creates on a CPU-only machine, in run order.
# Not DeepSpeed: on a CPU its inference path is Hugging Face `generate` underneath (no kernel
# injection), so it measures what the transformers baseline already measures, at ~40 s of a
# default run; `bench engines setup deepspeed` adds it and `--engine all` then measures it.
AUTO_SETUP_CPU = ("vllm", "sglang", "transformers_serve", "onnxruntime")


@dataclass
class EngineOutcome:
    name: str
    status: str
    reason: str = ""
    records: list[RequestRecord] = field(default_factory=list)


@dataclass
class RunResult:
    run_dir: Path
    summary: dict[str, Any]
    recommendation: Any = None
    interrupted: bool = False


def default_threads() -> int:
    """Engine threads: all cores but one (the client's), at least 1 (DESIGN.md)."""
    return max(1, (os.cpu_count() or 2) - 1)


def git_sha() -> str | None:
    """The harness checkout's commit, or None outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=5
        )
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def _scrape(url: str | None) -> str | None:
    if not url:
        return None
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode("utf-8", errors="replace")
    except OSError:
        return None


def _equivalence_requests(seed: int) -> list[RequestSpec]:
    return [
        RequestSpec(request_id=f"equiv-{i}", prompt=p, max_tokens=EQUIVALENCE_MAX_TOKENS, temperature=0.0, keep_output_text=True)
        for i, p in enumerate(EQUIVALENCE_PROMPTS)
    ]


def token_agreement(tokenizer: Any, reference: list[str], other: list[str]) -> dict[str, Any]:
    """Greedy output agreement of two engines over the same prompts, token by token.

    Returns ``token_agreement`` (matching tokens at the same position / reference tokens,
    0..1), ``exact_matches`` (prompts whose outputs are identical) and
    ``first_divergence`` (per prompt: index of the first differing token, or None).
    """
    match = total = exact = 0
    firsts: list[int | None] = []
    for a, b in zip(reference, other):
        ta = tokenizer.encode(a, add_special_tokens=False)
        tb = tokenizer.encode(b, add_special_tokens=False)
        first = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), None)
        if first is None and len(ta) != len(tb):
            first = min(len(ta), len(tb))
        firsts.append(first)
        match += sum(1 for x, y in zip(ta, tb) if x == y)
        total += max(len(ta), len(tb))
        exact += a == b
    return {
        "token_agreement": match / total if total else None,
        "exact_matches": exact,
        "prompts": len(reference),
        "first_divergence": firsts,
    }


class Orchestrator:
    """Runs one ``RunConfig``. ``console`` is a rich Console for progress and messages."""

    def __init__(self, cfg: RunConfig, console: Any) -> None:
        self.cfg = cfg
        self.console = console

    # -- setup -------------------------------------------------------------------------
    def _workload(self, tokenizer: Any) -> Workload:
        from workloads.registry import build_workload

        c = self.cfg
        return build_workload(
            c.workload,
            tokenizer,
            seed=c.seed,
            num_requests=c.num_requests,
            scale=c.scale,
            request_rate=c.request_rate,
            burstiness=c.burstiness,
            max_concurrency=c.max_concurrency,
            input_len=c.input_len,
            output_len=c.output_len,
            range_ratio=c.range_ratio,
            api=c.api,
            trace=c.trace,
            time_scale=c.time_scale,
            spec_file=c.spec_file,
        )

    def _manifest(self, writer: RunWriter, model_dir: Path, workload: Workload, threads: int) -> None:
        from adapters.hardware import detect_hardware

        from harness.app.model import model_summary

        hw = detect_hardware()
        writer.manifest.update(
            {
                "command": sys.argv,
                "harness_version": __version__,
                "git_sha": git_sha(),
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "python": platform.python_version(),
                "platform": platform.platform(),
                "hardware": hw.to_dict(),
                "model": model_summary(model_dir),
                "workload": workload.spec,
                "workload_stats": workload.stats,
                "seed": workload.spec.get("seed", self.cfg.seed),
                "slos": {s.key: s.threshold_ms for s in self.cfg.slos},
                "threads": {"engine": threads, "client": 1},
                "engines": {},
                "validity": {},
            }
        )
        writer.write_manifest()

    # -- one engine ----------------------------------------------------------------------
    def _launch_config(self, name: str, model_dir: Path, writer: RunWriter, threads: int) -> Any:
        from adapters.base import LaunchConfig

        c = self.cfg
        return LaunchConfig(
            model_dir=model_dir,
            run_dir=writer.run_dir,
            threads=threads,
            engine_args=c.engine_args.get(name, {}),
            startup_timeout_s=c.startup_timeout_s,
            base_url=c.base_url,
            model_name=c.served_model_name,
        )

    @contextmanager
    def _endpoint(self, name: str, adapter: Any, launch: Any, starter: Any) -> Iterator[tuple[Any, float, bool]]:
        """Yield ``(endpoint, start-up s, started in parallel)``: the engine held by ``starter``
        (thawed for its turn) or a fresh launch; the engine is stopped on exit."""
        if starter is not None and starter.holds(name):
            if not starter.failed(name):
                self.console.print(f"[bold]{name}[/]: resuming …")
            with starter.take(name) as (ep, startup_s):
                yield ep, startup_s, True
            return
        self.console.print(f"[bold]{name}[/]: starting …")
        t_start = time.monotonic()
        with adapter.launch(launch) as ep:
            yield ep, time.monotonic() - t_start, False

    def _measure_engine(
        self, name: str, adapter: Any, launch: Any, starter: Any, writer: RunWriter, workload: Workload, tokenizer: Any
    ) -> tuple[dict[str, Any], list[RequestRecord], list[str] | None]:
        c = self.cfg
        with self._endpoint(name, adapter, launch, starter) as (ep, startup_s, parallel):
            writer.manifest["engines"][name] = {
                "display_name": ep.display_name,
                "startup_s": round(startup_s, 2),
                "startup_parallel": parallel,
                **ep.effective_config,
            }
            writer.write_manifest()
            target = EndpointTarget(ep.base_url, ep.model_name, ep.api_key, ep.supports_ignore_eos)
            progress_cb, finish = self._progress(name, workload)
            runner = Runner(target, name, workload.name, writer.add_record, tokenizer,
                            RunnerOptions(c.max_concurrency, c.request_timeout_s), on_progress=progress_cb)
            try:
                equiv_texts = asyncio.run(self._before_measuring(name, target, runner, tokenizer))
                t0 = time.monotonic()
                asyncio.run(runner.measure(workload))
                wall = time.monotonic() - t0
            finally:
                finish()
            engine_metrics = self._engine_metrics(name, _scrape(ep.metrics_url))
        measured = [r for r in runner.records if r.phase == "measured"]
        metrics = compute_metrics(measured, c.slos, workload.offered_rate)
        extra = {"display_name": ep.display_name, "wall_s": round(wall, 2), "startup_s": round(startup_s, 2),
                 "startup_parallel": parallel}
        if engine_metrics:
            extra["engine_metrics"] = engine_metrics
        return {"metrics": metrics, **extra}, measured, equiv_texts

    async def _before_measuring(self, name: str, target: EndpointTarget, runner: Runner, tokenizer: Any) -> list[str] | None:
        """Warm-up requests (stored as phase ``warmup``, never in metrics) and the greedy
        equivalence prompts, sent together; returns the equivalence outputs (None = not checked)."""
        from workloads.registry import build_warmup

        c = self.cfg
        # all at once: one batch on a continuous-batching engine, a couple on a static one
        warm = runner.warmup(build_warmup(tokenizer, c.warmup, seed=(c.seed or 0) + 7919), concurrency=c.warmup) if c.warmup else None
        check = None
        if c.check_equivalence:
            eq = Runner(target, name, "equivalence", lambda r: None, None, RunnerOptions(None, 120.0))
            check = eq.warmup(_equivalence_requests(c.seed or 0), concurrency=len(EQUIVALENCE_PROMPTS))
        results = await asyncio.gather(*(x for x in (warm, check) if x is not None))
        if check is None:
            return None
        recs = sorted(results[-1], key=lambda r: r.request_id)
        return [r.output_text or "" for r in recs]

    def _engine_metrics(self, name: str, text: str | None) -> dict[str, Any]:
        if not text:
            return {}
        try:
            from adapters.prom import common_metrics, parse_prometheus

            return common_metrics(name, parse_prometheus(text))
        except Exception as exc:  # informational: never fail a run over a scrape
            return {"error": f"could not parse /metrics: {exc}"}

    def _progress(self, name: str, workload: Workload) -> tuple[Callable[[RequestRecord], None], Callable[[], None]]:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        total = int(workload.stats.get("requests") or workload.stats.get("turns") or len(workload.sessions))
        prog = Progress(TextColumn("  {task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                        TimeElapsedColumn(), console=self.console, transient=False)
        task = prog.add_task(f"{name} {workload.name}", total=total, info="")
        prog.start()
        counts = {"ok": 0, "failed": 0}

        def on_record(r: RequestRecord) -> None:
            if r.phase != "measured":
                return
            counts["ok" if r.success else "failed"] += 1
            done = counts["ok"] + counts["failed"]
            prog.update(task, completed=done, total=max(total, done), info=f"failed {counts['failed']}" if counts["failed"] else "")

        return on_record, prog.stop

    # -- the whole run -------------------------------------------------------------------
    def run(self) -> RunResult:
        from adapters.base import EngineError
        from adapters.registry import all_adapters, get_adapter

        from harness.app.model import resolve_model

        c = self.cfg
        model_dir = resolve_model(c.model)
        run_id = c.run_id or new_run_id(c.workload)
        run_dir = Path(c.output_dir) / run_id
        threads = c.threads or default_threads()
        writer = RunWriter(run_dir, run_id, c.workload)
        writer.summary["slos"] = {s.key: s.threshold_ms for s in c.slos}
        self.console.print(f"Run [bold]{escape(run_id)}[/] → {escape(str(run_dir))}")
        if c.calibrate:  # first, while nothing else runs: it measures the client's own timing
            from harness.loadgen.calibrate import calibrate

            self.console.print("Calibrating the client against a local null server …")
            try:
                writer.manifest["client_calibration"] = calibrate()
            except RuntimeError as exc:
                writer.manifest["client_calibration"] = {"error": str(exc)}
            writer.write_manifest()

        adapters = all_adapters() if c.engines == ["all"] else [get_adapter(n) for n in c.engines]
        equivalence: dict[str, list[str]] = {}
        interrupted = False
        runnable: list[tuple[Any, dict[str, Any], Any]] = []
        for adapter in adapters:
            name = adapter.name
            caps = getattr(adapter, "capabilities", None)
            cap_dict = dataclasses.asdict(caps) if caps is not None else {}
            if c.setup_engines and not self._ensure_installed(name, writer, cap_dict):
                continue
            probe = adapter.probe()
            if not probe.available:
                self.console.print(f"[yellow]{name}[/]: skipped — {escape(probe.reason)}")
                writer.set_engine(name, "skipped", probe.reason, capabilities=cap_dict)
                continue
            runnable.append((adapter, cap_dict, probe))
        launches = {a.name: self._launch_config(a.name, model_dir, writer, threads) for a, _, _ in runnable}
        starter = self._parallel_start(runnable, launches)
        # built while the engines start (loading transformers and the tokenizer takes ~5 s)
        tokenizer, workload = self._build_workload(model_dir, starter, writer)
        try:
            self._manifest(writer, model_dir, workload, threads)
            if starter is not None:
                try:
                    starter.wait()
                except KeyboardInterrupt:
                    _mark_not_measured(writer, runnable, "the run was interrupted during the engines' start-up")
                    raise
            for i, (adapter, cap_dict, probe) in enumerate(runnable):
                name = adapter.name
                try:
                    entry, measured, texts = self._measure_engine(name, adapter, launches[name], starter, writer,
                                                                  workload, tokenizer)
                except KeyboardInterrupt:
                    measured = _read_engine(writer, name)
                    metrics = compute_metrics(measured, c.slos, workload.offered_rate) if measured else {}
                    writer.set_engine(name, "failed",
                                      f"interrupted by the user (Ctrl-C) after {len(measured)} measured requests; kept",
                                      metrics=metrics, capabilities=cap_dict, version=probe.version)
                    interrupted = True
                    _mark_not_measured(writer, runnable[i + 1:], "the run was interrupted before its turn")
                    break
                except EngineError as exc:
                    # a crash mid-run keeps what was measured before it (metrics over those requests)
                    measured = _read_engine(writer, name)
                    metrics = compute_metrics(measured, c.slos, workload.offered_rate) if measured else {}
                    self.console.print(f"[red]{name}[/]: failed — {escape(str(exc))}")
                    if exc.log_tail:
                        self.console.print(exc.log_tail[-2000:], markup=False, highlight=False)
                    writer.set_engine(name, "failed", str(exc), metrics=metrics, log_tail=exc.log_tail[-4000:],
                                      capabilities=cap_dict, version=probe.version)
                    continue
                texts = self._record_engine(name, entry, texts, writer, cap_dict, probe)
                if texts is not None:
                    equivalence[name] = texts
        finally:
            if starter is not None:
                starter.close()
            writer.order_engines([a.name for a in adapters])  # skipped engines in their registry place
        if len(equivalence) >= 2:
            ref = "transformers" if "transformers" in equivalence else next(iter(equivalence))
            writer.summary["equivalence"] = {
                "reference": ref,
                "prompts": list(EQUIVALENCE_PROMPTS),
                "max_tokens": EQUIVALENCE_MAX_TOKENS,
                "engines": {n: token_agreement(tokenizer, equivalence[ref], t) for n, t in equivalence.items() if n != ref},
            }
        writer.close()
        result = RunResult(run_dir, writer.summary, interrupted=interrupted)
        if c.report:
            result.recommendation = self._report(run_dir)
        return result

    def _record_engine(self, name: str, entry: dict[str, Any], texts: list[str] | None, writer: RunWriter,
                       cap_dict: dict[str, Any], probe: Any) -> list[str] | None:
        """Store one measured engine (ok, or failed when no request succeeded), its validity
        facts and drift warnings; returns its equivalence texts when it counts."""
        m = entry["metrics"]
        if m.get("requests_completed", 0) == 0:
            reason = f"no request succeeded ({m.get('failures_by_class')})"
            writer.set_engine(name, "failed", reason, capabilities=cap_dict, version=probe.version, **entry)
            self.console.print(f"[red]{name}[/]: failed — {escape(reason)}")
            return None
        writer.set_engine(name, "ok", "", capabilities=cap_dict, version=probe.version, **entry)
        drift = m["token_drift"]
        writer.manifest["validity"][name] = {
            k: m.get(k) for k in ("offered_rate", "achieved_rate", "rate_valid")
        } | {
            "output_tokens_estimated": drift["output_estimated"],
            "output_token_drift": drift["output_rel_diff_mean"],
            "input_token_drift": drift["input_rel_diff_mean"],
        }
        for side in ("input", "output"):
            rel = drift[f"{side}_rel_diff_mean"]
            if rel is not None and rel > DRIFT_WARN:
                self.console.print(
                    f"[yellow]{name}[/]: server-reported {side} tokens differ from our tokenizer's count by "
                    f"{rel:.0%} on average: is the engine serving the same model/tokenizer? (manifest: validity)"
                )
        return texts

    def _build_workload(self, model_dir: Path, starter: Any, writer: RunWriter) -> tuple[Any, Workload]:
        """Tokenizer and workload; on failure (a bad spec, Ctrl-C) the engines already starting
        are stopped and the run folder, which holds no measurement yet, is removed."""
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(model_dir)
            return tokenizer, self._workload(tokenizer)
        except BaseException:
            if starter is not None:
                starter.close()
            writer.close()
            shutil.rmtree(writer.run_dir, ignore_errors=True)
            raise

    def _parallel_start(self, runnable: list[tuple[Any, dict[str, Any], Any]], launches: dict[str, Any]) -> Any:
        """Start every engine the harness runs as a process at once (harness/startup.py), when
        asked for, on a CPU-only machine, there are two or more, and they fit in host memory;
        None = start one by one.
        Returns at once: the caller waits with ``starter.wait()``."""
        from harness.app.startup import ParallelStarter, parallel_start_fits

        from adapters.hardware import detect_kind

        items = [(a.name, a, launches[a.name]) for a, _, _ in runnable if getattr(a, "starts_process", False)]
        if not self.cfg.parallel_start or len(items) < 2:
            return None
        if detect_kind() != "cpu":
            # GPU engines each claim most of the device memory (vLLM: 90 %): they cannot all
            # be resident at once, so they start one after another
            return None
        if not parallel_start_fits(len(items)):
            self.console.print(f"[yellow]not enough free memory to hold {len(items)} engines at once: "
                               "starting them one after another[/]")
            return None
        starter = ParallelStarter(self.console)
        starter.begin(items)
        return starter

    def _ensure_installed(self, name: str, writer: RunWriter, cap_dict: dict[str, Any]) -> bool:
        """Install engine ``name``'s environment when ``--setup-engines`` asks for it and it is
        missing. Returns False (engine recorded as ``failed`` with the pip log tail) when the
        install fails; True otherwise (including engines that need no install)."""
        from adapters.base import EngineError
        from adapters.envs import is_installed, setup_engine
        from adapters.hardware import detect_kind

        if name not in AUTO_SETUP_CPU or detect_kind() != "cpu" or is_installed(name):
            return True
        self.console.print(f"[bold]{name}[/]: environment missing, installing (one time) …")
        try:
            setup_engine(name, console=self.console)
        except EngineError as exc:
            self.console.print(f"[red]{name}[/]: failed to install — {escape(str(exc))}")
            writer.set_engine(name, "failed", f"failed to install: {exc}", log_tail=exc.log_tail[-4000:],
                              capabilities=cap_dict)
            return False
        return True

    def _report(self, run_dir: Path) -> Any:
        from adapters.hardware import detect_hardware, get_profile
        from harness.scoring import recommend
        from reports import write_reports
        from results.store import load_run

        run = load_run(run_dir)
        hw = detect_hardware() if self.cfg.hardware == "detected" else get_profile(self.cfg.hardware)
        rec = recommend([run], hardware=hw, slos=self.cfg.slos or None, preset=self.cfg.preset)
        write_reports(run_dir, rec)
        return rec


def _mark_not_measured(writer: RunWriter, engines: list[tuple[Any, dict[str, Any], Any]], why: str) -> None:
    """Record each ``(adapter, capabilities, probe)`` as skipped: "not measured: <why>"."""
    for adapter, cap_dict, _ in engines:
        writer.set_engine(adapter.name, "skipped", f"not measured: {why}", capabilities=cap_dict)


def _read_engine(writer: RunWriter, name: str) -> list[RequestRecord]:
    from results.store import REQUESTS_FILE, read_records

    return [r for r in read_records(writer.run_dir / REQUESTS_FILE) if r.engine == name and r.phase == "measured"]
