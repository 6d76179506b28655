"""Scripted engines on a simulated clock: the decision test bed's engines, whose truth is known.

A :class:`SimEngine` serves requests FIFO in ``slots`` (its ``max_num_seqs``): a request waits
for a free slot, then takes ``prefill_ms`` to its first token and ``tpot(active)`` ms per
further token, where ``active = min(concurrency, slots)`` sequences share the engine
(``tpot_ms × (1 + batch_slowdown × (active − 1)) × (1 + slot_overhead × (slots − 1))``: a batch
step slows as the batch grows, and every slot configured costs ``slot_overhead`` of each step,
busy or not, as a static reservation does; so its capacity at an SLO peaks at one slot count).
``jitter`` is the sigma of a lognormal factor on each request's times (the requests' noise);
``drift`` the sigma of a lognormal factor on every time of one measurement alike (the
machine's state while it ran: CPU steal, a fresh start's warm-up; the noise between
measurements that resampling one measurement's requests cannot see, drawn from its own stream
so that ``drift=0`` leaves every other draw as it was);
``fail_every`` > 0 makes every k-th request fail (a half-dead engine at 2), ``fail_rate`` each
request fail with that probability (an engine with a true failure rate); ``burst_ms`` delays the
first token of every request sent at the very start (the synchronised first turns, a burst of
prefills: an engine worse there alone, identical in steady state); ``crash_at`` makes
the engine die once that many requests are in flight (every later request fails, as after a
crash); ``startup_s``, ``processes`` and ``peak_memory_bytes`` are its tie-breaker facts.
``cache_blocks``, ``block_tokens`` and ``prefill_ms_per_token`` are its prefix cache, read by
agent sessions (:mod:`harness.loadgen.simulated_sessions`).

:func:`simulate` replays ``requests`` requests of ``output_tokens`` tokens from ``concurrency``
closed-loop clients (each sends its next request when its previous one ends) and returns the
:class:`~results.schema.RequestRecord` s a real client would have stored (nanosecond stamps on a
clock starting at 0) and the measured duration. :func:`truth` is the same model's noise-free
steady state, from which the capacity at an SLO follows analytically (:func:`true_capacity`).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from results.schema import RequestRecord

NS_PER_MS = 1_000_000


@dataclass(frozen=True)
class SimEngine:
    """A scripted engine (module docstring); times in ms, memory in bytes."""

    name: str
    slots: int = 8
    prefill_ms: float = 50.0
    tpot_ms: float = 20.0
    batch_slowdown: float = 0.1
    slot_overhead: float = 0.0
    jitter: float = 0.0
    drift: float = 0.0
    fail_every: int = 0
    fail_rate: float = 0.0
    burst_ms: float = 0.0
    crash_at: int | None = None
    startup_s: float = 10.0
    processes: int = 1
    peak_memory_bytes: float = 2e9
    prefill_ms_per_token: float = 0.0  # per prompt token not served from the prefix cache (agent sessions)
    cache_blocks: int | None = None  # its prefix cache: an LRU of this many blocks (None: none, no cached tokens reported)
    block_tokens: int = 16  # tokens per cache block

    def tpot_at(self, concurrency: float) -> float:
        """ms per output token with ``concurrency`` requests in flight (steady state)."""
        active = min(max(concurrency, 1.0), self.slots)
        return self.tpot_ms * (1.0 + self.batch_slowdown * (active - 1.0)) * (1.0 + self.slot_overhead * (self.slots - 1))


def simulate(engine: SimEngine, concurrency: int, requests: int, output_tokens: int, seed: int,
             name: str = "sim") -> tuple[list[RequestRecord], float]:
    """``requests`` requests from ``concurrency`` closed-loop clients (module docstring):
    ``(records, duration in s)``."""
    rng = np.random.default_rng(seed)
    free = [0.0] * engine.slots  # when each slot frees (ms), a min-heap
    heapq.heapify(free)
    clients = [0.0] * concurrency  # when each client sends its next request (ms)
    heapq.heapify(clients)
    records: list[RequestRecord] = []
    crashed = engine.crash_at is not None and concurrency >= engine.crash_at
    tpot = engine.tpot_at(concurrency)
    slow = float(np.random.default_rng([seed, 0xd71f7]).lognormal(0.0, engine.drift)) if engine.drift else 1.0
    for i in range(requests):
        send = heapq.heappop(clients)
        factor = (float(rng.lognormal(0.0, engine.jitter)) if engine.jitter else 1.0) * slow
        failed = crashed or (engine.fail_every > 0 and (i + 1) % engine.fail_every == 0)
        if engine.fail_rate > 0:
            failed = failed or bool(rng.random() < engine.fail_rate)
        record = RequestRecord(request_id=f"{name}-{i}", engine=engine.name, workload="sim", scheduled_ns=int(send * NS_PER_MS),
                               send_ns=int(send * NS_PER_MS), max_tokens=output_tokens)
        if failed:
            end = send + 5.0
            record.success, record.error_class, record.end_ns = False, "http_500", int(end * NS_PER_MS)
        else:
            start = max(send, heapq.heappop(free))
            first = start + engine.prefill_ms * factor + (engine.burst_ms if send == 0.0 else 0.0)
            chunks = [first + k * tpot * factor for k in range(output_tokens)]
            end = chunks[-1]
            heapq.heappush(free, end)
            record.success, record.first_token_ns, record.last_token_ns = True, int(first * NS_PER_MS), int(end * NS_PER_MS)
            record.end_ns = record.last_token_ns
            record.chunk_times_ns = [int(c * NS_PER_MS) for c in chunks]
            record.output_tokens_server = output_tokens
        records.append(record)
        heapq.heappush(clients, end)
    first_send = min(r.send_ns or 0 for r in records)
    last_end = max(r.end_ns or 0 for r in records)
    return records, (last_end - first_send) / 1e9


@dataclass(frozen=True)
class Steady:
    """The noise-free steady state at one concurrency: output tokens/s, TTFT and TPOT (ms)."""

    output_tps: float
    ttft_ms: float
    tpot_ms: float


def truth(engine: SimEngine, concurrency: float, output_tokens: int, percentile: float | None = None) -> Steady:
    """The model's steady state at a (continuous) ``concurrency`` of closed-loop clients: with
    ``active = min(C, slots)`` requests served and the rest queued FIFO, a request occupies its
    slot for ``D = prefill + (n − 1) × tpot`` ms and waits ``(C − active) / active × D`` before
    it (Little's law on the queue). With ``percentile`` (e.g. 90), TPOT and TTFT are that
    percentile over requests instead of the noise-free values: each request's times carry a
    lognormal factor of sigma ``jitter``, whose q-quantile is ``exp(z_q × jitter)`` (the queue's
    wait is kept at its mean: exact below ``slots``, an approximation above)."""
    tpot = engine.tpot_at(concurrency)
    duration = engine.prefill_ms + (output_tokens - 1) * tpot
    active = min(concurrency, engine.slots)
    wait = max(0.0, concurrency - active) / active * duration
    q = math.exp(NormalDist().inv_cdf(percentile / 100.0) * engine.jitter) if percentile is not None else 1.0
    return Steady(output_tps=active * output_tokens / (duration / 1000.0), ttft_ms=wait + engine.prefill_ms * q,
                  tpot_ms=tpot * q)


def true_capacity(engine: SimEngine, output_tokens: int, ttft_ms: float, tpot_ms: float, max_load: float = 256.0,
                  percentile: float = 90.0) -> float:
    """The output tokens/s at the highest concurrency whose steady-state TTFT and TPOT, at
    ``percentile`` over requests (the SLOs' p90 by default; :func:`truth`), meet the thresholds
    (bisection on the continuous concurrency; 0 when even 1 client misses them)."""
    def ok(c: float) -> bool:
        s = truth(engine, c, output_tokens, percentile)
        return s.ttft_ms <= ttft_ms and s.tpot_ms <= tpot_ms

    if not ok(1.0):
        return 0.0
    lo, hi = 1.0, max_load
    if ok(hi):
        return truth(engine, hi, output_tokens).output_tps
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return truth(engine, lo, output_tokens).output_tps  # throughput rises with the concurrency
