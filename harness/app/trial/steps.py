"""An engine's session and a trial: what happens around the one measurement step.

A **session** (:func:`open_session`) is one engine up for a while: taken from the
:class:`~harness.app.trial.startup.EngineStarter` (started, or thawed when it was started ahead
of its turn), its facts recorded (display name, start-up time, effective configuration, install
size), optionally its effective settings read (``--parity``), then warmed up with requests
that share no prefix with any workload, sent together with the greedy output-equivalence
prompts when they are asked for, then, the first time, checked for output fidelity against the
ground-truth reference (:func:`check_fidelity`) and asked the user's accuracy set
(:func:`check_accuracy`); the engine is stopped when the session ends. ``bench search`` measures
all of an engine's probes in one session.

A **trial** (:func:`run_trial`) is one session with one measurement in it
(:func:`harness.app.trial.measure.measure`), then, the first time, the feature probes outside
the measured phase: one engine's turn in one repeat of ``bench run``, run in this process or,
as is, on a Ray node (:mod:`harness.app.executors.ray_trial`).
"""

from __future__ import annotations

import asyncio
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

from rich.markup import escape

from adapters.base import Endpoint
from adapters.runtime.resources import install_facts
from results.schema import (
    COVERAGE_FLOOR,
    DEFAULT_OTHER_FLOOR,
    AccuracyItem,
    AccuracyResult,
    EffectiveSettings,
    EngineAnswers,
    EnergySource,
    EngineFacts,
    FeatureProbe,
    FidelityReference,
    FidelityResult,
    Manifest,
)
from workloads.base import Workload

from harness.app.trial.measure import MeasureOptions, Measurement, MeasurementSink, measure, target_of
from harness.app.trial.plan import EnginePlan
from harness.app.trial.progress import engine_progress
from harness.app.trial.startup import EngineStarter
from harness.loadgen.equivalence import EQUIVALENCE_PROMPTS, equivalence_requests
from harness.loadgen.runner import Runner, RunnerOptions
from harness.app.settings.run import RunSettings
from rich.console import Console

if TYPE_CHECKING:  # transformers is slow to import: only where a tokenizer is loaded
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class TrialSpec:
    """What every session and trial of a job shares: ``measure`` (how to measure), ``warmup``
    (warm-up requests per session, sent at once), ``warmup_seed`` (their seed), ``equivalence``
    (send the greedy equivalence prompts in the first session), ``feature_probes`` (probe the
    features after the first measurement), ``repeats`` (planned, for labels), ``hardware`` (the
    kind detected, for reading effective settings), ``read_effective`` (read them at all),
    ``fidelity`` (the reference the first session's fidelity check compares with; None = no
    check), ``fidelity_floor`` (the floor for other numerics), ``accuracy`` (the user's
    task-accuracy set, answered in the first session; empty = none) and ``model_declared`` (the
    user named, with ``--tokenizer``, the folder of the model an endpoint serves: its outputs are
    compared with that folder's reference; :func:`foreign_model`)."""

    measure: MeasureOptions
    warmup: int = 2
    warmup_seed: int = 7919
    equivalence: bool = False
    feature_probes: bool = False
    repeats: int = 1
    hardware: str = "cpu"
    read_effective: bool = True
    fidelity: FidelityReference | None = None
    fidelity_floor: float = DEFAULT_OTHER_FLOOR
    accuracy: tuple[AccuracyItem, ...] = ()
    model_declared: bool = False  # --tokenizer named the folder of the model an endpoint serves


@dataclass
class Session:
    """An engine up for its turn: ``endpoint``, ``startup_s`` (s, from launch to healthy),
    ``parallel`` (its start-up overlapped another's), ``effective`` (its settings as it reports
    them, first session only), ``equivalence`` (its greedy outputs, None = not checked)."""

    name: str
    endpoint: Endpoint
    startup_s: float
    parallel: bool
    effective: EffectiveSettings | None = None
    equivalence: list[str] | None = None
    fidelity: FidelityResult | None = None
    accuracy: AccuracyResult | None = None


