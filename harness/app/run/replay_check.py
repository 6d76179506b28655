"""The replay-fidelity certificate of an agentic run (``replay.json``), computed once every
engine was measured: the trace's statistics (every session of it once, at the run's scale)
against each engine's measured records (:mod:`harness.metrics.replay`), printed as a table
with the scaling it was sent at."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from results.schema import ReplayCertificate
from results.store import REQUESTS_FILE, read_records

from harness.metrics.replay import certificate_rows, sent_statistics
from harness.app.settings.run import RunSettings
from rich.console import Console

if TYPE_CHECKING:
    from harness.app.run.context import RunState

NOTE = ("trace: every session of the trace once at this scale, driven offline with its recorded replies; sent: the "
        "measured requests (every ladder point and repeat); hit rates: the trace's against the run's own prompts as built "
        "(theoretical; the engine's measured rate shown beside, not judged)")


def optimal_hit_rate(cfg: RunSettings, state: RunState) -> float | None:
    """The theoretical prefix-cache hit rate of the run's own agentic sessions under an infinite
    cache (:func:`workloads.replay_stats.offered_statistics`, the certificate's "sent" side):
    what each ladder point's measured hit rate is held against (``LadderSummary.cache_optimal``,
    :mod:`harness.metrics.cache`). None unless the run replayed an agentic workload with a
    tokenizer (its prompts are token ids only then)."""
    from workloads.registry import resolve_spec
    from workloads.replay_stats import offered_statistics

    workload = state.workload
    if workload is None or workload.name != "agentic" or state.tokenizer is None:
        return None
    spec = resolve_spec(cfg.workload)
    return float(offered_statistics(workload.sessions, spec.cache_block_tokens, spec.cache_blocks)["hit_rate_infinite"])


def replay_certificate(cfg: RunSettings, state: RunState) -> ReplayCertificate | None:
    """The certificate of the run in ``state`` (None unless it replayed an agentic workload)."""
    from workloads.registry import resolve_spec
    from workloads.replay_stats import offered_statistics, trace_sessions
    from workloads.tokens import as_kit

    workload = state.workload
    if workload is None or workload.name != "agentic" or state.tokenizer is None:
        return None
    spec = resolve_spec(cfg.workload)
    kit = as_kit(state.tokenizer)
    full = trace_sessions(spec, kit)
    trace = offered_statistics(full, spec.cache_block_tokens, spec.cache_blocks)
    built = offered_statistics(workload.sessions, spec.cache_block_tokens, spec.cache_blocks)
    records = [r for r in read_records(state.writer.run_dir / REQUESTS_FILE) if r.phase == "measured"]
    engines = {}
    for name in state.writer.summary.engines:
        mine = [r for r in records if r.engine == name]
        if mine:
            engines[name] = certificate_rows(trace, built, sent_statistics(mine))
    content = "real"
    if spec.trace is not None:
        from workloads.trace_import import import_trace

        content = import_trace(spec.trace, spec.trace_format).content
    return ReplayCertificate(run_id=state.writer.summary.run_id,
                             trace=spec.trace and str(spec.trace) or "swe-agent (shipped trajectories)", content=content,
                             scale=spec.scale, time_scale=spec.time_scale if spec.trace is not None else 1.0,
                             think_time_scale=None if spec.trace is not None else spec.think_time_scale,
                             trace_sessions=len(full), trace_requests=len(trace["input_tokens"]),
                             block_tokens=spec.cache_block_tokens, cache_blocks=spec.cache_blocks, engines=engines, note=NOTE)


def _num(v: float | None, unit: str) -> str:
    if v is None:
        return "—"
    return f"{v:.1%}" if unit == "share" else (f"{v:.2f}" if unit == "s" else f"{v:.1f}")


def print_certificate(console: Console, cert: ReplayCertificate) -> None:
    """The certificate as the console shows it: the scaling, then one table per engine."""
    scaling = f"scale {cert.scale:g}, time_scale {cert.time_scale:g}" + (
        f", think_time_scale {cert.think_time_scale:g}" if cert.think_time_scale is not None else "")
    console.print(f"Replay fidelity ({escape(cert.trace)}; {cert.content} text; {scaling}; "
                  f"{cert.trace_sessions} trace sessions, {cert.trace_requests} requests; within ±{cert.tolerance:.0%} "
                  f"or flagged; LRU of {cert.cache_blocks} blocks of {cert.block_tokens} tokens):", highlight=False)
    for name, e in cert.engines.items():
        table = Table(title=f"{name}: {e.requests} requests, {e.sessions} sessions sent", title_justify="left")
        for col in ("statistic", "trace", "sent", "deviation", ""):
            table.add_column(col, justify="left" if col == "statistic" else "right")
        for r in e.rows:
            dev = "—" if r.deviation is None else (f"{r.deviation * 100:+.1f} pt" if r.unit == "share" else f"{r.deviation:+.1%}")
            mark = "" if r.within is None else ("ok" if r.within else "[yellow]flagged[/]")
            table.add_row(r.statistic, _num(r.trace, r.unit), _num(r.sent, r.unit), dev, mark)
        console.print(table)
        if e.flagged:
            console.print(f"[yellow]{name}[/]: {len(e.flagged)} statistic(s) outside ±{cert.tolerance:.0%} of the trace: "
                          f"{escape(', '.join(e.flagged))}", highlight=False)
