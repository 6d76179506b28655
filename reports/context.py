"""Runs (+ a recommendation) → the plain data the report templates and plots need.

Only measured engines (status ``ok``) contribute numbers; skipped/failed engines contribute their
status, reason and log tail. Values missing from old or partial runs read "not recorded" (manifest)
or "—" (a metric the run did not produce). Everything comes from stored artefacts: the CDFs from
each engine's ``metrics.samples_ms``, the per-turn table from ``metrics.per_turn``, the metric
definitions from the manifest; nothing here computes a metric.
"""

from __future__ import annotations

import json
import math
from typing import Any

from results.recommendation import Recommendation
from results.schema import FEATURE_PROBES, EngineFacts, FeatureStatus, EngineResult, EngineStatus, Interval, Metrics, metric_value
from results.schema.metric_registry import TPS_DECIMALS, metric_figure, metrics
from results.store import Run
from reports.imported import definition_sections
from reports.parity import parity_sections
from reports.series import point_counters
from results.schema.metric_registry import usd_figure

NOT_RECORDED = "not recorded"
DASH = "—"

def summary_columns() -> list[tuple[str, str, str, str]]:
    """The summary table's columns, (key, header, path in the metrics, format): the counts and
    rates, then each registered metric's ``report`` statistics in registry order (``("ttft_p90",
    "TTFT p90 ms", "ttft_ms.p90", "metric")``, printed in the one form of ``metric_registry.figure``
    that the console and the verdict print too; p90 is what the default SLOs judge), then the rate.
    Output tok/s has ``TPS_DECIMALS`` decimals, as the capacity table's."""
    return [
        ("ok", "ok / failed", "", "okfail"),
        ("out_tps", "output tok/s", "output_throughput", f"{{:,.{TPS_DECIMALS}f}}"),
        ("req_s", "req/s", "request_throughput", "{:,.2f}"),
        ("goodput", "goodput req/s", "goodput.request_goodput", "{:,.2f}"),
        *[(f"{m.name}_{stat}", f"{m.header} {stat} {m.unit}", f"{m.field}.{stat}", "metric")
          for m in metrics() for stat in m.report],
        ("rate", "offered / achieved rate", "", "rate"),
    ]


def cdf_panels() -> list[tuple[str, str]]:
    """The CDF grid's panels, (metric name, axis title): each registered metric declared with ``cdf``."""
    return [(m.name, f"{m.label} ({m.unit})") for m in metrics() if m.cdf]

MANIFEST_SECTIONS = [
    ("Run", ["command", "harness_version", "git_sha", "created_at", "run_id", "python", "platform", "seed", "slos"]),
    ("Hardware", ["hardware"]),
    ("Model", ["model"]),
    ("Workload (incl. seed and scale)", ["workload"]),
    ("Workload statistics (the base workload; on a ladder run each point draws its own, of this shape and size per load)",
     ["workload_stats"]),
    ("Client calibration", ["client_calibration"]),
    ("Engine configurations", ["engines"]),
    ("Threads", ["threads"]),
    ("Validity flags", ["validity"]),
]


def fmt(value: Any, pattern: str = "{:,.2f}") -> str:
    """A metric cell: numbers through ``pattern``, None/NaN → "—", bools → yes/no."""
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return DASH
        return pattern.format(value)
    return str(value)


def _ms(value: float | None, metric: str) -> str:
    """A latency of ``metric`` in its one printed form (``metric_registry.metric_figure``); "—" when missing."""
    return DASH if value is None or not math.isfinite(value) else metric_figure(metric, float(value))


def _value_text(v: Any) -> str:
    if v is None or v == "":
        return NOT_RECORDED
    if v == [] or v == {}:
        return "none"
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, default=str)
    return str(v)


