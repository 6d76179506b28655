"""The replay-fidelity certificate of an agentic run (``replay.json``), computed once every
engine was measured: each engine's measured records against the sessions its measurements built
(a ladder's rebuilt from the seeds ``ladder.json`` stores), judged; the trace's statistics
(every session of it once, at the run's scale) beside them as coverage
(:mod:`harness.metrics.replay`); printed as a table with the scaling it was sent at."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from reports.replay import COLUMNS, replay_context

from results.schema import ReplayCertificate, RequestRecord
from results.schema.records import STOPPED_PHASE
from results.store import REQUESTS_FILE, read_records

from harness.metrics.replay import certificate_rows, fair_sides, sent_statistics
from harness.app.settings.run import RunSettings
from rich.console import Console

if TYPE_CHECKING:
    from harness.app.run.context import RunState

NOTE = ("judged: sent (the measured requests) against built (the sessions each measurement built: its own draw, scaling "
        "and truncation, rebuilt from its stored seed), pooled over the same measurements (every ladder point and repeat), "
        "so only the replayer's own losses are flagged; coverage: built against the whole trace (every session once, driven "
        "offline with its recorded replies), how representative the drawn sessions are, never judged; hit rates: theoretical, "
        "of the trace and of the prompts as built (the engine's measured rate shown beside, not judged)")


def optimal_hit_rate(cfg: RunSettings, state: RunState) -> float | None:
    """The theoretical prefix-cache hit rate of the run's own agentic sessions under an infinite
    cache (:func:`workloads.replay_stats.offered_statistics` of the run's base workload, not of
    each point's own draw, which the certificate's built column pools):
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


def _measurements(cfg: RunSettings, state: RunState, records: list[RequestRecord], name: str,
                  built: dict[tuple[int, int], list[Any]]) -> list[tuple[list[RequestRecord], list[Any]]]:
    """Engine ``name``'s measurements: (every record it stored, the sessions built for it). A
    ladder run's are rebuilt from ``ladder.json``'s seed and planned requests of each
    (:func:`harness.app.run.ladder_trial.measurement_options`; ``built`` caches them by (seed,
    requests): the engines of a run draw the same seeds); any other run's measurements (its
    repeats) all replayed the run's one workload. A measurement ``ladder.json`` cannot rebuild
    (none stored) is left out: ``EngineReplay.measurements`` counts those compared."""
    from harness.app.run.ladder_trial import measurement_options
    from workloads.registry import build_workload

    groups: dict[tuple[int | None, int], list[RequestRecord]] = {}
    for r in records:
        if r.engine == name and r.phase in ("measured", STOPPED_PHASE):
            groups.setdefault((r.probe, r.repeat), []).append(r)
    ladder = getattr(state, "ladder", None)
    climb = ladder.engines.get(name) if ladder is not None else None
    if climb is None:
        return [(g, state.workload.sessions) for g in groups.values()]
    points = {p.index: p for p in climb.points}
    out = []
    for (probe, repeat), g in sorted(groups.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1])):
        p = points.get(probe or 0)
        if p is None or repeat >= min(len(p.seeds), len(p.planned_requests)):
            continue
        key = (p.seeds[repeat], p.planned_requests[repeat])
        if key not in built:
            options = measurement_options(cfg.workload, *key)
            built[key] = build_workload(options, state.tokenizer, with_stats=False).sessions
        out.append((g, built[key]))
    return out


def replay_certificate(cfg: RunSettings, state: RunState) -> ReplayCertificate | None:
    """The certificate of the run in ``state`` (None unless it replayed an agentic workload):
    per engine, its measurements' records against their sessions as built (:func:`_measurements`,
    :func:`harness.metrics.replay.fair_sides`), pooled; the whole trace beside them."""
    from workloads.registry import resolve_spec
    from workloads.replay_stats import offered_statistics, pooled_statistics, trace_sessions
    from workloads.tokens import as_kit

    workload = state.workload
    if workload is None or workload.name != "agentic" or state.tokenizer is None:
        return None
    spec = resolve_spec(cfg.workload)
    blocks = (spec.cache_block_tokens, spec.cache_blocks)
    full = trace_sessions(spec, as_kit(state.tokenizer))
    trace = offered_statistics(full, *blocks)
    records = read_records(state.writer.run_dir / REQUESTS_FILE)
    engines, cache = {}, {}
    for name in state.writer.summary.engines:
        sent, built, cut, failed = [], [], 0, 0
        for recs, sessions in _measurements(cfg, state, records, name, cache):
            mine, kept, n_cut, n_failed = fair_sides(recs, sessions)
            sent += mine
            built.append(offered_statistics(kept, *blocks))
            cut, failed = cut + n_cut, failed + n_failed
        if sent:
            engines[name] = certificate_rows(trace, pooled_statistics(built, *blocks), sent_statistics(sent),
                                             measurements=len(built), left_out=cut, failed=failed)
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


def print_certificate(console: Console, cert: ReplayCertificate) -> None:
    """The certificate as the console shows it: the scaling, then one table per engine (the
    report's cells, :func:`reports.replay.replay_context`)."""
    ctx = replay_context(cert)
    if ctx is None:
        return
    console.print(f"Replay fidelity ({escape(cert.trace)}; {cert.content} text; {ctx['scaling']}; "
                  f"{cert.trace_sessions} trace sessions, {cert.trace_requests} requests; sent within ±{cert.tolerance:.0%} "
                  f"of the sessions as built or flagged; coverage: built against the whole trace, not judged; LRU of "
                  f"{cert.cache_blocks} blocks of {cert.block_tokens} tokens):", highlight=False)
    for name, engine in zip(cert.engines, ctx["engines"]):
        table = Table(title=escape(engine["title"]), title_justify="left")
        for col in COLUMNS:
            table.add_column(col, justify="left" if col == "statistic" else "right")
        for r in engine["rows"]:
            mark = "[yellow]flagged[/]" if r["mark"] == "flagged" else r["mark"]
            table.add_row(escape(r["statistic"]), r["trace"], r["built"], r["sent"], r["deviation"], mark, r["coverage"])
        console.print(table)
        if engine["flagged"]:
            e = cert.engines[name]
            console.print(f"[yellow]{escape(name)}[/]: {len(e.flagged)} statistic(s) sent outside ±{cert.tolerance:.0%} of "
                          f"the sessions as built: {escape(engine['flagged'])}", highlight=False)
