"""``bench run`` at one load point (``--num-requests``, ``--request-rate``, ``--max-concurrency``,
``--duration`` or ``--ramp-up-strategy`` asks for it): every engine measures the workload once
per repeat, the repeats in alternating order (A B C, C B A, ...) so a drifting machine favours
no engine.

For each repeat the executor starts the round's engines (as many ahead of their turn as fit,
frozen until it); the workload is built once while they start; each engine's trial runs
(:func:`harness.app.trial.steps.run_trial`: warm-up, the one measurement step, feature probes the
first time) and its summary entry is written at once. An engine that fails to start or crashes
is recorded as ``failed`` with its log tail and the run goes on; Ctrl-C (or SIGTERM) stops the
current engine, marks it ``failed`` ("interrupted"), keeps every record already written, and
leaves the engines that never had a turn ``not measured``.
"""

from __future__ import annotations

from functools import partial

from rich.markup import escape

from adapters.base import EngineError
from results.hardware import run_price
from results.schema import EngineResult, EngineStatus, RequestRecord
from results.store import REQUESTS_FILE, RunWriter, read_records

from harness.app.trial.executor import Trial
from harness.app.trial.plan import EnginePlan, not_measured_result
from harness.app.core.signals import interrupt_cause
from harness.app.trial.steps import TrialOutcome, run_trial, trial_spec
from harness.app.run.context import RunContext
from harness.app.run.engine_turns import EngineTurns


class PointMode:
    """One load point per engine and repeat (module docstring)."""

    name = "point"

    def run(self, ctx: RunContext, plans: list[EnginePlan]) -> str:
        """Every repeat, engines in alternating order; returns who interrupted the run ("" = nobody)."""
        turns = {p.name: EngineTurns(p) for p in plans}
        state, executor = ctx.state, ctx.executor
        for repeat in range(ctx.cfg.measure.repeats):
            live = [t for t in turns.values() if not t.failed]
            if repeat % 2:  # alternate the order (A B C, C B A, ...): drift of the machine cancels
                live.reverse()
            executor.begin([t.plan for t in live], quiet=repeat > 0)
            try:
                if state.workload is None:  # built while the engines start (loading the tokenizer takes ~5 s)
                    ctx.prepare_workload([t.plan for t in live])
                    state.trials = _trials(ctx, list(turns.values()))
                    executor.submit(list(state.trials.values()))
                for i, engine in enumerate(live):
                    if cause := _turn(ctx, engine, repeat):
                        _interrupted(ctx, live[i + 1:], list(turns.values()))
                        return cause
            finally:
                executor.end()
        return ""


def _trials(ctx: RunContext, engines: list[EngineTurns]) -> dict[tuple[str, int], Trial]:
    """Every trial of the run, in run order (repeat-major, the order alternating): one
    measurement of the workload per engine and repeat (:func:`run_trial`)."""
    state = ctx.state
    spec = trial_spec(ctx.cfg, ctx.kind, state.energy, fidelity=state.fidelity_reference)
    trials = {}
    for repeat in range(ctx.cfg.measure.repeats):
        for engine in (reversed(engines) if repeat % 2 else engines):
            body = partial(run_trial, repeat=repeat, spec=spec, workload=state.workload, tokenizer=state.tokenizer,
                           manifest=state.writer.manifest)
            trials[engine.name, repeat] = Trial((engine.name, repeat), engine.plan, body)
    return trials


def _turn(ctx: RunContext, engine: EngineTurns, repeat: int) -> str:
    """One engine's turn in one repeat, its summary entry updated at once (a crash of the
    harness keeps it). Returns who interrupted it ("the user (Ctrl-C)", "SIGTERM"; the engine is
    then failed), "" when it was not interrupted."""
    state, name = ctx.state, engine.name
    writer, repeats = state.writer, ctx.cfg.measure.repeats
    assert state.workload is not None and state.condition is not None
    try:
        outcome = ctx.executor.result(state.trials[name, repeat], writer)
    except KeyboardInterrupt as exc:
        measured = _read_engine(writer, name, repeat)
        cause = interrupt_cause(exc)
        writer.set_engine(name, engine.fail(f"interrupted by {cause} after {len(measured)} measured requests; kept",
                                            measured, state.condition, status=EngineStatus.INTERRUPTED))
        return cause
    except EngineError as exc:  # a crash mid-run keeps what was measured before it (metrics over those requests)
        ctx.console.print(f"[red]{name}[/]: failed — {escape(str(exc))}")
        if exc.log_tail:
            ctx.console.print(exc.log_tail[-2000:], markup=False, highlight=False)
        why = str(exc) if repeats == 1 else f"repeat {repeat + 1}/{repeats}: {exc}"
        writer.set_engine(name, engine.fail(why, _read_engine(writer, name, repeat), state.condition, exc.log_tail))
        return ""
    _keep(ctx, engine, outcome)
    return ""


def _keep(ctx: RunContext, engine: EngineTurns, outcome: TrialOutcome) -> None:
    """Add a measured trial to its engine and store the engine's entry as it now stands."""
    state, name = ctx.state, engine.name
    engine.add(outcome)
    if outcome.effective is not None:
        ctx.parity.keep(name, outcome.effective)
    assert state.condition is not None
    result = engine.result(state.condition, ctx.cfg.measure.repeats, price=run_price(state.writer.manifest.hardware))
    _record_engine(ctx, name, result)
    if outcome.equivalence is not None and result.status is EngineStatus.OK and state.equivalence is not None:
        state.equivalence[name] = outcome.equivalence
    if outcome.fidelity is not None:
        state.fidelity[name] = outcome.fidelity
    if outcome.accuracy is not None:
        state.accuracy[name] = outcome.accuracy


def _interrupted(ctx: RunContext, waiting: list[EngineTurns], engines: list[EngineTurns]) -> None:
    """After a Ctrl-C: engines that measured earlier repeats keep them (marked as fewer than
    planned); engines that measured nothing are not measured."""
    state = ctx.state
    writer = state.writer
    assert state.condition is not None
    for engine in waiting:
        if engine.measured:
            writer.set_engine(engine.name, engine.result(state.condition, ctx.cfg.measure.repeats,
                                                         price=run_price(writer.manifest.hardware)))
    for engine in engines:
        if not engine.measured and not engine.failed:
            writer.set_engine(engine.name, not_measured_result(engine.plan, "the run was interrupted before its turn"))


def _record_engine(ctx: RunContext, name: str, result: EngineResult) -> None:
    """Store one measured engine (ok, or failed when no request succeeded), its validity facts
    and drift warnings."""
    metrics = result.metrics
    assert metrics is not None
    ctx.parity.attach(name, result)
    ctx.state.writer.set_engine(name, result)
    if result.status is not EngineStatus.OK:
        ctx.console.print(f"[red]{name}[/]: failed — {escape(result.reason)}")
        return
    ctx.validity(name, metrics)


def _read_engine(writer: RunWriter, name: str, repeat: int) -> list[RequestRecord]:
    """The measured records of ``name``'s repeat ``repeat`` written so far."""
    return [r for r in read_records(writer.run_dir / REQUESTS_FILE)
            if r.engine == name and r.phase == "measured" and r.repeat == repeat]
