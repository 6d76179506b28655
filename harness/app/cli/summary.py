"""The console table of a run's summary: every headline number with its 95 % interval.

Renders a stored :class:`results.schema.RunSummary` (``bench run`` at its end, ``bench results
show``); its latency columns are each registered metric's ``console`` statistics
(:mod:`results.schema.metric_registry`, in registry order, ms, in the one printed form of
``metric_registry.figure``: the report and the verdict print the same string); the intervals come
from ``EngineResult.intervals`` (``harness.metrics.repeats``), with the value's decimals.
:func:`resource_table` is the compact second table of what each engine used while measured
(``EngineResult.resources``, ``adapters.runtime.resources``) and its cost (``EngineResult.cost``).
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from harness.app.trial.feature_phase import probe_line
from adapters.runtime.resources import fmt_bytes
from harness.app.cli.parity import parity_lines
from harness.metrics.failures import failure_text
from results.schema import EngineResult, EngineStatus, Interval, Metrics, RunSummary, metric_number
from results.schema.metric_registry import TPS_DECIMALS, metric_figure, metrics
from results.schema.metric_registry import usd_figure


def fmt(value: Any, digits: int = 1) -> str:
    """A number with thousands separators and ``digits`` decimals; "–" for None."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def with_interval(value: float | None, interval: Interval | None, digits: int = 1) -> str:
    """``value [low–high]`` (an interval is shown when one was formed, low < high), every number with
    ``digits`` decimals; "–" for None. Metric values go through :func:`metric_cell` instead."""
    if value is None:
        return "–"
    if interval is None or not interval.high > interval.low:
        return fmt(float(value), digits)
    return f"{fmt(float(value), digits)} [{fmt(interval.low, digits)}–{fmt(interval.high, digits)}]"


def metric_cell(path: str, value: float | None, interval: Interval | None) -> str:
    """A metric value with its interval in the one printed form (``metric_registry.figure``)."""
    if value is None:
        return "–"
    return metric_figure(path, float(value), *((interval.low, interval.high) if interval is not None else ()))


def _basis_line(summary: RunSummary) -> str:
    if not any(ci.high > ci.low for e in summary.engines.values() for ci in e.intervals.values()):
        return ("No intervals: no engine measured enough for one (one repeat gives intervals over requests; "
                "--repeats 2 or more measures run-to-run noise).")
    if summary.repeats > 1:
        rates = ("with fewer than 6 repeats, about their range: it holds the median with probability "
                 f"{1 - 2 * 0.5 ** summary.repeats:.0%}") if summary.repeats < 6 else "95%"
        return (f"[brackets]: intervals over {summary.repeats} interleaved repeats; latencies: 95%, two-stage "
                "bootstrap (repeats, then requests), around the value over all requests; rates: the value over the "
                f"summed measured time, bracketed by the per-repeat values ({rates}); CV: run-to-run coefficient of "
                "variation of output throughput.")
    several = sorted(n for n, e in summary.engines.items() if len(e.repeats) > 1)
    if several:  # a ladder run: the decisive engines' points were measured on several fresh starts
        return (f"[brackets]: 95% intervals; {', '.join(several)}: over the {len(summary.engines[several[0]].repeats)} "
                "measurements of the point shown (fresh starts: two-stage bootstrap, run-to-run noise included); the "
                "others: over the requests of one measurement (no run-to-run noise; rates have none).")
    return ("[brackets]: 95% intervals over the requests of one repeat (bootstrap); rates have none and "
            "run-to-run noise was not measured: use --repeats 2 or more.")


def summary_table(summary: RunSummary) -> tuple[Table, list[str]]:
    """The table and the lines to print under it (interval basis, engines' reasons, feature probes)."""
    table = Table(title=escape(f"Run {summary.run_id}: workload {summary.workload}"))
    incomplete = any(e.metrics is not None and e.metrics.requests_incomplete for e in summary.engines.values())
    latencies = [(f"{m.header} {stat}", f"{m.field}.{stat}") for m in metrics() for stat in m.console]
    cols = ["engine", "status", "ok/fail/inc" if incomplete else "ok/fail", "req/s", "out tok/s",
            *[header for header, _ in latencies], "goodput"]
    if summary.repeats > 1:
        cols.append("CV")
    for col in cols:
        table.add_column(col, justify="left" if col in ("engine", "status") else "right", overflow="fold")
    notes = ["Latencies in ms; rates over the measured phase (definitions: harness/metrics/).", _basis_line(summary)]
    for name, engine in summary.engines.items():
        m = engine.metrics
        if engine.feature_probes:  # ✓ verified, ✗ failed (why), – unsupported
            notes.append(probe_line(name, engine.feature_probes))
        if engine.status is not EngineStatus.OK or engine.reason:  # adapters' reasons already start with "name:"
            notes.append(engine.reason if engine.reason.startswith(f"{name}:") else f"{name}: {engine.reason}")
        elif engine.shown_status == "degraded" and m is not None:
            notes.append(f"{name}: degraded, {failure_text([m])}")
        if m is None:
            table.add_row(name, engine.status.value, *["–"] * (len(cols) - 2))
            continue
        if m.output_shortfall.requests:
            sf = m.output_shortfall
            notes.append(f"{name}: {sf.requests} of {sf.checked} replies stopped (finish_reason \"stop\") "
                         f"{sf.tokens_missing / sf.requests:,.0f} tokens short of max_tokens on average although "
                         "ignore_eos was sent: the endpoint ignores it, so it did less work than asked")
        notes += run_window_lines(name, m)
        if m.sessions is not None and m.sessions.aborted_turns:
            notes.append(f"{name}: {m.sessions.aborted_turns} turns never sent because an earlier turn of their session "
                         f"failed ({m.sessions.completed} of {m.sessions.sessions} sessions completed)")
        ci = engine.intervals.get
        row = [
            name, engine.shown_status,
            f"{m.requests_completed}/{m.requests_failed}" + (f"/{m.requests_incomplete}" if incomplete else ""),
            with_interval(m.request_throughput, ci("request_throughput"), 2),
            with_interval(m.output_throughput, ci("output_throughput"), TPS_DECIMALS),
            *[metric_cell(path, metric_number(m, path), ci(path)) for _, path in latencies],
            with_interval(m.goodput.request_goodput if m.goodput else None, ci("goodput.request_goodput"), 2),
        ]
        if summary.repeats > 1:
            cv = ci("output_throughput").cv if ci("output_throughput") else None
            row.append("–" if cv is None else f"{cv:.1%}")
        table.add_row(*row)
    return table, notes + parity_lines(summary)  # the configuration parity audit, after the engines' notes