def _summary_cells(m: Metrics, intervals: dict[str, Interval]) -> dict[str, str]:
    """One row of the summary table; a number with a stored 95 % interval reads ``v [low–high]``."""
    cells: dict[str, str] = {}
    for key, _, path, pattern in summary_columns():
        if pattern == "okfail":
            cells[key] = f"{m.requests_completed} / {m.requests_failed}" + (
                f" (+{m.requests_incomplete} incomplete)" if m.requests_incomplete else "")
        elif pattern == "rate":
            off, ach, valid = m.offered_rate, m.achieved_rate, m.rate_valid
            flag = "" if valid is None else (" ✓" if valid else " ✗ (outside ±5 %)")
            cells[key] = f"{fmt(off, '{:g}') if off else 'no rate limit'} / {fmt(ach, '{:.2f}')} req/s{flag}"
        elif pattern == "metric":
            v, ci = metric_value(m, path), intervals.get(path)
            bounds = (ci.low, ci.high) if ci is not None else ()
            cells[key] = DASH if v is None or math.isnan(v) else metric_figure(path, float(v), *bounds)
        else:
            cells[key] = fmt(metric_value(m, path), pattern)
            ci = intervals.get(path)
            if ci is not None and ci.high > ci.low:
                cells[key] += f" [{fmt(ci.low, pattern)}–{fmt(ci.high, pattern)}]"
    return cells


def _ladder_counters(run: Run, name: str, entry: EngineResult) -> dict[str, Any]:
    """A ladder run's engine counters, which its summary entry does not hold: those of its series at
    the point its metrics were read at (``EngineResult.ladder_point``: the capacity point),
    :func:`reports.series.point_counters`; {} for other runs, or without a series there."""
    ladder = run.ladder.engines.get(name) if run.ladder is not None else None
    at = next((p for p in ladder.points if p.index == entry.ladder_point), None) if ladder is not None else None
    return point_counters(at) if at is not None else {}


def _bytes(value: float | None) -> str:
    """Binary units ("1.5 GiB", "512.0 MiB"); "—" for None."""
    if value is None:
        return DASH
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(value) >= size:
            return f"{value / size:,.1f} {unit}"
    return f"{value:,.0f} B"


def _resource_cells(entry: EngineResult, facts: EngineFacts) -> dict[str, str]:
    """One row of the resource table: what the engine's process group used in its measured phase
    (``EngineResult.resources``), its install size (the manifest's ``install_bytes``), time to
    healthy and cost (``EngineResult.cost``), each "—" (or the recorded reason) where missing."""
    use, cost = entry.resources, entry.cost
    cells = {key: DASH for key in ("rss", "pss", "cpu", "cpu_peak", "gpu_mem", "gpu_util", "j_tok")}
    if use is not None and use.samples:
        share = (f" ({use.mean_cpu_percent / use.cpu_cores / 100:.0%} of {use.cpu_cores} cores)"
                 if use.mean_cpu_percent is not None and use.cpu_cores else "")
        cells.update(rss=_bytes(use.peak_rss_bytes), pss=_bytes(use.peak_pss_bytes),
                     cpu=fmt(use.mean_cpu_percent, "{:,.0f}%") + share, cpu_peak=fmt(use.peak_cpu_percent, "{:,.0f}%"),
                     gpu_mem=_bytes(use.peak_gpu_memory_bytes), gpu_util=fmt(use.mean_gpu_util_percent, "{:,.0f}%"),
                     j_tok=fmt(use.energy_per_output_token_j, "{:.3g}"))
    elif use is not None and use.note:
        cells["rss"] = use.note
    else:
        cells["rss"] = NOT_RECORDED
    size = facts.install_bytes
    cells["install"] = _bytes(size) if isinstance(size, (int, float)) else str(facts.install_note or NOT_RECORDED)
    cells["healthy"] = fmt(entry.startup_s, "{:,.1f}")
    cells["usd"] = DASH if cost is None or cost.usd_per_1m_output_tokens is None else \
        usd_figure(cost.usd_per_1m_output_tokens, cost.low, cost.high)
    return cells


def _resource_note(runs: list[Run]) -> str:
    """How the resource table was measured and which price its cost uses."""
    prices = sorted({f"${e.cost.usd_per_hour:g}/h ({e.cost.price_source})" for r in runs for e in r.summary.engines.values()
                     if e.cost is not None})
    gpu = sorted({e.resources.gpu_note for r in runs for e in r.summary.engines.values()
                  if e.resources is not None and e.resources.gpu_note})
    intervals = sorted({e.resources.interval_s for r in runs for e in r.summary.engines.values()
                        if e.resources is not None and e.resources.samples})
    every = f"every {', '.join(f'{i:g}' for i in intervals)} s" if intervals else "periodically"
    return ("Sampled " + every + " over the engine's whole process group during its measured phase (adapters/runtime/resources.py): "
            "RSS counts shared pages once per process, PSS splits them between processes (the group's real footprint); "
            "CPU is % of one core. Install size: the engine's virtual environment on disk. Cost: "
            + ("; ".join(prices) if prices else "no price recorded (bench run --price-per-hour)")
            + " / (output tok/s × 3600) × 1e6, bracketed by the throughput's interval where it has one."
            + (f" GPU: {'; '.join(gpu)}." if gpu else ""))


