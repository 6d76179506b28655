"""Energy in the capacity table (console and report, from ``ladder.json`` only): J per output
token at each engine's capacity point with its interval and its source, measured and provisioned
apart; the energy's cost per 1M output tokens beside the hour's; one note under the table saying
where the figures come from, or why there are none."""

from __future__ import annotations

from results.schema import EnergyFigures, LadderSummary

SHORT = {"nvml": "NVML", "rapl": "RAPL", "provisioned": "provisioned"}


def _one(fig: EnergyFigures) -> str:
    """``0.52 J/tok [0.48–0.57] (RAPL)``; ``n/a`` for figures not measured."""
    if fig.j_per_token is None:
        return "n/a"
    ci = fig.j_per_token_interval
    interval = " (1 run)" if ci is None else (f" [{ci[0]:.3g}–{ci[1]:.3g}]" if ci[0] > 0 else f" [≤ {ci[1]:.3g}]")
    return f"{fig.j_per_token:.3g} J/tok{interval} ({SHORT.get(fig.source, fig.source)})"


def energy_cell(measured: EnergyFigures | None, provisioned: EnergyFigures | None) -> str:
    """The capacity table's energy cell: measured, then ``; `` provisioned where given; – when
    the capacity has none (never met, or an older run)."""
    parts = [_one(f) for f in (measured, provisioned) if f is not None]
    if len(parts) == 2 and parts[0] == "n/a":
        parts = [parts[1]]  # a provisioned figure where nothing was read: the note says why
    return "; ".join(parts) or "–"


def energy_usd(measured: EnergyFigures | None, provisioned: EnergyFigures | None) -> str:
    """``$0.021 (energy, RAPL)``: the energy's cost per 1M output tokens at --price-per-kwh,
    labelled by its source ("" when there is none)."""
    out = [f"${f.usd_per_1m_output_tokens:.3g} (energy, {SHORT.get(f.source, f.source)})"
           for f in (measured, provisioned) if f is not None and f.usd_per_1m_output_tokens is not None]
    return "; ".join(out)


def energy_note(s: LadderSummary) -> str:
    """One line under the capacity table: where the energy figures come from and how their
    interval was formed, or why none was measured ("" for a run from before energy was read)."""
    figs = [e.capacity.energy for e in s.engines.values() if e.capacity is not None and e.capacity.energy is not None]
    prov = [e.capacity.energy_provisioned for e in s.engines.values()
            if e.capacity is not None and e.capacity.energy_provisioned is not None]
    if not figs and not prov:
        return ""
    measured = next((f for f in figs if f.j_per_token is not None), None)
    if measured is not None:
        line = (f"Energy: {measured.label}; J per output token at each capacity point (its highest passing load), "
                "95 % interval over its measurements, or over 5 time windows of one (ratio estimator); tokens/J = 1 / it.")
    else:
        why = next((f.reason for f in figs if f.reason), "not read")
        line = f"Energy: not measured ({why}): J per output token stored as null, never 0."
    if prov:
        line += (f" Provisioned figures, {prov[0].label}: {prov[0].mean_watts:g} W × each point's duration (first send to "
                 "last completion), the user's figure, not a measurement.")
    price = next((f.price_per_kwh for f in [*figs, *prov] if f.price_per_kwh is not None), None)
    if price is not None:
        line += f" Energy cost at ${price:g}/kWh: J/tok × 1e6 / 3.6e6 × price (the electricity only; the hour's price is beside it)."
    return line
