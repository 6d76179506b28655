"""The report of a capacity search: ``search.json`` → ``search.md`` + ``search_latency_vs_load.png``.

Renders the stored artefact only (:class:`results.schema.SearchSummary`, written by ``bench
search``): the deciding sentence and the capacity ranking as stored, a table per engine of
every probe, and one plot panel per SLO metric: each engine's measured SLO value against the
offered load (a marker at every probe, filled = pass, ``x`` = fail, a triangle at the top =
infinite: the percentile landed on a failed request), the SLO threshold as a dashed line and
a dotted vertical line at each engine's found capacity. Plot style: :mod:`reports.plots`.

With ``--repeats N`` a probe's values and verdict are those of its pooled metrics (every
request of its N repeats); the probe table says how many of the N repeats pass on their own.
"""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import ValidationError

from results.redact import redact_credentials
from results.schema import SEARCH_FILE, EngineSearch, SearchSummary
from results.schema.metric_registry import metrics
from results.store import ResultsError

from . import plots

MD_FILE = "search.md"
PLOT_FILE = "search_latency_vs_load.png"


def load_search(run_dir: Path | str) -> SearchSummary:
    """The ``search.json`` of ``run_dir``, validated. Raises :class:`ResultsError` (one line)."""
    path = Path(run_dir) / SEARCH_FILE
    if not path.is_file():
        raise ResultsError(f"{run_dir} holds no {SEARCH_FILE}: it is not a `bench search` folder")
    try:
        return SearchSummary.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "(top level)"
        raise ResultsError(f"{path}: field {where}: {err['msg']}; the file is damaged") from exc


def slo_label(key: str) -> str:
    """``"ttft_p99"`` → ``"p99 TTFT"``; ``"itl_p99_9"`` → ``"p99.9 ITL"`` (the registered metric's
    label, :mod:`results.schema.metric_registry`; an unknown name as it is)."""
    name, _, pct = key.partition("_p")
    known = {m.name: m.label for m in metrics()}
    return f"p{pct.replace('_', '.') or '99'} {known.get(name, name)}"


def _num(v: float | None, digits: int = 1) -> str:
    return "∞" if v is None or (isinstance(v, float) and math.isinf(v)) else f"{v:,.{digits}f}"


