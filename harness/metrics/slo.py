"""Latency objectives: parsing ``--slo``, the per-request rule (goodput) and the run-level value.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from results.pairs import parse_pairs
from results.schema import Metrics, RequestRecord

from .request import e2el_ms, itls_ms, tpot_ms, ttft_ms

SLO_METRICS = ("ttft", "tpot", "e2el", "itl")

class SLOError(ValueError):
    """An ``--slo`` string that cannot be parsed (message = the fix)."""

@dataclass(frozen=True)
class SLO:
    """A latency objective: ``metric`` ∈ {ttft, tpot, e2el, itl} must be ≤ ``threshold_ms``.

    Per request (goodput, DistServe): the request's own value must meet the threshold (for
    ``itl``: its largest gap). Per run (the scorer's hard constraint): the ``percentile`` of
    the metric's distribution must meet it (default 99).
    """

    metric: str
    threshold_ms: float
    percentile: float = 99.0

    @property
    def key(self) -> str:
        p = f"{self.percentile:g}".replace(".", "_")
        return f"{self.metric}_p{p}"

_STORED_PERCENTILES = {50.0: "p50", 90.0: "p90", 95.0: "p95", 99.0: "p99", 99.9: "p99_9", 100.0: "max"}

def parse_slos(text: str | None) -> list[SLO]:
    """Parse ``"ttft_p99=500,tpot_p99=50"`` (ms) into :class:`SLO` objects.

    Accepted keys: ``ttft``, ``tpot``, ``e2el``, ``itl``, each optionally with a percentile
    suffix ``_pNN`` or ``_pNN_N`` (``ttft_p99_9`` = p99.9); no suffix means p99.
    Raises :class:`SLOError` on anything else.
    """
    if not text:
        return []
    out: list[SLO] = []
    def no_value(part: str) -> SLOError:
        return SLOError(f"SLO {part!r} has no value: write it as e.g. ttft_p99=500 (ms)")

    for key, val in parse_pairs(text, no_value):
        m = re.fullmatch(r"(ttft|tpot|e2el|itl)(?:_p(\d+(?:_\d+)?))?", key.strip().lower())
        if not m:
            raise SLOError(
                f"unknown SLO {key!r}: use ttft, tpot, e2el or itl with an optional percentile, e.g. ttft_p99=500"
            )
        try:
            threshold = float(val)
        except ValueError:
            raise SLOError(f"SLO {key} needs a number of milliseconds, got {val!r}") from None
        if not threshold > 0 or math.isinf(threshold):
            raise SLOError(f"SLO {key} must be a positive number of milliseconds, got {val!r}")
        pct = float(m.group(2).replace("_", ".")) if m.group(2) else 99.0
        if pct not in _STORED_PERCENTILES:
            raise SLOError(f"SLO percentile p{pct:g} in {key!r} is not computed: use p50, p90, p95, p99, p99_9 or p100")
        slo = SLO(m.group(1), threshold, pct)
        if any(o.key == slo.key for o in out):
            raise SLOError(f"SLO {slo.key} is given twice: keep one value")
        out.append(slo)
    return out

def slo_table(slos: Sequence[SLO]) -> dict[str, float]:
    """How SLOs are stored in every artefact (manifest, summary, ladder, search, recommendation):
    key → threshold (ms), ``{"ttft_p90": 4000.0}``. :func:`slos_of` reads it back."""
    return {s.key: s.threshold_ms for s in slos}


def slos_of(table: Mapping[str, float] | None) -> list[SLO]:
    """The :class:`SLO` objects of a stored table (:func:`slo_table`; None or empty = none).
    Raises :class:`SLOError` for a key or threshold :func:`parse_slos` would refuse."""
    out: list[SLO] = []
    for key, threshold in (table or {}).items():
        out += parse_slos(f"{key}={threshold!r}")
    return out


def meets_slos(r: RequestRecord, slos: Sequence[SLO]) -> bool:
    """DistServe per-request rule: success and every SLO met by this request's own value."""
    if not r.success:
        return False
    for slo in slos:
        if slo.metric == "ttft":
            v = ttft_ms(r)
        elif slo.metric == "tpot":
            v = tpot_ms(r)
            if v is None:  # a 1-token reply has no TPOT; it cannot violate it
                continue
        elif slo.metric == "e2el":
            v = e2el_ms(r)
        else:
            gaps = itls_ms(r)
            v = max(gaps) if gaps else 0.0
        if v is None or v > slo.threshold_ms:
            return False
    return True

def slo_percentile_value(metrics: Metrics, slo: SLO) -> float | None:
    """The run-level value an SLO is judged on: the SLO's percentile of its metric (ms).

    Uses the error-adjusted distribution for ttft/e2el when requests failed (a failure can
    only make the percentile worse; None = infinite). Percentiles outside the stored set
    raise ValueError.
    """
    name = _STORED_PERCENTILES.get(slo.percentile)
    if name is None:
        raise ValueError(f"percentile p{slo.percentile:g} is not stored; use 50, 90, 95, 99, 99.9 or 100")
    if slo.metric in ("ttft", "e2el") and metrics.requests_failed:
        return metrics.error_adjusted.distribution(slo.metric).percentile(name)
    return metrics.distribution(slo.metric).percentile(name)
