"""``bench run --executor ray``: every trial (engine, repeat) a Ray task on a node of a cluster.

The driver (this process) plans the engines, builds the workload once and owns the run folder,
as a local run does: the run orchestrator is the same, with :class:`RayExecutor` as its
:class:`~harness.app.trial.executor.TrialExecutor` in place of the local one. No engine starts on
the driver; at the first turn every trial of the run is submitted at once (Ray runs as many side
by side as the cluster's resources allow), and each turn then waits for its trial.

A trial (:func:`harness.app.executors.ray_trial.run_remote_trial`, on its node) runs the same
:func:`harness.app.trial.steps.run_trial` a local run does: the same adapter starts the engine,
the same client warms it up and measures it, the same measurement step computes the metrics.
Its artefacts (records, recounts, client workers, engine facts) are streamed to the driver
through a :class:`~harness.app.executors.ray_trial.Mailbox` actor and handed to the driver's
sink (the run's ``RunWriter``) as they arrive, so a trial that dies keeps what it measured. The node of each
trial (hostname, IP, Ray node id) is recorded in the manifest's engine entry (``ray_trials``).

Resources per trial (Ray's ``num_cpus``/``num_gpus``/custom resources): ``num_cpus`` = engine
threads + 1 (the client), so a trial holds a node's cores as a local run does (no two
measurements share a core unless ``--ray-resources num_cpus=N`` says so); ``num_gpus`` = 1 for
an engine the harness starts on a GPU run or that cannot run on a CPU, else 0;
``--ray-resources NAME=N,...`` overrides these and adds custom resources (a node type).

Failures: a worker or node that dies mid-trial (``WorkerCrashedError``, ``NodeDiedError``, ...)
fails that trial's engine, "the Ray worker on node X died: ...", with the records streamed so
far; the run goes on. Ctrl-C (or SIGTERM) on the driver force-cancels every trial (the killed
worker's engine is ended by its watchdog, ``adapters/runtime/watchdog.py``, which watches the process
that started it: the Ray worker) and a local Ray instance the driver started is shut down.

Ray is an optional extra (``pip install 'llm-serve-bench[ray]'``) imported only here, lazily.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from rich.markup import escape

from adapters.base import EngineError
from results.recounts import TokenRecount
from results.schema import ClientWorker, EngineFacts, RayTrial, RequestRecord

from harness.app.trial.plan import EnginePlan
from harness.app.settings.ray_options import RESOURCE_KEYS, import_ray
from harness.app.settings.run import default_threads
from harness.app.trial.executor import Trial
from harness.app.executors.ray_trial import Mailbox, TrialResult, run_remote_trial
from harness.app.settings.run import RunSettings
from rich.console import Console
from harness.app.trial.measure import MeasurementSink

POLL_S = 0.25  # how often the driver drains the mailbox while it waits for a trial (s)
CANCEL_WAIT_S = 10.0  # after a Ctrl-C, how long the driver waits for cancelled trials to end (s)


def trial_options(plan: EnginePlan, threads: int, overrides: dict[str, float]) -> dict[str, Any]:
    """The Ray options of ``plan``'s trials: ``num_cpus`` (engine ``threads`` + 1 for the
    client; 1 for an endpoint the harness does not start), ``num_gpus`` (1 for an engine it
    starts on a GPU run or that declares no CPU support), then ``overrides`` (custom
    resources go to ``resources``)."""
    hardware = plan.capabilities.get("hardware") or ("cpu",)
    gpu = plan.starts_process and (plan.hardware_kind != "cpu" or "cpu" not in hardware)
    opts: dict[str, Any] = {"num_cpus": threads + 1 if plan.starts_process else 1, "num_gpus": 1 if gpu else 0}
    custom = {k: v for k, v in overrides.items() if k not in RESOURCE_KEYS}
    opts.update({k: v for k, v in overrides.items() if k in RESOURCE_KEYS})
    if custom:
        opts["resources"] = custom
    return opts


class RayExecutor:
    """The :class:`~harness.app.trial.executor.TrialExecutor` whose trials run as Ray tasks
    (module docstring). ``cfg.executor.address``: a Ray cluster (``HEAD:6379``, ``ray://HEAD:10001``,
    ``auto``); None = the Ray instance this process already joined, else a single-node one
    started here (all of this machine's CPUs) and shut down at :meth:`close`.
    ``cfg.executor.resources``: :func:`parse_resources`' overrides."""

    def __init__(self, cfg: RunSettings, console: Console, kind: str = "cpu") -> None:
        self.cfg, self.console = cfg, console
        self.address = cfg.executor.address
        self.resources = dict(cfg.executor.resources)
        self._unfit: dict[tuple[str, int], str] = {}  # trials no node of the cluster can hold: why
        self._refs: dict[tuple[str, int], Any] = {}
        self._nodes: dict[tuple[str, int], dict[str, Any]] = {}
        self._mailbox: Any = None
        self._started_ray = False
        self._connected = False

    # -- the executor's steps -----------------------------------------------------------------
    def begin(self, plans: list[EnginePlan], quiet: bool = False) -> None:
        """No engine starts on the driver (each trial starts its own, on its node)."""
        if not self._connected:
            self._connect(import_ray())

    def release(self, name: str) -> None:
        pass

    def hold(self, plans: list[EnginePlan]) -> None:
        pass  # every trial starts its own engine on its node

    def end(self) -> None:
        pass

    def close(self) -> None:
        if not self._connected:
            return
        ray = import_ray()
        self._cancel(list(self._refs))
        if self._mailbox is not None:
            ray.kill(self._mailbox)
            self._mailbox = None
        if self._started_ray:
            self.console.print("Stopping the local Ray instance …")
        if self._started_ray or self.address:
            ray.shutdown()  # a cluster keeps running: only this driver disconnects
        self._connected = False

    def result(self, trial: Trial, sink: MeasurementSink) -> Any:
        """Wait for ``trial``, writing every trial's streamed artefacts to ``sink`` meanwhile.
        Raises EngineError when the trial failed or its worker died; KeyboardInterrupt cancels
        every trial first."""
        ray = import_ray()
        name, index = key = trial.key
        if key in self._unfit:
            raise EngineError(self._unfit[key])
        ref = self._refs[key]
        try:
            while not ray.wait([ref], timeout=POLL_S)[0]:
                self._drain(sink)
            self._drain(sink)
            out: TrialResult = ray.get(ref)
        except KeyboardInterrupt:
            self._cancel(list(self._refs))
            self._drain(sink)
            raise
        except ray.exceptions.RayError as exc:
            self._drain(sink)
            self._cancel([k for k in self._refs if k[0] == name and k[1] > index])
            raise EngineError(self._died(key, exc, ray)) from None
        self._keep_log(sink, name, index, out.log)
        if out.error:
            self._cancel([k for k in self._refs if k[0] == name and k[1] > index])
            raise EngineError(out.error, out.log_tail)
        sink.add_engine_facts(name, EngineFacts(ray_trials=self._trials_of(name)))
        return out.outcome

    def _connect(self, ray: Any) -> None:
        if self.address:
            self.console.print(f"Connecting to the Ray cluster at {escape(self.address)} …")
            try:
                ray.init(address=self.address, logging_level="ERROR", log_to_driver=False)
            except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError ...
                raise EngineError(f"--ray-address {self.address}: cannot connect to a Ray cluster there "
                                  f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                                  "is `ray start --head` running on that host and port? A cluster with token "
                                  "authentication also needs RAY_AUTH_MODE=token and its token here (~/.ray/auth_token)") from exc
        elif not ray.is_initialized():
            self.console.print("Starting a local Ray instance …")
            ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
            self._started_ray = True
        self._connected = True
        total = ray.cluster_resources()
        self.console.print(f"Ray: {len([n for n in ray.nodes() if n.get('Alive')])} node(s), "
                           f"{total.get('CPU', 0):g} CPUs, {total.get('GPU', 0):g} GPUs")

    # -- trials ------------------------------------------------------------------------------
    def submit(self, trials: Sequence[Trial]) -> None:
        """Every trial of the job, in its order, as Ray tasks at once (Ray runs as many side by
        side as the cluster's resources allow); a trial no node can hold is failed at its turn."""
        ray = import_ray()
        if not self._connected:
            self._connect(ray)
        if self._mailbox is None:
            self._mailbox = ray.remote(num_cpus=0)(Mailbox).remote()
        task = ray.remote(max_retries=0)(run_remote_trial)
        threads = self.cfg.engine.threads or default_threads()
        offered = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        for trial in trials:
            opts = trial_options(trial.plan, threads, self.resources)
            if why := _unfit(opts, offered):
                self._unfit[trial.key] = why
                continue
            name, index = trial.key
            self._refs[trial.key] = task.options(name=f"bench {name} repeat {index + 1}", **opts).remote(
                trial.body, trial.plan, trial.key, self._mailbox)
        if trials:
            shown = trial_options(trials[0].plan, threads, self.resources)
            self.console.print(f"Submitted {len(self._refs)} trial(s) to Ray "
                               f"({', '.join(f'{k}={v:g}' for k, v in shown.items() if not isinstance(v, dict))} each)")

    def _drain(self, sink: MeasurementSink) -> None:
        """Hand ``sink`` what the trials posted since the last drain, in order (records,
        recounts, client workers, engine facts); note each trial's node."""
        if self._mailbox is None:
            return
        ray = import_ray()
        try:
            messages = ray.get(self._mailbox.drain.remote(), timeout=30)
        except ray.exceptions.RayError:
            return
        for kind, key, payload in messages:
            name, repeat = key
            if kind == "records":
                sink.add_record(RequestRecord.model_validate_json(payload))
            elif kind == "recounts":
                sink.add_recounts([TokenRecount.model_validate_json(p) for p in payload])
            elif kind == "client_workers":
                sink.add_client_workers(payload[0], [ClientWorker.model_validate_json(p) for p in payload[1]])
            elif kind == "engine_facts":
                sink.add_engine_facts(name, EngineFacts.model_validate_json(payload))
            elif kind == "node":
                self._nodes[(name, repeat)] = payload
                label = name if self.cfg.measure.repeats == 1 else f"{name} (repeat {repeat + 1}/{self.cfg.measure.repeats})"
                self.console.print(f"[bold]{escape(label)}[/]: running on node {escape(_where(payload))}")
                sink.add_engine_facts(name, EngineFacts(ray_trials=self._trials_of(name)))

    def _trials_of(self, name: str) -> list[RayTrial]:
        """Where each of ``name``'s trials ran so far (the manifest's ``ray_trials``)."""
        return [RayTrial.model_validate({"repeat": r, **facts})
                for (n, r), facts in sorted(self._nodes.items()) if n == name]

    def _died(self, key: tuple[str, int], exc: Exception, ray: Any) -> str:
        """The failed trial's reason: its node and what Ray said (an exception the trial raised
        is named as itself, a dead worker or node as Ray's error and its first line)."""
        facts = self._nodes.get(key)
        where = f"on node {_where(facts)}" if facts else "before it reported its node"
        cause = getattr(exc, "cause", None) if isinstance(exc, ray.exceptions.RayTaskError) else None
        if cause is not None:
            return f"the Ray trial failed {where}: {type(cause).__name__}: {cause}"
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        if facts is None:
            return f"the Ray trial died before it reported its node: {type(exc).__name__}: {first}"
        return f"the Ray worker on node {_where(facts)} died: {type(exc).__name__}: {first}"

    def _keep_log(self, sink: MeasurementSink, name: str, repeat: int, log: bytes) -> None:
        """Append a trial's engine log to ``logs/<engine>.log`` in the run folder."""
        if not log:
            return
        where = _where(self._nodes.get((name, repeat), {}))
        with open(Path(sink.run_dir) / "logs" / f"{name}.log", "ab") as fh:
            fh.write(f"==> repeat {repeat + 1}, Ray node {where} <==\n".encode() + log)

    def _cancel(self, keys: list[tuple[str, int]]) -> None:
        """Force-cancel the trials ``keys`` (a running one's worker is killed; its engine's
        watchdog then ends the engine) and wait up to :data:`CANCEL_WAIT_S` for them to end."""
        import ray

        refs = [self._refs.pop(k) for k in keys if k in self._refs]
        if not refs or not ray.is_initialized():
            return
        for ref in refs:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # already finished, or its worker is gone
                pass
        ray.wait(refs, num_returns=len(refs), timeout=CANCEL_WAIT_S)


def _unfit(opts: dict[str, Any], nodes: list[dict[str, float]]) -> str:
    """Why no node in ``nodes`` (Ray's ``Resources`` of each alive node) can hold a trial
    asking for ``opts``; "" when one can. Ray would queue such a trial for ever."""
    need = {"CPU": opts.get("num_cpus", 0), "GPU": opts.get("num_gpus", 0), "memory": opts.get("memory", 0),
            **opts.get("resources", {})}
    need = {k: v for k, v in need.items() if v}
    if any(all(node.get(k, 0) >= v for k, v in need.items()) for node in nodes):
        return ""
    best = ", ".join(f"{k} {max((n.get(k, 0) for n in nodes), default=0):g}" for k in need)
    return (f"no node of the Ray cluster can hold this trial: it needs {', '.join(f'{k} {v:g}' for k, v in need.items())}, "
            f"the largest node offers {best}; lower --threads or --ray-resources, or add such a node "
            "(custom resources: ray start --resources)")


def _where(facts: dict[str, Any]) -> str:
    """``host (ip, node id 1a2b3c4d…)`` for messages."""
    if not facts:
        return "unknown"
    return f"{facts.get('hostname')} ({facts.get('ip')}, node id {str(facts.get('node_id'))[:12]}…)"
