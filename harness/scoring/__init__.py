"""The scorer/recommender: measured runs + a deployment target → a ranking that names its
deciding constraint.

Pipeline (issue 6), per engine found in the runs' ``summary.json``:

1. **Not measured**: engines whose status is ``skipped``/``failed`` in every run (or that have no
   successful request) are listed with their reason and never get a number.
2. **Hard constraints**, first failure wins, each with a one-line reason:
   hardware (the engine's declared ``capabilities.hardware`` must include the target's kind; an FP8
   requirement needs ``HardwareProfile.supports_fp8``, i.e. compute capability ≥ 8.9),
   required features (declared ``features``/``quantization``), memory fit (weights + KV cache for
   the workload's concurrency × context must fit, see :class:`MemoryFit`), and the SLOs
   (``harness.metrics.slo_percentile_value`` at the offered load; repeats are combined by their
   median).
3. **Soft score** over the survivors: every criterion is normalized to (0, 1] relative to the
   best survivor with its direction explicit — higher-better ``x / max(x)`` (throughput, goodput,
   features), lower-better ``min(x) / x`` (latencies, complexity); ``hardware_fit`` is the memory
   headroom ``1 − required / usable``. Score = Σ wᵢ·sᵢ / Σ wᵢ (weights shown in the result).
4. **Deciding constraint** (one sentence) and **sensitivity**: the smallest change of one weight
   (closed form: the score difference is linear in each weight) or of one SLO threshold (re-run
   of steps 2-3 at each measured value) that changes the winner; and, when repeats exist,
   whether their spread could flip the ranking (winner at its worst repeat vs each rival at its
   best).

Tie-break (stated in every result): equal scores (|Δ| < 1e-9) are ordered by higher output
throughput, then lower p99 TTFT, then engine name.

Several runs: runs with the same workload and offered rate are repeats of one *condition*;
several offered rates form a load sweep. Each engine is scored at its highest-load condition
that meets every SLO (without SLOs: its highest-load condition).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
from pydantic import BaseModel, Field, computed_field

from adapters.base import FEATURES
from adapters.hardware import FP8_MIN_COMPUTE_CAPABILITY, GiB, HardwareProfile, profile_from_manifest
from harness.metrics import SLO, meets_slos, parse_slos, slo_percentile_value
from results.schema import RequestRecord
from results.store import Run

CRITERIA: tuple[str, ...] = ("throughput", "latency", "hardware_fit", "features", "complexity")

PRESETS: dict[str, dict[str, float]] = {
    "latency": {"throughput": 1.0, "latency": 4.0, "hardware_fit": 1.0, "features": 0.5, "complexity": 0.5},
    "throughput": {"throughput": 4.0, "latency": 1.0, "hardware_fit": 1.0, "features": 0.5, "complexity": 0.5},
    "balanced": {"throughput": 2.0, "latency": 2.0, "hardware_fit": 1.0, "features": 1.0, "complexity": 1.0},
    "agentic": {"throughput": 1.5, "latency": 3.0, "hardware_fit": 1.0, "features": 1.5, "complexity": 0.5},
}
"""Weights over :data:`CRITERIA`; ``--weights`` overrides the named ones."""

DEFAULT_MEMORY_UTILIZATION = 0.9  # vLLM's default gpu_memory_utilization
DEFAULT_COMPLEXITY = 2  # adapters.base.Capabilities default
QUANTIZATION_FORMATS = ("fp8", "int8", "int4", "awq", "gptq", "fp4", "nvfp4", "mxfp4", "gguf", "bnb")
TIE_BREAK = "equal scores are ordered by higher output throughput, then lower p99 TTFT, then engine name"
_EPS = 1e-9

METRIC_LABELS = {"ttft": "TTFT", "tpot": "TPOT", "e2el": "E2E latency", "itl": "ITL"}
DTYPE_BYTES = {
    "float32": 4, "fp32": 4, "float": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    "float8": 1, "fp8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1,
}


class ScorerError(ValueError):
    """Bad scorer input (unknown preset/weight/feature, no runs); the message names the fix."""


# --------------------------------------------------------------------------------------------
# result model


class MemoryFit(BaseModel):
    """Does the model + KV cache fit the target? All sizes in bytes.

    ``kv_bytes_per_token = 2 (K and V) × num_layers × num_kv_heads × head_dim × dtype_bytes``
    (vLLM's KV cache sizing); ``kv_tokens = concurrency × context_tokens``;
    ``total_bytes = weights_bytes + kv_bytes_per_token × kv_tokens``;
    ``usable_bytes = memory_bytes × devices_used × memory_utilization``.
    ``fits`` is None when something needed was not recorded (then ``arithmetic`` says what).
    """

    engine: str
    fits: bool | None = None
    num_params: int | None = None
    dtype_bytes: int | None = None
    weights_bytes: int | None = None
    num_layers: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    kv_bytes_per_token: int | None = None
    concurrency: int | None = None
    concurrency_source: str = "not recorded"
    context_tokens: int | None = None
    kv_tokens: int | None = None
    kv_bytes: int | None = None
    total_bytes: int | None = None
    devices_used: int = 1
    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION
    usable_bytes: int | None = None
    headroom: float | None = None
    arithmetic: str = ""


class RankedEngine(BaseModel):
    """One surviving engine: ``score`` in [0, 1], ``components`` (criterion → normalized score in
    [0, 1]), ``contributions`` (criterion → wᵢ·sᵢ/Σw, summing to ``score``), ``metrics`` (raw
    values at ``condition``: ``*_ms`` in ms, ``output_throughput`` in tokens/s,
    ``request_throughput``/``goodput`` in requests/s)."""

    rank: int
    engine: str
    display_name: str
    score: float
    components: dict[str, float]
    contributions: dict[str, float]
    metrics: dict[str, float | bool | None]
    condition: str
    repeats: int
    notes: list[str] = Field(default_factory=list)


class WeightFlip(BaseModel):
    """The smallest change of one criterion's weight that changes the winner (others fixed):
    above ``to_weight`` (raising) or below it (lowering) ``new_winner`` wins."""

    criterion: str
    from_weight: float
    to_weight: float
    new_winner: str


class Recommendation(BaseModel):
    """The scorer's answer; JSON-serialisable (``model_dump_json``).

    ``winner`` is None when no engine survives the hard constraints (then ``message`` says why
    and :attr:`exit_code` is 1). ``eliminated`` maps engine → one-line reason (including
    skipped/failed/not-measured engines); ``elimination_stage`` maps engine → ``"not measured" |
    "hardware" | "feature" | "memory" | "slo"``.
    """

    winner: str | None
    winner_display_name: str | None = None
    ranking: list[RankedEngine]
    eliminated: dict[str, str]
    elimination_stage: dict[str, str]
    deciding_constraint: str
    sensitivity: list[str]
    weight_flips: list[WeightFlip] = Field(default_factory=list)
    weights: dict[str, float]
    preset: str
    hardware: dict[str, Any]
    slos: dict[str, float]
    required_features: list[str]
    memory_fit: dict[str, MemoryFit]
    workloads: list[str]
    runs: list[str]
    tie_break: str = TIE_BREAK
    notes: list[str] = Field(default_factory=list)
    message: str = ""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def exit_code(self) -> int:
        """0 when an engine was recommended, 1 when none survives (also in the JSON)."""
        return 0 if self.winner is not None else 1


# --------------------------------------------------------------------------------------------
# parsing


def parse_weights(text: str) -> dict[str, float]:
    """Parse ``"throughput=2,latency=1"`` into ``{"throughput": 2.0, "latency": 1.0}``.

    Keys must be in :data:`CRITERIA`; values finite and ≥ 0. Raises :class:`ScorerError`
    (a ValueError) with one line naming the bad part and the fix.
    """
    out: dict[str, float] = {}
    if text is None or not text.strip():
        raise ScorerError("--weights is empty: write e.g. throughput=2,latency=1")
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise ScorerError(f"weight {part!r} has no value: write it as e.g. latency=2")
        key, _, val = part.partition("=")
        key = key.strip().lower().replace("-", "_")
        if key not in CRITERIA:
            raise ScorerError(f"unknown weight {key!r}: use {', '.join(CRITERIA)}")
        try:
            w = float(val)
        except ValueError:
            raise ScorerError(f"weight {key} needs a number, got {val.strip()!r}") from None
        if not math.isfinite(w) or w < 0:
            raise ScorerError(f"weight {key} must be a finite number ≥ 0, got {val.strip()!r}")
        out[key] = w
    if not out:
        raise ScorerError("--weights is empty: write e.g. throughput=2,latency=1")
    return out


def resolve_weights(preset: str, weights: dict[str, float] | None) -> dict[str, float]:
    """The preset's weights with ``weights`` overriding the named criteria.

    Raises :class:`ScorerError` for an unknown preset/criterion or when all weights are 0.
    """
    if preset not in PRESETS:
        raise ScorerError(f"unknown preset {preset!r}: use one of {', '.join(PRESETS)}")
    out = dict(PRESETS[preset])
    for k, v in (weights or {}).items():
        if k not in CRITERIA:
            raise ScorerError(f"unknown weight {k!r}: use {', '.join(CRITERIA)}")
        if not math.isfinite(v) or v < 0:
            raise ScorerError(f"weight {k} must be a finite number ≥ 0, got {v!r}")
        out[k] = float(v)
    if sum(out.values()) <= 0:
        raise ScorerError("all weights are 0: give at least one criterion a positive weight")
    return out


# --------------------------------------------------------------------------------------------
# gathering the runs


@dataclass
class _Measurement:
    run_id: str
    workload: str
    offered_rate: float  # math.inf when no open-loop target
    metrics: dict[str, Any]
    engine_metrics: dict[str, Any]
    records: list[RequestRecord]
    manifest: dict[str, Any]

    @property
    def condition(self) -> tuple[str, float]:
        return (self.workload, self.offered_rate)


@dataclass
class _Engine:
    name: str
    display_name: str
    statuses: list[tuple[str, str]] = field(default_factory=list)  # (status, reason) per run
    capabilities: dict[str, Any] | None = None
    measurements: list[_Measurement] = field(default_factory=list)

    def conditions(self) -> list[tuple[str, float]]:
        return sorted({m.condition for m in self.measurements}, key=lambda c: (c[1], c[0]))

    def at(self, cond: tuple[str, float]) -> list[_Measurement]:
        return [m for m in self.measurements if m.condition == cond]


def condition_label(cond: tuple[str, float]) -> str:
    """``("chat", 4.0)`` → ``"chat at 4 req/s"``; agentic rates are session starts
    (``"agentic at 0.753 sessions/s"``); an infinite rate → ``"at max load"``."""
    wl, rate = cond
    unit = "sessions/s" if wl == "agentic" else "req/s"
    return f"{wl} at {rate:.3g} {unit}" if math.isfinite(rate) else f"{wl} at max load (no rate limit)"


def _gather(runs: Sequence[Run]) -> dict[str, _Engine]:
    engines: dict[str, _Engine] = {}
    for run in runs:
        summary = run.summary or {}
        workload = str(summary.get("workload") or (run.manifest.get("workload") or {}).get("name") or "unknown")
        for name, entry in (summary.get("engines") or {}).items():
            entry = entry or {}
            eng = engines.setdefault(name, _Engine(name, str(entry.get("display_name") or name)))
            if entry.get("display_name"):
                eng.display_name = str(entry["display_name"])
            status = str(entry.get("status", "unknown"))
            eng.statuses.append((status, str(entry.get("reason") or "")))
            if entry.get("capabilities"):
                eng.capabilities = entry["capabilities"]
            metrics = entry.get("metrics") or {}
            if status == "ok" and metrics.get("requests_completed"):
                rate = metrics.get("offered_rate")
                eng.measurements.append(
                    _Measurement(
                        run_id=run.run_id,
                        workload=workload,
                        offered_rate=float(rate) if rate else math.inf,
                        metrics=metrics,
                        engine_metrics=entry.get("engine_metrics") or {},
                        records=run.records_for(name),
                        manifest=run.manifest or {},
                    )
                )
    return engines


def _not_measured_reason(eng: _Engine) -> str:
    bad = [(s, r) for s, r in eng.statuses if s != "ok"]
    if bad:
        status, reason = bad[-1]
        return f"not measured ({status}): {reason or 'no reason recorded'}"
    return "not measured: no successful request in any run"


# --------------------------------------------------------------------------------------------
# memory fit


def max_in_flight(records: Iterable[RequestRecord]) -> int:
    """Largest number of requests in flight at once (send_ns → end_ns intervals; a request
    without an end counts until the last event). Ends sort before sends at equal times."""
    events: list[tuple[int, int]] = []
    ends_known = [r.end_ns for r in records if r.end_ns is not None]
    horizon = max(ends_known) if ends_known else None
    for r in records:
        if r.send_ns is None:
            continue
        end = r.end_ns if r.end_ns is not None else (r.last_token_ns or horizon or r.send_ns)
        events.append((r.send_ns, 1))
        events.append((end, -1))
    events.sort(key=lambda e: (e[0], e[1]))
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def _dtype_bytes(model: dict[str, Any], override: int | None) -> int | None:
    if override is not None:
        return override
    dt = str(model.get("dtype") or "").lower().replace("torch.", "")
    return DTYPE_BYTES.get(dt)


def _fmt_bytes(n: float) -> str:
    return f"{int(n):,} B ({n / GiB:.2f} GiB)"


def memory_fit(
    engine: str,
    model: dict[str, Any],
    records: Sequence[RequestRecord],
    workload_spec: dict[str, Any],
    hardware: HardwareProfile,
    *,
    dtype_bytes: int | None = None,
    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION,
    tensor_parallel: bool = True,
) -> MemoryFit:
    """Weights + KV cache vs the target's usable memory, with the arithmetic spelled out.

    ``model``: the manifest's model object (num_params, num_layers, num_kv_heads, head_dim, dtype);
    ``records``: the engine's measured records — concurrency = their max in-flight, else the
    workload spec's ``max_concurrency``; context = the largest input + output tokens of one
    request. ``tensor_parallel=False`` limits the engine to one device. Never raises for
    missing data: ``fits`` is None and the arithmetic says what was not recorded.
    """
    mf = MemoryFit(engine=engine, memory_utilization=memory_utilization)
    db = _dtype_bytes(model, dtype_bytes)
    mf.dtype_bytes = db
    mf.num_params = model.get("num_params")
    mf.num_layers = model.get("num_layers")
    mf.num_kv_heads = model.get("num_kv_heads")
    mf.head_dim = model.get("head_dim")
    measured = [r for r in records if r.phase == "measured"]
    if measured:
        mf.concurrency = max_in_flight(measured) or None
        mf.concurrency_source = "max in flight in the run"
    if mf.concurrency is None and workload_spec.get("max_concurrency"):
        mf.concurrency = int(workload_spec["max_concurrency"])
        mf.concurrency_source = "workload max_concurrency"
    ctx = [(r.input_tokens or 0) + (r.output_tokens or 0) for r in measured]
    mf.context_tokens = max(ctx) if ctx and max(ctx) > 0 else None
    mf.devices_used = hardware.num_devices if tensor_parallel else 1
    mf.usable_bytes = int(hardware.memory_bytes * mf.devices_used * memory_utilization)

    missing = [
        name
        for name, v in (
            ("model num_params", mf.num_params),
            ("model dtype", db),
            ("num_layers", mf.num_layers),
            ("num_kv_heads", mf.num_kv_heads),
            ("head_dim", mf.head_dim),
            ("concurrency", mf.concurrency),
            ("context length", mf.context_tokens),
        )
        if v is None
    ]
    if missing:
        mf.arithmetic = f"memory fit not checked: {', '.join(missing)} not recorded"
        return mf
    assert db is not None and mf.num_params is not None  # for type checkers
    mf.weights_bytes = int(mf.num_params) * db
    mf.kv_bytes_per_token = 2 * int(mf.num_layers) * int(mf.num_kv_heads) * int(mf.head_dim) * db  # type: ignore[arg-type]
    mf.kv_tokens = int(mf.concurrency) * int(mf.context_tokens)  # type: ignore[arg-type]
    mf.kv_bytes = mf.kv_bytes_per_token * mf.kv_tokens
    mf.total_bytes = mf.weights_bytes + mf.kv_bytes
    mf.fits = mf.total_bytes <= mf.usable_bytes
    mf.headroom = max(0.0, 1.0 - mf.total_bytes / mf.usable_bytes) if mf.usable_bytes else 0.0
    tp_note = "" if tensor_parallel or hardware.num_devices == 1 else " (no tensor parallelism: one device)"
    mf.arithmetic = (
        f"weights {mf.num_params:,} params × {db} B = {mf.weights_bytes:,} B; "
        f"KV 2 × {mf.num_layers} layers × {mf.num_kv_heads} KV heads × {mf.head_dim} head dim × {db} B "
        f"= {mf.kv_bytes_per_token:,} B/token × ({mf.concurrency} in flight × {mf.context_tokens:,} tokens context "
        f"= {mf.kv_tokens:,} tokens) = {mf.kv_bytes:,} B; "
        f"total {_fmt_bytes(mf.total_bytes)} {'≤' if mf.fits else '>'} usable {mf.devices_used} × "
        f"{hardware.memory_bytes / GiB:.1f} GiB × {memory_utilization:g} = {_fmt_bytes(mf.usable_bytes)}{tp_note}"
    )
    return mf


# --------------------------------------------------------------------------------------------
# evaluation


def _median(vals: list[float]) -> float:
    return float(np.median(np.asarray(vals, dtype=np.float64)))


def _slo_value(m: _Measurement, slo: SLO) -> float:
    """The SLO's run-level value in ms; math.inf when unmeasurable-because-failed."""
    try:
        v = slo_percentile_value(m.metrics, slo)
    except (KeyError, TypeError):
        return math.inf
    if v is None:
        if slo.metric == "tpot" and not m.metrics.get("requests_failed"):
            return 0.0  # only 1-token replies: TPOT is undefined and cannot be violated (meets_slos)
        return math.inf
    return float(v)


def _goodput(m: _Measurement, slos: Sequence[SLO]) -> float | None:
    """Requests/s meeting every SLO (DistServe), recomputed from records for the given SLOs."""
    dur = m.metrics.get("duration_s") or 0.0
    measured = [r for r in m.records if r.phase == "measured"]
    if measured and dur > 0:
        return sum(1 for r in measured if meets_slos(r, slos)) / dur
    stored = m.metrics.get("goodput") or {}
    if stored.get("slos") == {s.key: s.threshold_ms for s in slos}:
        return stored.get("request_goodput")
    return None


def _get(d: dict[str, Any], path: str) -> float | None:
    cur: Any = d
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return float(cur) if isinstance(cur, (int, float)) and not isinstance(cur, bool) else None


def _engine_metric(em: dict[str, Any], *names: str) -> float | None:
    for n in names:
        v = em.get(n)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    return None


def _raw_metrics(ms: list[_Measurement], slos: Sequence[SLO], pick: str = "median") -> dict[str, float | None]:
    """Scoring metrics over repeats: median, or the best/worst repeat per metric."""
    paths = {
        "output_throughput": ("output_throughput", True),
        "request_throughput": ("request_throughput", True),
        "ttft_p50_ms": ("ttft_ms.p50", False),
        "ttft_p99_ms": ("ttft_ms.p99", False),
        "tpot_p50_ms": ("tpot_ms.p50", False),
        "tpot_p99_ms": ("tpot_ms.p99", False),
        "itl_p99_ms": ("itl_ms.p99", False),
        "e2el_p99_ms": ("e2el_ms.p99", False),
    }

    def combine(vals: list[float], higher_better: bool) -> float | None:
        if not vals:
            return None
        if pick == "median":
            return _median(vals)
        best = pick == "best"
        return max(vals) if best == higher_better else min(vals)

    out: dict[str, float | None] = {}
    for key, (path, hb) in paths.items():
        out[key] = combine([v for m in ms if (v := _get(m.metrics, path)) is not None], hb)
    if slos:
        out["goodput"] = combine([v for m in ms if (v := _goodput(m, slos)) is not None], True)
        for s in slos:
            vals = [_slo_value(m, s) for m in ms]
            v = combine(vals, False)
            out[f"slo:{s.key}"] = None if v is None or math.isinf(v) else v
    return out


def _info_metrics(ms: list[_Measurement]) -> dict[str, float | bool | None]:
    m0 = ms[0]
    em = m0.engine_metrics
    return {
        "requests_completed": _median([m.metrics.get("requests_completed") or 0 for m in ms]),
        "requests_failed": _median([m.metrics.get("requests_failed") or 0 for m in ms]),
        "offered_rate": m0.metrics.get("offered_rate"),
        "achieved_rate": m0.metrics.get("achieved_rate"),
        "rate_valid": m0.metrics.get("rate_valid"),
        "prefix_cache_hit_rate": _engine_metric(em, "prefix_cache_hit_rate"),
        "spec_acceptance_rate": _engine_metric(em, "spec_acceptance_rate", "spec_decode_acceptance_rate"),
    }


@dataclass
class _Ctx:
    engines: dict[str, _Engine]
    hardware: HardwareProfile
    weights: dict[str, float]
    pre_eliminated: dict[str, tuple[str, str]]  # engine → (stage, reason), before the SLO stage
    mem: dict[str, MemoryFit]


@dataclass
class _Outcome:
    slos: list[SLO]
    survivors: list[str]
    ranking: list[RankedEngine]
    eliminated: dict[str, tuple[str, str]]
    ref_cond: dict[str, tuple[str, float]]
    slo_values: dict[str, dict[str, float]]  # engine → slo key → value at the judged condition
    components: dict[str, dict[str, float]]
    raw: dict[str, dict[str, float | None]]

    @property
    def winner(self) -> str | None:
        return self.ranking[0].engine if self.ranking else None


def _num(x: float) -> str:
    """A weight for a sentence: at most 3 decimals, no trailing zeros (1.004 → "1.004")."""
    return f"{x:.3f}".rstrip("0").rstrip(".")


def _fmt_ms(v: float | None) -> str:
    return "∞ (failed requests)" if v is None or math.isinf(v) else f"{v:,.1f} ms"


def _slo_text(s: SLO) -> str:
    return f"p{s.percentile:g} {METRIC_LABELS[s.metric]} ≤ {s.threshold_ms:g} ms"


def _normalize(values: dict[str, float | None], higher_better: bool) -> dict[str, float]:
    """Ratio to the best survivor: higher-better x/max, lower-better min/x; missing → 0."""
    present = {k: v for k, v in values.items() if v is not None and math.isfinite(v)}
    out: dict[str, float] = {}
    if not present:
        return {k: 1.0 for k in values}
    if higher_better:
        best = max(present.values())
        for k, v in values.items():
            out[k] = 0.0 if k not in present else (1.0 if best <= 0 else max(0.0, v) / best)  # type: ignore[operator]
    else:
        best = min(present.values())
        for k, v in values.items():
            if k not in present:
                out[k] = 0.0
            elif v <= 0:  # type: ignore[operator]
                out[k] = 1.0
            else:
                out[k] = max(0.0, best) / v  # type: ignore[operator]
    return out


def _evaluate(ctx: _Ctx, slos: list[SLO], *, raw_override: dict[str, dict[str, float | None]] | None = None) -> _Outcome:
    eliminated = dict(ctx.pre_eliminated)
    survivors: list[str] = []
    ref_cond: dict[str, tuple[str, float]] = {}
    slo_values: dict[str, dict[str, float]] = {}
    for name, eng in ctx.engines.items():
        if name in eliminated:
            continue
        conds = eng.conditions()
        passing: list[tuple[str, float]] = []
        fail_msgs: dict[tuple[str, float], list[str]] = {}
        vals_by_cond: dict[tuple[str, float], dict[str, float]] = {}
        for c in conds:
            ms = eng.at(c)
            vals = {s.key: _median([_slo_value(m, s) for m in ms]) for s in slos}
            vals_by_cond[c] = vals
            misses = [
                f"p{s.percentile:g} {METRIC_LABELS[s.metric]} "
                f"{_fmt_ms(vals[s.key])} > {s.threshold_ms:g} ms"
                for s in slos
                if vals[s.key] > s.threshold_ms
            ]
            if misses:
                fail_msgs[c] = misses
            else:
                passing.append(c)
        if slos and not passing:
            c0 = conds[0]
            reps = len(eng.at(c0))
            rep_note = f" (median of {reps} repeats)" if reps > 1 else ""
            eliminated[name] = ("slo", f"misses the SLO: {'; '.join(fail_msgs[c0])} on {condition_label(c0)}{rep_note}")
            slo_values[name] = vals_by_cond[c0]
            continue
        chosen = passing[-1]
        ref_cond[name] = chosen
        slo_values[name] = vals_by_cond[chosen]
        survivors.append(name)

    raw: dict[str, dict[str, float | None]] = {}
    for name in survivors:
        raw[name] = (raw_override or {}).get(name) or _raw_metrics(ctx.engines[name].at(ref_cond[name]), slos)

    comps: dict[str, dict[str, float]] = {n: {} for n in survivors}
    if survivors:
        thr_keys = ["output_throughput"] + (["goodput"] if slos else [])
        lat_keys = [f"slo:{s.key}" for s in slos] if slos else ["ttft_p99_ms", "tpot_p99_ms"]
        thr_norm = [_normalize({n: raw[n].get(k) for n in survivors}, True) for k in thr_keys]
        lat_norm = [_normalize({n: raw[n].get(k) for n in survivors}, False) for k in lat_keys]
        feats = {n: float(len(set((ctx.engines[n].capabilities or {}).get("features") or []) & set(FEATURES))) for n in survivors}
        feat_norm = _normalize(feats, True)  # type: ignore[arg-type]
        cplx = {n: float((ctx.engines[n].capabilities or {}).get("complexity") or DEFAULT_COMPLEXITY) for n in survivors}
        cplx_norm = _normalize(cplx, False)  # type: ignore[arg-type]
        for n in survivors:
            mf = ctx.mem.get(n)
            comps[n] = {
                "throughput": float(np.mean([d[n] for d in thr_norm])),
                "latency": float(np.mean([d[n] for d in lat_norm])),
                "hardware_fit": 1.0 if mf is None or mf.headroom is None else float(mf.headroom),
                "features": feat_norm[n],
                "complexity": cplx_norm[n],
            }

    wsum = sum(ctx.weights.values())
    rows = []
    for n in survivors:
        contrib = {c: ctx.weights[c] * comps[n][c] / wsum for c in CRITERIA}
        rows.append((n, sum(contrib.values()), contrib))

    def sort_key(row: tuple[str, float, dict[str, float]]) -> tuple[float, float, float, str]:
        n, score, _ = row
        thr = raw[n].get("output_throughput") or 0.0
        ttft = raw[n].get("ttft_p99_ms")
        return (-round(score, 9), -thr, ttft if ttft is not None else math.inf, n)

    rows.sort(key=sort_key)
    ranking: list[RankedEngine] = []
    for i, (n, score, contrib) in enumerate(rows, 1):
        eng = ctx.engines[n]
        ms = eng.at(ref_cond[n])
        notes = []
        if not eng.capabilities:
            notes.append("capabilities not recorded: hardware/feature checks skipped, complexity assumed 2")
        metrics: dict[str, float | bool | None] = {**raw[n], **_info_metrics(ms)}
        ranking.append(
            RankedEngine(
                rank=i,
                engine=n,
                display_name=eng.display_name,
                score=round(score, 6),
                components={c: round(v, 6) for c, v in comps[n].items()},
                contributions={c: round(v, 6) for c, v in contrib.items()},
                metrics=metrics,
                condition=condition_label(ref_cond[n]),
                repeats=len(ms),
                notes=notes,
            )
        )
    return _Outcome(slos, survivors, ranking, eliminated, ref_cond, slo_values, comps, raw)


# --------------------------------------------------------------------------------------------
# explanations


def _criterion_detail(c: str, w: str, r: str, out: _Outcome, ctx: _Ctx) -> str:
    rw, rr = out.raw[w], out.raw[r]
    if c == "latency":
        key = f"slo:{out.slos[0].key}" if out.slos else "ttft_p99_ms"
        label = _slo_text(out.slos[0]).split(" ≤")[0] if out.slos else "p99 TTFT"
        a, b = rw.get(key), rr.get(key)
        ratio = f", {b / a:.2f}×" if a and b else ""
        return f"{label} {_fmt_ms(a)} vs {_fmt_ms(b)}{ratio}"
    if c == "throughput":
        a, b = rw.get("output_throughput"), rr.get("output_throughput")
        ratio = f", {a / b:.2f}×" if a and b else ""
        return f"output {a or 0:,.1f} vs {b or 0:,.1f} tokens/s{ratio}"
    if c == "features":
        fa = len(set((ctx.engines[w].capabilities or {}).get("features") or []) & set(FEATURES))
        fb = len(set((ctx.engines[r].capabilities or {}).get("features") or []) & set(FEATURES))
        return f"{fa} vs {fb} declared serving features"
    if c == "complexity":
        ca = (ctx.engines[w].capabilities or {}).get("complexity") or DEFAULT_COMPLEXITY
        cb = (ctx.engines[r].capabilities or {}).get("complexity") or DEFAULT_COMPLEXITY
        return f"operational complexity {ca} vs {cb} (1 = pip install, 5 = containers + compilation)"
    ha, hb = out.components[w]["hardware_fit"], out.components[r]["hardware_fit"]
    return f"memory headroom {ha:.0%} vs {hb:.0%}"


def _excluded_clause(out: _Outcome, stages: Iterable[str]) -> list[str]:
    """Why each engine of ``stages`` is out; engines skipped before measuring (not installed,
    no such hardware) are only named - their reasons are in the table, not the deciding line."""
    stages = tuple(stages)
    skipped = [n for n, (st, reason) in out.eliminated.items()
               if st == "not measured" and st in stages and reason.startswith("not measured (skipped)")]
    parts = [f"{n} excluded: {reason}" for n, (st, reason) in out.eliminated.items() if st in stages and n not in skipped]
    if skipped:
        parts.append(f"not measured (skipped; reasons in the not-measured list): {', '.join(skipped)}")
    return parts


def _deciding(out: _Outcome, ctx: _Ctx, preset: str) -> str:
    non_slo = ("not measured", "hardware", "feature", "memory")
    if out.winner is None:
        parts = [f"{n}: {reason}" for n, (_, reason) in out.eliminated.items()]
        return "no engine survives the hard constraints: " + ("; ".join(parts) if parts else "the runs hold no engines")
    w = out.winner
    wdisp = w
    cond = condition_label(out.ref_cond[w])
    if len(out.survivors) == 1:
        slo_out = [n for n, (st, _) in out.eliminated.items() if st == "slo"]
        if slo_out and out.slos:
            slo_desc = " and ".join(_slo_text(s) for s in out.slos)
            # the runner-up: the SLO-eliminated engine closest to meeting every SLO
            def worst_ratio(n: str) -> tuple[float, SLO]:
                return max(
                    ((out.slo_values[n][s.key] / s.threshold_ms, s) for s in out.slos), key=lambda t: t[0]
                )

            second = min(slo_out, key=lambda n: (worst_ratio(n)[0], n))
            _, s_bad = worst_ratio(second)
            a, b = out.slo_values[w][s_bad.key], out.slo_values[second][s_bad.key]
            if math.isinf(b):
                second_txt = f"{second} 2nd, p{s_bad.percentile:g} {METRIC_LABELS[s_bad.metric]} lands on failed requests"
            elif a > 0:
                second_txt = f"{second} 2nd, {b / a:.1f}× the {METRIC_LABELS[s_bad.metric]}"
            else:
                second_txt = f"{second} 2nd, {METRIC_LABELS[s_bad.metric]} {_fmt_ms(b)}"
            others = [f"{n} also misses it" for n in slo_out if n != second]
            parts = [f"{wdisp}: the only engine meeting {slo_desc} on {cond}", second_txt, *others]
            parts += _excluded_clause(out, non_slo)
            return "; ".join(parts)
        excluded = _excluded_clause(out, non_slo)
        if not excluded:
            return f"{wdisp}: the only engine measured ({cond}); no other engine to compare with"
        return "; ".join([f"{wdisp}: the only engine left after the hard constraints ({cond})", *excluded])
    r = out.ranking[1].engine
    wsum = sum(ctx.weights.values())
    margin_by_c = {
        c: ctx.weights[c] * (out.components[w][c] - out.components[r][c]) / wsum for c in CRITERIA
    }
    margin = sum(margin_by_c.values())
    sw, sr = out.ranking[0].score, out.ranking[1].score
    if abs(margin) < _EPS:
        head = (
            f"{wdisp}: tied with {r} on score {sw:.3f} under the {preset} weights; "
            f"tie broken by the stated rule ({TIE_BREAK})"
        )
    else:
        top = max(CRITERIA, key=lambda c: margin_by_c[c])
        against = {c: v for c, v in margin_by_c.items() if v < -_EPS}
        offset = (
            "; " + ", ".join(f"{c} {v:+.3f}" for c, v in sorted(against.items(), key=lambda kv: kv[1]))
            + f" in {r}'s favour" if against else ""
        )
        head = (
            f"{wdisp}: highest score {sw:.3f} vs {r} {sr:.3f} under the {preset} weights on {cond}; "
            f"decided by {top} ({_criterion_detail(top, w, r, out, ctx)}; "
            f"{top} {margin_by_c[top]:+.3f} to the margin of {margin:+.3f}{offset})"
        )
    return "; ".join([head, *_excluded_clause(out, non_slo + ("slo",))])


# A weight change larger than this many times the sum of all weights is reported as "no
# realistic change": it only flips a near-tie on that one criterion.
_EXTREME_WEIGHT = 10.0


def _weight_sensitivity(out: _Outcome, ctx: _Ctx, flips: list[WeightFlip]) -> list[str]:
    """Closed form: with D_e = Σ_c w_c (s_ec − s_wc) ≤ 0 for each rival e, changing w_c by δ
    changes D_e by δ·(s_ec − s_wc); the winner changes once some D_e > 0. Appends the smallest
    change per criterion to ``flips``."""
    if out.winner is None:
        return []
    if len(out.survivors) < 2:
        return ["no weight change can change the winner: only one engine survives the hard constraints"]
    w = out.winner
    wsum = sum(ctx.weights.values())
    rivals = [e for e in out.survivors if e != w]
    # D_e = Σ_c w_c (s_ec − s_wc) < 0 (≤ 0 on a tie); changing w_c by δ adds δ·d_ec.
    found: list[tuple[float, str]] = []
    lines: list[str] = []
    for c in CRITERIA:
        wc = ctx.weights[c]
        best_up: tuple[float, str] | None = None
        best_down: tuple[float, str] | None = None
        for e in rivals:
            D = sum(ctx.weights[k] * (out.components[e][k] - out.components[w][k]) for k in CRITERIA)
            d = out.components[e][c] - out.components[w][c]
            if d > _EPS:
                delta = max(0.0, -D / d)
                if best_up is None or delta < best_up[0]:
                    best_up = (delta, e)
            elif d < -_EPS:
                delta = max(0.0, D / d)  # amount to decrease
                if delta <= wc + _EPS and (best_down is None or delta < best_down[0]):
                    best_down = (delta, e)
        opts = []
        extreme = None
        if best_up is not None:
            flips.append(WeightFlip(criterion=c, from_weight=wc, to_weight=wc + best_up[0], new_winner=best_up[1]))
            if best_up[0] > _EXTREME_WEIGHT * wsum:  # a near-tie on this criterion: no realistic weighting
                extreme = (f"no realistic change of the {c} weight alone changes the winner (it would take "
                           f"more than {_num(wc + best_up[0])} to make {best_up[1]} the winner)")
            else:
                opts.append((best_up[0], f"raising the {c} weight from {wc:g} to above {_num(wc + best_up[0])} "
                                         f"(+{_num(best_up[0])}) makes {best_up[1]} the winner"))
        if best_down is not None:
            flips.append(WeightFlip(criterion=c, from_weight=wc, to_weight=wc - best_down[0], new_winner=best_down[1]))
            opts.append((best_down[0], f"lowering the {c} weight from {wc:g} to below {_num(wc - best_down[0])} "
                                       f"(−{_num(best_down[0])}) makes {best_down[1]} the winner"))
        if opts:
            opts.sort(key=lambda t: t[0])
            found.append(opts[0])
            lines.append(opts[0][1])
        else:
            lines.append(extreme or f"no change of the {c} weight alone changes the winner")
    if found:
        delta, text = min(found, key=lambda t: t[0])
        return [f"smallest weight change that changes the winner: {text}"] + [l for l in lines if l != text]
    return [f"no change of any single weight changes the winner: {w} scores at least as high on every criterion"]


def _slo_sensitivity(out: _Outcome, ctx: _Ctx) -> list[str]:
    if not out.slos:
        return ["no SLOs given: pass e.g. --slo ttft_p99=500 to make latency a hard constraint"]
    lines = []
    base = out.winner
    for i, s in enumerate(out.slos):
        values = sorted(
            {
                v
                for n, eng in ctx.engines.items()
                if n not in ctx.pre_eliminated
                for c in eng.conditions()
                if math.isfinite(v := _median([_slo_value(m, s) for m in eng.at(c)]))
            }
        )

        def with_threshold(t: float) -> str | None:
            new = list(out.slos)
            new[i] = SLO(s.metric, t, s.percentile)
            return _evaluate(ctx, new).winner

        label = f"p{s.percentile:g} {METRIC_LABELS[s.metric]}"
        tight = None
        for v in sorted((v for v in values if v <= s.threshold_ms), reverse=True):
            t = v * (1 - 1e-6)
            if t <= 0:
                continue
            nw = with_threshold(t)
            if nw != base:
                tight = (v, nw)
                break
        loose = None
        for v in (v for v in values if v > s.threshold_ms):
            nw = with_threshold(v)
            if nw != base:
                loose = (v, nw)
                break
        if tight:
            who = f"makes {tight[1]} the winner" if tight[1] else "leaves no engine"
            lines.append(f"tightening {label} from {s.threshold_ms:g} ms to below {tight[0]:,.1f} ms {who}")
        else:
            lines.append(f"no tightening of {label} changes the winner")
        if loose:
            who = f"makes {loose[1]} the winner" if loose[1] else "leaves no engine"
            lines.append(f"loosening {label} from {s.threshold_ms:g} ms to {loose[0]:,.1f} ms {who}")
        else:
            lines.append(f"no loosening of {label} changes the winner")
    return lines


def _noise_sensitivity(out: _Outcome, ctx: _Ctx) -> list[str]:
    reps = {n: len(ctx.engines[n].at(out.ref_cond[n])) for n in out.survivors}
    slo_out = [n for n, (st, _) in out.eliminated.items() if st == "slo"]
    if not any(v > 1 for v in reps.values()) and not any(
        len(ctx.engines[n].at(ctx.engines[n].conditions()[0])) > 1 for n in slo_out
    ):
        return ["no repeats of the same engine and workload: run-to-run noise was not measured; "
                "repeat the run to check whether it could flip the ranking"]
    lines = []
    w = out.winner
    # SLO verdicts that individual repeats disagree with
    for n in out.survivors + slo_out:
        eng = ctx.engines[n]
        cond = out.ref_cond.get(n) or eng.conditions()[0]
        ms = eng.at(cond)
        if len(ms) < 2:
            continue
        for s in out.slos:
            misses = sum(1 for m in ms if _slo_value(m, s) > s.threshold_ms)
            if n in out.survivors and misses:
                lines.append(f"{n} missed {_slo_text(s)} in {misses} of {len(ms)} repeats: noise could eliminate it")
            if n in slo_out and misses < len(ms):
                lines.append(f"{n} met {_slo_text(s)} in {len(ms) - misses} of {len(ms)} repeats: noise could readmit it")
    if w is not None and len(out.survivors) > 1:
        flips = []
        for e in out.survivors:
            if e == w:
                continue
            override = {n: out.raw[n] for n in out.survivors}
            override[w] = _raw_metrics(ctx.engines[w].at(out.ref_cond[w]), out.slos, "worst")
            override[e] = _raw_metrics(ctx.engines[e].at(out.ref_cond[e]), out.slos, "best")
            alt = _evaluate(ctx, out.slos, raw_override=override)
            sw = next(r.score for r in alt.ranking if r.engine == w)
            se = next(r.score for r in alt.ranking if r.engine == e)
            if alt.winner != w:
                flips.append(f"{e} at its best repeat scores {se:.3f} vs {w} at its worst {sw:.3f}")
            else:
                lines.append(
                    f"the spread over repeats cannot flip {w} vs {e}: {w} at its worst repeat {sw:.3f} ≥ {e} at its best {se:.3f} "
                    f"({reps[w]} vs {reps[e]} repeats)"
                )
        if flips:
            lines.insert(0, "run-to-run noise could flip the ranking: " + "; ".join(flips))
    return lines


# --------------------------------------------------------------------------------------------
# entry point


def recommend(
    runs: list[Run],
    *,
    hardware: HardwareProfile,
    slos: list[SLO] | None = None,
    weights: dict[str, float] | None = None,
    preset: str = "balanced",
    required_features: Sequence[str] = (),
    dtype_bytes: int | None = None,
    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION,
) -> Recommendation:
    """Rank the engines measured in ``runs`` for a deployment on ``hardware``.

    ``slos``: hard latency constraints (default: the first run's ``summary.json`` SLOs);
    ``weights``: overrides of the ``preset``'s weights (see :data:`PRESETS`);
    ``required_features``: adapter features (``adapters.base.FEATURES``) or quantization formats
    (:data:`QUANTIZATION_FORMATS`; ``"fp8"`` also needs FP8 hardware) every engine must declare —
    the workload spec's ``required_features`` in the manifest are added;
    ``dtype_bytes``: bytes per weight and KV element (default: from the model's dtype);
    ``memory_utilization``: fraction of device memory an engine may use (vLLM default 0.9).

    Returns a :class:`Recommendation` (``winner`` None when nothing survives — never raises for
    that). Raises :class:`ScorerError` for no runs, an unknown preset/weight/feature, a
    ``dtype_bytes`` ≤ 0 or a ``memory_utilization`` outside (0, 1].
    """
    if not runs:
        raise ScorerError("no runs given: pass at least one run folder or run id")
    w = resolve_weights(preset, weights)
    if dtype_bytes is not None and dtype_bytes <= 0:
        raise ScorerError(f"dtype_bytes must be a positive number of bytes, got {dtype_bytes}")
    if not 0 < memory_utilization <= 1:
        raise ScorerError(f"memory_utilization must be in (0, 1], got {memory_utilization}")
    if slos is None:
        stored = (runs[0].summary or {}).get("slos") or {}
        try:
            slos = parse_slos(",".join(f"{k}={v}" for k, v in stored.items())) if stored else []
        except ValueError:
            slos = []
    required = [f.strip().lower() for f in required_features if f and f.strip()]
    for run in runs:
        for f in ((run.manifest or {}).get("workload") or {}).get("required_features") or []:
            if str(f).lower() not in required:
                required.append(str(f).lower())
    for f in required:
        if f not in FEATURES and f not in QUANTIZATION_FORMATS:
            raise ScorerError(
                f"unknown feature {f!r}: use one of {', '.join(FEATURES + QUANTIZATION_FORMATS)}"
            )

    engines = _gather(runs)
    notes: list[str] = []
    pre: dict[str, tuple[str, str]] = {}
    mem: dict[str, MemoryFit] = {}
    needs_fp8 = "fp8" in required or dtype_bytes == 1 and any(
        "fp8" in str(((r.manifest or {}).get("model") or {}).get("dtype", "")).lower() for r in runs
    )
    for name, eng in engines.items():
        if not eng.measurements:
            pre[name] = ("not measured", _not_measured_reason(eng))
            continue
        caps = eng.capabilities or {}
        hw = [str(h).lower() for h in caps.get("hardware") or []]
        if caps and hardware.kind not in hw:
            need = {"nvidia": "an NVIDIA GPU", "amd": "an AMD GPU", "cpu": "a CPU"}
            wants = " or ".join(need.get(h, h) for h in hw) or "no declared hardware"
            pre[name] = ("hardware", f"needs {wants}; target {hardware.name} is {hardware.kind}")
            continue
        if needs_fp8 and not hardware.supports_fp8:
            cc = hardware.compute_capability
            has = f"has compute capability {cc[0]}.{cc[1]}" if cc else f"is {hardware.kind}"
            lim = ".".join(map(str, FP8_MIN_COMPUTE_CAPABILITY))
            pre[name] = ("hardware", f"FP8 needs compute capability ≥ {lim} (Ada/Hopper or newer); {hardware.name} {has}")
            continue
        if caps:
            have = {str(x).lower() for x in (caps.get("features") or [])} | {
                str(x).lower() for x in (caps.get("quantization") or [])
            }
            lacking = [f for f in required if f not in have]
            if lacking:
                pre[name] = ("feature", f"lacks {', '.join(lacking)}, which the workload needs")
                continue
        m0 = eng.measurements[0]
        mf = memory_fit(
            name,
            (m0.manifest.get("model") or {}),
            [r for m in eng.measurements for r in m.records],
            (m0.manifest.get("workload") or {}),
            hardware,
            dtype_bytes=dtype_bytes,
            memory_utilization=memory_utilization,
            tensor_parallel=("tensor_parallel" in (caps.get("features") or [])) if caps else True,
        )
        mem[name] = mf
        if mf.fits is False:
            pre[name] = ("memory", f"does not fit: {mf.arithmetic}")

    ctx = _Ctx(engines, hardware, w, pre, mem)
    out = _evaluate(ctx, list(slos))

    workloads = sorted({m.workload for e in engines.values() for m in e.measurements})
    if len(workloads) > 1:
        notes.append(f"the runs cover several workloads ({', '.join(workloads)}); each engine is scored at its "
                     "highest-load condition that meets the SLOs")
    if len({out.ref_cond[n] for n in out.survivors}) > 1:
        notes.append("survivors are scored at different conditions (workload/offered rate): compare with care")
    measured_on = set()
    for r in runs:
        prof = profile_from_manifest((r.manifest or {}).get("hardware"))
        if prof is not None:
            measured_on.add("cpu" if prof.kind == "cpu" else "gpu")
    target = "cpu" if hardware.kind == "cpu" else "gpu"
    if measured_on and measured_on != {target}:
        notes.append(f"measured on {'/'.join(sorted(measured_on))}, target {hardware.name} is {hardware.kind}: "
                     "latency and throughput will differ there; the measured SLO verdicts are kept as the best evidence")
    for n, mf in mem.items():
        if mf.fits is None:
            notes.append(f"{n}: {mf.arithmetic}")

    deciding = _deciding(out, ctx, preset)
    flips: list[WeightFlip] = []
    sensitivity = _weight_sensitivity(out, ctx, flips) + _slo_sensitivity(out, ctx) + _noise_sensitivity(out, ctx)
    message = ""
    if out.winner is None:
        message = (
            "no engine survives the hard constraints; loosen an SLO (--slo), pick other hardware "
            "(--hardware/--gpus) or measure more engines"
        )
    return Recommendation(
        winner=out.winner,
        winner_display_name=engines[out.winner].display_name if out.winner else None,
        ranking=out.ranking,
        eliminated={n: reason for n, (_, reason) in out.eliminated.items()},
        elimination_stage={n: st for n, (st, _) in out.eliminated.items()},
        deciding_constraint=deciding,
        sensitivity=sensitivity,
        weight_flips=flips,
        weights=w,
        preset=preset,
        hardware=hardware.to_dict(),
        slos={s.key: s.threshold_ms for s in slos},
        required_features=required,
        memory_fit=mem,
        workloads=workloads,
        runs=[r.run_id for r in runs],
        notes=notes,
        message=message,
    )
