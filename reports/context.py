"""Runs (+ a recommendation) → the plain data the report templates and plots need.

Only measured engines (status ``ok``) contribute numbers; skipped/failed engines contribute their
status, reason and log tail. Values missing from old or partial runs read "not recorded" (manifest)
or "—" (a metric the run did not produce). Per-request values come from ``harness.metrics``
(``ttft_ms``, ``tpot_ms``, ``itls_ms``, ``e2el_ms``) on successful measured records, so the plots
use the same definitions as the summary numbers.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

import harness.metrics as metrics_module
from harness.metrics import e2el_ms, itls_ms, tpot_ms, ttft_ms
from harness.scoring import Recommendation
from results.store import Run

NOT_RECORDED = "not recorded"
DASH = "—"

# (key, header, path in the metrics dict, format)
SUMMARY_COLUMNS: list[tuple[str, str, str, str]] = [
    ("ok", "ok / failed", "", "okfail"),
    ("out_tps", "output tok/s", "output_throughput", "{:,.1f}"),
    ("req_s", "req/s", "request_throughput", "{:,.2f}"),
    ("goodput", "goodput req/s", "goodput.request_goodput", "{:,.2f}"),
    ("ttft_p50", "TTFT p50 ms", "ttft_ms.p50", "{:,.1f}"),
    ("ttft_p99", "TTFT p99 ms", "ttft_ms.p99", "{:,.1f}"),
    ("tpot_p50", "TPOT p50 ms", "tpot_ms.p50", "{:,.2f}"),
    ("tpot_p99", "TPOT p99 ms", "tpot_ms.p99", "{:,.2f}"),
    ("itl_p99", "ITL p99 ms", "itl_ms.p99", "{:,.2f}"),
    ("e2el_p99", "E2E p99 ms", "e2el_ms.p99", "{:,.1f}"),
    ("rate", "offered / achieved rate", "", "rate"),
]

CDF_PANELS = [("ttft", "TTFT (ms)"), ("tpot", "TPOT (ms)"), ("itl", "ITL (ms)"), ("e2el", "E2E latency (ms)")]

MANIFEST_SECTIONS = [
    ("Run", ["command", "harness_version", "git_sha", "created_at", "run_id", "python", "platform", "seed", "slos"]),
    ("Hardware", ["hardware"]),
    ("Model", ["model"]),
    ("Workload (incl. seed and scale)", ["workload"]),
    ("Workload statistics", ["workload_stats"]),
    ("Client calibration", ["client_calibration"]),
    ("Engine configurations", ["engines"]),
    ("Threads", ["threads"]),
    ("Validity flags", ["validity"]),
]


def _get(d: Any, path: str) -> Any:
    cur = d
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


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


def _value_text(v: Any) -> str:
    if v is None or v == "":
        return NOT_RECORDED
    if v == [] or v == {}:
        return "none"
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, default=str)
    return str(v)


def _summary_cells(m: dict[str, Any]) -> dict[str, str]:
    cells: dict[str, str] = {}
    for key, _, path, pattern in SUMMARY_COLUMNS:
        if pattern == "okfail":
            cells[key] = f"{m.get('requests_completed', DASH)} / {m.get('requests_failed', DASH)}"
        elif pattern == "rate":
            off, ach, valid = m.get("offered_rate"), m.get("achieved_rate"), m.get("rate_valid")
            flag = "" if valid is None else (" ✓" if valid else " ✗ (outside ±5 %)")
            cells[key] = f"{fmt(off, '{:g}') if off else 'max load'} / {fmt(ach, '{:.2f}')}{flag}"
        else:
            cells[key] = fmt(_get(m, path), pattern)
    return cells


def _label(run: Run, engine: str, compare: bool) -> str:
    return f"{run.run_id}/{engine}" if compare else engine


def per_request_series(run: Run, engine: str) -> dict[str, list[float]]:
    """TTFT, TPOT, E2E (one value per successful measured request) and pooled ITL gaps, in ms."""
    ok = [r for r in run.records_for(engine) if r.success]
    return {
        "ttft": [v for r in ok if (v := ttft_ms(r)) is not None],
        "tpot": [v for r in ok if (v := tpot_ms(r)) is not None],
        "e2el": [v for r in ok if (v := e2el_ms(r)) is not None],
        "itl": [g for r in ok for g in itls_ms(r)],
    }


def per_turn_ttft(run: Run, engine: str) -> dict[int, list[float]]:
    """turn_id → TTFTs (ms) of successful measured requests of that turn (agentic sessions)."""
    out: dict[int, list[float]] = {}
    for r in run.records_for(engine):
        if r.success and r.turn_id is not None and (v := ttft_ms(r)) is not None:
            out.setdefault(r.turn_id, []).append(v)
    return out


def build_context(runs: list[Run], recommendation: Recommendation | None) -> dict[str, Any]:
    """Everything the templates render, plus ``plot_data`` for :mod:`reports.plots`."""
    compare = len(runs) > 1
    rows, not_measured, engine_stats, turn_rows = [], [], [], []
    cdf: dict[str, dict[str, list[float]]] = {}
    tl_points: list[tuple[str, float, float]] = []
    turn_series: dict[str, dict[int, float]] = {}
    for run in runs:
        for name, entry in (run.summary.get("engines") or {}).items():
            entry = entry or {}
            status = entry.get("status", "unknown")
            label = _label(run, name, compare)
            display = entry.get("display_name") or name
            if status != "ok":
                not_measured.append({
                    "run_id": run.run_id, "engine": name, "display_name": display, "status": status,
                    "reason": entry.get("reason") or "no reason recorded", "log_tail": entry.get("log_tail") or "",
                })
                continue
            m = entry.get("metrics") or {}
            rows.append({"run_id": run.run_id, "engine": name, "display_name": display, "label": label,
                         "version": entry.get("version") or NOT_RECORDED, "cells": _summary_cells(m)})
            series = per_request_series(run, name)
            if any(series.values()):
                cdf[label] = series
            x, y = m.get("output_throughput"), _get(m, "ttft_ms.p99")
            if isinstance(x, (int, float)) and isinstance(y, (int, float)):
                tl_points.append((label, float(x), float(y)))
            em = entry.get("engine_metrics") or {}
            inp = m.get("total_input_tokens") or 0
            cached = m.get("cached_tokens") or 0
            hit = em.get("prefix_cache_hit_rate")
            acc = em.get("spec_acceptance_rate", em.get("spec_decode_acceptance_rate"))
            acc_len = em.get("spec_mean_accepted_length", em.get("spec_mean_acceptance_length"))
            preempt, kv_use = em.get("num_preemptions"), em.get("kv_cache_usage")
            if any(v is not None for v in (hit, acc, acc_len, preempt, kv_use)) or cached:
                engine_stats.append({
                    "label": label,
                    "prefix_cache_hit_rate": fmt(hit, "{:.1%}"),
                    "cached_fraction": fmt(cached / inp if inp else None, "{:.1%}"),
                    "spec_acceptance_rate": fmt(acc, "{:.1%}"),
                    "spec_mean_acceptance_length": fmt(acc_len, "{:.2f}"),
                    "num_preemptions": fmt(preempt, "{:,.0f}"),
                    "kv_cache_usage": fmt(kv_use, "{:.1%}"),
                })
            turns = per_turn_ttft(run, name)
            if len(turns) >= 2:
                turn_series[label] = {t: float(np.median(v)) for t, v in turns.items()}
                for t in sorted(turns):
                    v = np.asarray(turns[t])
                    turn_rows.append({"label": label, "turn": t, "n": int(v.size),
                                      "median": fmt(float(np.median(v)), "{:,.1f}"),
                                      "p90": fmt(float(np.percentile(v, 90)), "{:,.1f}")})

    manifests = []
    for run in runs:
        man = run.manifest or {}
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
                          "slos": ", ".join(f"{k} ≤ {v:g} ms" for k, v in (run.summary.get("slos") or {}).items()) or "none", "workload": run.summary.get("workload") or NOT_RECORDED})

    rec = recommendation.model_dump() if recommendation is not None else None
    return {
        "title": ("Comparison of " + ", ".join(r.run_id for r in runs)) if compare else f"Run {runs[0].run_id}",
        "compare": compare,
        "runs": [{"run_id": r.run_id, "workload": r.summary.get("workload") or NOT_RECORDED} for r in runs],
        "columns": [(k, h) for k, h, _, _ in SUMMARY_COLUMNS],
        "rows": rows,
        "not_measured": not_measured,
        "engine_stats": engine_stats,
        "turn_rows": turn_rows,
        "manifests": manifests,
        "metric_definitions": (metrics_module.__doc__ or "").strip(),
        "metric_source": "harness/metrics.py",
        "rec": rec,
        "plot_data": {"cdf": cdf, "throughput_latency": tl_points, "per_turn": turn_series},
    }
