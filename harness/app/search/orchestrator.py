"""``bench search``: each engine's capacity under SLOs, by bracketing and bisection.

For every engine (planned and started like ``bench run``: :func:`plan_engine`, the one launch
path :class:`EngineStarter` with slots from :func:`start_slots`): start it, warm it up once,
run :func:`harness.app.search.capacity.search_capacity` over the search variable, stop it. The
engine stays up for all of its probes. The method is that of vLLM's ``vllm bench sweep
serve_sla`` (tune ``request_rate`` or ``max_concurrency`` until the SLA just holds) and of
AIPerf's max-goodput-under-SLO search: probe ``--low``, double until a probe fails, bisect to
``--tolerance`` (relative; concurrency is bisected on integers, so it is exact).

Each probe is one measured condition:

- the workload is built at the probe's load: ``--search-var rate`` sets the request rate
  (requests/s; agentic: session starts/s, offered exactly, drawn schedules being rescaled),
  ``--search-var concurrency`` the in-flight cap (``max_concurrency``) with the rate at inf;
- it is ``--repeats N`` measurements back to back on the same engine (default 1), **repeat
  ``k`` of probe ``i`` drawing its workload with seed ``base seed + i * N + k``**: no
  measurement reuses another's prompts, so none is flattered by prefixes an earlier one left
  in the engine's cache (the warm-up shares no prefix with any workload either);
- each measured with the shared :class:`Runner` (a fixed request count per measurement: keep
  probes short), metrics by :func:`compute_metrics`, pooled over the N repeats
  (:func:`harness.metrics.repeats.pooled_metrics`: a p99 rests on N times the requests) and
  judged on its pooled requests by :func:`harness.app.search.capacity.judge_probe` (the judge of
  a point ``bench run``'s ladder uses: steady state, the error bound's interval): it passes
  only when every SLO holds at its percentile and it is not saturated (achieved arrival rate
  below the offered one beyond 5 %, rate searches only) - a saturated probe is a fail, so the
  search turns down at once; the capacity is read between the last passing and the first
  failing probe where the SLO margin crosses 1 (:func:`harness.app.search.capacity.probe_capacity`,
  the ladder's estimator);
  each repeat's own verdict, metrics and the headline intervals are stored with the probe;
- its records go to the run folder's ``requests.jsonl`` with ``probe = i`` and ``repeat = k``
  (written when each repeat ends, after the re-tokenization pass; a Ctrl-C keeps the requests
  that finished). The probe itself: :mod:`harness.app.search.probe`.

The time budget (``--budget``, s) is split evenly over the engines; an engine's share bounds
its probes (start-up and warm-up are not counted): no probe starts that would not finish
within it, judging by the previous probe's duration, all of its repeats included (the first
by N times its schedule length).

Artefacts: ``search.json`` (:class:`results.schema.SearchSummary`: per engine the search
result with each probe's full metrics, the SLOs, the search variable and unit, the budget, the
wall time, and the capacity ranking of :mod:`harness.scoring.verdict.capacity_ranking`),
``manifest.json`` (:func:`fill_manifest`, plus a ``search`` section), ``summary.json`` (per
engine the metrics of its probe at the found capacity), ``search.md`` and
``search_latency_vs_load.png`` (:mod:`reports.search`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from adapters.base import EngineAdapter, EngineError
from results.schema import (
    SEARCH_FILE,
    EngineResult,
    EngineSearch,
    EngineStatus,
    SearchFacts,
    SearchProbe,
    SearchSummary,
)
from results.store import RunWriter, new_run_id, write_model_atomic

from harness.app.trial.executor import make_starter
from harness.app.trial.plan import EnginePlan, launch_config, not_measured_result, plan_engine, skipped_result
from harness.app.trial.prepare import announce, build_or_discard, record_run_facts
from harness.app.settings.run import RunSettings, default_threads
from harness.app.core.signals import interrupt_cause
from harness.app.trial.startup import EngineStarter
from harness.app.trial.steps import TrialSpec, open_session
from harness.app.search.capacity import CapacityResult, search_capacity
from harness.app.search.config import SearchSettings, default_slos, search_unit
from harness.app.search.probe import ProbeMeasurer, load_text, probe_options
from harness.metrics import SLO, slo_table
from harness.scoring.verdict.capacity_ranking import rank_capacity
from harness.scoring.formatting import slo_text
from rich.console import Console

if TYPE_CHECKING:  # transformers is slow to import: only where a tokenizer is loaded
    from transformers import PreTrainedTokenizerBase


@dataclass
class SearchResult:
    run_dir: Path
    summary: SearchSummary
    interrupted: str = ""  # who interrupted the search ("the user (Ctrl-C)", "SIGTERM"); "" = it ran to its end


class SearchOrchestrator:
    """Runs one :class:`SearchSettings` with the jobs' shared steps: engine plans, the one launch
    path, sessions (:func:`harness.app.trial.steps.open_session`) and the one measurement step."""

    def __init__(self, cfg: SearchSettings, console: Console) -> None:
        self.cfg = cfg
        self.console = console
        self.unit = search_unit(cfg.search_var, cfg.workload.name)
        self.requests_per_probe: int | None = None
        self.slos: list[SLO] = list(cfg.decision.slos)  # the defaults once the hardware is known
        self.prober: ProbeMeasurer | None = None
        self.spec: TrialSpec | None = None

    # -- the whole search ----------------------------------------------------------------
    def run(self) -> SearchResult:
        from adapters.telemetry.hardware import detect_kind
        from adapters.registry import all_adapters, get_adapter

        from harness.app.core.model import resolve_model

        c = self.cfg
        t_start = time.monotonic()
        kind = detect_kind()  # once: the adapters, the start slots and the default SLOs use it
        slos_default = not c.decision.slos
        slos = self.slos = c.decision.slos or default_slos(kind, c.workload.name)
        self.prober = ProbeMeasurer(c, slos, self.unit, self.console)
        run = c.run_config(probe_options(c.workload, c.search_var, c.low, 0), slos)  # the first probe's workload
        self.spec = TrialSpec(measure=self.prober.options, warmup=run.measure.warmup, warmup_seed=(run.workload.seed or 0) + 7919,
                              hardware=kind, read_effective=False)
        model_dir = resolve_model(run.engine.model, weights=any(e != "openai" for e in run.engine.names))
        run_id = run.output.run_id or new_run_id(f"search-{c.workload.name}")
        threads = run.engine.threads or default_threads()
        writer = RunWriter(Path(run.output.output_dir) / run_id, run_id, c.workload.name)
        writer.summary.slos = slo_table(slos)
        writer.summary.repeats = c.measure.repeats  # each engine's summary.json metrics pool its capacity probe's repeats
        adapters = all_adapters(kind) if c.engine.names == ["all"] else [get_adapter(n, kind) for n in c.engine.names]
        summary = SearchSummary(run_id=run_id, workload=c.workload.name, search_var=c.search_var, unit=self.unit,
                                slos=writer.summary.slos, slos_default=slos_default, low=c.low, high=c.high,
                                tolerance=c.tolerance, budget_s=c.budget_s, budget_per_engine_s=c.budget_s,
                                max_probes=c.max_probes, repeats=c.measure.repeats, seed=c.workload.seed or 0)
        plans = self._plans(adapters, run, model_dir, threads, kind, writer, summary)
        per_engine = summary.budget_per_engine_s = c.budget_s / max(1, len(plans))
        self._announce(slos, slos_default, kind, len(plans), per_engine)
        starter = make_starter(self.console, plans, kind, run.engine.parallel_start)
        try:
            starter.begin()
            tokenizer = self._prepare(run, model_dir, threads, writer, starter, per_engine)
            summary.requests_per_probe = self.requests_per_probe
            interrupted = self._engines(plans, starter, writer, tokenizer, summary, per_engine)
        finally:
            starter.close()
        writer.order_engines([a.name for a in adapters])
        summary.engines = {a.name: summary.engines[a.name] for a in adapters if a.name in summary.engines}
        summary.capacity_recommendation = rank_capacity(summary.engines, slos, self.unit, low=c.low)
        summary.wall_s = round(time.monotonic() - t_start, 2)
        write_model_atomic(writer.run_dir / SEARCH_FILE, summary)
        writer.close()
        from reports.search import write_search_report

        write_search_report(writer.run_dir)
        return SearchResult(writer.run_dir, summary, interrupted)

    def _plans(self, adapters: list[EngineAdapter], run: RunSettings, model_dir: Path, threads: int, kind: str, writer: RunWriter,
               summary: SearchSummary) -> list[EnginePlan]:
        """The available engines' plans; the others recorded as skipped."""
        plans = []
        for adapter in adapters:
            launch = launch_config(run, run.engine.args.get(adapter.name, {}), model_dir, writer.run_dir, threads)
            plan = plan_engine(adapter, launch, kind)
            if plan.available:
                plans.append(plan)
                continue
            self.console.print(f"[yellow]{plan.name}[/]: skipped — {escape(plan.probe.reason)}")
            summary.engines[plan.name] = EngineSearch(status=EngineStatus.SKIPPED, reason=plan.probe.reason)
            writer.set_engine(plan.name, skipped_result(plan))
        return plans

    def _prepare(self, run: RunSettings, model_dir: Path, threads: int, writer: RunWriter, starter: EngineStarter,
                 per_engine: float) -> PreTrainedTokenizerBase | None:
        """The tokenizer and the first probe's workload (built while the engines start: its size
        sets the probes'), the manifest with its ``search`` section; returns the tokenizer."""
        from workloads.registry import build_workload

        c = self.cfg
        tokenizer, workload = build_or_discard(model_dir, lambda tok: build_workload(run.workload, tok), writer,
                                               starter.close)
        announce(self.console, "Search", writer)  # the folder is kept from here on, whatever happens
        record_run_facts(writer, run, model_dir, workload, threads)
        st = workload.stats
        self.requests_per_probe = int(st.get("requests") or st.get("turns") or len(workload.sessions))
        writer.manifest.search = SearchFacts(
            search_var=c.search_var, unit=self.unit, low=c.low, high=self._high(), tolerance=c.tolerance,
            budget_s=c.budget_s, budget_per_engine_s=per_engine, max_probes=c.max_probes,
            repeats=c.measure.repeats, seeds=self._seed_text(c.workload.seed or 0), slos_default=not c.decision.slos)
        writer.write_manifest()
        return tokenizer

    def _engines(self, plans: list[EnginePlan], starter: EngineStarter, writer: RunWriter, tokenizer: PreTrainedTokenizerBase,
                 summary: SearchSummary, per_engine: float) -> str:
        """Search each engine in turn; returns who interrupted the search ("" = nobody)."""
        for i, plan in enumerate(plans):
            if cause := self._engine(plan, starter, writer, tokenizer, summary, per_engine):
                for rest in plans[i + 1:]:
                    why = "the search was interrupted before its turn"
                    summary.engines[rest.name] = EngineSearch(status=EngineStatus.NOT_MEASURED, reason=f"not measured: {why}")
                    writer.set_engine(rest.name, not_measured_result(rest, why))
                return cause
        return ""

    def _high(self) -> float | None:
        """``--high``, else the probe's request count for a concurrency search (more in flight
        than there are requests changes nothing), else None (unbounded doubling)."""
        if self.cfg.high is not None:
            return self.cfg.high
        return float(self.requests_per_probe) if self.cfg.search_var == "concurrency" and self.requests_per_probe else None

    def _seed_text(self, base: int) -> str:
        n = self.cfg.measure.repeats
        if n == 1:
            return f"probe i uses seed {base} + i"
        return f"repeat k of probe i uses seed {base} + i * {n} + k (no prompt reused across measurements)"

    def _announce(self, slos: list[SLO], slos_default: bool, kind: str, n: int, per_engine: float) -> None:
        c = self.cfg
        where = "the reference CPU machine" if kind == "cpu" else "a GPU"
        dflt = f" (default SLOs for {where}; pass --slo to set yours)" if slos_default else ""
        self.console.print(f"Capacity search over {'the request rate' if c.search_var == 'rate' else 'concurrency'} "
                           f"({self.unit}) under {' and '.join(slo_text(s) for s in slos)}{dflt}", highlight=False)
        if n:
            self.console.print(f"Budget {c.budget_s:g} s split evenly over {n} engine(s): {per_engine:.0f} s of probes "
                               f"each (start-up and warm-up not counted); tolerance {c.tolerance:.0%}, at most "
                               f"{c.max_probes} probes; {self._probe_text()}", highlight=False)

    def _probe_text(self) -> str:
        c = self.cfg
        if c.measure.repeats == 1:
            return f"probe i draws its workload with seed {c.workload.seed or 0} + i"
        return (f"each probe is {c.measure.repeats} measurements back to back, judged on their pooled metrics; "
                f"{self._seed_text(c.workload.seed or 0)}")

    # -- one engine ----------------------------------------------------------------------
    def _engine(self, plan: EnginePlan, starter: EngineStarter, writer: RunWriter, tokenizer: PreTrainedTokenizerBase,
                summary: SearchSummary, budget_s: float) -> str:
        """Search one engine and record it; returns who interrupted it ("" = not interrupted)."""
        assert self.prober is not None and self.spec is not None
        c, name, prober = self.cfg, plan.name, self.prober
        probes: list[SearchProbe] = []
        result: CapacityResult | None = None
        info: dict[str, Any] = {}
        try:  # warmed up once per engine; the engine stays up for all its probes
            with open_session(plan, starter, self.spec, writer, self.console, tokenizer=tokenizer,
                              workload_name=c.workload.name) as session:
                info = {"display_name": session.endpoint.display_name, "startup_s": round(session.startup_s, 2)}
                result = search_capacity(
                    lambda load: prober.measure(name, session.endpoint, tokenizer, writer, load, probes),
                    low=c.low, high=self._high(), tolerance=c.tolerance, budget_s=budget_s, max_probes=c.max_probes,
                    integer=c.search_var == "concurrency", first_estimate_s=self._first_estimate(), unit=self.unit)
        except KeyboardInterrupt as exc:
            cause = interrupt_cause(exc)
            self._record(name, plan, writer, summary, None, probes, info, EngineStatus.INTERRUPTED,
                         f"interrupted by {cause} after {len(probes)} probes; kept")
            return cause
        except EngineError as exc:
            self.console.print(f"[red]{name}[/]: failed — {escape(str(exc))}")
            if exc.log_tail:
                self.console.print(exc.log_tail[-2000:], markup=False, highlight=False)
            self._record(name, plan, writer, summary, result, probes, info, EngineStatus.FAILED, str(exc), exc.log_tail)
            return ""
        self._record(name, plan, writer, summary, result, probes, info, EngineStatus.OK, "")
        return ""

    def _first_estimate(self) -> float | None:
        """Expected seconds of the first probe: its arrival schedule's span at ``--low`` times
        the repeats (a lower bound; None for a concurrency search, whose span is not known
        beforehand)."""
        n = self.requests_per_probe
        return self.cfg.measure.repeats * (n - 1) / self.cfg.low if self.cfg.search_var == "rate" and n and n > 1 else None

    def _record(self, name: str, plan: EnginePlan, writer: RunWriter, summary: SearchSummary,
                result: CapacityResult | None, probes: list[SearchProbe], info: dict[str, Any],
                status: EngineStatus, reason: str, log_tail: str = "") -> None:
        """Store one engine's search in ``search.json``'s model and ``summary.json``."""
        if result is not None:
            fields = result.model_dump(exclude={"probes"})
        else:  # interrupted or crashed mid-search: the passing probes so far give a lower bound
            passing = [p.load for p in probes if p.passed]
            fields = {"capacity": max(passing, default=0.0), "stopped": "interrupted" if status is EngineStatus.INTERRUPTED else "failed",
                      "bracket": (max(passing, default=None), None), "message": reason, "unit": self.unit,
                      "low": self.cfg.low, "integer": self.cfg.search_var == "concurrency"}
        entry = EngineSearch(status=status, reason=reason, version=plan.probe.version, probes=probes, **info, **fields)
        summary.engines[name] = entry
        if status is EngineStatus.OK:
            self.console.print(f"[bold]{name}[/]: {escape(entry.message)}")
        at = next((p for p in probes if p.passed and p.load == entry.bracket[0]), probes[0] if probes else None)
        pooled = f", pooled over its {self.cfg.measure.repeats} repeats" if self.cfg.measure.repeats > 1 else ""
        where = (f"metrics of probe {at.index} at {load_text(at.load, self.cfg.search_var)} {self.unit}"
                 f"{' (the passing load the capacity is read from)' if at.passed else ' (the lowest load; it failed)'}{pooled}") if at else "no probe ran"
        why = reason or f"capacity search: {entry.message}"
        writer.set_engine(name, EngineResult(
            status=status, reason=f"{why}; {where}; every probe in {SEARCH_FILE}", metrics=at.metrics if at else None,
            repeats=at.repeats if at else [], intervals=at.intervals if at else {},
            resources=at.resources if at else None, engine_metrics=at.engine_metrics if at else {},
            display_name=info.get("display_name"), version=plan.probe.version, capabilities=plan.capabilities,
            startup_s=info.get("startup_s"), wall_s=round(entry.elapsed_s, 2) or None, log_tail=log_tail[-4000:]))
