"""One measurement's requests as the decision reads them: arrays (:class:`Requests`), judged on
the measurement's steady state (:func:`steady_window`), with the error bound's interval
(:func:`failure_lower_bound`) and each engine's own random stream (:func:`engine_stream`).
:mod:`harness.scoring.capacity.frontier` judges points and reads capacities from them.

**The steady state** of a closed-loop measurement opens at its first completion (until then
every session in flight is in its first turn, all sent at once: the synchronised start, a burst
of prefills that steady state never sees) and closes when the first session ends after the last
was admitted (from then on the load drains). Requests sent inside it are judged; throughput
counts the tokens emitted inside it over its length. A measurement whose window holds fewer than
:data:`STEADY_MIN_JUDGED` requests, or under half of them, is judged whole.

**The error bound** is judged with an interval, not on the raw fraction: a point fails by errors
only when the one-sided 95 % Wilson score lower bound of its failure rate (Wilson 1927, JASA 22)
is above the bound (with about 12 requests a point, one failure is 8 % of them; an engine whose
true failure rate is 1 % would trip a raw 5 % bound at about one point in nine, and trips this
one at about one in several thousand). Failures still count against the SLOs (error-adjusted).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from harness.metrics.request import e2el_ms, itls_ms, tpot_ms, ttft_ms
from results.schema import RequestRecord
from results.schema.metric_registry import slo_metrics

ARRAYS = ("ttft", "tpot", "e2el", "itl")
"""The SLO metrics :class:`Requests` holds as fields (the scorer's throughput and interactivity
read them too); every other registered SLO metric's values go to ``Requests.more``."""

ERROR_BOUND_Z = 1.6448536269514722  # one-sided 95 %: a point fails by errors when the Wilson lower bound is above the bound


def failure_lower_bound(failed: np.ndarray | float, n: np.ndarray | float) -> np.ndarray:
    """The one-sided 95 % Wilson score lower bound of a failure rate ``failed / n`` (Wilson
    1927, JASA 22: the score interval's lower end, never below 0); vectorised; 1.0 where ``n`` is
    0 (no request answered: nothing was served)."""
    k, m = np.asarray(failed, dtype=np.float64), np.asarray(n, dtype=np.float64)
    z2 = ERROR_BOUND_Z ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        p = k / m
        center = (p + z2 / (2 * m)) / (1 + z2 / m)
        half = ERROR_BOUND_Z * np.sqrt(p * (1 - p) / m + z2 / (4 * m * m)) / (1 + z2 / m)
        low = np.maximum(0.0, center - half)
    return np.where(m > 0, low, 1.0)


def failure_upper_bound(failed: float, n: float) -> float:
    """The one-sided 95 % Wilson score upper bound of a failure rate ``failed / n`` (the score
    interval's upper end, never above 1); 1.0 when ``n`` is 0."""
    if n <= 0:
        return 1.0
    z2, p = ERROR_BOUND_Z ** 2, failed / n
    center = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = ERROR_BOUND_Z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return min(1.0, center + half)


def errors_undecided(failed: int, n: int, max_failure_rate: float) -> bool:
    """Whether a point's failures leave the error bound undecided: some request failed, yet the
    Wilson interval of the rate holds the bound (its lower end at or below it, its upper end
    above): too few requests to tell a fluke from an engine that fails above the bound. The
    ladder measures such a point again (:data:`harness.app.run.ladder.ERROR_EXTRA` times at
    most): points sized for the error bound."""
    return failed > 0 and not too_many_failures(failed, n, max_failure_rate) \
        and failure_upper_bound(failed, n) > max_failure_rate


def too_many_failures(failed: int, n: int, max_failure_rate: float) -> bool:
    """Whether ``failed`` of ``n`` requests exceed the bound ``max_failure_rate`` beyond the
    noise: the one-sided 95 % Wilson lower bound of the rate is above it (module docstring)."""
    return bool(failure_lower_bound(failed, n) > max_failure_rate)


def engine_stream(seed: int, name: str) -> int:
    """The seed of ``name``'s own bootstrap stream in a run seeded ``seed``: independent
    streams per engine (module docstring), reproducible from the run's seed and the name."""
    return int(np.random.SeedSequence([seed & 0xFFFFFFFF, zlib.crc32(name.encode())]).generate_state(1)[0])


STEADY_MIN_JUDGED = 8  # fewer requests than this in the steady state: judge the whole measurement


