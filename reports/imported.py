"""Imported runs (``bench import``) in a report: the "Definitions differ" section and its console
lines, from each run's stored ``manifest.imported_from`` (``results.schema.ImportProvenance``).

Per imported run: every metric whose value is not plainly ours (copied from the tool's summary
under the tool's definition, recomputed from raw numbers that still carry the tool's
definition, or unavailable), the caveats, and a side-by-side table of the run's stored
metrics next to the tool's own summary numbers. Nothing here computes a metric.
"""

from __future__ import annotations

import math
from typing import Any

from results.schema import metric_value
from results.store import Run

SIDE_BY_SIDE: list[tuple[str, str, str]] = [
    ("ttft_ms.p50", "TTFT p50 ms", "{:,.2f}"), ("ttft_ms.p99", "TTFT p99 ms", "{:,.2f}"),
    ("tpot_ms.mean", "TPOT mean ms", "{:,.2f}"), ("tpot_ms.p99", "TPOT p99 ms", "{:,.2f}"),
    ("itl_ms.mean", "ITL mean ms", "{:,.2f}"), ("itl_ms.p99", "ITL p99 ms", "{:,.2f}"),
    ("e2el_ms.p99", "E2E p99 ms", "{:,.1f}"), ("output_throughput", "output tok/s", "{:,.1f}"),
    ("request_throughput", "req/s", "{:,.3f}"), ("duration_s", "duration s", "{:,.3f}"),
    ("total_output_tokens", "output tokens", "{:,.0f}"),
]
"""(key in ``Metrics`` / ``ImportProvenance.tool_summary``, label, format) of the side-by-side table."""


def _fmt(value: Any, pattern: str) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return "—"
    return pattern.format(value)


def definition_sections(runs: list[Run]) -> list[dict[str, Any]]:
    """One section per imported run: ``run_id``, ``label`` (the tool), ``version``, ``file``,
    ``differs`` (``(metric, how)`` for each metric not plainly ours), ``caveats`` and ``rows``
    (``label``, ours, the tool's, how ours was obtained: recomputed / copied / unavailable)."""
    out = []
    for run in runs:
        prov = run.manifest.imported_from
        if prov is None:
            continue
        engine = next(iter(run.summary.engines.values()), None)
        metrics = engine.metrics if engine is not None else None
        rows = []
        for key, label, pattern in SIDE_BY_SIDE:
            theirs = prov.tool_summary.get(key)
            ours = metric_value(metrics, key) if metrics is not None else None
            if theirs is None and ours is None:
                continue
            how = prov.metrics.get(key.split(".")[0], "recomputed" if prov.per_request else "copied")
            rows.append({"label": label, "ours": _fmt(ours, pattern), "theirs": _fmt(theirs, pattern),
                         "how": how.split()[0].rstrip(":")})
        out.append({"run_id": run.run_id, "label": prov.label, "version": prov.version or "version not recorded",
                    "file": prov.file, "entry": f" (entry {prov.entry} of {prov.entries})" if prov.entries > 1 else "",
                    "differs": list(prov.differing().items()), "caveats": list(prov.caveats), "rows": rows})
    return out


def caveat_lines(runs: list[Run]) -> list[str]:
    """The console's version of the section: per imported run, a heading line, then one line per
    metric that is not plainly ours, then the caveats."""
    lines = []
    for s in definition_sections(runs):
        lines.append(f"Definitions differ: {s['run_id']} was imported from {s['label']} ({s['version']}, "
                     f"{s['file']}{s['entry']})")
        lines += [f"  {metric}: {how}" for metric, how in s["differs"]]
        lines += [f"  note: {c}" for c in s["caveats"]]
    return lines
