"""The run's engine plan: each engine decided once, before anything starts.

An :class:`EnginePlan` holds what the rest of the run needs to know about one engine: its
adapter, its declared capabilities (recorded, never scored as facts), the one probe result
(carried in the launch config, so the launch does not probe again), the launch config, and
the hardware kind the run detected once. The orchestrator builds the plans, hands them to
the :class:`~harness.app.trial.startup.EngineStarter` and measures them in order.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters.base import EngineAdapter, LaunchConfig, ProbeResult
from results.schema import EngineResult, EngineStatus, SkipCause

from harness.app.trial.startup import StartItem
from harness.app.settings.run import RunSettings


@dataclass(frozen=True)
class EnginePlan:
    """One engine of the run: ``name``, ``adapter``, ``capabilities`` (the adapter's declared
    :class:`~adapters.base.Capabilities` as a dict), ``probe`` (taken once), ``launch`` (its
    :class:`LaunchConfig`, the probe included) and ``hardware_kind`` (``"nvidia"|"amd"|"cpu"``)."""

    name: str
    adapter: EngineAdapter
    capabilities: dict[str, Any]
    probe: ProbeResult
    launch: LaunchConfig
    hardware_kind: str

    @property
    def available(self) -> bool:
        return self.probe.available

    @property
    def starts_process(self) -> bool:
        """True when the harness starts (and may pause) this engine's server process."""
        return bool(getattr(self.adapter, "starts_process", False))

    def start_item(self) -> StartItem:
        return StartItem(self.name, self.adapter, self.launch, self.starts_process)


def capabilities_of(adapter: EngineAdapter) -> dict[str, Any]:
    """The adapter's declared capabilities as a JSON-safe dict ({} when it declares none)."""
    caps = getattr(adapter, "capabilities", None)
    return dataclasses.asdict(caps) if caps is not None else {}


def plan_engine(adapter: EngineAdapter, launch: LaunchConfig, hardware_kind: str) -> EnginePlan:
    """Probe ``adapter`` once (with the launch's engine args where the adapter reads them,
    e.g. ``tensorrt_llm:trtllm_serve=PATH``) and return its plan."""
    probe_for_launch = getattr(adapter, "probe_for_launch", None)
    probe = probe_for_launch(launch) if probe_for_launch is not None else adapter.probe()
    return EnginePlan(name=adapter.name, adapter=adapter, capabilities=capabilities_of(adapter), probe=probe,
                      launch=dataclasses.replace(launch, probe=probe), hardware_kind=hardware_kind)


def launch_config(cfg: RunSettings, engine_args: dict[str, str], model_dir: Path, run_dir: Path, threads: int) -> LaunchConfig:
    """Engine launch settings from a job's settings ``cfg`` (timeouts, endpoint, served name)."""
    return LaunchConfig(model_dir=model_dir, run_dir=run_dir, threads=threads, engine_args=engine_args,
                        startup_timeout_s=cfg.engine.startup_timeout_s, base_url=cfg.deployments.base_url, model_name=cfg.deployments.served_model_name)


def skipped_result(plan: EnginePlan) -> EngineResult:
    """The summary entry of an engine its probe found unavailable (with the probe's reason)."""
    return EngineResult(status=EngineStatus.SKIPPED, reason=plan.probe.reason, skip_cause=SkipCause(plan.probe.cause),
                        capabilities=plan.capabilities)


def not_measured_result(plan: EnginePlan, why: str) -> EngineResult:
    """The summary entry of a planned engine a job never measured (``why``: e.g. interrupted)."""
    return EngineResult(status=EngineStatus.NOT_MEASURED, reason=f"not measured: {why}", capabilities=plan.capabilities)
