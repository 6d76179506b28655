"""The decision at a glance: the throughput–interactivity frontier and the capacity table, from
``ladder.json`` only (:class:`results.schema.LadderSummary`).

**The frontier** (``frontier.png``, the InferenceX view): one curve per engine through its
ladder points in load order, x = tokens/s per user (interactivity: 1000 / TPOT at the percentile
the TPOT SLO judges, so a point left of the SLO line is one that failed it; MLPerf Endpoints'
1000 / TPOT p90), y =
output tokens/s per device; a point that failed the SLO is drawn hollow. The TPOT SLO is a
vertical line at 1000 / threshold: everything left of it is too slow for a user. Each engine's
capacity at the SLO is a large marker with its 95 % interval as a vertical whisker; the
winner's is a star; the reference engine is dashed (a yardstick). With ``--tune``, each
engine's other configurations are dotted and faded behind its curve, under a broad translucent
line: the envelope over all its configurations (InferenceX draws an engine's frontier so).
"""

from __future__ import annotations

import math

from typing import Any

from results.schema import EngineLadder, LadderSummary
from results.schema.ladder import tps_interval_text

from .energy import energy_cell, energy_usd
from .plots import _figure, _png
from results.schema.metric_registry import usd_figure

LOG_SPREAD = 10.0  # the throughput axis is logarithmic when the plotted points span more than this factor


def _capacity_xy(ladder: EngineLadder) -> tuple[float, float] | None:
    """Where the capacity sits on the frontier: its throughput, at the interactivity
    interpolated between the points that bracket it by load."""
    cap = ladder.capacity
    if cap is None or cap.never_met or not ladder.points:
        return None
    pts = [p for p in ladder.points if p.per_user_tps]
    if not pts:
        return None
    lo = max((p for p in pts if p.load <= cap.load), key=lambda p: p.load, default=pts[0])
    hi = min((p for p in pts if p.load >= cap.load), key=lambda p: p.load, default=pts[-1])
    t = 0.0 if hi.load == lo.load else (cap.load - lo.load) / (hi.load - lo.load)
    return lo.per_user_tps + t * (hi.per_user_tps - lo.per_user_tps), cap.output_tps  # type: ignore[operator]