@dataclass
class TrialOutcome:
    """One trial: its measurement and the session's facts (see :class:`Session`), the engine's
    manifest entry, and the feature probes' verdicts (first trial only)."""

    measurement: Measurement
    startup_s: float
    parallel: bool
    display_name: str
    manifest_entry: EngineFacts = field(default_factory=EngineFacts)
    effective: EffectiveSettings | None = None
    equivalence: list[str] | None = None
    feature_probes: dict[str, FeatureProbe] = field(default_factory=dict)
    fidelity: FidelityResult | None = None
    accuracy: AccuracyResult | None = None


def engine_facts(endpoint: Endpoint, startup_s: float, parallel: bool) -> EngineFacts:
    """The engine's manifest entry: display name, start-up (s), whether it started alongside
    others, its effective configuration (whose ``display_name`` and ``startup_s``, a launched
    server's own, win) and the size on disk of its environment."""
    return EngineFacts.model_validate({"display_name": endpoint.display_name, "startup_s": round(startup_s, 2),
                                       "startup_parallel": parallel, **endpoint.effective_config,
                                       **install_facts(endpoint.effective_config)})


@contextmanager
def open_session(plan: EnginePlan, starter: EngineStarter, spec: TrialSpec, sink: MeasurementSink, console: Console,
                 *, tokenizer: PreTrainedTokenizerBase, workload_name: str, repeat: int = 0) -> Iterator[Session]:
    """Engine ``plan``'s session (module docstring) in repeat ``repeat`` (the first, 0, reads
    the effective settings and sends the equivalence prompts); warm-up records go to ``sink``
    (phase ``warmup``, labelled ``workload_name`` and ``repeat``, never in metrics). Raises the
    :class:`EngineError` of a failed start; the engine is stopped on exit."""
    name, first = plan.name, repeat == 0
    resuming = starter.holds(name) and not starter.failed(name) and starter.slots > 1
    what = ("thawing its started server" if resuming else "starting") if plan.starts_process else "connecting"
    console.print(f"[bold]{escape(name)}[/]: {what} …")
    with starter.take(name) as (ep, startup_s):
        parallel = starter.parallel(name)
        sink.add_engine_facts(name, engine_facts(ep, startup_s, parallel))
        session = Session(name, ep, startup_s, parallel)
        if first and spec.read_effective:  # what the engine reports it runs with, after health, before any request
            from adapters.telemetry.effective import read_effective

            session.effective = read_effective(name, ep, spec.hardware)
        warm = Runner(target_of(ep, spec.measure.ignore_eos), name, workload_name, sink.add_record, None,
                      RunnerOptions(spec.measure.max_concurrency, spec.measure.request_timeout_s, repeat=repeat))
        session.equivalence = asyncio.run(_warm_up(warm, tokenizer, spec, first and spec.equivalence))
        if first and spec.fidelity is not None:
            session.fidelity = check_fidelity(name, ep, spec, console)
        if first and spec.accuracy:
            session.accuracy = check_accuracy(name, warm, spec, console)
        yield session


def check_fidelity(name: str, endpoint: Endpoint, spec: TrialSpec, console: Console) -> FidelityResult:
    """The engine's answers to the fidelity reference's prompts (:func:`harness.loadgen.fidelity.ask`,
    outside the measured phase) compared with it (:func:`harness.metrics.fidelity.compare`); one
    line printed. ``numerics``: the engine's own word on its configuration (``effective_config``),
    which picks the floor, never the result."""
    from harness.loadgen.fidelity import ask
    from harness.metrics.fidelity import compare

    assert spec.fidelity is not None
    numerics = str(endpoint.effective_config.get("numerics") or "reference")
    if why := foreign_model(endpoint, spec.fidelity, spec.model_declared):  # never another model's reference
        answers = EngineAnswers(numerics=numerics, error=why)
    else:
        answers = asyncio.run(ask(endpoint, spec.fidelity, numerics=numerics, timeout_s=spec.measure.request_timeout_s))
    result = compare(spec.fidelity, answers, other_floor=spec.fidelity_floor)
    console.print(f"  {escape(name)}: {escape(fidelity_line(result))}", highlight=False)
    return result


