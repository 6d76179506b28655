"""The replay-fidelity certificate (``replay.json``, :mod:`harness.metrics.replay`) as every place
prints it: the console after a run, the report's section and the caveat under the verdict read
the same cells from here, so a statistic reads the same wherever it is shown."""

from __future__ import annotations

from typing import Any

from results.schema.replay import ReplayCertificate

COLUMNS = ("statistic", "trace", "built", "sent", "sent vs built", "", "coverage")


def number(v: float | None, unit: str) -> str:
    """A statistic's value: a share as a percentage (1 decimal), seconds with 2 decimals,
    tokens and counts with 1; "—" for none."""
    if v is None:
        return "—"
    return f"{v:.1%}" if unit == "share" else (f"{v:.2f}" if unit == "s" else f"{v:,.1f}")


def _plural(n: int, word: str) -> str:
    """``"1 session"``, ``"2 sessions"``, with thousands separators."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def deviation(v: float | None, unit: str) -> str:
    """A deviation: a share's in points (``+1.5 pt``), others relative (``-50.0%``); "—" for none."""
    if v is None:
        return "—"
    text = f"{v * 100:+.1f} pt" if unit == "share" else f"{v:+.1%}"
    return text.replace("-0.0", "+0.0")  # a deviation that rounds to nothing has no sign


def scaling(cert: ReplayCertificate) -> str:
    """``"scale 1, time_scale 1"`` (and the shipped set's think-time scale)."""
    return f"scale {cert.scale:g}, time_scale {cert.time_scale:g}" + (
        f", think_time_scale {cert.think_time_scale:g}" if cert.think_time_scale is not None else "")


def flagged_text(cert: ReplayCertificate, name: str) -> str:
    """``"output p90 -50.0%, output p99 -50.0%"``: an engine's flagged statistics with their
    deviations ("" when none is flagged)."""
    e = cert.engines[name]
    rows = {r.statistic: r for r in e.rows}
    return ", ".join(f"{s} {deviation(rows[s].deviation, rows[s].unit)}" if s in rows else s for s in e.flagged)


def replay_caveats(cert: ReplayCertificate | None) -> list[str]:
    """One line under the verdict per engine whose replay is flagged ([] for none, or no
    certificate): the verdict rests on load that did not follow the workload as built."""
    if cert is None:
        return []
    return [f"Caveat (replay fidelity): {name} was sent {len(e.flagged)} statistic{'s' if len(e.flagged) != 1 else ''} "
            f"outside ±{cert.tolerance:.0%} of the sessions built for its measurements ({flagged_text(cert, name)}): "
            "its figures rest on load that did not follow the workload as built"
            for name, e in cert.engines.items() if e.flagged]


def engine_title(cert: ReplayCertificate, name: str) -> str:
    e = cert.engines[name]
    cut = f"; {_plural(e.left_out_sessions, 'session')} cut in flight by an early stop left out" if e.left_out_sessions else ""
    if e.failed_sessions:
        cut += (f"; {_plural(e.failed_sessions, 'session')} with a request the engine failed "
                "left out (the engine's failures, judged by the reliability gate)")
    return (f"{name}: {_plural(e.requests, 'request')}, {_plural(e.sessions, 'session')} sent over "
            f"{_plural(e.measurements, 'measurement')}{cut}")


def replay_context(cert: ReplayCertificate | None) -> dict[str, Any] | None:
    """The report's section: the header facts and, per engine, its title and rows of cells
    (:data:`COLUMNS`); None without a certificate."""
    if cert is None or not cert.engines:
        return None
    engines = []
    for name, e in cert.engines.items():
        rows = [{"statistic": r.statistic, "trace": number(r.trace, r.unit), "built": number(r.built, r.unit),
                 "sent": number(r.sent, r.unit), "deviation": deviation(r.deviation, r.unit),
                 "mark": "" if r.within is None else ("ok" if r.within else "flagged"),
                 "coverage": deviation(r.coverage, r.unit)} for r in e.rows]
        engines.append({"title": engine_title(cert, name), "rows": rows, "flagged": flagged_text(cert, name)})
    return {"trace": cert.trace, "content": cert.content, "scaling": scaling(cert), "sessions": cert.trace_sessions,
            "requests": cert.trace_requests, "tolerance": f"{cert.tolerance:.0%}", "blocks": cert.cache_blocks,
            "block_tokens": cert.block_tokens, "engines": engines}
