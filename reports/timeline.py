"""The report's view of a run over time: per-engine timelines and a per-request timeline.

Plain data in, PNG bytes out (:mod:`reports.plots`' canvas). The timelines are
:class:`results.schema.Timeline` artefacts the application derives from the records
(``harness.metrics.timeline``); the per-request timeline draws the stored timestamps of each
request as they are (scheduled → sent: client queueing; sent → first token: TTFT; first → last
token: decode), for runs small enough to read (:data:`MAX_GANTT_REQUESTS` per engine).
"""

from __future__ import annotations

from typing import Callable, Sequence

from results.schema import RequestRecord, Timeline

from .plots import _figure, _png

MAX_GANTT_REQUESTS = 120
MAX_GANTT_ENGINES = 4
NS_PER_S = 1_000_000_000


def timeline_plot(series: dict[str, Timeline]) -> bytes:
    """Three stacked panels over the measured phase (x: seconds from the first send): requests in
    flight, output tokens/s and median TTFT (ms), one line per label (the first repeat of each)."""
    fig = _figure(8, 7.5)
    panels = [("requests in flight", "in_flight"), ("output tokens/s", "output_tps"), ("TTFT p50 (ms)", "ttft_p50_ms")]
    axes = [fig.add_subplot(3, 1, i + 1) for i in range(3)]
    ttfts: list[float] = []
    for label, line in series.items():
        x = [(i + 0.5) * line.bucket_s for i in range(len(line.in_flight))]
        idle = _idle(line.in_flight)
        for ax, (_, key) in zip(axes, panels):
            y = [float("nan") if v is None or i in idle else v for i, v in enumerate(getattr(line, key))]
            ax.plot(x, y, marker="." if len(x) < 40 else None, label=label)
            if key == "ttft_p50_ms":
                ttfts += [v for v in y if v == v]
    for ax, (title, _) in zip(axes, panels):
        ax.set_ylabel(title)
        ax.grid(True, alpha=0.3)
    if len(ttfts) >= 20:  # one slow bucket must not flatten the rest: cut at 1.2x the 98th percentile
        top = sorted(ttfts)[int(0.98 * (len(ttfts) - 1))] * 1.2
        if max(ttfts) > 1.5 * top:
            axes[2].set_ylim(0, top)
            axes[2].set_ylabel(f"TTFT p50 (ms; cut at {top:,.0f})")
    axes[-1].set_xlabel("seconds since the first measured send (gaps: the engine idle between its measurements)")
    widths = ", ".join(f"{label} {line.bucket_s:g} s" for label, line in series.items())
    axes[0].set_title(f"measured phase over time (bucket widths: {widths})", fontsize=10)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)


IDLE_BUCKETS = 10  # this many empty buckets in a row are a gap (the engine waiting for its next measurement)


def _idle(in_flight: Sequence[float | None]) -> set[int]:
    """The buckets of runs of at least :data:`IDLE_BUCKETS` with nothing in flight: not drawn, so a
    ladder measured in several sittings (a climb, then a climb-on minutes later) reads as gaps,
    not as a stall."""
    out: set[int] = set()
    run: list[int] = []
    for i, v in enumerate([*in_flight, 1]):
        if i < len(in_flight) and not v:
            run.append(i)
            continue
        if len(run) >= IDLE_BUCKETS:
            out.update(run)
        run = []
    return out


def gantt_eligible(records_by_label: dict[str, Sequence[RequestRecord]]) -> bool:
    """True when every engine has at most :data:`MAX_GANTT_REQUESTS` measured requests and
    there are at most :data:`MAX_GANTT_ENGINES` engines."""
    return 0 < len(records_by_label) <= MAX_GANTT_ENGINES and all(
        0 < len(records) <= MAX_GANTT_REQUESTS for records in records_by_label.values())


def request_gantt(records_by_label: dict[str, Sequence[RequestRecord]]) -> bytes:
    """One panel per label: a row per request (by scheduled time), grey from scheduled to sent
    (client queueing), orange from sent to the first token (TTFT), blue from the first to the last
    token (decode); a red cross where a failed request ended."""
    labels = list(records_by_label)
    fig = _figure(8, 2.6 * len(labels) + 0.6)
    for k, label in enumerate(labels):
        ax = fig.add_subplot(len(labels), 1, k + 1)
        records = sorted(records_by_label[label], key=lambda r: r.scheduled_ns)
        t0 = min(r.scheduled_ns for r in records)

        def s(t: int) -> float:
            return (t - t0) / NS_PER_S

        for y, r in enumerate(records):
            if r.send_ns is not None and r.send_ns > r.scheduled_ns:
                ax.hlines(y, s(r.scheduled_ns), s(r.send_ns), color="0.7", linewidth=2)
            if r.send_ns is not None and r.first_token_ns is not None:
                ax.hlines(y, s(r.send_ns), s(r.first_token_ns), color="tab:orange", linewidth=2)
            if r.first_token_ns is not None and r.last_token_ns is not None:
                ax.hlines(y, s(r.first_token_ns), s(r.last_token_ns), color="tab:blue", linewidth=2)
            if not r.success and r.end_ns is not None:
                ax.plot([s(r.end_ns)], [y], marker="x", color="tab:red")
        ax.set_title(label, fontsize=9)
        ax.set_ylabel("request")
        ax.grid(True, axis="x", alpha=0.3)
    fig.axes[-1].set_xlabel("seconds since the first scheduled request "
                            "(grey: queued in the client, orange: TTFT, blue: decode, x: failed)")
    fig.tight_layout()
    return _png(fig)


def timeline_plots(runs: Sequence[object], timelines: dict[tuple[str, str], list[Timeline]] | None,
                   label: Callable[[object, str, bool], str]) -> dict[str, bytes]:
    """PNGs ``timeline`` (every measured engine's first repeat) and ``requests`` (the per-request
    timeline of each engine's first repeat, when :func:`gantt_eligible`), keyed as the report's
    plots. ``timelines``: (run id, engine) → its timelines; ``label``: the report's engine label."""
    from results.schema import EngineStatus

    compare = len(runs) > 1
    series: dict[str, Timeline] = {}
    gantt: dict[str, list[RequestRecord]] = {}
    for run in runs:
        for name, entry in run.summary.engines.items():  # type: ignore[attr-defined]
            if entry.status is not EngineStatus.OK:
                continue
            text = label(run, name, compare)
            lines = (timelines or {}).get((run.run_id, name)) or []  # type: ignore[attr-defined]
            if lines:
                series[text] = lines[0]
            first = [r for r in run.records_for(name) if r.repeat == 0]  # type: ignore[attr-defined]
            if first:
                gantt[text] = first
    out: dict[str, bytes] = {}
    if series:
        out["timeline"] = timeline_plot(series)
    if gantt_eligible(gantt):
        out["requests"] = request_gantt(gantt)
    return out
