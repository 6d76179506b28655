"""Energy: where it is read from (:class:`EnergySource`, the manifest's ``energy``), what one
measured phase used (:class:`PhaseEnergy`, in :class:`~results.schema.ResourceUse`) and the
figures of a load point or a capacity (:class:`EnergyFigures`, in ``ladder.json`` and
``recipe.json``).

Units: joules (J), watts (W), seconds (s); ``energy_uj`` of RAPL is µJ, NVML's counter mJ, both
converted to J where they are read (:mod:`adapters.telemetry.energy`). A figure that could not be measured
is ``None`` with the reason beside it: never 0, never a guess from a datasheet (TDP).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Artefact, Bound

SOURCE_KINDS = ("nvml", "rapl", "none")
SOURCE_LABELS = {
    "nvml": "measured: NVML total-energy counter of the GPUs",
    "rapl": "measured: RAPL package + DRAM counters of the CPU sockets (the whole package: engine and client)",
    "none": "not measured",
}


class EnergySource(Artefact):
    """The run's energy source, chosen once before any engine starts (``adapters.telemetry.energy.choose_source``).

    ``kind``: ``nvml`` (NVIDIA GPUs), ``rapl`` (Linux powercap on the CPU), ``none`` (``reason``
    says why: no RAPL zone, permission denied, no NVML). ``zones``: what the counter sums (RAPL
    zone folders with their names; GPU indices); ``root``: the powercap folder read.
    ``idle_watts``: the machine's draw over ``idle_s`` seconds before any engine ran (W; None
    when not measured), subtracted from each point's energy into its above-idle figure (both
    kept). ``provisioned_watts``: ``--watts`` (the user's figure for the draw, labelled
    "provisioned", never mixed with measured ones); ``price_per_kwh``: ``--price-per-kwh``
    (USD per kWh)."""

    kind: Literal["nvml", "rapl", "none"] = "none"
    reason: str = ""
    zones: list[str] = Field(default_factory=list)
    root: str = ""
    idle_watts: float | None = None
    idle_s: float | None = None
    provisioned_watts: float | None = None
    price_per_kwh: float | None = None

    @property
    def measured(self) -> bool:
        return self.kind != "none"

    @property
    def label(self) -> str:
        """``measured: RAPL …`` or ``not measured: no RAPL …`` (one line)."""
        base = SOURCE_LABELS[self.kind]
        return f"{base}: {self.reason}" if self.kind == "none" and self.reason else base

    def line(self) -> str:
        """The console's one energy line, said once per run."""
        if not self.measured:
            out = f"energy: not readable on this machine ({self.reason or 'no source'}): stored as null"
        else:
            idle = f"; idle {self.idle_watts:,.1f} W over {self.idle_s:g} s, subtracted into the above-idle figure" \
                if self.idle_watts is not None and self.idle_s else "; idle draw not measured"
            out = f"energy: {self.label} ({', '.join(self.zones)}){idle}"
        if self.provisioned_watts is not None:
            out += f"; provisioned {self.provisioned_watts:g} W (--watts), shown apart"
        return out


class PhaseEnergy(Artefact):
    """What one measured phase used, by the run's source: ``energy_j`` (J, the counter's increase
    over ``duration_s``, wrap-around corrected; None with ``reason`` when it could not be read),
    ``idle_watts`` (the run's), ``sampled_watts`` (NVML: the mean of the power readings taken
    beside the counter, W; a cross-check: ``sampled_watts × duration_s`` ≈ ``energy_j``),
    ``series``: (``time.perf_counter_ns()``, J since the phase began) at every sample, so a
    point's energy can be split into time windows (:mod:`harness.metrics.energy`)."""

    source: Literal["nvml", "rapl", "none"] = "none"
    energy_j: float | None = None
    duration_s: float | None = None
    idle_watts: float | None = None
    sampled_watts: float | None = None
    series: list[tuple[int, float]] = Field(default_factory=list)
    reason: str = ""

    @property
    def above_idle_j(self) -> float | None:
        """``energy_j − idle_watts × duration_s`` (J); None without both."""
        if self.energy_j is None or self.idle_watts is None or self.duration_s is None:
            return None
        return self.energy_j - self.idle_watts * self.duration_s


class EnergyFigures(Artefact):
    """Energy per output token at one load point (or at an engine's capacity point).

    ``source``: ``nvml`` / ``rapl`` (measured), ``provisioned`` (``--watts`` × the phases'
    duration: the user's figure, never mixed with a measured one) or ``none`` (``reason`` says
    why; every figure None). ``j_per_token``: J per output token (total energy / output tokens of
    the point's measurements pooled) with its 95 % ``j_per_token_interval`` (Student t over the
    point's measurements when there are several, else over the time windows of its one
    measurement; None with fewer than 2); ``tokens_per_j`` its inverse with the inverse
    interval; ``j_per_token_above_idle``: the same less the idle draw; ``samples`` and
    ``over``: how many measurements or windows the interval rests on. ``usd_per_1m_output_tokens``:
    the energy's cost at ``price_per_kwh`` (USD/kWh; ``j_per_token × 1e6 / 3.6e6 × price``);
    ``mean_watts``: energy / duration (W)."""

    source: Literal["nvml", "rapl", "provisioned", "none"] = "none"
    label: str = ""
    j_per_token: float | None = None
    j_per_token_interval: tuple[Bound, Bound] | None = None
    tokens_per_j: float | None = None
    tokens_per_j_interval: tuple[Bound, Bound] | None = None
    j_per_token_above_idle: float | None = None
    mean_watts: float | None = None
    samples: int = 0
    over: Literal["measurements", "windows", ""] = ""
    price_per_kwh: float | None = None
    usd_per_1m_output_tokens: float | None = None
    reason: str = ""
