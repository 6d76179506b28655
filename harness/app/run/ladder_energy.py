"""Energy on the load ladders (issue 43): each point's J per output token from its measurements
(:func:`harness.metrics.energy.point_energy`, measured; ``--watts``: provisioned, apart), and at
each engine's capacity point (the passing load below its boundary, the point its ``summary.json``
entry describes) in ``ladder.json``'s capacity, which the capacity table and the recipe show."""

from __future__ import annotations

from typing import Sequence

from results.schema import EnergySource, LadderPoint, LadderSummary

from harness.metrics.energy import EnergySample, point_energy, provisioned_energy


def point_figures(point: LadderPoint, samples: Sequence[EnergySample | None], source: EnergySource | None) -> None:
    """Fill ``point.energy`` (measured, or None figures with the reason) and
    ``point.energy_provisioned`` (``--watts``; None without it) from its measurements' samples."""
    known = [s for s in samples if s is not None]
    point.energy = point_energy(known, source)
    if source is not None:
        point.energy_provisioned = provisioned_energy(known, source.provisioned_watts, source.price_per_kwh)


def capacity_figures(summary: LadderSummary) -> None:
    """Each engine's capacity gets the energy figures of its capacity point (the highest passing
    load below its boundary); none for a capacity never met."""
    for ladder in summary.engines.values():
        cap = ladder.capacity
        if cap is None or cap.never_met or cap.bracket[0] is None:
            continue
        at = next((p for p in ladder.points if p.load == cap.bracket[0]), None)
        if at is not None:
            cap.energy, cap.energy_provisioned, cap.energy_load = at.energy, at.energy_provisioned, at.load
