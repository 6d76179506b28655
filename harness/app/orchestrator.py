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
import shutil
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from rich.markup import escape

from results.schema import (
    EngineResult,
    EngineStatus,
    Equivalence,
    Metrics,
    RequestRecord,
    SkipCause,
    Validity,
)
from results.store import RunWriter, new_run_id
from workloads.base import Workload

from harness.app.manifest import fill_manifest
from harness.app.run_config import AUTO_SETUP_CPU, RunConfig, default_threads  # noqa: F401 (re-exported)
from harness.app.progress import engine_progress
from harness.loadgen.client import EndpointTarget
from harness.loadgen.equivalence import EQUIVALENCE_MAX_TOKENS, EQUIVALENCE_PROMPTS, compare_outputs, equivalence_requests
from harness.metrics import SLO, compute_metrics
from harness.loadgen.runner import Runner, RunnerOptions

DRIFT_WARN = 0.05  # warn when server usage and re-tokenization disagree by more than 5 % on average


@dataclass
class EngineOutcome:
    name: str
    status: str
    reason: str = ""
    records: list[RequestRecord] = field(default_factory=list)


@dataclass
class RunResult:
    run_dir: Path
    summary: Any  # results.schema.RunSummary
    recommendation: Any = None
    interrupted: bool = False


def _scrape(url: str | None) -> str | None:
    if not url:
        return None
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode("utf-8", errors="replace")
    except OSError:
        return None


