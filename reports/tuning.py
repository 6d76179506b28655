"""``bench run --tune`` in the report, from ``ladder.json``'s ``tuning`` only: per engine the
configuration chosen, its tuned capacity beside the defaults' and the gain tuning gave
(:func:`tuning_rows`), and every configuration tried with its capacity or why it was dropped
(:func:`tried_rows`). The envelope over the configurations is drawn on the frontier chart
(:func:`reports.frontier.frontier_png`)."""

from __future__ import annotations

from typing import Any

from results.schema import CapacityAtSLO, LadderSummary


def _cap(cap: CapacityAtSLO | None) -> str:
    if cap is None:
        return "–"
    if cap.never_met:
        return "misses the SLO"
    shown = f"{'≥ ' if cap.open else ''}{cap.output_tps:,.1f}"
    return shown + (f" [{cap.interval[0]:,.1f}–{cap.interval[1]:,.1f}]" if cap.interval else "")


def tuning_rows(s: LadderSummary) -> list[dict[str, Any]]:
    """One row per engine of the search: configuration chosen, tuned capacity (the main job's),
    the defaults' capacity (their search ladder), the gain, configurations tried and rejected,
    seconds of measuring; an engine not searched says why."""
    rows = []
    for name, t in s.tuning.items():
        if not t.configs:
            rows.append({"engine": name, "chosen": "–", "tuned": "–", "defaults": "–", "gain": "–", "tried": "–",
                         "seconds": "–", "note": t.note})
            continue
        chosen = t.config(t.chosen)
        default = t.configs[0]
        main = s.engines.get(name)
        rejected = sum(c.status == "rejected" for c in t.configs)
        rows.append({
            "engine": name, "chosen": f"{chosen.label if chosen else '?'} ({t.chosen})",
            "tuned": _cap(main.capacity if main else None),
            "defaults": _cap(default.ladder.capacity if default.ladder else None),
            "gain": t.gain_text or "–",
            "tried": f"{len(t.configs)}" + (f" ({rejected} rejected)" if rejected else ""),
            "seconds": f"{t.used_s:,.0f} of {t.budget_s:,.0f}", "note": t.method})
    return rows


def tried_rows(s: LadderSummary) -> list[dict[str, Any]]:
    """Every configuration tried, engine by engine: its id, knobs, status (or the engine's line
    when it was rejected or failed), rungs reached, its capacity at the SLO, seconds measured."""
    rows = []
    for name, t in s.tuning.items():
        for c in t.configs:
            status = c.status + (" ★ chosen" if c.id == t.chosen else "")
            rows.append({"engine": name, "id": c.id, "config": c.label,
                         "status": status + (f": {c.reason[:140]}" if c.reason else ""), "rungs": str(c.rungs),
                         "capacity": _cap(c.ladder.capacity if c.ladder else None), "seconds": f"{c.measuring_s:,.0f}"})
    return rows
