"""The engine-configuration parity audit: the measured engines' effective settings side by side,
and an unfair flag with its reason wherever a difference changes what is measured.

It compares stored artefacts only (each ``EngineResult.effective``, read by ``adapters.telemetry.effective``
from what the engine itself reported). Flags, each a caveat (the recommender lists them in its
notes; nothing is eliminated for one):

- prefix caching on for some engines and off for others: a workload with shared prefixes is
  served from cache on one side only;
- KV capacity in tokens differing by more than :data:`KV_TOLERANCE` (``max / min - 1 > 0.2``): the
  smaller cache preempts or queues earlier under load;
- dtype differing: different arithmetic cost per token (and numerics);
- speculative decoding on for some engines only: tokens per target step differ;
- on a GPU only, eager mode next to CUDA graphs (a CPU has no CUDA graphs: never a flag there);
- ``max_num_seqs`` differing by more than :data:`SEQS_RATIO` × (``max / min > 2``): under
  saturation the engine admitting more sequences at once trades tail latency for throughput, so
  p99 TTFT/TPOT at high load compare different admission policies, not engines;
- an engine whose measured mean CPU exceeds 1.5 × the threads it was given (``threads`` row;
  :func:`cpu_over_threads`, from the resources sampled while it was measured): it used more
  cores than its rivals, and on a small machine the client's core too.

A value an engine did not report (None) never raises a flag; the row shows "not reported".
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from results.schema import (
    EFFECTIVE_FIELDS,
    FLAG_SOURCE,
    EffectiveSettings,
    EngineStatus,
    ParityAudit,
    ParityFlag,
    ParityRow,
    ParityStrict,
    RunSummary,
)
from results.store import Run

KV_TOLERANCE = 0.20  # KV capacity (tokens) may differ by this fraction of the smaller one
SEQS_RATIO = 2.0  # max_num_seqs may differ by this factor
GPU_KINDS = ("nvidia", "amd")
NOT_REPORTED = "not reported"


def _n(v: int) -> str:
    return f"{v:,}"


def _onoff(v: bool) -> str:
    return "on" if v else "off"


LABELS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "kv_capacity_tokens": ("KV capacity (tokens)", _n),
    # exact bytes first: two budgets that round to the same GiB (whole KV blocks of a 1 GiB budget
    # vs the budget itself) must not read as equal in a row marked "differs"
    "kv_capacity_bytes": ("KV capacity (bytes)", lambda v: f"{_n(v)} ({v / 2**30:.2f} GiB)"),
    "block_size": ("block / page size (tokens)", _n),
    "prefix_caching": ("prefix caching", _onoff),
    "chunked_prefill": ("chunked prefill", _onoff),
    "chunked_prefill_tokens": ("chunked-prefill budget (tokens)", _n),
    "max_num_seqs": ("max_num_seqs", _n),
    "max_num_batched_tokens": ("max_num_batched_tokens", _n),
    "dtype": ("dtype", str),
    "threads": ("threads", _n),
    "cuda_graphs": ("CUDA graphs", lambda v: "CUDA graphs" if v else "eager"),
    "speculative": ("speculative decoding", str),
    "max_model_len": ("max model length (tokens)", _n),
}
assert tuple(LABELS) == EFFECTIVE_FIELDS


def _cell(name: str, value: Any, source: str | None) -> str | None:
    """The shown value; None = not reported; "none" when the engine says it has no such thing."""
    if value is None:
        return f"none ({source.split(': ', 1)[-1]})" if source else None
    text = LABELS[name][1](value)
    return f"{text} (our flag)" if source and source.startswith(FLAG_SOURCE) else text


def _groups(known: dict[str, Any], fmt: Callable[[Any], str]) -> str:
    """``"on: own, vllm; off: transformers"``."""
    by: dict[str, list[str]] = {}
    for engine, value in known.items():
        by.setdefault(fmt(value), []).append(engine)
    return "; ".join(f"{v}: {', '.join(names)}" for v, names in by.items())


def _flag(name: str, known: dict[str, Any], hardware: str | None) -> str | None:
    """The reason ``name``'s known values are unfair, None when they are not."""
    values = list(known.values())
    if len(values) < 2:
        return None
    if name == "prefix_caching" and len(set(values)) > 1:
        return (f"prefix caching differs ({_groups(known, _onoff)}): shared prompt prefixes are served from "
                "cache on one side only, so TTFT and throughput on a workload with shared prefixes compare "
                "cache hits with recomputation")
    if name == "kv_capacity_tokens":
        low, high = min(values), max(values)
        if low > 0 and high / low - 1 > KV_TOLERANCE:
            listing = ", ".join(f"{e} {v:,}" for e, v in known.items())
            return (f"KV cache capacity differs by {high / low - 1:.0%} (> {KV_TOLERANCE:.0%}; {listing} tokens): the "
                    "smaller cache preempts or queues requests earlier under load")
    if name == "dtype" and len(set(values)) > 1:
        return (f"dtype differs ({_groups(known, str)}): a different compute cost per token and different "
                "numerics, not a difference between the engines")
    if name == "speculative" and len({v == "off" for v in values}) > 1:
        return (f"speculative decoding differs ({_groups(known, str)}): tokens per target-model step differ, so "
                "TPOT compares different decoding methods")
    if name == "cuda_graphs" and hardware in GPU_KINDS and len(set(values)) > 1:
        fmt = LABELS["cuda_graphs"][1]
        return (f"eager mode next to CUDA graphs ({_groups(known, fmt)}): the eager engine pays kernel-launch "
                "overhead on every decode step the others replay as one graph")
    if name == "max_num_seqs":
        low, high = min(values), max(values)
        if low > 0 and high / low > SEQS_RATIO:
            listing = ", ".join(f"{e} {v:,}" for e, v in known.items())
            return (f"max_num_seqs differs by more than {SEQS_RATIO:g}× ({listing}): under saturation the engine "
                    "admitting more sequences at once trades tail latency for throughput, so p99 TTFT/TPOT at "
                    "high load compare admission limits, not engines")
    return None


