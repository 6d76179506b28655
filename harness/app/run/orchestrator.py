"""``bench run``: one workload, every requested engine, in the mode the settings ask for.

Flow (one way): plan the engines (install when asked, probe once, skip the unavailable) → the
run's typed context (:class:`harness.app.run.context.RunContext`: settings, console, hardware
kind, parity audit, executor, state) → the mode measures over it
(:func:`harness.app.run.modes.mode_for`: the load ladders of the main job, ``--tune``'s search
before them, or one load point per engine and repeat), writing each result as it comes → the
equivalence, parity, fidelity and accuracy audits → score and report.

An engine that fails to start or crashes is recorded as ``failed`` with its log tail and the run
goes on; Ctrl-C (or SIGTERM) keeps every record already written, leaves the engines that never had
a turn ``not measured``, and comes back as ``RunResult.interrupted``; the executor stops every
engine it started whatever happens.
"""

from __future__ import annotations

import shutil
from dataclasses import replace, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from adapters.base import EngineError
from results.schema import AccuracyCheck, CalibrationFacts, EnergySource, EngineResult, EngineStatus, Equivalence, LadderSummary, RunSummary
from results.store import RunWriter, new_run_id
from workloads.base import Workload

from harness.app.trial.executor import LocalExecutor, TrialExecutor
from harness.app.trial.parity_run import ParityRun
from harness.app.trial.plan import EnginePlan, capabilities_of, launch_config, plan_engine, skipped_result
from harness.app.settings.run import RunSettings, default_threads  # noqa: F401 (re-exported)
from harness.app.trial.steps import accuracy_items
from harness.app.run.context import RunContext, RunState
from harness.app.run.modes import mode_for
from harness.loadgen.equivalence import EQUIVALENCE_MAX_TOKENS, EQUIVALENCE_PROMPTS, compare_outputs
from harness.metrics import slo_table
from harness.metrics.fidelity import fidelity_check
from rich.console import Console
from adapters.base import EngineAdapter

if TYPE_CHECKING:  # transformers is slow to import: only where a tokenizer is loaded
    from transformers import PreTrainedTokenizerBase


@dataclass
class RunResult:
    run_dir: Path
    summary: RunSummary
    recommendation: Any = None
    interrupted: str = ""  # who interrupted the run: "the user (Ctrl-C)", "SIGTERM"; "" = ran to its end
    ladder: LadderSummary | None = None  # the main job's ladders and decision (None: one load point was asked for)


