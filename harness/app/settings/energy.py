"""``--watts`` and ``--price-per-kwh``: the energy options of ``bench run``, one group
(:class:`EnergyOptions`, flat on the command line like the workload's options).

``--watts W``: the draw of the machine measured on, for a user who knows it where the harness
cannot read a counter (a cloud VM without RAPL, a metered PDU): each point's energy is then W ×
its measured phases' duration, labelled "provisioned" and shown apart from any measured figure.
``--price-per-kwh P``: USD per kWh, for the energy's cost per 1M output tokens beside the
hour's (``--price-per-hour``): J per token × 1e6 / 3.6e6 × P, where energy was measured or
provisioned (null otherwise, with the reason).
"""

from __future__ import annotations

import math
from typing import Annotated, Optional

from pydantic import BaseModel, ConfigDict, field_validator

from harness.app.settings.fields import Cli, CliGroup


class EnergyOptions(BaseModel):
    """``watts`` (W, > 0) and ``price_per_kwh`` (USD per kWh, > 0); None = not given."""

    model_config = ConfigDict(extra="forbid")

    watts: Optional[float] = None
    price_per_kwh: Optional[float] = None

    @field_validator("watts")
    @classmethod
    def _watts(cls, value: Optional[float]) -> Optional[float]:
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"--watts is the machine's draw in watts, a number > 0 (e.g. 350), got {value:g}")
        return value

    @field_validator("price_per_kwh")
    @classmethod
    def _price(cls, value: Optional[float]) -> Optional[float]:
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"--price-per-kwh is USD per kWh, a number > 0 (e.g. 0.15), got {value:g}")
        return value


ENERGY_OPTIONS = CliGroup({
    "watts": Cli("--watts", help="The draw of the machine measured on, in watts, where the harness cannot read an energy counter (no RAPL, no NVML): each point's energy is then W x its duration, labelled 'provisioned' and never mixed with measured figures (with a readable counter both are shown, apart)."),
    "price_per_kwh": Cli("--price-per-kwh", help="USD per kWh: the energy's cost per 1M output tokens beside the hour's (--price-per-hour), where energy was measured (NVML, RAPL) or provisioned (--watts); null with the reason otherwise."),
}, panel="Decision and SLOs")

EnergyGroup = Annotated[EnergyOptions, ENERGY_OPTIONS]
