"""The engines' own time series over their ladders (issue 43), from ``ladder.json`` only: why each
capacity ended where the series shows it (one line per engine, under the verdict) and one chart
per engine (``series-<engine>.png``): KV-cache usage, running and waiting requests and
preemptions, and the speculative draft acceptance rate where the engine speculates, over the
measured phases, in load order, each phase marked with its load."""

from __future__ import annotations

from results.schema import EngineLadder, LadderPoint, LadderSummary

from .plots import _figure, _png

KV_FULL = 0.95  # KV-cache usage at or above this reads "full"


def _state(point: LadderPoint) -> tuple[float | None, float | None, float | None, float | None]:
    """(peak KV usage, preemptions, peak waiting, peak running) over the point's measurements."""
    series = [s for s in point.series if s.samples]
    if not series:
        return None, None, None, None
    peaks = [[s.peak(k) for s in series] for k in ("kv_cache_usage", "waiting", "running")]
    pre = [s.last("preemptions") for s in series]
    known = [p for p in pre if p is not None]
    kv, waiting, running = (max((v for v in vs if v is not None), default=None) for vs in peaks)
    return kv, sum(known) if known else None, waiting, running


def _acceptance(point: LadderPoint) -> float | None:
    """The speculative draft acceptance rate at the end of the point's last measurement with one (0..1)."""
    rates = [r for s in point.series if s.samples and (r := s.last("spec_acceptance_rate")) is not None]
    return rates[-1] if rates else None


def point_counters(point: LadderPoint) -> dict[str, float | str]:
    """The engine's own counters at one ladder point, read from its series (``LadderPoint.series``,
    each measurement's ``/metrics`` scraped over its measured phase), in the keys of
    ``EngineResult.engine_metrics`` (the report's "Prefix caching and speculative decoding"
    table reads either): ``prefix_cache_hit_rate`` and ``spec_acceptance_rate`` (0..1, since the
    phase began: the last sample of the last measurement reporting it), ``num_preemptions`` (summed
    over the measurements), ``kv_cache_usage`` (the peak fraction) and ``counters_scope`` saying
    where they come from; {} when no measurement has a series."""
    series = [s for s in point.series if s.samples]
    if not series:
        return {}
    out: dict[str, float | str] = {}
    for key, name in (("prefix_hit_rate", "prefix_cache_hit_rate"), ("spec_acceptance_rate", "spec_acceptance_rate")):
        values = [v for s in series if (v := s.last(key)) is not None]
        if values:
            out[name] = values[-1]
    kv, pre, _, _ = _state(point)
    if pre is not None:
        out["num_preemptions"] = pre
    if kv is not None:
        out["kv_cache_usage"] = kv
    n = len(series)
    out["counters_scope"] = (f"its /metrics series at its capacity point ({point.load} in flight, {n} measurement"
                             f"{'s' if n != 1 else ''}; ladder.json): rates since each phase began, KV usage its peak")
    return out


def why_line(name: str, e: EngineLadder) -> str:
    """``vllm: KV cache 100 % and 23 preemptions at 8 in flight (where TTFT p90 broke)``: what the
    engine's series shows at the load where its capacity ended (the failing load of its bracket);
    "compute-bound" only where a latency SLO broke with neither memory nor a queue to show (a load
    whose requests failed says that instead); "" without a failing load or a series there."""
    cap = e.capacity
    if cap is None or cap.bracket[1] is None:
        return ""
    at = next((p for p in e.points if p.load == cap.bracket[1]), None)
    if at is None:
        return ""
    kv, pre, waiting, running = _state(at)
    if kv is None and waiting is None:
        return ""
    failed = cap.binding == "errors"  # failed requests ended it, not a latency SLO
    where = f"at {at.load} in flight" + (f" (where {cap.binding} broke)" if cap.binding and not failed else "")
    parts = []
    if kv is not None and (kv >= KV_FULL or pre):
        parts.append(f"KV cache {kv:.0%}" + (f" and {pre:.0f} preemptions" if pre else ""))
    if waiting:
        parts.append(f"up to {waiting:.0f} request{'s' if round(waiting) != 1 else ''} waiting"
                     + (f" beside {running:.0f} running" if running else ""))
    accepted = _acceptance(at)
    spec = f"; speculative drafts {accepted:.0%} accepted" if accepted is not None else ""
    broke = ": its requests failed there (the error-rate bound broke, not a latency SLO)" if failed else ""
    if not parts:  # neither memory nor the queue: each step got slower, unless requests failed
        peak = f"KV cache at most {kv:.0%}" if kv is not None else "no KV-cache figure"
        cause = broke or ": compute-bound (every running request's steps got slower)"
        return f"{name}: {peak}, no preemption and no request waiting {where}{cause}{spec}"
    return f"{name}: {' and '.join(parts)} {where}{broke}{spec}"


def why_lines(s: LadderSummary) -> list[str]:
    """:func:`why_line` of every engine that has one."""
    return [line for name, e in s.engines.items() if (line := why_line(name, e))]


def series_png(name: str, e: EngineLadder) -> bytes | None:
    """The engine's chart (module docstring); None when no point has a series."""
    points = [p for p in sorted(e.points, key=lambda p: p.load) if any(s.samples for s in p.series)]
    if not points:
        return None
    fig = _figure(9, 4.8)
    ax, aq = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2)
    offset, spec_labelled = 0.0, False
    for p in points:
        for s in (s for s in p.series if s.samples):
            t = [offset + x.t_s for x in s.samples]
            ax.plot(t, [100 * x.kv_cache_usage if x.kv_cache_usage is not None else float("nan") for x in s.samples],
                    color="tab:blue", label="KV cache used" if p is points[0] and s is p.series[0] else None)
            if any(x.spec_acceptance_rate is not None for x in s.samples):
                ax.plot(t, [100 * x.spec_acceptance_rate if x.spec_acceptance_rate is not None else float("nan")
                            for x in s.samples], color="tab:orange",
                        label="speculative drafts accepted" if not spec_labelled else None)
                spec_labelled = True
            for key, color in (("running", "tab:green"), ("waiting", "tab:red"), ("preemptions", "tab:purple")):
                aq.plot(t, [getattr(x, key) if getattr(x, key) is not None else float("nan") for x in s.samples],
                        color=color, label=key if p is points[0] and s is p.series[0] else None)
            ax.axvline(offset, color="grey", linewidth=0.6)
            aq.axvline(offset, color="grey", linewidth=0.6)
            ax.annotate(f"{p.load}", (offset, 100), textcoords="offset points", xytext=(2, -10), fontsize=7)
            offset = t[-1] + s.interval_s
    ax.set_ylabel("KV cache used (%)" if not spec_labelled else "%")
    if spec_labelled:  # above the plot: inside it the box hid the first phase's lines
        ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 1.08), ncol=2, frameon=False)
    ax.set_ylim(0, 105)
    ax.set_title(f"{name}: its own /metrics over its ladder (phases in load order, each labelled by its load in flight)",
                 fontsize=9)
    aq.set_ylabel("requests / preemptions")
    aq.set_xlabel("seconds of measuring (phases back to back)")
    aq.legend(fontsize=8, loc="upper left")
    return _png(fig)