def run_window_lines(name: str, m: Metrics) -> list[str]:
    """A duration-based run's notes for engine ``name``: its limits and what the warm-up /
    cool-down windows excluded, and the requests its drain bound cut (incomplete)."""
    rw = m.run_window
    if rw is None:
        return []
    lines = [f"{name}: {rw.limits_text()}" + (f"; {text}" if (text := rw.excluded_text()) else "")]
    if m.requests_incomplete:
        lines.append(f"{name}: {m.requests_incomplete} requests were still in flight when the drain bound ran out: "
                     "cancelled and counted incomplete (neither ok nor failed, in no latency)")
    return lines


def _resource_row(name: str, engine: EngineResult) -> list[str]:
    use, cost = engine.resources, engine.cost
    if use is None or not use.samples:
        why = use.note if use is not None and use.note else "not sampled"
        cells = [why] + ["–"] * 4
    else:
        cores = f" ({use.mean_cpu_percent / use.cpu_cores:.0f}% of {use.cpu_cores})" \
            if use.mean_cpu_percent is not None and use.cpu_cores else ""
        cpu = "–" if use.mean_cpu_percent is None else f"{use.mean_cpu_percent:,.0f}%{cores}"
        gpu = "–"
        if use.peak_gpu_memory_bytes is not None:
            gpu = f"{fmt_bytes(use.peak_gpu_memory_bytes)}, {fmt(use.mean_gpu_util_percent, 0)}%"
            if use.energy_per_output_token_j is not None:
                gpu += f", {use.energy_per_output_token_j:.3g} J/tok"
        cells = [fmt_bytes(use.peak_rss_bytes), fmt_bytes(use.peak_pss_bytes), cpu, fmt(use.peak_cpu_percent, 0) + "%"
                 if use.peak_cpu_percent is not None else "–", gpu]
    usd = "–"
    if cost is not None:
        usd = usd_figure(cost.usd_per_1m_output_tokens, cost.low, cost.high)
    return [name, *cells, fmt(engine.startup_s, 1), usd]


def resource_table(summary: RunSummary) -> Table | None:
    """What each measured engine's process group used in its measured phase (peak RSS and PSS,
    mean CPU % of one core with the machine share, peak CPU %, GPU memory/utilisation/J per
    token where NVML measured them), its time to healthy (s) and its cost (USD per 1M output
    tokens at the run's price per hour); None when no engine was measured."""
    measured = {name: e for name, e in summary.engines.items() if e.metrics is not None and e.status is EngineStatus.OK}
    if not measured:
        return None
    prices = {(e.cost.usd_per_hour, e.cost.price_source) for e in measured.values() if e.cost is not None}
    price = "; ".join(f"${usd:g}/h, {source}" for usd, source in sorted(prices)) or "no price: --price-per-hour"
    table = Table(title=escape(f"Resources while measured; cost at {price}"), title_justify="left")
    for col in ("engine", "peak RSS", "peak PSS", "mean CPU", "peak CPU", "GPU mem, util", "healthy s",
                "$/1M out tok"):
        table.add_column(col, justify="left" if col == "engine" else "right", overflow="fold")
    for name, engine in measured.items():
        table.add_row(*_resource_row(name, engine))
    return table


def print_summary(summary: RunSummary, console: Any) -> None:
    """Print :func:`summary_table`, the compact resources table and the notes to ``console``."""
    table, notes = summary_table(summary)
    console.print(table, *filter(None, [resource_table(summary)]))  # resources: a second, compact table
    for line in notes:
        console.print(f"  {line}" if not line.startswith(("Latencies", "[brackets]")) else line,
                      highlight=False, markup=False)
