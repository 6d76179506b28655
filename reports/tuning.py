"""``bench run --tune`` in the report, from ``ladder.json``'s ``tuning`` only: per engine the
configuration chosen, its tuned capacity beside the defaults' and the gain tuning gave
(:func:`tuning_rows`), and every configuration tried with its capacity or why it was dropped
(:func:`tried_rows`). The envelope over the configurations is drawn on the frontier chart
(:func:`reports.frontier.frontier_png`)."""

from __future__ import annotations

from typing import Any

from results.schema import CapacityAtSLO, EngineTuning, LadderSummary, Recipe


def _cap(cap: CapacityAtSLO | None) -> str:
    if cap is None:
        return "–"
    if cap.never_met:
        return "misses the SLO"
    shown = cap.tps_text
    return shown + (f" [{cap.interval[0]:,.1f}–{cap.interval[1]:,.1f}]" if cap.interval else "")


def _numerics(numerics: str) -> str:
    """How a configuration's numerics are shown beside its knobs: "" at the reference's precision,
    "lower precision" when the knobs say what it lowers, else the engine's word ("q8_0 weights")."""
    if numerics == "reference":
        return ""
    return "lower precision" if numerics.startswith("lower precision") else numerics


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
        unfaithful = sum(c.status == "unfaithful" for c in t.configs)
        dropped = ", ".join(x for x in (f"{rejected} rejected" if rejected else "",
                                        f"{unfaithful} failed the fidelity gate" if unfaithful else "") if x)
        lowered = f" ({_numerics(chosen.numerics)})" if chosen is not None and _numerics(chosen.numerics) else ""
        rows.append({
            "engine": name, "chosen": picked + lowered,
            "tuned": _cap(main.capacity if main else None),
            "defaults": _cap(default.capacity if default else None),
            "gain": t.gain_text or "–",
            "tried": f"{len(t.configs)}" + (f" ({dropped})" if dropped else ""),
            "seconds": f"{t.used_s:,.0f} (budget {t.budget_s:,.0f})" + (
                f" + {t.defaults_s:,.0f} defaults' climb" if t.defaults_id else ""),
            "note": t.method + (" (lower precision allowed, gated by fidelity)" if t.lower_precision else "")})
    return rows


def tried_rows(s: LadderSummary) -> list[dict[str, Any]]:
    """Every configuration tried, engine by engine: its id, knobs, status (or the engine's line
    when it was rejected or failed), rungs reached, its capacity at the SLO, seconds measured."""
    rows = []
    for name, t in s.tuning.items():
        for c in t.configs:
            status = c.status + (" ★ chosen" if c.id == t.chosen else "")
            numerics = f" ({_numerics(c.numerics)})" if _numerics(c.numerics) else ""
            rows.append({"engine": name, "id": c.id, "config": c.label + numerics,
                         "status": status + (f": {c.reason[:240]}" if c.reason else ""), "rungs": str(c.rungs),
                         "capacity": _cap(c.ladder.capacity if c.ladder else None), "seconds": f"{c.measuring_s:,.0f}"})
    return rows


def gain_line(engine: str, tuning: EngineTuning) -> str:
    """``vllm: tuned max_num_seqs=32 (vllm#2), gain over its defaults 1.31× [1.12–1.52]; 4 configurations,
    212 s of measuring`` for the console and the report."""
    if not tuning.configs:
        return f"{engine}: not tuned — {tuning.note}"
    chosen = tuning.config(tuning.chosen)
    rejected = [c for c in tuning.configs if c.status == "rejected"]
    unfaithful = [c for c in tuning.configs if c.status == "unfaithful"]
    rej = (f"; {len(rejected)} rejected by the engine" if rejected else "") + (
        f"; {len(unfaithful)} of lower precision failed the fidelity gate" if unfaithful else "")
    n = len(tuning.configs)
    spent = f"{n} configurations, {tuning.used_s:,.0f} s of measuring{rej}"
    if tuning.interrupted:
        done = sum(c.status == "measured" for c in tuning.configs)
        return (f"{engine}: not tuned — the search was interrupted by {tuning.interrupted} before it chose "
                f"({done} of {spent})")
    what = chosen.label if chosen is not None else "?"
    if chosen is not None and _numerics(chosen.numerics):
        what += f" ({_numerics(chosen.numerics)}: its fidelity check faces the floor for other numerics)"
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


def recipe_check(recipe: Recipe, s: LadderSummary) -> str:
    """A recipe measured again (``bench run --engine-config FILE``) against the capacity it stored:
    ``vllm from its recipe (run tune-cpu): 72.6 [68.5–76.2] output tok/s per device now, ≥ 81.4
    [76.5–85.6] then: inside the recipe's interval``; ``below`` / ``above`` it otherwise, with what
    a lower bound on either side means; not compared under other SLOs or another workload."""
    head = f"{recipe.engine} from its recipe (run {recipe.run_id or '?'}): "
    ladder = s.engines.get(recipe.engine)
    if ladder is None or ladder.capacity is None:
        return head + "no capacity this time (its status is above)"
    now = ladder.capacity
    then = (_cap(CapacityAtSLO(output_tps=recipe.capacity_tps, interval=recipe.capacity_interval,
                               open=recipe.capacity_open)) if recipe.capacity_tps is not None else "none stored")
    shown = f"{_cap(now)} output tok/s per device now, {then} then"
    if recipe.workload != s.workload or recipe.slos != s.slos:
        return head + f"{shown}: not compared (the recipe was measured on {recipe.workload or '?'} under " + (
            ", ".join(f"{k} ≤ {v:g} ms" for k, v in recipe.slos.items()) or "no SLOs") + ")"
    if recipe.capacity_tps is None or recipe.capacity_interval is None or now.never_met:
        return head + shown
    lo, hi = recipe.capacity_interval
    if lo <= now.output_tps <= hi:
        return head + f"{shown}: inside the recipe's interval"
    if now.output_tps > hi:
        return head + f"{shown}: above the recipe's interval" + (
            " (consistent: the recipe's was a lower bound)" if recipe.capacity_open else "")
    return head + f"{shown}: below the recipe's interval" + (
        " (this run's ladder stopped before an SLO broke: a lower bound, raise --ladder-budget)" if now.open else
        " (the recipe's capacity did not hold up here: another machine, load on it, or the spread between starts)")