def _judged_ttft(runs: list[Run]) -> str:
    """``p90`` when the runs' SLOs judge TTFT at p90 (a ladder run's), else ``p99``."""
    keys = {k for r in runs for k in ((r.ladder.slos if r.ladder is not None else {}) or r.summary.slos or {})}
    pct = sorted({k.partition("_")[2] for k in keys if k.startswith("ttft_p")})
    return pct[0] if len(pct) == 1 and pct[0] in ("p50", "p90", "p95", "p99") else "p99"


def _plot_label(run: Run, name: str, label: str) -> str:
    """``vllm at 4 in flight`` for a ladder run (its metrics are those of one ladder point: the
    highest that passed below its capacity, else its lowest), so plots that compare engines say
    that each is shown at its own load; ``label`` otherwise."""
    ladder = run.ladder.engines.get(name) if run.ladder is not None else None
    if ladder is None or ladder.capacity is None or not ladder.points:
        return label
    load = ladder.capacity.bracket[0] if ladder.capacity.bracket[0] is not None else min(p.load for p in ladder.points)
    return f"{label} at {load:g} in flight"


def interval_note(runs: list[Run]) -> str:
    """What the brackets of the summary table are, from the runs' repeat counts."""
    repeats = sorted({r.summary.repeats for r in runs})
    several = sorted(n for r in runs for n, e in r.summary.engines.items() if len(e.repeats) > 1)
    if repeats == [1] and several:  # a ladder run: the decisive engines' points were measured on fresh starts
        return (f"Brackets: 95 % intervals; {', '.join(several)}: over the measurements of the point shown (fresh "
                "starts; two-stage bootstrap, run-to-run noise included); the others: over the requests of one "
                "measurement (no run-to-run noise; rates have none).")
    if repeats == [1]:
        return ("Brackets: 95 % bootstrap intervals over the requests of one repeat; rates have none and "
                "run-to-run noise was not measured (bench run --repeats 2 or more measures it).")
    return (f"Brackets: 95 % intervals over {', '.join(map(str, repeats))} interleaved repeats (two-stage bootstrap: "
            "repeats, then requests; rates: the median over repeats).")


def timing_line(run: Run) -> str | None:
    """A duration-based run's header line, from its manifest's workload spec and each engine's
    ``metrics.run_window``: ``"duration 60 s, drain bound 30 s; linear ramp 1 → 5 req/s (vLLM's
    --ramp-up-strategy); own: metrics exclude the first 10 s and the last 5 s: 37 of 412
    requests, 2 incomplete"``; None for a count-based run."""
    spec = run.manifest.workload or {}
    parts = []
    if spec.get("duration_s") is not None:
        drain = spec.get("drain_timeout_s")
        parts.append(f"duration {spec['duration_s']:g} s" + (f", drain bound {drain:g} s" if drain is not None else ""))
    if spec.get("ramp_up_strategy"):
        parts.append(f"{spec['ramp_up_strategy']} ramp {spec.get('ramp_up_start_rps'):g} → {spec.get('ramp_up_end_rps'):g} "
                     "req/s (vLLM's --ramp-up-strategy)")
    for name, entry in run.summary.engines.items():
        m = entry.metrics
        if m is None or m.run_window is None:
            continue
        said = [text] if (text := m.run_window.excluded_text()) else []
        said += [f"{m.requests_incomplete} incomplete (cut by the drain bound)"] if m.requests_incomplete else []
        if said:
            parts.append(f"{name}: {', '.join(said)}")
    return "; ".join(parts) or None


def _label(run: Run, engine: str, compare: bool) -> str:
    return f"{run.run_id}/{engine}" if compare else engine


