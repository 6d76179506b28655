"""``bench run``: one workload, every requested engine, over interleaved repeats.

Flow (one way): plan the engines (install when asked, probe once, skip the unavailable) →
for each repeat: the executor starts the round's engines (here: as many ahead of their turn as
fit, frozen until it), the workload is built once while they start, each engine's trial runs
(:func:`harness.app.core.trial.run_trial`: warm-up, the one measurement step, feature probes
the first time) and its summary entry is written at once → the equivalence and parity audits
→ score and report. Repeats alternate the order (A B C, C B A, ...) so a drifting machine
favours no engine.

An engine that fails to start or crashes is recorded as ``failed`` with its log tail and the
run goes on; Ctrl-C (or SIGTERM) stops the current engine, marks it ``failed``
("interrupted"), keeps every record already written, leaves the engines that never had a turn
``not measured``, and re-raises as ``RunResult.interrupted``.
"""

from __future__ import annotations

from dataclasses import replace, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from rich.markup import escape

from adapters.base import EngineError
from results.hardware import run_price
from results.schema import (AccuracyCheck, AccuracyResult, CalibrationFacts, EngineResult, EngineStatus, Equivalence, FidelityReference, FidelityResult,
                            LadderSummary, RequestRecord, RunSummary, Validity)
from results.store import REQUESTS_FILE, RunWriter, new_run_id, read_records
from workloads.base import Workload

from harness.app.core.executor import LocalExecutor, Trial, TrialExecutor
from harness.app.core.fidelity_reference import run_reference
from harness.app.core.measure import condition_of
from harness.app.core.parity_run import ParityRun
from harness.app.core.prepare import build_or_discard, record_run_facts
from harness.app.core.plan import EnginePlan, capabilities_of, launch_config, not_measured_result, plan_engine, skipped_result
from harness.app.core.settings import AUTO_SETUP_CPU, RunSettings, default_threads  # noqa: F401 (re-exported)
from harness.app.core.signals import interrupt_cause
from harness.app.core.trial import TrialOutcome, accuracy_items, run_trial, trial_spec
from harness.app.core.warm_cache import warn_if_cache_may_be_warm
from harness.app.run.engine_turns import EngineTurns
from harness.loadgen.equivalence import EQUIVALENCE_MAX_TOKENS, EQUIVALENCE_PROMPTS, compare_outputs
from harness.metrics import slo_table
from harness.metrics.fidelity import fidelity_check
from harness.metrics.summarise import Condition

DRIFT_WARN = 0.05  # warn when server usage and re-tokenization disagree by more than 5 % on average


@dataclass
class RunResult:
    run_dir: Path
    summary: RunSummary
    recommendation: Any = None
    interrupted: str = ""  # who interrupted the run: "the user (Ctrl-C)", "SIGTERM"; "" = ran to its end
    ladder: LadderSummary | None = None  # the main job's ladders and decision (None: one load point was asked for)


@dataclass
class _State:
    """One run in progress: its writer, workload, tokenizer and condition once built, and the
    equivalence outputs of the engines that gave them."""

    writer: RunWriter
    model_dir: Path
    threads: int
    workload: Workload | None = None
    tokenizer: Any = None
    condition: Condition | None = None
    equivalence: dict[str, list[str]] | None = None
    trials: dict[tuple[str, int], Trial] = field(default_factory=dict)
    ladder: LadderSummary | None = None
    fidelity_reference: FidelityReference | None = None
    fidelity: dict[str, FidelityResult] = field(default_factory=dict)
    accuracy: dict[str, AccuracyResult] = field(default_factory=dict)