class Orchestrator:
    """Runs one :class:`RunSettings`. ``console`` is a rich Console for progress and messages;
    ``executor`` makes a :class:`TrialExecutor` for the detected hardware kind (None = here,
    :class:`LocalExecutor`; ``bench run --executor ray`` passes the Ray one)."""

    def __init__(self, cfg: RunSettings, console: Console, executor: Any = None) -> None:
        self.cfg = cfg
        self.console = console
        self.parity = ParityRun(cfg, console)  # --parity: engine args, effective settings, the audit
        self.make_executor = executor
        self.kind = "cpu"  # the hardware kind, detected once per run

    # -- setup -------------------------------------------------------------------------
    def _workload(self, tokenizer: PreTrainedTokenizerBase) -> Workload:
        from workloads.registry import build_workload

        return build_workload(self.cfg.workload, tokenizer)

    def _executor(self, kind: str) -> TrialExecutor:
        if self.make_executor is not None:
            return self.make_executor(self.cfg, self.console, kind)
        return LocalExecutor(self.console, hardware_kind=kind, parallel=self.cfg.engine.parallel_start)

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
        if line := workers_line(c.workload.request_rate, calibration.max_rate_rps, c.measure.client_workers):
            self.console.print(line)  # how many client processes the offered rate needs

    def _energy(self, writer: RunWriter, kind: str) -> EnergySource:
        """The run's energy source (NVML on NVIDIA, RAPL on a CPU, none with its reason) and the
        idle draw, measured while nothing runs; recorded in the manifest and said in one line."""
        from adapters.telemetry.energy import choose_source, measure_idle

        source = measure_idle(choose_source(gpu=kind == "nvidia"))
        source = source.model_copy(update={"provisioned_watts": self.cfg.energy.watts,
                                           "price_per_kwh": self.cfg.energy.price_per_kwh})
        writer.manifest.energy = source
        writer.write_manifest()
        self.console.print(escape(source.line()), highlight=False, soft_wrap=True)
        return source

    def _plans(self, adapters: list[Any], kind: str, state: RunState) -> list[EnginePlan]:
        """The available engines' plans; the others recorded as skipped (or failed to install)."""
        plans = []
        for adapter in adapters:
            if self.cfg.engine.setup and not self._ensure_installed(adapter, kind, state.writer):
                continue
            launch = launch_config(self.cfg, self.parity.engine_args(adapter.name), state.model_dir,
                                   state.writer.run_dir, state.threads)
            launch = replace(launch, devices=self.cfg.deployments.devices.get(adapter.name))
            plan = plan_engine(adapter, launch, kind)
            if plan.available:
                plans.append(plan)
                continue
            self.console.print(f"[yellow]{plan.name}[/]: skipped — {escape(plan.probe.reason)}")
            state.writer.set_engine(plan.name, skipped_result(plan))
        return plans

    # -- the whole run -------------------------------------------------------------------
    def run(self) -> RunResult:
        from adapters.telemetry.hardware import detect_kind
        from adapters.registry import all_adapters, endpoint_adapters, get_adapter

        from harness.app.core.model import resolve_model

        c = self.cfg
        run_id = c.output.run_id or new_run_id(c.workload.name)
        # a bad --model fails here, before a run folder exists (weights: a local engine serves it)
        model_dir = resolve_model(c.engine.model, weights=any(e != "openai" for e in c.engine.names))
        state = RunState(RunWriter(Path(c.output.output_dir) / run_id, run_id, c.workload.name), model_dir,
                         c.engine.threads or default_threads(), equivalence={})
        writer = state.writer
        writer.summary.slos = slo_table(c.decision.slos)
        writer.summary.repeats = c.measure.repeats
        if c.engine.config:  # --engine-config: say what the recipe set (the command line's own flags won over it)
            args = " ".join(f"{k}={v}" for e in c.engine.names for k, v in c.engine.args.get(e, {}).items())
            self.console.print(f"Recipe {escape(str(c.engine.config))}: {escape(','.join(c.engine.names))} with "
                               f"{escape(args) or 'its defaults'}, {c.engine.threads or 'default'} thread(s)", highlight=False)
        if c.measure.calibrate:
            self._calibrate(writer)
        kind = self.kind = detect_kind()  # once per run: the adapters, the start slots and the installs use it
        state.energy = self._energy(writer, kind)  # before any engine starts: the idle draw is the machine's own
        adapters = all_adapters(kind) if c.engine.names == ["all"] else [get_adapter(n, kind) for n in c.engine.names]
        adapters += endpoint_adapters(c.deployments.endpoints)
        self.parity.plan(adapters, state.model_dir, kind)
        plans = self._plans(adapters, kind, state)
        if not plans:  # nothing can be measured: no run folder is left for `bench results list` to show
            reasons = "; ".join(e.reason if e.reason.startswith(f"{n}:") else f"{n}: {e.reason}"
                                for n, e in writer.summary.engines.items())
            writer.close()
            shutil.rmtree(writer.run_dir, ignore_errors=True)
            raise EngineError(" ".join(f"no engine can run here, so nothing was measured and no run folder is kept "
                                       f"({reasons})".split()))
        executor = self._executor(kind)
        ctx = RunContext(c, self.console, kind, self.parity, executor, state, self._workload)
        try:
            interrupted = mode_for(c).run(ctx, plans)
        finally:
            executor.close()
            if state.workload is not None:  # else the run folder was removed: nothing was measured
                writer.order_engines([a.name for a in adapters])  # skipped engines in their registry place
        self._audits(state)
        writer.close()
        self._replay(state)
        result = RunResult(writer.run_dir, writer.summary, interrupted=interrupted, ladder=state.ladder)
        if c.output.report:
            result.recommendation = self._report(writer.run_dir)
        return result

    # -- the end -------------------------------------------------------------------------
    def _audits(self, state: RunState) -> None:
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
            writer.write_fidelity(fidelity_check(state.fidelity_reference, state.fidelity, self.cfg.check.fidelity_floor,
                                                 allow_unchecked=self.cfg.check.allow_unchecked))
        if self.cfg.check.accuracy and state.accuracy:
            writer.write_accuracy(AccuracyCheck(source=str(self.cfg.check.accuracy), items=len(accuracy_items(self.cfg.check.accuracy)),
                                                engines=state.accuracy))

    def _replay(self, state: RunState) -> None:
        """An agentic run's replay-fidelity certificate (``replay.json``), stored and printed."""
        from harness.app.run.replay_check import print_certificate, replay_certificate

        cert = replay_certificate(self.cfg, state)
        if cert is not None and cert.engines:
            state.writer.write_replay(cert)
            print_certificate(self.console, cert)

    def _ensure_installed(self, adapter: EngineAdapter, kind: str, writer: RunWriter) -> bool:
        """Install engine ``name``'s environment when ``--setup-engines`` asks for it and it is
        missing. Returns False (engine recorded as ``failed`` with the pip log tail) when the
        install fails; True otherwise (including engines that need no install)."""
        from adapters import registry
        from adapters.runtime.envs import is_installed, setup_engine

        name = adapter.name
        if not registry.declared(name, "auto_setup_cpu", False) or kind != "cpu" or is_installed(name):
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

