"""The cost criterion: USD per 1M output tokens on the target hardware, lower better.

``cost = price / (output tok/s × 3600) × 1e6`` (:func:`results.hardware.cost_per_million_tokens`)
with ``price`` the target's price per device-hour × its devices
(:attr:`results.hardware.HardwareProfile.deployment_price_per_hour`: the profile's on-demand
list price, or ``--price-per-hour``) and the output throughput the score uses (the median over
the condition's repeats). Normalised lower-better against the best survivor, ``min(c) / c``.

With one price for every engine (one target) the cost score equals the output-throughput
ratio ``tps / max(tps)``: cost ranks engines as output throughput does, in dollars. An engine
without a throughput gets no cost score (0), and without a price for the target no engine gets
one (every cost score 0, so the criterion cannot move a ranking); the note says which.
"""

from __future__ import annotations

from results.hardware import HardwareProfile, cost_per_million_tokens
from results.schema.metric_registry import usd_figure

RawMetrics = dict[str, float | None]


def usd_per_million_output_tokens(hardware: HardwareProfile, raw: RawMetrics) -> float | None:
    """USD per 1M output tokens of one engine on the target ``hardware``: its deployment price
    and the engine's scoring output throughput through :func:`results.hardware.cost_per_million_tokens`
    (the arithmetic ``harness.app`` also uses for a run's recorded ``EngineResult.cost``). None
    without a price or a throughput."""
    return cost_per_million_tokens(hardware.deployment_price_per_hour, raw.get("output_throughput"))


def cost_scores(hardware: HardwareProfile, raw: dict[str, RawMetrics]) -> dict[str, float]:
    """Each engine's cost score in [0, 1]: ``min(cost) / cost``; 0 for an engine without a cost."""
    costs = {name: usd_per_million_output_tokens(hardware, values) for name, values in raw.items()}
    present = [cost for cost in costs.values() if cost is not None]
    if not present:
        return {name: 0.0 for name in raw}
    best = min(present)
    return {name: 0.0 if cost is None else best / cost for name, cost in costs.items()}


def cost_note(hardware: HardwareProfile, raw: dict[str, RawMetrics], weight: float) -> str:
    """One note: the price used, each survivor's cost, who has none and why."""
    price = hardware.deployment_price_per_hour
    if price is None:
        return (f"cost not scored: no price per device-hour for {hardware.name} (pass --price-per-hour); every "
                "engine's cost score is 0")
    devices = f" × {hardware.num_devices} devices" if hardware.num_devices > 1 else ""
    source = f" ({hardware.price_source})" if hardware.price_source else ""
    costs = {name: usd_per_million_output_tokens(hardware, values) for name, values in raw.items()}
    shown = "; ".join(f"{name} {usd_figure(cost)}" for name, cost in costs.items() if cost is not None)
    missing = [name for name, cost in costs.items() if cost is None]
    parts = [f"cost per 1M output tokens at ${hardware.price_per_hour:g}/device-hour{devices}{source}, "
             f"price / (median output tok/s × 3600) × 1e6, lower better: {shown or 'none'}"]
    if missing:
        parts.append(f"no cost score (no output throughput) for {', '.join(missing)}")
    if weight == 0:
        parts.append("weight 0 in this preset (--preset cost or --weights cost=1 scores it)")
    return "; ".join(parts)