def frontier_png(s: LadderSummary) -> bytes | None:
    """The frontier chart (module docstring); None when no engine has a measured point."""
    curves = {n: e for n, e in s.engines.items() if any(p.per_user_tps for p in e.points)}
    if not curves:
        return None
    fig = _figure(9, 5.6)
    ax = fig.add_subplot(1, 1, 1)
    winner = s.decision.winner if s.decision else ""
    colors = engine_colors(s)
    for name, e in curves.items():
        color = colors[name]
        pts = [p for p in sorted(e.points, key=lambda p: p.load) if p.per_user_tps]
        xs, ys = [p.per_user_tps for p in pts], [p.output_tps for p in pts]
        label = name + (" (yardstick)" if e.reference else "") + (" — excluded" if e.excluded else "")
        ax.plot(xs, ys, "--" if e.reference else "-", color=color, linewidth=1.6, label=label, alpha=0.5 if e.excluded else 1)
        for p, x, y in zip(pts, xs, ys):
            ax.plot([x], [y], "o", color=color, markerfacecolor=color if p.passed else "white", markersize=5)
            ax.annotate(str(p.load), (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7, color=color)
        _tried(ax, s, name, color)
        xy = _capacity_xy(e)
        if xy is not None and e.capacity is not None:
            star = name == winner
            ax.plot([xy[0]], [xy[1]], "*" if star else "D", color=color, markersize=14 if star else 8,
                    markerfacecolor="white" if e.capacity.open else color, markeredgecolor="black", alpha=0.85, zorder=5)
            if e.capacity.interval is not None:
                lo, hi = e.capacity.interval
                ax.plot([xy[0], xy[0]], [lo, hi], color=color, linewidth=2.2, zorder=4)
    tpot = next((v for k, v in s.slos.items() if k.startswith("tpot")), None)
    if tpot:
        ax.axvline(1000.0 / tpot, color="crimson", linestyle=":", linewidth=2.0,
                   label=f"TPOT SLO ({1000.0 / tpot:.3g} tok/s per user; slower to its left)")
    tpot_key = next((k for k in s.slos if k.startswith("tpot_p")), "")
    judged = tpot_key.partition("_p")[2].replace("_", ".") if tpot_key else ""
    ax.set_xlabel(f"interactivity: tokens/s per user (1000 / {'p' + judged if judged else 'median'} TPOT"
                  f"{', the percentile the SLO judges' if judged else ''})")
    ys = [p.output_tps for e in curves.values() for p in e.points if p.output_tps > 0]
    log = bool(ys) and max(ys) > LOG_SPREAD * min(ys)  # engines 10x apart: a linear axis flattens the slow ones
    if log:
        ax.set_yscale("log")
    ax.set_ylabel("output tokens/s per device (each engine's own devices)" + (", log scale" if log else ""))
    ax.set_title(f"Throughput vs interactivity, {s.workload}: points labelled by load (in flight), hollow = failed the SLO;\n"
                 "★ winner, ◆ capacity at the SLO with its 95 % interval (hollow: a lower bound, the ladder stopped first)",
                 fontsize=9)
    ax.grid(True, alpha=0.3, which="both")
    if not log:
        ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the chart: never over a curve
    return _png(fig)


def _tried(ax: Any, s: LadderSummary, name: str, color: Any) -> None:
    """``--tune``: the engine's other configurations faded behind its curve, and the envelope over
    all of them (``EngineTuning.envelope``, the Pareto frontier of their passing points) as a
    broad translucent line."""
    tuning = s.tuning.get(name)
    if tuning is None or not tuning.configs:
        return
    for c in tuning.configs:
        cpts = [p for p in sorted(c.ladder.points, key=lambda p: p.load) if p.per_user_tps] if c.ladder else []
        if cpts:
            ax.plot([p.per_user_tps for p in cpts], [p.output_tps for p in cpts], ":", color=color, linewidth=1.0,
                    alpha=0.3, marker=".", markersize=4)
    measured = sum(c.status == "measured" for c in tuning.configs)
    if tuning.envelope:
        ax.plot([x for x, _ in tuning.envelope], [y for _, y in tuning.envelope], "-" if len(tuning.envelope) > 1 else "o",
                color=color, linewidth=6, markersize=14, alpha=0.18,
                label=f"{name}: envelope over its {measured} measured configurations (tried ones dotted)")


def engine_colors(s: LadderSummary) -> dict[str, Any]:
    """Each plotted engine's colour, the same on every chart of the run (the frontier's order:
    the engines with a measured point, as ``ladder.json`` lists them)."""
    curves = [n for n, e in s.engines.items() if any(p.per_user_tps for p in e.points)]
    return dict(zip(curves, _colors(len(curves))))


def _colors(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def capacity_rows(s: LadderSummary) -> list[dict[str, Any]]:
    """The compact table: one row per engine, the decision's order first (winner, ranking,
    yardsticks, then the excluded): capacity with its interval, load, requests/s (agentic: and
    jobs per hour per device, ``jobs``; – otherwise), $/1M output
    tokens, devices for the target load, and the gates (passed, or the one line)."""
    d = s.decision
    order = ([d.winner] if d and d.winner else []) + [n for n in (d.ranking if d else []) if n != (d.winner if d else "")]
    order += [n for n in (d.yardsticks if d else []) if n not in order]
    order += [n for n in s.engines if n not in order]
    unit = "sessions" if d is not None and d.unit == "sessions" else "req"
    rows = []
    for name in order:
        e = s.engines[name]
        cap = e.capacity
        ok = cap is not None and not cap.never_met
        ge = "≥ " if ok and cap.open else ""  # type: ignore[union-attr]
        rows.append({
            "engine": name + (" ★" if d and name == d.winner else "") + (" (yardstick)" if e.reference else "")
                      + (f" ({e.devices} devices)" if e.devices and e.devices > 1 else ""),
            "capacity": cap.tps_text if ok else ("0" if cap is not None else "–"),  # type: ignore[union-attr]
            "interval": _interval(cap) if ok else "–",
            "load": cap.load_text if ok else "–",  # type: ignore[union-attr]
            "rate": f"{ge}{cap.request_rate:.3g} {unit}/s" if ok else "–",  # type: ignore[union-attr]
            "jobs": (cap.jobs_text or "–") if ok else "–",  # type: ignore[union-attr]  (agentic: jobs/h per device)
            "usd": _usd(cap) if ok else "–",
            "energy": energy_cell(cap.energy, cap.energy_provisioned) if ok else "–",  # type: ignore[union-attr]
            "devices": _devices(cap) if ok else "–",
            "gates": _short(e.excluded or _passed(e)),
            "stopped": _stopped(e) + ("; client-limited at " + ", ".join(str(p.load) for p in e.points if p.client_limited)
                                    + " (more --client-workers)" if any(p.client_limited for p in e.points) else ""),
        })
    return rows


YARDSTICK_NOTE = ("(yardstick): the reference engine of this repository (own_engine/), on the chart and in the table "
                  "as a yardstick on the same scale, never recommended: it is built to be read and to measure "
                  "mechanisms, not run as a production server.")


def caveats(summary: Any, replay: Any = None) -> list[str]:
    """The parity audit's unfair flags of a run (``RunSummary.parity``), one line each, for under
    the verdict: a difference that changes what was measured belongs beside the answer, not only in
    the parity section (e.g. prefix caching on for some engines only); then the replay-fidelity
    certificate's flags (``replay``: the run's ``ReplayCertificate``, :func:`reports.replay.replay_caveats`)."""
    from .replay import replay_caveats

    parity = getattr(summary, "parity", None)
    return [f"Caveat (configuration parity): {flag.reason}" for flag in (parity.flags if parity is not None else [])] + \
        replay_caveats(replay)


def shim_note(s: LadderSummary, manifest: Any) -> str:
    """One line under the verdict when the engine it names (the winner, else the leader) ran
    behind a server of this repository around the engine's library (a shim): what ran, and the
    nearest production server ("" otherwise, or without the manifest's facts)."""
    d = s.decision
    name = (d.winner or d.leader) if d is not None else ""
    facts = manifest.engines.get(name) if manifest is not None and name else None
    extra = (facts.model_extra or {}) if facts is not None else {}
    if not extra.get("shim"):
        return ""
    return (f"What ran: {name} is {facts.display_name or name} behind this repository's server {extra['shim']} (an "
            f"OpenAI-compatible shim around the engine's library); the nearest production server: "
            f"{extra.get('production_server') or 'none known'}. bench serve RECIPE starts it as measured.")


def spread_note(s: LadderSummary) -> str:
    """One line under the capacity table on the run-to-run noise its intervals hold: the spread
    between measurements (``harness.scoring.capacity.spread``) with its degrees of freedom and
    where they came from; or that none was estimated ("" without a capacity)."""
    caps = [e.capacity for e in s.engines.values() if e.capacity is not None and not e.capacity.never_met]
    if not caps:
        return ""
    known = next((c for c in caps if c.spread_df), None)
    prior = s.spread_prior.runs if s.spread_prior is not None else []
    earlier = f"{len(prior)} earlier run{'s' if len(prior) != 1 else ''} on this machine" if prior else ""
    if known is None:
        return ("Intervals hold the requests' noise only: the spread between measurements (a machine's, run to run) "
                "was not estimated (no point measured twice in whole, within this run or across the earlier runs on this "
                "machine it took in; (1 run) beside each).")
    stored = s.spread_prior
    prior_df = (stored.df if stored.df is not None else sum(len(g) - 1 for g in stored.groups)) if stored is not None else 0
    own = known.spread_df > prior_df
    if own and earlier:
        where = f"this run's points measured twice and {earlier}: {', '.join(prior)}"
    elif own:
        where = "this run's points measured twice"
    else:
        where = f"{earlier}: {', '.join(prior)}; this run measured no point twice"
    tau = known.spread or 0.0
    return (f"Intervals hold the spread between measurements: ±{100 * (math.exp(tau) - 1):.1f} % per measurement "
            f"(ν = {known.spread_df}; from {where}), moving each point's latency and throughput in every resample.")


def yardstick_note(s: LadderSummary) -> str:
    """One line under the capacity table explaining the yardstick, where one was measured ("" else)."""
    names = [n for n, e in s.engines.items() if e.reference and e.capacity is not None]
    return f"{', '.join(names)} {YARDSTICK_NOTE}" if names else ""


def race_note(s: LadderSummary) -> str:
    """One line under the capacity table naming the engines the main job measured no more
    because they could not reach the leader (``EngineLadder.race``), and the measured engines
    whose output fidelity it did not check because the verdict does not rest on them; "" when none."""
    out = [f"{n} {e.race}" for n, e in s.engines.items() if e.race]
    asked = any(e.fidelity is not None for e in s.engines.values())  # the run checked fidelity at all
    checked = asked and any(e.fidelity is None and e.race for e in s.engines.values())
    why = " (their output fidelity was not checked: an engine that cannot win needs none)" if checked else ""
    lines = [f"Out of the race, measured no more{why}: " + "; ".join(out) + "."] if out else []
    spared = [n for n, e in s.engines.items() if asked and e.fidelity is None and not e.race and not e.reference
              and not e.excluded and e.status.value == "ok" and e.points]
    if spared:
        lines.append(f"Output fidelity not checked for {', '.join(spared)}: the verdict does not rest on "
                     f"{'it' if len(spared) == 1 else 'them'} (only the leader's, and a runner-up's not separated "
                     "from it, is checked).")
    return " ".join(lines)


def _stopped(e: EngineLadder) -> str:
    """Why the ladder stopped, in words that match the capacity: ``budget`` only for a lower
    bound; an SLO that broke first, with the bisection the budget cut short, reads
    ``slo (bisection cut by budget)``; an engine the main job measured no more because it could
    not reach the leader (``EngineLadder.race``) reads ``out of the race``."""
    if e.race or e.stopped == "race":
        return "out of the race"
    cap = e.capacity
    if cap is not None and not cap.open and cap.bracket[1] is not None and e.stopped in ("budget", "max_points"):
        return f"slo (bisection cut by {'budget' if e.stopped == 'budget' else 'the point count'})"
    return e.stopped


def _passed(e: Any) -> str:
    """The gates' cell of an engine none excluded: ``passed``, or ``passed (--allow-unchecked):
    fidelity not checked (…)`` when that flag let an engine whose check did not vouch for it compete."""
    if e.status.value != "ok":
        return e.reason or e.status.value
    why = e.fidelity.unchecked() if e.fidelity is not None and e.fidelity.passed is not False else ""
    return f"passed (--allow-unchecked): {why}" if why else "passed"


def _interval(cap: Any) -> str:
    """``[12.2–15.1]``; ``(1 run)`` after it when the points it rests on were measured once and
    no point of the run twice (no spread between measurements to widen it by), so it holds the
    requests' noise but not the run-to-run noise."""
    if cap.interval is None:
        return "–"
    fails = getattr(cap, "lowest_fails", 0.0) or 0.0
    near = f" (its lowest load fails in {fails:.0%} of resamples)" if fails >= 0.025 else ""  # why it reaches 0
    return tps_interval_text(cap.interval) + (" (1 run)" if cap.measurements < 2 and not getattr(cap, "spread_df", 0) else "") + near


def _usd(cap: Any) -> str:
    """``$0.31 (hour); $0.021 (energy, RAPL)``: $/1M output tokens from the device-hour's price
    and from --price-per-kwh's, each labelled when both are there (``$0.31`` alone; – without either)."""
    energy = energy_usd(cap.energy, cap.energy_provisioned)
    hour = f"{'≤ ' if cap.open else ''}{usd_figure(cap.usd_per_1m_output_tokens)}" + (" (hour)" if energy else "") \
        if cap.usd_per_1m_output_tokens else ""
    return "; ".join(x for x in (hour, energy) if x) or "–"


def _devices(cap: Any) -> str:
    """``3 ($0.20/h)``: the devices ``--target-load`` needs at the SLO and their cost (``≤``: at
    most, from a capacity that is a lower bound); – without a target."""
    if not cap.devices_needed:
        return "–"
    le = "≤ " if cap.open else ""
    return f"{le}{cap.devices_needed}" + (f" ({le}${cap.usd_per_hour:.3g}/h)" if cap.usd_per_hour is not None else "")


def _short(reason: str, limit: int = 110) -> str:
    """A gate's reason for a table cell: its first clause, at most ``limit`` characters."""
    first = reason.split(" - ")[0].split("; ")[0]
    return first if len(first) <= limit else first[:limit - 1] + "…"