def foreign_model(endpoint: Endpoint, reference: FidelityReference, declared: bool) -> str:
    """Why an endpoint's outputs cannot be compared with ``reference`` ("" when they can): it is
    a deployment this harness did not start (``--endpoint``, ``--engine openai``) serving a model
    whose name is not the reference's folder (``reference.model``, the weights transformers ran),
    and the user did not name that folder as its model (``--tokenizer``, ``declared``). Its
    outputs are then compared with no other model's: the check does not run, and says why."""
    if endpoint.effective_config.get("engine") != "openai" or declared or not reference.model:
        return ""
    served = endpoint.model_name.rstrip("/").rsplit("/", 1)[-1]
    if served.lower() == reference.model.lower():
        return ""
    short = served if len(served) <= 24 else served[:23] + "…"
    # the first line is what the gate cell shows (short); the rest, the console and the fidelity table
    return (f"serves another model ({short})\nit serves {endpoint.model_name!r}, not {reference.model} (the weights "
            "of the reference, transformers fp32): its outputs are compared with no other model's; pass --tokenizer "
            "FOLDER of the served model, weights included, to check it")


def check_accuracy(name: str, warm: Runner, spec: TrialSpec, console: Console) -> AccuracyResult:
    """The user's accuracy set answered greedily through the session's client (``warm``'s
    target, not stored: outside the measured phase), 8 questions at a time, scored (:func:`harness.metrics.accuracy.score`); one line printed."""
    from harness.metrics.accuracy import score
    from workloads.base import RequestSpec

    requests = [RequestSpec(request_id=f"accuracy-{i}", prompt=item.prompt, messages=item.messages,
                            max_tokens=item.max_tokens, temperature=0.0, keep_output_text=True)
                for i, item in enumerate(spec.accuracy)]
    runner = Runner(warm.target, warm.engine, "accuracy", lambda r: None, None,
                    RunnerOptions(None, spec.measure.request_timeout_s))
    records = {r.request_id: r for r in asyncio.run(runner.warmup(requests, concurrency=8))}
    replies = [(r.output_text or "") if (r := records.get(q.request_id)) is not None and r.success else None
               for q in requests]
    result = score(spec.accuracy, replies)
    iv = result.interval
    spread = f" [{iv.low:.0%}, {iv.high:.0%}]" if iv is not None else ""
    failed = f", {result.failed} failed" if result.failed else ""
    console.print(f"  {escape(name)}: accuracy {result.correct}/{result.total} ({result.accuracy or 0:.0%}{spread}{failed})",
                  highlight=False)
    return result


def fidelity_line(r: FidelityResult) -> str:
    """``"fidelity 1.000 [0.998, 1.000] top-1 agreement outside near-ties (2,048 positions, 3
    near-tie flips), 30/32 exact"`` (``, on 20 of 32 prompts answered`` when some were not; ``—
    below the floor 0.99`` or ``— not checked: fewer than 90 % of the prompts answered``) or why
    it was not checked."""
    if r.error is not None or r.agreement_outside_near_ties is None:
        what = (r.error or ("every position checked was a near-tie" if r.positions else "no position checked")) \
            .replace("\n", ": ")  # a short first line and its details, on one console line
        return f"fidelity not checked — {what}"
    iv = r.agreement_interval
    spread = f" [{iv.low:.3f}, {iv.high:.3f}]" if iv is not None else ""
    verdict = "" if r.passed is not False else f" — below the floor {r.floor:.2f}"
    if not verdict and r.unchecked():
        verdict = f" — not checked: fewer than {COVERAGE_FLOOR * 100:.0f} % of the prompts answered"
    covered = (f", on {r.prompts_answered} of {r.prompts} prompts answered"
               if r.prompts_answered is not None and r.prompts_answered < r.prompts else "")
    return (f"fidelity {r.agreement_outside_near_ties:.3f}{spread} top-1 agreement with transformers fp32 outside "
            f"near-ties ({r.positions:,} positions, {r.near_tie_divergences} near-tie flips), {r.exact_matches}/"
            f"{r.prompts} exact{covered}{verdict}")


