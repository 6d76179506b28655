"""One ``bench run`` as the measuring modes see it: its typed context (:class:`RunContext`) and
the state it builds up (:class:`RunState`).

The run orchestrator (:mod:`harness.app.run.orchestrator`) plans the engines and makes the
context; a mode (:mod:`harness.app.run.modes`: one load point, a load ladder, a tuned ladder)
measures over it; the orchestrator then audits and reports. A mode reads only this context: the
settings, the console, the hardware kind, the parity audit, the executor, and the run's state
(writer, workload, tokenizer, condition, the checks' results), and calls its two steps every mode
shares: :meth:`RunContext.prepare_workload` and :meth:`RunContext.validity`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from results.schema import EnergySource, FidelityReference, FidelityResult, AccuracyResult, LadderSummary, Validity
from results.store import RunWriter
from workloads.base import Workload

from harness.app.trial.executor import Trial, TrialExecutor
from harness.app.trial.fidelity_reference import run_reference
from harness.app.trial.measure import condition_of
from harness.app.trial.plan import EnginePlan
from harness.app.trial.prepare import announce, build_or_discard, context_overflow, record_run_facts
from harness.app.trial.warm_cache import warn_if_cache_may_be_warm
from harness.metrics.summarise import Condition
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    from harness.app.trial.parity_run import ParityRun
    from harness.app.settings.run import RunSettings

DRIFT_WARN = 0.05  # warn when server usage and re-tokenization disagree by more than 5 % on average


@dataclass
class RunState:
    """One run in progress: its writer, workload, tokenizer and condition once built, the
    equivalence outputs of the engines that gave them, the trials of the one-load-point mode,
    the ladder's summary, and the fidelity and accuracy checks' results by engine."""

    writer: RunWriter
    model_dir: Path
    threads: int
    workload: Workload | None = None
    tokenizer: PreTrainedTokenizerBase | None = None
    condition: Condition | None = None
    equivalence: dict[str, list[str]] | None = None
    trials: dict[tuple[str, int], Trial] = field(default_factory=dict)
    ladder: LadderSummary | None = None
    fidelity_reference: FidelityReference | None = None
    fidelity: dict[str, FidelityResult] = field(default_factory=dict)
    accuracy: dict[str, AccuracyResult] = field(default_factory=dict)
    energy: EnergySource | None = None  # chosen, and its idle draw measured, before any engine started


@dataclass
class RunContext:
    """What a mode measures over: the run settings ``cfg``, the rich ``console``, the hardware
    ``kind`` ("cpu", "cuda"), the ``parity`` audit, the ``executor`` that starts engines and runs
    trials, the run's ``state``, and ``build_workload`` (tokenizer → the workload the settings
    ask for)."""

    cfg: "RunSettings"
    console: Console
    kind: str
    parity: "ParityRun"
    executor: TrialExecutor
    state: RunState
    build_workload: Callable[[Any], Workload]

    def prepare_workload(self, plans: list[EnginePlan]) -> None:
        """Tokenizer, workload, condition and manifest (:mod:`harness.app.trial.prepare`), and the
        fidelity reference when an engine is left to check against it (none is built when every
        engine was skipped, e.g. an endpoint that is not reachable). Raises what the workload
        raises (the run folder is then removed: nothing was measured)."""
        c, state = self.cfg, self.state
        writer = state.writer
        state.tokenizer, state.workload = build_or_discard(state.model_dir, self.build_workload, writer, self.executor.close)
        announce(self.console, "Run", writer)  # the folder is kept from here on, whatever happens
        state.condition = condition_of(state.workload, c.decision.slos, seed=c.workload.seed or 0)
        record_run_facts(writer, c, state.model_dir, state.workload, state.threads)
        if state.workload.spec.get("trace") and state.workload.stats.get("note"):  # agentic --trace: what is sent
            self.console.print(f"[dim]{state.workload.stats['note']}[/]", highlight=False)
        model = writer.manifest.model
        if line := context_overflow(c, state.workload, state.tokenizer, model.max_position_embeddings if model else None):
            self.console.print(f"[yellow]warning[/]: {escape(line)}", highlight=False)
        state.fidelity_reference = run_reference(state.model_dir, c.workload, state.tokenizer, c.check.fidelity_prompts,
                                                 c.check.fidelity_tokens, self.console) if plans else None  # none to check
        warn_if_cache_may_be_warm(self.console, writer.run_dir, writer.manifest.workload, plans)

    def validity(self, name: str, metrics: Any) -> None:
        """``name``'s validity facts in the manifest (rates, token counts against our tokenizer's)
        and a warning when the server's token counts drift from ours by more than
        :data:`DRIFT_WARN` on average: every mode's (a ladder's over the metrics of the point its
        summary shows)."""
        drift = metrics.token_drift
        self.state.writer.manifest.validity[name] = Validity(
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
