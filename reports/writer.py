"""Write ``report.md`` and a self-contained ``report.html`` into a run folder.

The HTML embeds its plots as base64 PNG ``data:`` URIs, inlines its CSS and has no scripts; a
Content-Security-Policy meta tag (``default-src 'none'``) makes any accidental external load fail
visibly, so the file works offline and from e-mail. The Markdown references the same PNGs saved
next to it (``<stem>-plots/*.png``). Templates: ``reports/templates/report.{md,html}.j2``.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from results.recommendation import Recommendation
from results.redact import redact_credentials
from results.schema import LadderSummary, Timeline
from results.store import Run

from . import plots
from .context import _label, build_context, cdf_panels
from .fidelity import accuracy_context, fidelity_context
from .replay import replay_context
from .energy import energy_note
from .series import series_png, why_lines
from .jobs import cliff_lines, job_frontier_png, job_rows
from .frontier import capacity_rows, caveats, frontier_png, race_note, shim_note, spread_note, yardstick_note
from .winner_map import map_lines, winner_map_png
from .tuning import tried_rows, tuning_rows
from .timeline import timeline_plots


def _md_cell(value: Any) -> str:
    """Escape a value for one Markdown table cell (pipes, newlines)."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("reports", "templates"),
        autoescape=lambda name: bool(name) and name.endswith(".html.j2"),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["mdcell"] = _md_cell
    return env


def decision_context(ladder: LadderSummary, notes: list[str] | None = None) -> dict[str, Any]:
    """What the report's first screen shows: the verdict sentence, the deciding SLOs, the
    capacity table's rows, the exclusions."""
    d = ladder.decision
    return {"sentence": d.sentence if d else "No decision was made.", "winner": d.winner if d else "",
            "tie": bool(d and d.tie), "rows": capacity_rows(ladder), "yardstick_note": yardstick_note(ladder),
            "race_note": race_note(ladder), "energy_note": energy_note(ladder), "spread_note": spread_note(ladder), "why": why_lines(ladder),
            "caveats": list(notes or []),
            "slos": ", ".join(f"{k} ≤ {v:g} ms" for k, v in ladder.slos.items()) + (" (defaults)" if ladder.slos_default else ""),
            "unit": "sessions" if d is not None and d.unit == "sessions" else "requests",
            "excluded": dict(d.excluded) if d else {},
            "tuning": tuning_rows(ladder), "tried": tried_rows(ladder), "jobs": job_rows(ladder),
            "cliffs": cliff_lines(ladder)}


def render_plots(plot_data: dict[str, Any]) -> dict[str, bytes]:
    """PNG bytes per plot name (``cdf``, ``throughput_latency``, ``per_turn``), only for the
    plots that have data."""
    out: dict[str, bytes] = {}
    if plot_data["cdf"]:
        out["cdf"] = plots.cdf_grid(plot_data["cdf"], cdf_panels())
    if plot_data["throughput_latency"]:
        out["throughput_latency"] = plots.throughput_latency(plot_data["throughput_latency"],
                                                             plot_data.get("throughput_latency_label", "p99 TTFT (ms)"))
    if plot_data["per_turn"]:
        out["per_turn"] = plots.per_turn(plot_data["per_turn"])
    return out


def write_reports(runs: list[Run], recommendation: Recommendation | None, out_dir: Path,
                  timelines: dict[tuple[str, str], list[Timeline]] | None = None) -> tuple[Path, Path]:
    """Write the Markdown and HTML reports of ``runs`` into ``out_dir``; return their paths.

    One run: ``report.md`` / ``report.html``; several: ``report-compare.md`` / ``.html`` covering
    all of them. Renders only stored artefacts (summary, manifest, recommendation); the
    application completes and scores runs before calling this (``harness.app.run.reporting``).
    ``timelines``: (run id, engine) → its timelines (``harness.metrics.timeline``), plotted.
    """
    out_dir = Path(out_dir)
    stem = "report-compare" if len(runs) > 1 else "report"
    ctx = build_context(runs, recommendation)
    pngs = render_plots(ctx.pop("plot_data"))
    pngs.update(timeline_plots(runs, timelines, _label))
    ladder = runs[0].ladder if len(runs) == 1 else None
    ctx["decision"] = decision_context(ladder, caveats(runs[0].summary, runs[0].replay) + [n for n in [shim_note(ladder, runs[0].manifest)] if n]) \
        if ladder is not None else None
    ctx["fidelity"] = fidelity_context(runs[0].fidelity, ladder) if len(runs) == 1 else None
    ctx["accuracy"] = accuracy_context(runs[0].accuracy) if len(runs) == 1 else None
    ctx["replay"] = replay_context(runs[0].replay) if len(runs) == 1 else None
    if ladder is not None and (chart := frontier_png(ladder)) is not None:
        pngs["frontier"] = chart
    if ladder is not None and (chart := job_frontier_png(ladder)) is not None:
        pngs["job_frontier"] = chart
    winners = runs[0].winner_map if ladder is not None else None
    ctx["winner_map"] = map_lines(winners) if winners is not None else None
    if winners is not None and ladder is not None and (chart := winner_map_png(winners, ladder)) is not None:
        pngs["winner_map"] = chart
    for name, engine in (ladder.engines.items() if ladder is not None else []):  # each engine's own time series
        if (chart := series_png(name, engine)) is not None:
            pngs[f"series-{name}"] = chart

    plot_dir = out_dir / f"{stem}-plots"
    plot_dir.mkdir(exist_ok=True)
    md_plots = {}
    for name, data in pngs.items():
        (plot_dir / f"{name}.png").write_bytes(data)
        md_plots[name] = f"{plot_dir.name}/{name}.png"
    html_plots = {name: "data:image/png;base64," + base64.b64encode(data).decode("ascii") for name, data in pngs.items()}

    env = _environment()
    md_path, html_path = out_dir / f"{stem}.md", out_dir / f"{stem}.html"
    # credentials in a URL (a run stored before they were masked at the source) never reach a report
    md_path.write_text(redact_credentials(env.get_template("report.md.j2").render(**ctx, plots=md_plots)), encoding="utf-8")
    html_path.write_text(redact_credentials(env.get_template("report.html.j2").render(**ctx, plots=html_plots)),
                         encoding="utf-8")
    return md_path, html_path