FEATURE_MARKS = {FeatureStatus.VERIFIED: "✓", FeatureStatus.FAILED: "✗", FeatureStatus.UNSUPPORTED: "–"}
"""The feature-probe matrix's marks (the console's too: ``harness.app.trial.feature_phase.SYMBOLS``)."""


def feature_matrix(runs: list[Run], compare: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """The feature-probe matrix from each engine's stored ``feature_probes``: one row per probed
    engine (``label``, ``cells``: probe → mark, "not probed" where the engine has no verdict for
    it) and one line per verdict with its detail and time."""
    rows, details = [], []
    for run in runs:
        for name, entry in run.summary.engines.items():
            probes = entry.feature_probes
            if not probes:
                continue
            label = _label(run, name, compare)
            rows.append({"label": label, "cells": {f: FEATURE_MARKS[probes[f].status] if f in probes else "not probed"
                                                   for f in FEATURE_PROBES}})
            for feature in [f for f in FEATURE_PROBES if f in probes] + [f for f in probes if f not in FEATURE_PROBES]:
                probe = probes[feature]
                took = f" ({probe.elapsed_ms / 1000:,.1f} s)" if probe.elapsed_ms is not None else ""
                details.append(f"{label} {feature}: {FEATURE_MARKS[probe.status]} {probe.status.value}{took} — "
                               f"{probe.detail or 'no detail recorded'}")
    return rows, details


def build_context(runs: list[Run], recommendation: Recommendation | None) -> dict[str, Any]:
    """Everything the templates render, plus ``plot_data`` for :mod:`reports.plots`."""
    compare = len(runs) > 1
    rows, not_measured, engine_stats, turn_rows, resource_rows = [], [], [], [], []
    degraded: list[dict[str, str]] = []  # measured engines some of whose requests failed
    cdf: dict[str, dict[str, list[float]]] = {}
    tl_points: list[tuple[str, float, float]] = []
    turn_series: dict[str, dict[int, float]] = {}
    tl_pct = _judged_ttft(runs)  # the throughput-latency chart's y: the TTFT percentile the SLO judges (p99 without one)
    for run in runs:
        for name, entry in run.summary.engines.items():
            label = _label(run, name, compare)
            display = entry.display_name or name
            m = entry.metrics
            if entry.status is not EngineStatus.OK or m is None:
                not_measured.append({
                    "run_id": run.run_id, "engine": name, "display_name": display, "status": entry.status.value,
                    "reason": entry.reason or "no reason recorded", "log_tail": entry.log_tail,
                })
                continue
            if entry.shown_status == "degraded":  # listed with its failures, and still in the tables
                failed, total = m.requests_failed, m.requests_failed + m.requests_completed
                classes = ", ".join(f"{cls} ×{n}" + (f" ({m.error_examples[cls][:120]})" if cls in m.error_examples else "")
                                    for cls, n in sorted(m.failures_by_class.items(), key=lambda kv: -kv[1]))
                degraded.append({"run_id": run.run_id, "engine": name,
                                 "reason": f"{failed} of {total} measured requests failed: {classes}"})
            rows.append({"run_id": run.run_id, "engine": name, "display_name": display, "label": label,
                         "version": entry.version or NOT_RECORDED, "cells": _summary_cells(m, entry.intervals)})
            resource_rows.append({"label": label, **_resource_cells(entry, run.manifest.engines.get(name) or EngineFacts())})
            series = m.samples_ms.model_dump() if m.samples_ms is not None else {}
            at = _plot_label(run, name, label)  # a ladder run: each engine's metrics come from one of its points
            if any(series.values()):
                cdf[at] = series
            x, y = m.output_throughput, getattr(m.ttft_ms, tl_pct, None)
            if isinstance(x, (int, float)) and isinstance(y, (int, float)):
                tl_points.append((at, float(x), float(y)))
            em = entry.engine_metrics or _ladder_counters(run, name, entry)  # a ladder run's: from its series
            inp = m.total_input_tokens
            cached = m.cached_tokens
            hit = em.get("prefix_cache_hit_rate")
            acc = em.get("spec_acceptance_rate", em.get("spec_decode_acceptance_rate"))
            acc_len = em.get("spec_mean_accepted_length", em.get("spec_mean_acceptance_length"))
            preempt, kv_use = em.get("num_preemptions"), em.get("kv_cache_usage")
            caching = entry.effective.prefix_caching if entry.effective is not None else None
            if any(v is not None for v in (hit, acc, acc_len, preempt, kv_use)) or cached or caching:
                # an engine running with prefix caching gets a row even when it reports no counter of it
                engine_stats.append({
                    "label": label,
                    "prefix_cache_hit_rate": fmt(hit, "{:.1%}"),
                    "cached_fraction": fmt(cached / inp if inp else None, "{:.1%}"),
                    "spec_acceptance_rate": fmt(acc, "{:.1%}"),
                    "spec_mean_acceptance_length": fmt(acc_len, "{:.2f}"),
                    "num_preemptions": fmt(preempt, "{:,.0f}"),
                    "kv_cache_usage": fmt(kv_use, "{:.1%}"),
                    # engine counters: deltas over the measured phase, or cumulative in older runs
                    "scope": (em.get("prefix_cache_hit_rate_scope") or em.get("counters_scope") or "since engine start")
                    if em else "prefix caching on; the engine reports no counter of it",
                })
            turns = {int(t): row for t, row in (m.per_turn or {}).items() if row.ttft_ms_p50 is not None}
            if len(turns) >= 2:
                turn_series[at] = {t: float(row.ttft_ms_p50) for t, row in turns.items()}
                for t in sorted(turns):
                    row = turns[t]
                    turn_rows.append({"label": label, "turn": t, "n": row.requests,
                                      "median": _ms(row.ttft_ms_p50, "ttft"), "p90": _ms(row.ttft_ms_p90, "ttft")})

    manifests = []
    for run in runs:
        man = run.manifest.model_dump(mode="json", exclude_none=False)
        sections = []
        for title, keys in MANIFEST_SECTIONS:
            items = []
            for k in keys:
                v = man.get(k)
                if isinstance(v, dict) and v:
                    items += [(f"{k}.{kk}" if len(keys) > 1 else kk, _value_text(vv)) for kk, vv in v.items()]
                elif isinstance(v, list) and k == "command":
                    items.append((k, " ".join(map(str, v))))
                else:
                    items.append((k, _value_text(v)))
            sections.append({"title": title, "entries": items})
        manifests.append({"run_id": run.run_id, "run_dir": str(run.run_dir), "sections": sections,
                          "slos": ", ".join(f"{k} ≤ {v:g} ms" for k, v in run.summary.slos.items()) or "none",
                          "workload": run.summary.workload or NOT_RECORDED})

    rec = recommendation.model_dump() if recommendation is not None else None
    feature_rows, feature_details = feature_matrix(runs, compare)
    return {
        "title": ("Comparison of " + ", ".join(r.run_id for r in runs)) if compare else f"Run {runs[0].run_id}",
        "compare": compare,
        "runs": [{"run_id": r.run_id, "workload": r.summary.workload or NOT_RECORDED, "timing": timing_line(r)}
                 for r in runs],
        "columns": [(k, h) for k, h, _, _ in summary_columns()],
        "interval_note": interval_note(runs),
        "rows": rows,
        "not_measured": not_measured,
        "degraded": degraded,
        "parity": parity_sections(runs),  # the configuration parity audit of each run (summary.parity)
        "engine_stats": engine_stats,
        "resource_rows": resource_rows,
        "resource_note": _resource_note(runs),
        "turn_rows": turn_rows,
        "manifests": manifests,
        "metric_definitions": runs[0].manifest.metric_definitions or NOT_RECORDED,
        "metric_source": "harness/metrics/",
        "rec": rec,
        "feature_columns": list(FEATURE_PROBES),
        "feature_rows": feature_rows,
        "feature_details": feature_details,
        "definitions_differ": definition_sections(runs),  # imported runs: metrics under another tool's definition
        "cdf_alt": f"{', '.join(m.header for m in metrics() if m.cdf)} latency CDFs",  # the registered panels
        "plot_data": {"cdf": cdf, "throughput_latency": tl_points, "per_turn": turn_series,
                      "throughput_latency_label": f"{tl_pct} TTFT (ms)"},
    }
