"""Run orchestration: one workload, every requested engine, one after another.

Flow (one way): build the workload → for each engine: probe → launch (adapter) → warm-up →
equivalence prompts → measure (runner) → metrics → store; then scorer → reports. An engine
that fails to start or crashes is recorded as ``failed`` with its log tail and the run goes
on; Ctrl-C stops the current engine (the adapter's context manager kills its process group),
marks it ``failed`` ("interrupted"), keeps every record already written, and re-raises.
"""

from __future__ import annotations

import asyncio
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
    RequestRecord,
    SkipCause,
    Validity,
    WINDOW_PHASES,
)
from results.store import RunWriter, new_run_id
from adapters.hardware import run_price
from adapters.resources import ResourceSampler, install_facts
from workloads.base import Workload

from harness.app.run.engine_turns import EngineTurns
from harness.app.core.parity_run import ParityRun
from harness.app.core.manifest import fill_manifest
from harness.app.core.plan import EnginePlan, capabilities_of, plan_engine
from harness.app.core.startup import EngineStarter, start_slots
from harness.app.core.settings import AUTO_SETUP_CPU, default_threads  # noqa: F401 (re-exported)
from harness.app.core.settings import RunSettings as RunConfig  # the settings (the body still says RunConfig)
from harness.app.core.progress import engine_progress
from harness.app.core.warm_cache import warn_if_cache_may_be_warm
from harness.app.core.signals import interrupt_cause
from harness.loadgen.client import EndpointTarget
from harness.loadgen.equivalence import EQUIVALENCE_MAX_TOKENS, EQUIVALENCE_PROMPTS, compare_outputs, equivalence_requests
from harness.metrics import compute_metrics
from harness.loadgen.runner import Runner, RunnerOptions
from harness.loadgen.workers import client_measurer

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
    interrupted: str = ""  # who interrupted the run: "the user (Ctrl-C)", "SIGTERM"; "" = ran to its end


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
        self.parity = ParityRun(cfg, console)  # --parity: engine args, effective settings, the audit

    # -- setup -------------------------------------------------------------------------
    def _workload(self, tokenizer: Any) -> Workload:
        from workloads.registry import build_workload

        return build_workload(self.cfg.workload, tokenizer)

    def _manifest(self, writer: RunWriter, model_dir: Path, workload: Workload, threads: int) -> None:
        fill_manifest(writer.manifest, model_dir, workload, self.cfg.workload.seed, self.cfg.slos, threads,
                      token_note=self.cfg.token_note, describe_model=self.cfg.model_described)
        if self.cfg.price_per_hour is not None and writer.manifest.hardware is not None:  # --price-per-hour
            writer.manifest.hardware.update(price_per_hour=self.cfg.price_per_hour, price_source="--price-per-hour")
        writer.write_manifest()

    # -- one engine ----------------------------------------------------------------------
    def _launch_config(self, name: str, model_dir: Path, writer: RunWriter, threads: int) -> Any:
        from adapters.base import LaunchConfig

        c = self.cfg
        return LaunchConfig(
            model_dir=model_dir,
            run_dir=writer.run_dir,
            threads=threads,
            engine_args=self.parity.engine_args(name),
            startup_timeout_s=c.startup_timeout_s,
            base_url=c.base_url,
            model_name=c.served_model_name,
        )

    @contextmanager
    def _endpoint(self, plan: EnginePlan, starter: EngineStarter) -> Iterator[tuple[Any, float, bool]]:
        """Yield ``(endpoint, start-up s, started alongside others)`` for ``plan``'s turn; the
        engine is stopped on exit."""
        resuming = starter.holds(plan.name) and not starter.failed(plan.name) and starter.slots > 1
        self.console.print(f"[bold]{plan.name}[/]: {'resuming' if resuming else 'starting'} …")
        with starter.take(plan.name) as (ep, startup_s):
            yield ep, startup_s, starter.parallel(plan.name)

    def _measure_engine(self, turns: EngineTurns, starter: EngineStarter, writer: RunWriter, workload: Workload,
                        tokenizer: Any, repeat: int) -> list[str] | None:
        """One turn of ``turns``' engine: start/thaw, warm up, (repeat 0) equivalence prompts,
        measure, stop; adds the repeat to ``turns`` and returns the equivalence texts."""
        c = self.cfg
        name = turns.name
        label = name if c.repeats == 1 else f"{name} (repeat {repeat + 1}/{c.repeats})"
        with self._endpoint(turns.plan, starter) as (ep, startup_s, parallel):
            writer.manifest.engines[name] = {
                "display_name": ep.display_name,
                "startup_s": round(startup_s, 2),
                "startup_parallel": parallel,
                **ep.effective_config,
                **install_facts(ep.effective_config),  # size on disk of its venv (cached until it changes)
            }
            writer.write_manifest()
            if repeat == 0:  # what the engine reports it runs with, after health, before any request
                self.parity.read(name, ep)
            target = EndpointTarget(ep.base_url, ep.model_name, ep.api_key, ep.supports_ignore_eos and c.ignore_eos)
            progress_cb, finish = engine_progress(self.console, label, workload)
            runner = Runner(target, name, workload.name, writer.add_record, tokenizer,
                            RunnerOptions(c.workload.max_concurrency, c.request_timeout_s, repeat=repeat),
                            on_progress=progress_cb)
            try:
                equiv_texts = asyncio.run(self._before_measuring(name, target, runner, tokenizer, repeat == 0))
                counters_before = _scrape(ep.metrics_url)  # engine counters then count the measured phase only
                t0 = time.monotonic()
                measurer = client_measurer(runner, c.client_workers, writer.manifest, writer.write_manifest)
                with ResourceSampler(ep.pgid) as sampler:  # a thread sampling the engine's process group
                    asyncio.run(measurer.measure(workload))  # --client-workers N: N processes, one schedule
                wall = time.monotonic() - t0
            finally:
                finish()
            writer.replace_records(runner.retokenize())  # derived work, after the measured phase
            engine_metrics = self._engine_metrics(name, counters_before, _scrape(ep.metrics_url))
            if repeat == 0 and c.feature_probes:  # outside the measured phase, after its counters were read
                from harness.app.core.feature_phase import probe_phase
                turns.feature_probes = probe_phase(self.console, name, ep, target, tokenizer, writer.manifest,
                                                   c.request_timeout_s)
        measured = [r for r in runner.records if r.phase == "measured" or r.phase in WINDOW_PHASES]  # windows: counted
        turns.add(compute_metrics(measured, c.slos, workload.offered_rate, workload.requested_rate,
                                  workload.planned_turns(), workload.timing), measured,
                  wall_s=wall, startup_s=startup_s, parallel=parallel, display_name=ep.display_name,
                  engine_metrics=engine_metrics, resources=sampler.result)
        return equiv_texts

    async def _before_measuring(self, name: str, target: EndpointTarget, runner: Runner, tokenizer: Any,
                                equivalence: bool) -> list[str] | None:
        """Warm-up requests (stored as phase ``warmup``, never in metrics) and the greedy
        equivalence prompts, sent together; returns the equivalence outputs (None = not checked)."""
        from workloads.registry import build_warmup

        c = self.cfg
        # all at once: one batch on a continuous-batching engine, a couple on a static one
        warm = runner.warmup(build_warmup(tokenizer, c.warmup, seed=(c.workload.seed or 0) + 7919), concurrency=c.warmup) if c.warmup else None
        check = None
        if c.check_equivalence and equivalence:
            eq = Runner(target, name, "equivalence", lambda r: None, None, RunnerOptions(None, c.request_timeout_s))
            check = eq.warmup(equivalence_requests(), concurrency=len(EQUIVALENCE_PROMPTS))
        results = await asyncio.gather(*(x for x in (warm, check) if x is not None))
        if check is None:
            return None
        recs = sorted(results[-1], key=lambda r: r.request_id)
        return [r.output_text or "" for r in recs]

    def _engine_metrics(self, name: str, before: str | None, after: str | None) -> dict[str, Any]:
        """The engine's own counters over the measured phase (``adapters.prom.measured_phase``)."""
        if not after:
            return {}
        try:
            from adapters.prom import measured_phase, parse_prometheus

            return measured_phase(name, parse_prometheus(before) if before else None, parse_prometheus(after))
        except Exception as exc:  # informational: never fail a run over a scrape
            return {"error": f"could not parse /metrics: {exc}"}

    # -- the whole run -------------------------------------------------------------------
    def run(self) -> RunResult:
        from adapters.hardware import detect_kind
        from adapters.registry import all_adapters, get_adapter

        from harness.app.core.model import resolve_model

        c = self.cfg
        model_dir = resolve_model(c.model)
        run_id = c.run_id or new_run_id(c.workload.name)
        run_dir = Path(c.output_dir) / run_id
        threads = c.threads or default_threads()
        writer = RunWriter(run_dir, run_id, c.workload.name)
        writer.summary.slos = {s.key: s.threshold_ms for s in c.slos}
        self.console.print(f"Run [bold]{escape(run_id)}[/] → {escape(str(run_dir))}")
        if c.calibrate:  # first, while nothing else runs: it measures the client's own timing
            from harness.loadgen.calibrate import calibrate, workers_line

            self.console.print("Calibrating the client against a local null server …")
            try:
                writer.manifest.client_calibration = calibrate()
            except RuntimeError as exc:
                writer.manifest.client_calibration = {"error": str(exc)}
            writer.write_manifest()
            if line := workers_line(c.workload.request_rate, writer.manifest.client_calibration.get("max_rate_rps"), c.client_workers):
                self.console.print(line)  # how many client processes the offered rate needs

        kind = detect_kind()  # once per run: the adapters, the start slots and the installs use it
        adapters = all_adapters(kind) if c.engines == ["all"] else [get_adapter(n, kind) for n in c.engines]
        self.parity.plan(adapters, model_dir, kind)
        equivalence: dict[str, list[str]] = {}
        interrupted = ""  # who interrupted the run ("" = nobody)
        plans: list[EnginePlan] = []
        for adapter in adapters:
            if c.setup_engines and not self._ensure_installed(adapter, kind, writer):
                continue
            plan = plan_engine(adapter, self._launch_config(adapter.name, model_dir, writer, threads), kind)
            if not plan.available:
                self.console.print(f"[yellow]{plan.name}[/]: skipped — {escape(plan.probe.reason)}")
                writer.set_engine(plan.name, EngineResult(status=EngineStatus.SKIPPED, reason=plan.probe.reason,
                                                          skip_cause=SkipCause(plan.probe.cause),
                                                          capabilities=plan.capabilities))
                continue
            plans.append(plan)
        writer.summary.repeats = c.repeats
        turns = {p.name: EngineTurns(p) for p in plans}
        tokenizer, workload = None, None
        try:
            for repeat in range(c.repeats):
                live = [t for t in turns.values() if not t.failed]
                if repeat % 2:  # alternate the order (A B C, C B A, ...): drift of the machine cancels
                    live.reverse()
                starter = self._starter([t.plan for t in live], kind, quiet=repeat > 0)
                try:
                    starter.begin()
                    if workload is None:
                        # built while the engines start (loading transformers and the tokenizer takes ~5 s)
                        tokenizer, workload = self._build_workload(model_dir, starter, writer)
                        self._manifest(writer, model_dir, workload, threads)
                        warn_if_cache_may_be_warm(self.console, writer.run_dir, writer.manifest.workload, plans)
                    for i, engine in enumerate(live):
                        if cause := self._turn(engine, starter, writer, workload, tokenizer, repeat, equivalence):
                            interrupted = cause
                            self._interrupted(writer, workload, live[i + 1:], list(turns.values()))
                            break
                finally:
                    starter.close()
                if interrupted:
                    break
        finally:
            if workload is not None:  # else the run folder was removed: nothing was measured
                writer.order_engines([a.name for a in adapters])  # skipped engines in their registry place
        if len(equivalence) >= 2:
            ref = "transformers" if "transformers" in equivalence else next(iter(equivalence))
            writer.summary.equivalence = Equivalence(
                reference=ref, prompts=list(EQUIVALENCE_PROMPTS), max_tokens=EQUIVALENCE_MAX_TOKENS,
                engines={n: compare_outputs(tokenizer, equivalence[ref], t) for n, t in equivalence.items() if n != ref},
            )
        writer.summary.parity = self.parity.audit(writer.summary)
        writer.close()
        result = RunResult(run_dir, writer.summary, interrupted=interrupted)
        if c.report:
            result.recommendation = self._report(run_dir)
        return result

    def _turn(self, engine: EngineTurns, starter: EngineStarter, writer: RunWriter, workload: Workload,
              tokenizer: Any, repeat: int, equivalence: dict[str, list[str]]) -> str:
        """One engine's turn in one repeat, its summary entry updated at once (a crash of the
        harness keeps it). Returns who interrupted it ("the user (Ctrl-C)", "SIGTERM"; the
        engine is then failed), "" when it was not interrupted."""
        from adapters.base import EngineError

        c = self.cfg
        name = engine.name
        try:
            texts = self._measure_engine(engine, starter, writer, workload, tokenizer, repeat)
        except KeyboardInterrupt as exc:
            measured = _read_engine(writer, name, repeat)
            cause = interrupt_cause(exc)
            writer.set_engine(name, engine.fail(
                f"interrupted by {cause} after {len(measured)} measured requests; kept", measured, c.slos,
                workload.offered_rate, workload.requested_rate))
            return cause
        except EngineError as exc:
            # a crash mid-run keeps what was measured before it (metrics over those requests)
            self.console.print(f"[red]{name}[/]: failed — {escape(str(exc))}")
            if exc.log_tail:
                self.console.print(exc.log_tail[-2000:], markup=False, highlight=False)
            why = str(exc) if c.repeats == 1 else f"repeat {repeat + 1}/{c.repeats}: {exc}"
            writer.set_engine(name, engine.fail(why, _read_engine(writer, name, repeat), c.slos, workload.offered_rate,
                                                workload.requested_rate, exc.log_tail))
            return ""
        result = engine.result(c.slos, workload.offered_rate, workload.requested_rate, c.repeats,
                               seed=c.workload.seed or 0, price=run_price(writer.manifest.hardware))
        self._record_engine(name, result, writer)
        if texts is not None and result.status is EngineStatus.OK:
            equivalence[name] = texts
        return ""

    def _interrupted(self, writer: RunWriter, workload: Workload, waiting: list[EngineTurns],
                     engines: list[EngineTurns]) -> None:
        """After a Ctrl-C: engines that measured earlier repeats keep them (marked as fewer than
        planned); engines that measured nothing are not measured."""
        c = self.cfg
        for engine in waiting:
            if engine.metrics:
                writer.set_engine(engine.name, engine.result(c.slos, workload.offered_rate, workload.requested_rate,
                                                             c.repeats, seed=c.workload.seed or 0,
                                                             price=run_price(writer.manifest.hardware)))
        _mark_not_measured(writer, [e.plan for e in engines if not e.metrics and not e.failed],
                           "the run was interrupted before its turn")

    def _record_engine(self, name: str, result: EngineResult, writer: RunWriter) -> None:
        """Store one measured engine (ok, or failed when no request succeeded), its validity
        facts and drift warnings."""
        metrics = result.metrics
        assert metrics is not None
        self.parity.attach(name, result)
        writer.set_engine(name, result)
        if result.status is not EngineStatus.OK:
            self.console.print(f"[red]{name}[/]: failed — {escape(result.reason)}")
            return
        drift = metrics.token_drift
        writer.manifest.validity[name] = Validity(
            offered_rate=metrics.offered_rate, requested_rate=metrics.requested_rate,
            achieved_rate=metrics.achieved_rate, rate_valid=metrics.rate_valid, output_tokens_estimated=drift.output_estimated, output_token_drift=drift.output_rel_diff_mean,
            input_token_drift=drift.input_rel_diff_mean,
        )
        for side, rel in (("input", drift.input_rel_diff_mean), ("output", drift.output_rel_diff_mean)):
            if rel is not None and rel > DRIFT_WARN:
                self.console.print(
                    f"[yellow]{name}[/]: server-reported {side} tokens differ from our tokenizer's count by "
                    f"{rel:.0%} on average: is the engine serving the same model/tokenizer? (manifest: validity)"
                )

    def _build_workload(self, model_dir: Path, starter: EngineStarter, writer: RunWriter) -> tuple[Any, Workload]:
        """Tokenizer and workload; on failure (a bad spec, Ctrl-C) the engines already starting
        are stopped and the run folder, which holds no measurement yet, is removed."""
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(model_dir)
            return tokenizer, self._workload(tokenizer)
        except BaseException:
            starter.close()
            writer.close()
            shutil.rmtree(writer.run_dir, ignore_errors=True)
            raise

    def _starter(self, plans: list[EnginePlan], kind: str, quiet: bool = False) -> EngineStarter:
        """The one launch path (harness/app/core/startup.py): as many engines started ahead of their
        turn as the machine holds (all of them on a CPU machine with the memory, else fewer);
        one slot = each engine starts at its turn (``--sequential-start``, a GPU machine)."""
        n = sum(p.starts_process for p in plans)
        slots = start_slots(n, parallel=self.cfg.parallel_start, hardware_kind=kind)
        if self.cfg.parallel_start and kind == "cpu" and 1 < n and slots < n and not quiet:
            self.console.print(f"[yellow]free memory holds {slots} of the {n} engines at once: "
                               f"starting at most {slots} ahead of their turn[/]")
        return EngineStarter(self.console, [p.start_item() for p in plans], slots)

    def _ensure_installed(self, adapter: Any, kind: str, writer: RunWriter) -> bool:
        """Install engine ``name``'s environment when ``--setup-engines`` asks for it and it is
        missing. Returns False (engine recorded as ``failed`` with the pip log tail) when the
        install fails; True otherwise (including engines that need no install)."""
        from adapters.base import EngineError
        from adapters.envs import is_installed, setup_engine

        name = adapter.name
        if name not in AUTO_SETUP_CPU or kind != "cpu" or is_installed(name):
            return True
        self.console.print(f"[bold]{name}[/]: environment missing, installing (one time) …")
        try:
            setup_engine(name, console=self.console)
        except EngineError as exc:
            self.console.print(f"[red]{name}[/]: failed to install — {escape(str(exc))}")
            writer.set_engine(name, EngineResult(status=EngineStatus.FAILED, reason=f"failed to install: {exc}",
                                                 log_tail=exc.log_tail[-4000:], capabilities=capabilities_of(adapter)))
            return False
        return True

    def _report(self, run_dir: Path) -> Any:
        from adapters.hardware import get_profile, profile_from_manifest
        from harness.app.run.reporting import write_run_reports
        from harness.scoring import recommend
        from results.recommendation import write_recommendation
        from results.store import load_run

        run = load_run(run_dir)
        # the profile the manifest recorded for this run (detected once), unless another was asked for
        detected = profile_from_manifest(run.manifest.hardware) if self.cfg.hardware == "detected" else None
        hw = detected or get_profile(self.cfg.hardware)
        hw = hw if self.cfg.price_per_hour is None else hw.with_price(self.cfg.price_per_hour)
        rec = recommend([run], hardware=hw, slos=self.cfg.slos or None, preset=self.cfg.preset,
                        max_failure_rate=self.cfg.max_failure_rate)
        write_recommendation(run_dir, rec)
        write_run_reports(run_dir, rec)
        return rec


def _mark_not_measured(writer: RunWriter, plans: list[EnginePlan], why: str) -> None:
    """Record each planned engine as not measured, with ``why``."""
    for plan in plans:
        writer.set_engine(plan.name, EngineResult(status=EngineStatus.NOT_MEASURED, reason=f"not measured: {why}",
                                                  capabilities=plan.capabilities))


def _read_engine(writer: RunWriter, name: str, repeat: int) -> list[RequestRecord]:
    """The measured records of ``name``'s repeat ``repeat`` written so far."""
    from results.store import REQUESTS_FILE, read_records

    return [r for r in read_records(writer.run_dir / REQUESTS_FILE)
            if r.engine == name and r.phase == "measured" and r.repeat == repeat]
