"""``bench run --tune`` in the report, from ``ladder.json``'s ``tuning`` only: per engine the
configuration chosen, its tuned capacity beside the defaults' and the gain tuning gave
(:func:`tuning_rows`), and every configuration tried with its capacity or why it was dropped
(:func:`tried_rows`). The envelope over the configurations is drawn on the frontier chart
(:func:`reports.frontier.frontier_png`)."""

from __future__ import annotations

from typing import Any

from results.schema import CapacityAtSLO, EngineTuning, LadderSummary


def _cap(cap: CapacityAtSLO | None) -> str:
    if cap is None:
        return "–"
    if cap.never_met:
        return "misses the SLO"
    shown = f"{'≥ ' if cap.open else ''}{cap.output_tps:,.1f}"
    return shown + (f" [{cap.interval[0]:,.1f}–{cap.interval[1]:,.1f}]" if cap.interval else "")


def tuning_rows(s: LadderSummary) -> list[dict[str, Any]]:
    """One row per engine of the search: configuration chosen, tuned capacity (the main job's),
    the defaults' capacity (their climb as the main job climbs; the main job's own when the
    search kept them), the gain, configurations tried and rejected, seconds of measuring (the
    search's, its budget in brackets, + the defaults' climb); an engine not searched says why."""
    rows = []
    for name, t in s.tuning.items():
        if not t.configs:
            rows.append({"engine": name, "chosen": "–", "tuned": "–", "defaults": "–", "gain": "–", "tried": "–",
                         "seconds": "–", "note": t.note})
            continue
        chosen = t.config(t.chosen)
        main = s.engines.get(name)
        picked = (f"none: the search was interrupted by {t.interrupted}" if t.interrupted else
                  f"{chosen.label if chosen else '?'} ({t.chosen})")
        default = main if t.chosen == t.configs[0].id else t.defaults  # the defaults kept: the main job climbed them
        rejected = sum(c.status == "rejected" for c in t.configs)
        rows.append({
            "engine": name, "chosen": picked,
            "tuned": _cap(main.capacity if main else None),
            "defaults": _cap(default.capacity if default else None),
            "gain": t.gain_text or "–",
            "tried": f"{len(t.configs)}" + (f" ({rejected} rejected)" if rejected else ""),
            "seconds": f"{t.used_s:,.0f} (budget {t.budget_s:,.0f})" + (
                f" + {t.defaults_s:,.0f} defaults' climb" if t.defaults_id else ""),
            "note": t.method})
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


def gain_line(engine: str, tuning: EngineTuning) -> str:
    """``vllm: tuned max_num_seqs=32 (vllm#2), gain over its defaults 1.31× [1.12–1.52]; 4 configurations,
    212 s of measuring`` for the console and the report."""
    if not tuning.configs:
        return f"{engine}: not tuned — {tuning.note}"
    chosen = tuning.config(tuning.chosen)
    rejected = [c for c in tuning.configs if c.status == "rejected"]
    rej = f"; {len(rejected)} rejected by the engine" if rejected else ""
    n = len(tuning.configs)
    spent = f"{n} configurations, {tuning.used_s:,.0f} s of measuring{rej}"
    if tuning.interrupted:
        done = sum(c.status == "measured" for c in tuning.configs)
        return (f"{engine}: not tuned — the search was interrupted by {tuning.interrupted} before it chose "
                f"({done} of {spent})")
    what = chosen.label if chosen is not None else "?"
    g = "gain over its defaults " + (tuning.gain_text or "not measured")
    return f"{engine}: tuned {what} ({tuning.chosen}), {g}; {spent}"


def no_recipe_reason(s: LadderSummary) -> str:
    """Why a run made no ``recipe.json`` (the winner's command line), said under the verdict:
    ``vllm is an endpoint the harness does not start``, ``the verdict names no production winner
    (own is a yardstick, never recommended; ...)``, ``... (undecided: ...)``; "" when there is a winner."""
    d = s.decision
    if d is None:
        return "no decision was made"
    if d.winner:
        return f"{d.winner} is an endpoint the harness does not start (no command line to store)"
    if d.undecided:
        return "the verdict names no winner (undecided: a runner-up's ladder stopped before an SLO broke)"
    if d.interrupted:
        return f"the verdict names no winner (interrupted by {d.interrupted})"
    if not d.ranking and d.yardsticks:
        found = [n for n in d.yardsticks if n in s.tuning and s.tuning[n].chosen]
        where = (f"; what its search chose is in ladder.json's tuning ({', '.join(found)})" if found else "")
        return (f"the verdict names no production winner: {', '.join(d.yardsticks)} only ranked as a yardstick, "
                f"never the recommendation{where}")
    return "the verdict names no winner (see why above)"