class Orchestrator:
    """Runs one :class:`RunSettings`. ``console`` is a rich Console for progress and messages;
    ``executor`` makes a :class:`TrialExecutor` for the detected hardware kind (None = here,
    :class:`LocalExecutor`; ``bench run --executor ray`` passes the Ray one)."""

    def __init__(self, cfg: RunSettings, console: Any, executor: Any = None) -> None:
        self.cfg = cfg
        self.console = console
        self.parity = ParityRun(cfg, console)  # --parity: engine args, effective settings, the audit
        self.make_executor = executor
        self.kind = "cpu"  # the hardware kind, detected once per run

    # -- setup -------------------------------------------------------------------------
    def _workload(self, tokenizer: Any) -> Workload:
        from workloads.registry import build_workload

        return build_workload(self.cfg.workload, tokenizer)

    def _executor(self, kind: str) -> TrialExecutor:
        if self.make_executor is not None:
            return self.make_executor(self.cfg, self.console, kind)
        return LocalExecutor(self.console, hardware_kind=kind, parallel=self.cfg.parallel_start)

    def _calibrate(self, writer: RunWriter) -> None:
        """The client measured against a local null server, first, while nothing else runs."""
        from harness.loadgen.calibrate import calibrate, workers_line

        c = self.cfg
        self.console.print("Calibrating the client against a local null server …")
        try:
            calibration = CalibrationFacts.model_validate(calibrate())
        except RuntimeError as exc:
            calibration = CalibrationFacts(error=str(exc))
        writer.manifest.client_calibration = calibration
        writer.write_manifest()
        if line := workers_line(c.workload.request_rate, calibration.max_rate_rps, c.client_workers):
            self.console.print(line)  # how many client processes the offered rate needs

    def _plans(self, adapters: list[Any], kind: str, state: _State) -> list[EnginePlan]:
        """The available engines' plans; the others recorded as skipped (or failed to install)."""
        plans = []
        for adapter in adapters:
            if self.cfg.setup_engines and not self._ensure_installed(adapter, kind, state.writer):
                continue
            launch = launch_config(self.cfg, self.parity.engine_args(adapter.name), state.model_dir,
                                   state.writer.run_dir, state.threads)
            launch = replace(launch, devices=self.cfg.devices.get(adapter.name))
            plan = plan_engine(adapter, launch, kind)
            if plan.available:
                plans.append(plan)
                continue
            self.console.print(f"[yellow]{plan.name}[/]: skipped — {escape(plan.probe.reason)}")
            state.writer.set_engine(plan.name, skipped_result(plan))
        return plans

    # -- the whole run -------------------------------------------------------------------
    def run(self) -> RunResult:
        from adapters.hardware import detect_kind
        from adapters.registry import all_adapters, endpoint_adapters, get_adapter

        from harness.app.core.model import resolve_model

        c = self.cfg
        run_id = c.run_id or new_run_id(c.workload.name)
        state = _State(RunWriter(Path(c.output_dir) / run_id, run_id, c.workload.name), resolve_model(c.model),
                       c.threads or default_threads(), equivalence={})
        writer = state.writer
        writer.summary.slos = slo_table(c.slos)
        writer.summary.repeats = c.repeats
        self.console.print(f"Run [bold]{escape(run_id)}[/] → {escape(str(writer.run_dir))}")
        if c.engine_config:  # --engine-config: say what the recipe set (the command line's own flags won over it)
            args = " ".join(f"{k}={v}" for e in c.engines for k, v in c.engine_args.get(e, {}).items())
            self.console.print(f"Recipe {escape(str(c.engine_config))}: {escape(','.join(c.engines))} with "
                               f"{escape(args) or 'its defaults'}, {c.threads or 'default'} thread(s)", highlight=False)
        if c.calibrate:
            self._calibrate(writer)
        kind = self.kind = detect_kind()  # once per run: the adapters, the start slots and the installs use it
        adapters = all_adapters(kind) if c.engines == ["all"] else [get_adapter(n, kind) for n in c.engines]
        adapters += endpoint_adapters(c.endpoints)
        self.parity.plan(adapters, state.model_dir, kind)
        turns = {p.name: EngineTurns(p) for p in self._plans(adapters, kind, state)}
        executor = self._executor(kind)
        try:
            if c.ladder:
                from harness.app.run.ladder_main import climb_all

                interrupted = climb_all(self, executor, [t.plan for t in turns.values()], state)
            else:
                interrupted = self._repeats(executor, turns, state)
        finally:
            executor.close()
            if state.workload is not None:  # else the run folder was removed: nothing was measured
                writer.order_engines([a.name for a in adapters])  # skipped engines in their registry place
        self._audits(state)
        writer.close()
        result = RunResult(writer.run_dir, writer.summary, interrupted=interrupted, ladder=state.ladder)
        if c.report:
            result.recommendation = self._report(writer.run_dir)
        return result

    def _repeats(self, executor: TrialExecutor, turns: dict[str, EngineTurns], state: _State) -> str:
        """Every repeat, engines in alternating order; returns who interrupted the run ("" = nobody)."""
        for repeat in range(self.cfg.repeats):
            live = [t for t in turns.values() if not t.failed]
            if repeat % 2:  # alternate the order (A B C, C B A, ...): drift of the machine cancels
                live.reverse()
            executor.begin([t.plan for t in live], quiet=repeat > 0)
            try:
                if state.workload is None:  # built while the engines start (loading the tokenizer takes ~5 s)
                    self.prepare_workload(executor, state, [t.plan for t in live])
                    state.trials = self._trials(list(turns.values()), state)
                    executor.submit(list(state.trials.values()))
                for i, engine in enumerate(live):
                    if cause := self._turn(engine, executor, state, repeat):
                        self._interrupted(state, live[i + 1:], list(turns.values()))
                        return cause
            finally:
                executor.end()
        return ""

    def _trials(self, engines: list[EngineTurns], state: _State) -> dict[tuple[str, int], Trial]:
        """Every trial of the run, in run order (repeat-major, the order alternating): one
        measurement of the workload per engine and repeat (:func:`run_trial`)."""
        spec = trial_spec(self.cfg, self.kind, fidelity=state.fidelity_reference)
        trials = {}
        for repeat in range(self.cfg.repeats):
            for engine in (reversed(engines) if repeat % 2 else engines):
                body = partial(run_trial, repeat=repeat, spec=spec, workload=state.workload, tokenizer=state.tokenizer,
                               manifest=state.writer.manifest)
                trials[engine.name, repeat] = Trial((engine.name, repeat), engine.plan, body)
        return trials

    def prepare_workload(self, executor: TrialExecutor, state: _State, plans: list[EnginePlan]) -> None:
        """Tokenizer, workload, condition and manifest (:mod:`harness.app.core.prepare`), and the
        fidelity reference when an engine is left to check against it (none is built when every
        engine was skipped, e.g. an endpoint that is not reachable)."""
        c, writer = self.cfg, state.writer
        state.tokenizer, state.workload = build_or_discard(state.model_dir, self._workload, writer, executor.close)
        state.condition = condition_of(state.workload, c.slos, seed=c.workload.seed or 0)
        record_run_facts(writer, c, state.model_dir, state.workload, state.threads)
        state.fidelity_reference = run_reference(state.model_dir, c.workload, state.tokenizer, c.fidelity_prompts,
                                                 c.fidelity_tokens, self.console) if plans else None  # none to check
        warn_if_cache_may_be_warm(self.console, writer.run_dir, writer.manifest.workload, plans)

    # -- one engine's turn -------------------------------------------------------------
    def _turn(self, engine: EngineTurns, executor: TrialExecutor, state: _State, repeat: int) -> str:
        """One engine's turn in one repeat, its summary entry updated at once (a crash of the
        harness keeps it). Returns who interrupted it ("the user (Ctrl-C)", "SIGTERM"; the
        engine is then failed), "" when it was not interrupted."""
        c, writer, name = self.cfg, state.writer, engine.name
        assert state.workload is not None and state.condition is not None
        try:
            outcome = executor.result(state.trials[name, repeat], writer)
        except KeyboardInterrupt as exc:
            measured = _read_engine(writer, name, repeat)
            cause = interrupt_cause(exc)
            writer.set_engine(name, engine.fail(f"interrupted by {cause} after {len(measured)} measured requests; kept",
                                                measured, state.condition))
            return cause
        except EngineError as exc:  # a crash mid-run keeps what was measured before it (metrics over those requests)
            self.console.print(f"[red]{name}[/]: failed — {escape(str(exc))}")
            if exc.log_tail:
                self.console.print(exc.log_tail[-2000:], markup=False, highlight=False)
            why = str(exc) if c.repeats == 1 else f"repeat {repeat + 1}/{c.repeats}: {exc}"
            writer.set_engine(name, engine.fail(why, _read_engine(writer, name, repeat), state.condition, exc.log_tail))
            return ""
        self._keep(engine, outcome, state)
        return ""

    def _keep(self, engine: EngineTurns, outcome: TrialOutcome, state: _State) -> None:
        """Add a measured trial to its engine and store the engine's entry as it now stands."""
        name, writer = engine.name, state.writer
        engine.add(outcome)
        if outcome.effective is not None:
            self.parity.keep(name, outcome.effective)
        assert state.condition is not None
        result = engine.result(state.condition, self.cfg.repeats, price=run_price(writer.manifest.hardware))
        self._record_engine(name, result, writer)
        if outcome.equivalence is not None and result.status is EngineStatus.OK and state.equivalence is not None:
            state.equivalence[name] = outcome.equivalence
        if outcome.fidelity is not None:
            state.fidelity[name] = outcome.fidelity
        if outcome.accuracy is not None:
            state.accuracy[name] = outcome.accuracy

    def _interrupted(self, state: _State, waiting: list[EngineTurns], engines: list[EngineTurns]) -> None:
        """After a Ctrl-C: engines that measured earlier repeats keep them (marked as fewer than
        planned); engines that measured nothing are not measured."""
        writer = state.writer
        assert state.condition is not None
        for engine in waiting:
            if engine.measured:
                writer.set_engine(engine.name, engine.result(state.condition, self.cfg.repeats,
                                                             price=run_price(writer.manifest.hardware)))
        for engine in engines:
            if not engine.measured and not engine.failed:
                writer.set_engine(engine.name, not_measured_result(engine.plan, "the run was interrupted before its turn"))

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
        self.validity(name, metrics, writer)

    def validity(self, name: str, metrics: Any, writer: RunWriter) -> None:
        """``name``'s validity facts in the manifest (rates, token counts against our tokenizer's)
        and a warning when the server's token counts drift from ours: the one-load-point path and
        the ladder's (there, over the metrics of the point its summary shows)."""
        drift = metrics.token_drift
        writer.manifest.validity[name] = Validity(
            offered_rate=metrics.offered_rate, requested_rate=metrics.requested_rate,
            achieved_rate=metrics.achieved_rate, rate_valid=metrics.rate_valid, output_tokens_estimated=drift.output_estimated,
            output_token_drift=drift.output_rel_diff_mean, input_token_drift=drift.input_rel_diff_mean,
        )
        for side, rel in (("input", drift.input_rel_diff_mean), ("output", drift.output_rel_diff_mean)):
            if rel is not None and rel > DRIFT_WARN:
                self.console.print(
                    f"[yellow]{name}[/]: server-reported {side} tokens differ from our tokenizer's count by "
                    f"{rel:.0%} on average: is the engine serving the same model/tokenizer? (manifest: validity)"
                )

    # -- the end -------------------------------------------------------------------------
    def _audits(self, state: _State) -> None:
        """The greedy output equivalence over the engines that gave outputs, and the parity audit."""
        writer, equivalence = state.writer, state.equivalence or {}
        if len(equivalence) >= 2:
            ref = "transformers" if "transformers" in equivalence else next(iter(equivalence))
            writer.summary.equivalence = Equivalence(
                reference=ref, prompts=list(EQUIVALENCE_PROMPTS), max_tokens=EQUIVALENCE_MAX_TOKENS,
                engines={n: compare_outputs(state.tokenizer, equivalence[ref], t) for n, t in equivalence.items() if n != ref},
            )
        writer.summary.parity = self.parity.audit(writer.summary)
        if state.fidelity_reference is not None:
            writer.write_fidelity(fidelity_check(state.fidelity_reference, state.fidelity, self.cfg.fidelity_floor,
                                                 allow_unchecked=self.cfg.allow_unchecked))
        if self.cfg.accuracy and state.accuracy:
            writer.write_accuracy(AccuracyCheck(source=str(self.cfg.accuracy), items=len(accuracy_items(self.cfg.accuracy)),
                                                engines=state.accuracy))

    def _ensure_installed(self, adapter: Any, kind: str, writer: RunWriter) -> bool:
        """Install engine ``name``'s environment when ``--setup-engines`` asks for it and it is
        missing. Returns False (engine recorded as ``failed`` with the pip log tail) when the
        install fails; True otherwise (including engines that need no install)."""
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
        from harness.app.run.reporting import score_and_report

        return score_and_report(run_dir, self.cfg)


def _read_engine(writer: RunWriter, name: str, repeat: int) -> list[RequestRecord]:
    """The measured records of ``name``'s repeat ``repeat`` written so far."""
    return [r for r in read_records(writer.run_dir / REQUESTS_FILE)
            if r.engine == name and r.phase == "measured" and r.repeat == repeat]