async def _warm_up(warm: Runner, tokenizer: PreTrainedTokenizerBase, spec: TrialSpec, equivalence: bool) -> list[str] | None:
    """Warm-up requests through ``warm`` (phase ``warmup``), sent together with the greedy
    equivalence prompts when ``equivalence`` (never stored); returns the equivalence outputs
    (None = not checked)."""
    from workloads.registry import build_warmup

    jobs = []
    if spec.warmup:  # all at once: one batch on a continuous-batching engine, a couple on a static one
        jobs.append(warm.warmup(build_warmup(tokenizer, spec.warmup, seed=spec.warmup_seed), concurrency=spec.warmup))
    if equivalence:
        eq = Runner(warm.target, warm.engine, "equivalence", lambda r: None, None,
                    RunnerOptions(None, spec.measure.request_timeout_s))
        jobs.append(eq.warmup(equivalence_requests(), concurrency=len(EQUIVALENCE_PROMPTS)))
    results = await asyncio.gather(*jobs)
    if not equivalence:
        return None
    return [r.output_text or "" for r in sorted(results[-1], key=lambda r: r.request_id)]


def run_trial(plan: EnginePlan, starter: EngineStarter, sink: MeasurementSink, console: Console, *, repeat: int,
              spec: TrialSpec, workload: Workload, tokenizer: PreTrainedTokenizerBase, manifest: Manifest) -> TrialOutcome:
    """Engine ``plan``'s turn in repeat ``repeat`` (module docstring; a trial body,
    :mod:`harness.app.trial.executor`): a session, one measurement of ``workload`` with a
    progress bar, the feature probes after the first one. ``manifest``: the run's (read only:
    the model's length for the longest feature probe).
    Raises the :class:`EngineError` of a failed start or a crash; a KeyboardInterrupt after the
    finished requests reached ``sink``."""
    name, first = plan.name, repeat == 0
    label = name if spec.repeats == 1 else f"{name} (repeat {repeat + 1}/{spec.repeats})"
    with open_session(plan, starter, spec, sink, console, tokenizer=tokenizer, workload_name=workload.name,
                      repeat=repeat) as session:
        progress, finish = engine_progress(console, label, workload)
        try:
            measured = measure(name, session.endpoint, workload, repeat, sink, tokenizer=tokenizer,
                               options=spec.measure, on_progress=progress)
        finally:
            finish()
        probes: dict[str, FeatureProbe] = {}
        if first and spec.feature_probes:  # outside the measured phase, after its counters were read
            from harness.app.trial.feature_phase import probe_phase

            probes = probe_phase(console, name, session.endpoint, target_of(session.endpoint, spec.measure.ignore_eos),
                                 tokenizer, manifest, spec.measure.request_timeout_s)
        ep = session.endpoint
        return TrialOutcome(measurement=measured, startup_s=session.startup_s, parallel=session.parallel,
                            display_name=ep.display_name, manifest_entry=engine_facts(ep, session.startup_s, session.parallel),
                            effective=session.effective, equivalence=session.equivalence, feature_probes=probes,
                            fidelity=session.fidelity, accuracy=session.accuracy)


def trial_spec(cfg: RunSettings, hardware_kind: str, energy: EnergySource | None = None, **override: Any) -> TrialSpec:
    """The :class:`TrialSpec` of a job's settings ``cfg`` (the run settings: SLOs, timeouts,
    client workers, warm-up, checks) on ``hardware_kind``; ``energy``: the run's energy source
    (``results.schema.EnergySource``, read around every measured phase); ``override`` replaces fields."""
    options = MeasureOptions(slos=tuple(cfg.decision.slos), request_timeout_s=cfg.measure.request_timeout_s,
                             max_concurrency=cfg.workload.max_concurrency, client_workers=cfg.measure.client_workers,
                             ignore_eos=cfg.measure.ignore_eos, energy=energy)
    fields: dict[str, Any] = dict(measure=options, warmup=cfg.measure.warmup, warmup_seed=(cfg.workload.seed or 0) + 7919,
                                  equivalence=cfg.check.equivalence, feature_probes=cfg.check.feature_probes,
                                  repeats=cfg.measure.repeats, hardware=hardware_kind,
                                  fidelity_floor=cfg.check.fidelity_floor, accuracy=accuracy_items(cfg.check.accuracy),
                                  model_declared=cfg.deployments.tokenizer is not None)
    return TrialSpec(**{**fields, **override})


def accuracy_items(path: str | None) -> tuple[AccuracyItem, ...]:
    """The accuracy set of ``--accuracy`` (empty without one)."""
    if not path:
        return ()
    from workloads.accuracy import load_accuracy_set

    return tuple(load_accuracy_set(path))
