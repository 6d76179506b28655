"""The report's "Configuration parity" section, from each run's stored ``summary.parity``
(the audit ``harness.scoring.checks.parity`` wrote; nothing is compared here)."""

from __future__ import annotations

from typing import Any

from results.store import Run

NOT_REPORTED = "not reported"


def parity_sections(runs: list[Run]) -> list[dict[str, Any]]:
    """One section per run that has an audit: ``engines``; ``rows`` (``label``, ``mark``
    ✗ unfair / ≠ differs / "", ``cells`` in engine order, "not reported" where the engine
    said nothing); ``flags`` (reasons); ``not_reported`` lines; ``notes``; ``sources`` (one line
    per engine and setting: where the value came from)."""
    out = []
    for run in runs:
        audit = run.summary.parity
        if audit is None or not audit.rows:
            continue
        rows = [{"label": r.label, "mark": "✗" if r.unfair else "≠" if r.differs else "",
                 "cells": [r.values.get(e) or NOT_REPORTED for e in audit.engines]} for r in audit.rows]
        sources = [f"{e} {r.label}: {r.sources[e]}" for e in audit.engines for r in audit.rows if e in r.sources]
        out.append({
            "run_id": run.run_id, "mode": audit.mode, "hardware": audit.hardware or "unknown",
            "engines": audit.engines, "rows": rows, "flags": [f.reason for f in audit.flags],
            "not_reported": [f"{e}: {', '.join(names)}" for e, names in audit.not_reported.items()],
            "notes": audit.notes, "sources": sources,
        })
    return out