def audit(engines: dict[str, EffectiveSettings], hardware: str | None = None, mode: str = "report",
          strict: ParityStrict | None = None) -> ParityAudit:
    """The parity audit over ``engines`` (name → its effective settings), measured on
    ``hardware`` ("cpu" / "nvidia" / "amd"; None = unknown, so CUDA graphs are not compared).
    ``mode``: "report" or "strict"; ``strict``: what ``--parity strict`` did (kept in the audit)."""
    names = list(engines)
    out = ParityAudit(mode=mode, hardware=hardware, engines=names, strict=strict)
    for name in EFFECTIVE_FIELDS:
        values = {e: getattr(s, name) for e, s in engines.items()}
        sources = {e: s.sources[name] for e, s in engines.items() if name in s.sources}
        known = {e: v for e, v in values.items() if v is not None}
        reason = _flag(name, known, hardware)
        if reason:
            out.flags.append(ParityFlag(setting=name, engines=list(known), reason=reason))
        out.rows.append(ParityRow(setting=name, label=LABELS[name][0], sources=sources, unfair=reason is not None,
                                  values={e: _cell(name, v, sources.get(e)) for e, v in values.items()},
                                  differs=len({repr(v) for v in known.values()}) > 1))
        for engine, value in values.items():
            if value is None and engine not in sources:
                out.not_reported.setdefault(engine, []).append(name)
    if hardware == "cpu":
        out.notes.append("CUDA graphs are not compared on a CPU (no engine has them there). Every CPU engine gets "
                         "the same 1 GiB KV budget from the harness; the KV rows are what each engine made of it.")
    if any(src.startswith(FLAG_SOURCE) for s in engines.values() for src in s.sources.values()):
        out.notes.append("(our flag): the engine did not report the value; it is the flag the harness passed.")
    for name, s in engines.items():
        out.notes += [f"{name}: {note}" for note in s.notes]
    if strict is not None:
        applied = "; ".join(f"{e}: " + ", ".join(f"{k}={v}" for k, v in a.items()) for e, a in strict.applied.items())
        out.notes.append(f"--parity strict added: {applied or 'nothing'}")
        out.notes += [f"--parity strict could not equalise {line}" for line in strict.could_not]
        out.notes += [f"--parity strict: {line} (your --engine-arg wins)" for line in strict.user_kept]
    return out


def audit_summary(summary: RunSummary, hardware: str | None, mode: str = "report",
                  strict: ParityStrict | None = None) -> ParityAudit | None:
    """The audit of a run's measured engines (status ok, settings read); None when none has any."""
    engines = {name: e.effective for name, e in summary.engines.items()
               if e.status is EngineStatus.OK and e.effective is not None}
    if not engines:
        return None
    out = audit(engines, hardware, mode, strict)
    over = cpu_over_threads(summary)
    if over:
        out.flags.append(ParityFlag(setting="threads", engines=list(over), reason="; ".join(over.values())))
        row = next((r for r in out.rows if r.setting == "threads"), None)
        if row is not None:
            row.unfair = True
    return out


CPU_OVER_THREADS = 1.5  # an engine's mean CPU above 1.5x the threads it was given: it used more cores than the others


def cpu_over_threads(summary: RunSummary) -> dict[str, str]:
    """Engines whose measured mean CPU (cores, the sampled process group) exceeds
    :data:`CPU_OVER_THREADS` times the threads the harness gave them, with the reason: more
    cores than its rivals (and, on a small machine, the client's own core)."""
    out = {}
    for name, e in summary.engines.items():
        use, eff = e.resources, e.effective
        threads = eff.threads if eff is not None else None
        if use is None or use.mean_cpu_percent is None or not threads:
            continue
        cores = use.mean_cpu_percent / 100.0
        if cores > CPU_OVER_THREADS * threads:
            out[name] = (f"{name} used {cores:.1f} cores on average with {threads} thread(s) given (its other "
                         "threads or processes): it had more CPU than the engines held to their threads, and shared "
                         "the client's core")
    return out


def parity_notes(runs: Sequence[Run]) -> list[str]:
    """One recommendation note per unfair flag of each run's stored audit (a caveat: a flag
    never eliminates an engine), prefixed with the run id when there are several runs."""
    notes: list[str] = []
    for run in runs:
        parity = run.summary.parity
        if parity is None:
            continue
        where = f" in {run.run_id}" if len(runs) > 1 else ""
        notes += [f"unfair comparison{where}: {flag.reason}" for flag in parity.flags]
    return notes


__all__ = ["CPU_OVER_THREADS", "KV_TOLERANCE", "SEQS_RATIO", "audit", "audit_summary", "cpu_over_threads",
           "parity_notes"]