class Orchestrator:
    """Runs one ``RunConfig``. ``console`` is a rich Console for progress and messages."""

    def __init__(self, cfg: RunConfig, console: Any) -> None:
        self.cfg = cfg
        self.console = console

    # -- setup -------------------------------------------------------------------------
    def _workload(self, tokenizer: Any) -> Workload:
        from workloads.registry import build_workload

        return build_workload(self.cfg.workload, tokenizer)

    def _manifest(self, writer: RunWriter, model_dir: Path, workload: Workload, threads: int) -> None:
        fill_manifest(writer.manifest, model_dir, workload, self.cfg.workload.seed, self.cfg.slos, threads)
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
    ) -> tuple[EngineResult, list[RequestRecord], list[str] | None]:
        c = self.cfg
        with self._endpoint(name, adapter, launch, starter) as (ep, startup_s, parallel):
            writer.manifest.engines[name] = {
                "display_name": ep.display_name,
                "startup_s": round(startup_s, 2),
                "startup_parallel": parallel,
                **ep.effective_config,
            }
            writer.write_manifest()
            target = EndpointTarget(ep.base_url, ep.model_name, ep.api_key, ep.supports_ignore_eos)
            progress_cb, finish = engine_progress(self.console, name, workload)
            runner = Runner(target, name, workload.name, writer.add_record, tokenizer,
                            RunnerOptions(c.workload.max_concurrency, c.request_timeout_s), on_progress=progress_cb)
            try:
                equiv_texts = asyncio.run(self._before_measuring(name, target, runner, tokenizer))
                t0 = time.monotonic()
                asyncio.run(runner.measure(workload))
                wall = time.monotonic() - t0
            finally:
                finish()
            writer.replace_records(runner.retokenize())  # derived work, after the measured phase
            engine_metrics = self._engine_metrics(name, _scrape(ep.metrics_url))
        measured = [r for r in runner.records if r.phase == "measured"]
        metrics = compute_metrics(measured, c.slos, workload.offered_rate)
        result = EngineResult(status=EngineStatus.OK, metrics=metrics, display_name=ep.display_name, wall_s=round(wall, 2),
                              startup_s=round(startup_s, 2), startup_parallel=parallel, engine_metrics=engine_metrics)
        return result, measured, equiv_texts

    async def _before_measuring(self, name: str, target: EndpointTarget, runner: Runner, tokenizer: Any) -> list[str] | None:
        """Warm-up requests (stored as phase ``warmup``, never in metrics) and the greedy
        equivalence prompts, sent together; returns the equivalence outputs (None = not checked)."""
        from workloads.registry import build_warmup

        c = self.cfg
        # all at once: one batch on a continuous-batching engine, a couple on a static one
        warm = runner.warmup(build_warmup(tokenizer, c.warmup, seed=(c.workload.seed or 0) + 7919), concurrency=c.warmup) if c.warmup else None
        check = None
        if c.check_equivalence:
            eq = Runner(target, name, "equivalence", lambda r: None, None, RunnerOptions(None, 120.0))
            check = eq.warmup(equivalence_requests(), concurrency=len(EQUIVALENCE_PROMPTS))
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

    # -- the whole run -------------------------------------------------------------------
    def run(self) -> RunResult:
        from adapters.base import EngineError
        from adapters.registry import all_adapters, get_adapter

        from harness.app.model import resolve_model

        c = self.cfg
        model_dir = resolve_model(c.model)
        run_id = c.run_id or new_run_id(c.workload.name)
        run_dir = Path(c.output_dir) / run_id
        threads = c.threads or default_threads()
        writer = RunWriter(run_dir, run_id, c.workload.name)
        writer.summary.slos = {s.key: s.threshold_ms for s in c.slos}
        self.console.print(f"Run [bold]{escape(run_id)}[/] → {escape(str(run_dir))}")
        if c.calibrate:  # first, while nothing else runs: it measures the client's own timing
            from harness.loadgen.calibrate import calibrate

            self.console.print("Calibrating the client against a local null server …")
            try:
                writer.manifest.client_calibration = calibrate()
            except RuntimeError as exc:
                writer.manifest.client_calibration = {"error": str(exc)}
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
                writer.set_engine(name, EngineResult(status=EngineStatus.SKIPPED, reason=probe.reason,
                                                     skip_cause=SkipCause(probe.cause), capabilities=cap_dict))
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
                    result, measured, texts = self._measure_engine(name, adapter, launches[name], starter, writer,
                                                                  workload, tokenizer)
                except KeyboardInterrupt:
                    measured = _read_engine(writer, name)
                    writer.set_engine(name, EngineResult(
                        status=EngineStatus.FAILED,
                        reason=f"interrupted by the user (Ctrl-C) after {len(measured)} measured requests; kept",
                        metrics=self._partial_metrics(measured, workload), capabilities=cap_dict, version=probe.version))
                    interrupted = True
                    _mark_not_measured(writer, runnable[i + 1:], "the run was interrupted before its turn")
                    break
                except EngineError as exc:
                    # a crash mid-run keeps what was measured before it (metrics over those requests)
                    measured = _read_engine(writer, name)
                    self.console.print(f"[red]{name}[/]: failed — {escape(str(exc))}")
                    if exc.log_tail:
                        self.console.print(exc.log_tail[-2000:], markup=False, highlight=False)
                    writer.set_engine(name, EngineResult(
                        status=EngineStatus.FAILED, reason=str(exc), metrics=self._partial_metrics(measured, workload),
                        log_tail=exc.log_tail[-4000:], capabilities=cap_dict, version=probe.version))
                    continue
                texts = self._record_engine(name, result, texts, writer, cap_dict, probe)
                if texts is not None:
                    equivalence[name] = texts
        finally:
            if starter is not None:
                starter.close()
            writer.order_engines([a.name for a in adapters])  # skipped engines in their registry place
        if len(equivalence) >= 2:
            ref = "transformers" if "transformers" in equivalence else next(iter(equivalence))
            writer.summary.equivalence = Equivalence(
                reference=ref, prompts=list(EQUIVALENCE_PROMPTS), max_tokens=EQUIVALENCE_MAX_TOKENS,
                engines={n: compare_outputs(tokenizer, equivalence[ref], t) for n, t in equivalence.items() if n != ref},
            )
        writer.close()
        result = RunResult(run_dir, writer.summary, interrupted=interrupted)
        if c.report:
            result.recommendation = self._report(run_dir)
        return result

    def _partial_metrics(self, measured: list[RequestRecord], workload: Workload) -> Metrics | None:
        """Metrics over what an engine measured before it crashed or was interrupted (None: nothing)."""
        return compute_metrics(measured, self.cfg.slos, workload.offered_rate) if measured else None

    def _record_engine(self, name: str, result: EngineResult, texts: list[str] | None, writer: RunWriter,
                       cap_dict: dict[str, Any], probe: Any) -> list[str] | None:
        """Store one measured engine (ok, or failed when no request succeeded), its validity
        facts and drift warnings; returns its equivalence texts when it counts."""
        metrics = result.metrics
        assert metrics is not None
        result.capabilities, result.version = cap_dict, probe.version
        if metrics.requests_completed == 0:
            result.status = EngineStatus.FAILED
            result.reason = f"no request succeeded ({metrics.failures_by_class})"
            writer.set_engine(name, result)
            self.console.print(f"[red]{name}[/]: failed — {escape(result.reason)}")
            return None
        writer.set_engine(name, result)
        drift = metrics.token_drift
        writer.manifest.validity[name] = Validity(
            offered_rate=metrics.offered_rate, achieved_rate=metrics.achieved_rate, rate_valid=metrics.rate_valid,
            output_tokens_estimated=drift.output_estimated, output_token_drift=drift.output_rel_diff_mean,
            input_token_drift=drift.input_rel_diff_mean,
        )
        for side, rel in (("input", drift.input_rel_diff_mean), ("output", drift.output_rel_diff_mean)):
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
            writer.set_engine(name, EngineResult(status=EngineStatus.FAILED, reason=f"failed to install: {exc}",
                                                 log_tail=exc.log_tail[-4000:], capabilities=cap_dict))
            return False
        return True

    def _report(self, run_dir: Path) -> Any:
        from adapters.hardware import detect_hardware, get_profile
        from harness.app.reporting import write_run_reports
        from harness.scoring import recommend
        from results.recommendation import write_recommendation
        from results.store import load_run

        run = load_run(run_dir)
        hw = detect_hardware() if self.cfg.hardware == "detected" else get_profile(self.cfg.hardware)
        rec = recommend([run], hardware=hw, slos=self.cfg.slos or None, preset=self.cfg.preset)
        write_recommendation(run_dir, rec)
        write_run_reports(run_dir, rec)
        return rec


def _mark_not_measured(writer: RunWriter, engines: list[tuple[Any, dict[str, Any], Any]], why: str) -> None:
    """Record each ``(adapter, capabilities, probe)`` as not measured, with ``why``."""
    for adapter, cap_dict, _ in engines:
        writer.set_engine(adapter.name, EngineResult(status=EngineStatus.NOT_MEASURED, reason=f"not measured: {why}",
                                                     capabilities=cap_dict))


def _read_engine(writer: RunWriter, name: str) -> list[RequestRecord]:
    from results.store import REQUESTS_FILE, read_records

    return [r for r in read_records(writer.run_dir / REQUESTS_FILE) if r.engine == name and r.phase == "measured"]