def steady_window(records: Sequence[RequestRecord]) -> tuple[int, int] | None:
    """The steady state of one closed-loop measurement (ns on the records' clock), or None when
    it holds fewer than :data:`STEADY_MIN_JUDGED` requests or under half of them. It opens at
    the first completion: until then every session in flight is in its first turn, sent at once
    (the synchronised start, a burst of prefills that steady state never sees); it closes at the
    first session to end after the last session was admitted: until then every session that
    ended was replaced, so the load held, and from then on it drains. A request is judged when
    it was sent inside the window; throughput counts the tokens emitted inside it over its length.
    A session is the records' ``session_id`` (a single-turn request is a session of its own)."""
    ends = [r.end_ns for r in records if r.end_ns is not None]
    sends = [r.send_ns for r in records if r.send_ns is not None]
    if not ends or not sends:
        return None
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for r in records:
        key = r.session_id or r.request_id
        if r.send_ns is not None:
            first[key] = min(first.get(key, r.send_ns), r.send_ns)
        if r.end_ns is not None:
            last[key] = max(last.get(key, r.end_ns), r.end_ns)
    opens = min(ends)
    admitted = max(first.values()) if first else max(sends)
    after = [t for t in last.values() if t >= admitted]
    closes = min(after) if after else max(ends)
    if closes <= opens:
        return None
    judged = sum(1 for r in records if r.send_ns is not None and opens <= r.send_ns <= closes)
    if judged < STEADY_MIN_JUDGED or 2 * judged < len(records):
        return None
    return opens, closes