def _load(v: float | None, e: EngineSearch | None = None, integer: bool = False) -> str:
    if v is None:
        return "–"
    return f"{v:g}" if integer or (e is not None and e.integer) else f"{v:.3g}"


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def latency_vs_load(summary: SearchSummary) -> bytes | None:
    """PNG: one panel per SLO (measured value in ms vs offered load), or None without probes."""
    searched = {n: e for n, e in summary.engines.items() if e.probes}
    if not searched or not summary.slos:
        return None
    keys = list(summary.slos)
    fig = plots._figure(8, 3.8 * len(keys))
    colors = [f"C{i}" for i in range(10)]
    for row, key in enumerate(keys):
        ax = fig.add_subplot(len(keys), 1, row + 1)
        finite = [v for e in searched.values() for p in e.probes if (v := p.values.get(key)) is not None]
        top = max(finite + [summary.slos[key]]) * 1.15
        for i, (name, e) in enumerate(searched.items()):
            color = colors[i % len(colors)]
            pts = sorted(e.probes, key=lambda p: p.load)
            xs = [p.load for p in pts if p.values.get(key) is not None]
            ax.plot(xs, [p.values[key] for p in pts if p.values.get(key) is not None], color=color, linewidth=1.2,
                    label=name)
            for p in pts:
                v = p.values.get(key)
                y, marker = (top, "^") if v is None else (v, "o" if p.passed else "x")
                ax.scatter([p.load], [y], marker=marker, s=45, color=color, zorder=3,
                           facecolors=color if (p.passed or marker == "x") else "none")
            if e.capacity > 0:
                ax.axvline(e.capacity, color=color, linestyle=":", linewidth=1.4,
                           label=f"{name} capacity {_load(e.capacity, e)}")
        ax.axhline(summary.slos[key], color="k", linestyle="--", linewidth=1, label=f"SLO {summary.slos[key]:g} ms")
        loads = [p.load for e in searched.values() for p in e.probes]
        if min(loads) > 0 and max(loads) / min(loads) >= 4:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(f"offered load ({summary.unit})")
        ax.set_ylabel(f"{slo_label(key)} (ms)")
        ax.set_ylim(0, top * 1.05)
        ax.set_title(f"{slo_label(key)} vs offered load (o probe passed, x failed: every SLO judged, ▲ infinite)",
                     fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return plots._png(fig)


def _probe_text(s: SearchSummary) -> str:
    """How each probe was measured and seeded (one or two sentences)."""
    n = s.requests_per_probe or "?"
    if s.repeats <= 1:
        return (f"{n} requests per probe; probe i draws its workload with seed {s.seed} + i, so no probe reuses "
                f"another's prompts from the prefix cache.")
    return (f"each probe is {s.repeats} repeats of {n} requests back to back, judged on their pooled metrics (a "
            f"percentile over all {s.repeats} × {n} requests; each repeat's own verdict is listed); repeat k of probe i "
            f"draws its workload with seed {s.seed} + i × {s.repeats} + k, so no measurement reuses another's prompts "
            f"from the prefix cache.")


def render_markdown(summary: SearchSummary, plot: str | None) -> str:
    """``search.md`` from the stored summary (``plot``: the PNG's relative path, or None)."""
    s, rec = summary, summary.capacity_recommendation
    slos = ", ".join(f"{slo_label(k)} ≤ {v:g} ms" for k, v in s.slos.items()) or "none"
    dflt = " (the defaults: no --slo was given)" if s.slos_default else ""
    high = f", at most {_load(s.high, integer=s.search_var == 'concurrency')}" if s.high is not None else ""
    out = [
        f"# Capacity search {s.run_id}", "",
        f"Workload **{s.workload}**, search variable **{s.search_var}** ({s.unit}) from {_load(s.low)}{high}; "
        f"SLOs: {slos}{dflt}.",
        f"Budget {s.budget_s:g} s, split evenly over the engines: {s.budget_per_engine_s:.0f} s of probes per engine "
        f"(start-up and warm-up not counted). Tolerance {s.tolerance:.0%}, at most {s.max_probes} probes, "
        f"{_probe_text(s)} Wall time {s.wall_s:.0f} s.", "",
        "## Decision", "", f"> {rec.sentence if rec else 'not ranked'}", "",
        "## Capacity per engine", "",
        "| rank | engine | capacity | bracket [pass, fail) | stopped | probes | search time (s) | note |",
        "|---:|---|---:|---|---|---:|---:|---|",
    ]
    ranks = {r.engine: r for r in rec.ranking} if rec else {}
    for name, e in s.engines.items():
        r = ranks.get(name)
        note = (rec.excluded.get(name, "") if rec else "") or e.reason
        if r is not None:
            note = "; ".join(x for x in (("yardstick (reference engine)" if r.reference else ""),
                                         (f"tied with {', '.join(r.tied_with)}" if r.tied_with else ""),
                                         ("lower bound" if r.at_least else "")) if x)
        cap = ("≥ " if r is not None and r.at_least else "") + _load(e.capacity, e)
        lo, hi = e.bracket
        out.append(f"| {r.rank if r else '–'} | {_cell(name)} | {cap} | [{_load(lo, e)}, {_load(hi, e)}) | "
                   f"{e.stopped or e.status.value} | {len(e.probes)} | {e.elapsed_s:.1f} | {_cell(note)} |")
    if plot:
        out += ["", "## Latency vs load", "", f"![SLO metrics vs offered load]({plot})"]
    keys = list(s.slos)
    for name, e in s.engines.items():
        if not e.probes:
            continue
        out += ["", f"## Probes: {name}", "", _cell(e.message), "",
                "| probe | load | achieved | " + " | ".join(f"{slo_label(k)} (ms)" for k in keys)
                + " | verdict | seed | time (s) |",
                "|---:|---:|---:|" + "---:|" * len(keys) + "---|---:|---:|"]
        for p in e.probes:
            verdict = "pass" if p.passed else ("fail (saturated)" if p.saturated else "fail")
            if len(p.repeat_passed) > 1:
                verdict += f" ({sum(p.repeat_passed)} of {len(p.repeat_passed)} repeats pass)"
            vals = " | ".join(_num(p.values.get(k)) for k in keys)
            out.append(f"| {p.index} | {_load(p.load, e)} | {_num(p.achieved, 2)} | {vals} | {verdict} | "
                       f"{', '.join(map(str, p.seeds)) if p.seeds else (p.seed if p.seed is not None else '–')} | "
                       f"{_num(p.duration_s)} |")
    if rec and rec.method:
        out += ["", "## Method", "", rec.method + "."]
    return "\n".join(out) + "\n"


def write_search_report(run_dir: Path | str) -> tuple[Path, Path | None]:
    """Write ``search.md`` (and ``search_latency_vs_load.png`` when any probe ran) into
    ``run_dir`` from its ``search.json``; return their paths (the PNG's None when not drawn)."""
    run_dir = Path(run_dir)
    summary = load_search(run_dir)
    png = latency_vs_load(summary)
    plot_path = None
    if png is not None:
        plot_path = run_dir / PLOT_FILE
        plot_path.write_bytes(png)
    md = run_dir / MD_FILE
    md.write_text(redact_credentials(render_markdown(summary, PLOT_FILE if plot_path else None)), encoding="utf-8")
    return md, plot_path