def judged_records(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """The records the judge reads of one point: per measurement (``repeat``), the measured
    requests sent inside its steady state (:func:`steady_window`; all of them when it is too
    short to judge), and every failure wherever it fell (a failure counts against the SLOs and
    the error bound wherever it happened, as in :meth:`Requests.of`). Summarised, they give the
    point's latency percentiles exactly as the judge reads them."""
    by: dict[int, list[RequestRecord]] = {}
    for r in records:
        if r.phase == "measured":
            by.setdefault(r.repeat, []).append(r)
    out: list[RequestRecord] = []
    for k in sorted(by):
        window = steady_window(by[k])
        lo, hi = window if window is not None else (-math.inf, math.inf)
        out += [r for r in by[k] if not r.success or (r.send_ns is not None and lo <= r.send_ns <= hi)]
    return out


def measured_span_s(records: Sequence[RequestRecord]) -> float:
    """First send → last completion of one measurement (s), as :func:`harness.metrics.compute_metrics`
    does (incomplete requests' ends left out); 0.0 without sends or ends."""
    sends = [r.send_ns for r in records if r.send_ns is not None]
    ends = [r.end_ns for r in records if r.end_ns is not None and r.error_class != "incomplete"]
    return max(0.0, (max(ends) - min(sends)) / 1e9) if sends and ends else 0.0


def _tokens_within(r: RequestRecord, lo: float, hi: float) -> float:
    """The output tokens ``r`` emitted in ``(lo, hi]`` (ns): its token-bearing chunks there, each
    carrying an equal share of its tokens (all of them for an unbounded window). The window opens
    at a completion, whose last chunk is not counted: N completions over N intervals between
    them, not N + 1 (a review measured a one-slot server at 10.7 req/s whose ceiling is 10)."""
    tokens = float(r.output_tokens or 0)
    if math.isinf(lo) and math.isinf(hi):
        return tokens
    chunks = r.chunk_times_ns or [t for t in (r.first_token_ns, r.last_token_ns) if t is not None]
    if not chunks:
        return 0.0
    inside = sum(1 for t in chunks if lo < t <= hi)
    return tokens * inside / len(chunks)


@dataclass(frozen=True)
class Requests:
    """One measurement's requests as arrays (times in ms; NaN where a value does not exist):
    ``ok`` success; ``ttft``, ``e2el`` (NaN for a failed request, counted +inf in SLOs);
    ``tpot`` (NaN below 2 output tokens); ``tokens`` output tokens of successful requests (0
    otherwise); ``itl`` each request's inter-token gaps; ``cluster`` the index (0 … k−1, in order
    of first appearance) of the session each request belongs to (its own for a single-turn
    request): what the bootstrap resamples; ``done`` 1.0 for a request that succeeded within the
    window (the request rate). ``duration_s``: the window judged (s: the steady state,
    :func:`steady_window`, else the whole measured phase); ``span_s``: the whole measured phase
    (s; sessions/s of an agentic point count over it); ``steady``: whether the window is the
    steady state. Latencies are NaN outside the steady state (a request sent in the
    synchronised start or the drain is not judged), tokens count those emitted inside it."""

    ok: np.ndarray
    ttft: np.ndarray
    tpot: np.ndarray
    e2el: np.ndarray
    tokens: np.ndarray
    itl: tuple[np.ndarray, ...]
    duration_s: float
    cluster: np.ndarray | None = None  # None: every request a cluster of its own
    done: np.ndarray | None = None  # None: every successful request
    out: np.ndarray | None = None  # each successful request's output tokens (None: ``tokens``)
    span_s: float | None = None  # None: duration_s
    steady: bool = False
    more: Mapping[str, tuple[np.ndarray, ...]] = field(default_factory=dict)  # other SLO metrics: per request, its values

    def values(self, name: str) -> np.ndarray:
        """The values an SLO on the registered metric ``name`` is judged over (ms): one per
        request (NaN where none) for ttft, tpot and e2el; ITL's gaps and any other metric's
        values (``Metric.values_of``, ``more``) pooled over the requests."""
        if name in ("ttft", "tpot", "e2el"):
            return getattr(self, name)
        parts = self.itl if name == "itl" else self.more[name]
        return np.concatenate(parts) if parts else np.empty(0)

    @classmethod
    def of(cls, records: Sequence[RequestRecord], duration_s: float, *, steady: bool = True) -> "Requests":
        """From one measurement's measured records (incomplete ones, cut by a drain bound, are
        left out, as in :func:`harness.metrics.compute_metrics`, and so are requests a Ctrl-C
        cut: the client's doing, not the engine's), judged on their steady state
        (:func:`steady_window`; ``steady=False``, or a window too short to judge: every request
        over ``duration_s``)."""
        rs = [r for r in records if r.phase == "measured" and r.error_class not in ("incomplete", "interrupted")]

        def arr(values: list[float | None]) -> np.ndarray:
            return np.array([math.nan if v is None else v for v in values], dtype=np.float64)

        window = steady_window(rs) if steady else None
        lo, hi = window if window is not None else (-math.inf, math.inf)
        judged = [window is None or (r.send_ns is not None and lo <= r.send_ns <= hi) for r in rs]
        ok = np.array([r.success for r in rs], dtype=bool)
        ids: dict[str, int] = {}
        cluster = np.array([ids.setdefault(r.session_id or r.request_id, len(ids)) for r in rs], dtype=np.int64)
        seen = [r.success and j for r, j in zip(rs, judged)]
        return cls(ok=ok, cluster=cluster, ttft=arr([ttft_ms(r) if s else None for r, s in zip(rs, seen)]),
                   tpot=arr([tpot_ms(r) if s else None for r, s in zip(rs, seen)]),
                   e2el=arr([e2el_ms(r) if s else None for r, s in zip(rs, seen)]),
                   tokens=np.array([_tokens_within(r, lo, hi) if r.success else 0.0 for r in rs], dtype=np.float64),
                   itl=tuple(np.asarray(itls_ms(r), dtype=np.float64) if s else np.empty(0) for r, s in zip(rs, seen)),
                   duration_s=(hi - lo) / 1e9 if window is not None else float(duration_s),
                   done=np.array([r.success and r.end_ns is not None and lo < r.end_ns <= hi for r in rs], dtype=np.float64),
                   span_s=float(duration_s), steady=window is not None,
                   out=np.array([(r.output_tokens or 0) if r.success else 0 for r in rs], dtype=np.float64),
                   more={m.name: tuple(np.asarray(m.values_of(r) if s else [], dtype=np.float64) for r, s in zip(rs, seen))
                         for m in slo_metrics() if m.name not in ARRAYS})

    @property
    def n(self) -> int:
        return int(self.ok.size)

    def clusters(self) -> list[np.ndarray]:
        """The request indices of each cluster (session), in cluster order."""
        if self.cluster is None:
            return [np.array([i]) for i in range(self.n)]
        order = np.argsort(self.cluster, kind="stable")
        return np.split(order, np.flatnonzero(np.diff(self.cluster[order])) + 1) if self.n else []

    def take(self, idx: np.ndarray) -> "Requests":
        """The requests at ``idx`` (a bootstrap resample), over the same duration; each copy of a
        request keeps its cluster id (a resample's clusters are not told apart: only the
        bootstrap reads them, before it takes)."""
        return Requests(self.ok[idx], self.ttft[idx], self.tpot[idx], self.e2el[idx], self.tokens[idx],
                        tuple(self.itl[i] for i in idx), self.duration_s,
                        cluster=self.cluster[idx] if self.cluster is not None else None, done=self.completions()[idx],
                        out=self.tokens_out()[idx], span_s=self.span_s, steady=self.steady,
                        more={k: tuple(v[i] for i in idx) for k, v in self.more.items()})

    def tokens_out(self) -> np.ndarray:
        """Each successful request's whole output tokens (``tokens`` counts those inside the window)."""
        return self.out if self.out is not None else self.tokens

    def completions(self) -> np.ndarray:
        """1.0 per request that succeeded within the window judged (the request rate's count)."""
        return self.done if self.done is not None else self.ok.astype(np.float64)

    @property
    def span(self) -> float:
        return self.span_s if self.span_s is not None else self.duration_s


def pool(parts: Sequence[Requests]) -> Requests:
    """Several measurements of one point as one: requests concatenated, durations summed."""
    if len(parts) == 1:
        return parts[0]
    offsets = np.cumsum([0] + [p.n for p in parts[:-1]])  # clusters of different measurements stay apart
    cluster = np.concatenate([(p.cluster if p.cluster is not None else np.arange(p.n)) + off
                              for p, off in zip(parts, offsets)]).astype(np.int64)
    return Requests(np.concatenate([p.ok for p in parts]), np.concatenate([p.ttft for p in parts]),
                    np.concatenate([p.tpot for p in parts]), np.concatenate([p.e2el for p in parts]),
                    np.concatenate([p.tokens for p in parts]), tuple(g for p in parts for g in p.itl),
                    sum(p.duration_s for p in parts), cluster=cluster,
                    done=np.concatenate([p.completions() for p in parts]), span_s=sum(p.span for p in parts),
                    steady=all(p.steady for p in parts), out=np.concatenate([p.tokens_out() for p in parts]),
                    more={k: tuple(g for p in parts for g in p.more[k]) for k in parts[0].more})

