"""Latency objectives: parsing ``--slo``, the per-request rule (goodput) and the run-level value.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from results.pairs import parse_pairs
from results.schema import Metrics, RequestRecord
from results.schema.metric_registry import LATENCY_PERCENTILES, metric, slo_metrics, stat_name


def slo_metric_names() -> tuple[str, ...]:
    """The metrics ``--slo`` accepts (each declared with ``slo_percentiles``), in registry order:
    ``("ttft", "tpot", "itl", "e2el")`` plus any registered since."""
    return tuple(m.name for m in slo_metrics())


SLO_METRICS = slo_metric_names()
"""The built-in SLO metrics (as registered on import); :func:`slo_metric_names` for the current ones."""

class SLOError(ValueError):
    """An ``--slo`` string that cannot be parsed (message = the fix)."""

@dataclass(frozen=True)
class SLO:
    """A latency objective: ``metric`` (a registered SLO metric: ttft, tpot, e2el, itl …) must
    be ≤ ``threshold_ms``.

    Per request (goodput, DistServe): the request's own value must meet the threshold (for
    ``itl``: its largest gap; ``Metric.value``). Per run (the scorer's hard constraint): the
    ``percentile`` of the metric's distribution must meet it (default 99).
    """

    metric: str
    threshold_ms: float
    percentile: float = 99.0

    @property
    def key(self) -> str:
        p = f"{self.percentile:g}".replace(".", "_")
        return f"{self.metric}_p{p}"


def _percentiles_text(percentiles: Sequence[float]) -> str:
    """``"p50, p90, p95, p99, p99_9 or p100"``."""
    names = ["p" + f"{p:g}".replace(".", "_") for p in percentiles]
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


def slo_choices_text() -> str:
    """What ``--slo`` accepts, read off the registry (its ``--help``): ``"ttft, tpot, itl or e2el
    at p50, p90, p95, p99, p99_9 or p100"``; metrics whose percentiles differ each say theirs."""
    groups: dict[tuple[float, ...], list[str]] = {}
    for m in slo_metrics():
        groups.setdefault(m.slo_percentiles, []).append(m.name)
    parts = [f"{_or_list(names)} at {_percentiles_text(ps)}" for ps, names in groups.items()]
    return "; ".join(parts)


def _or_list(names: Sequence[str]) -> str:
    """``"ttft, tpot, itl or e2el"``."""
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


def parse_slos(text: str | None) -> list[SLO]:
    """Parse ``"ttft_p99=500,tpot_p90=50"`` (ms) into :class:`SLO` objects.

    Accepted keys: a registered SLO metric (:func:`slo_metric_names`: ``ttft``, ``tpot``,
    ``itl``, ``e2el``) with a percentile suffix ``_pNN`` or ``_pNN_N`` (``ttft_p99_9`` = p99.9)
    among those its declaration allows (``Metric.slo_percentiles``). A bare metric
    (``ttft=500``) is refused: it once meant p99 while the default SLOs judge p90, and nobody was
    told; the error says to write ``ttft_p90=500`` or ``ttft_p99=500``.
    Raises :class:`SLOError` on anything else.
    """
    return _parse(text, bare=False)


def _parse(text: str | None, bare: bool) -> list[SLO]:
    """:func:`parse_slos`; ``bare``: a metric without a percentile reads as p99 (stored tables of old runs)."""
    if not text:
        return []
    out: list[SLO] = []
    def no_value(part: str) -> SLOError:
        return SLOError(f"SLO {part!r} has no value: write it as e.g. ttft_p99=500 (ms)")

    names = slo_metric_names()
    for key, val in parse_pairs(text, no_value):
        m = re.fullmatch(r"(" + "|".join(map(re.escape, names)) + r")(?:_p(\d+(?:_\d+)?))?", key.strip().lower())
        if not m:
            raise SLOError(
                f"unknown SLO {key!r}: use {', '.join(names[:-1])} or {names[-1]} with a percentile, e.g. ttft_p99=500"
            )
        try:
            threshold = float(val)
        except ValueError:
            raise SLOError(f"SLO {key} needs a number of milliseconds, got {val!r}") from None
        if not threshold > 0 or math.isinf(threshold):
            raise SLOError(f"SLO {key} must be a positive number of milliseconds, got {val!r}")
        name = m.group(1)
        if not m.group(2) and not bare:
            raise SLOError(f"SLO {key.strip()!r} has no percentile: write {name}_p90={val.strip()} or "
                           f"{name}_p99={val.strip()} (the default SLOs judge p90)")
        pct = float(m.group(2).replace("_", ".")) if m.group(2) else 99.0
        allowed = metric(name).slo_percentiles
        if pct not in allowed:
            raise SLOError(f"SLO percentile p{pct:g} in {key!r} is not computed: use {_percentiles_text(allowed)}")
        slo = SLO(name, threshold, pct)
        if any(o.key == slo.key for o in out):
            raise SLOError(f"SLO {slo.key} is given twice: keep one value")
        out.append(slo)
    return out

def slo_table(slos: Sequence[SLO]) -> dict[str, float]:
    """How SLOs are stored in every artefact (manifest, summary, ladder, search, recommendation):
    key → threshold (ms), ``{"ttft_p90": 4000.0}``. :func:`slos_of` reads it back."""
    return {s.key: s.threshold_ms for s in slos}


def slos_of(table: Mapping[str, float] | None) -> list[SLO]:
    """The :class:`SLO` objects of a stored table (:func:`slo_table`; None or empty = none); a
    bare key of an old run reads as p99, as it was judged. Raises :class:`SLOError` for a key or
    threshold :func:`parse_slos` would refuse otherwise."""
    out: list[SLO] = []
    for key, threshold in (table or {}).items():
        out += _parse(f"{key}={threshold!r}", bare=True)
    return out


def meets_slos(r: RequestRecord, slos: Sequence[SLO]) -> bool:
    """DistServe per-request rule: success and every SLO met by this request's own value
    (``Metric.value``; a request without one breaks the SLO unless ``Metric.missing_meets_slo``:
    a 1-token reply has no TPOT, so it cannot violate it)."""
    if not r.success:
        return False
    for slo in slos:
        judged = metric(slo.metric)
        v = judged.value(r)
        if v is None and judged.missing_meets_slo:
            continue
        if v is None or v > slo.threshold_ms:
            return False
    return True

def slo_percentile_value(metrics: Metrics, slo: SLO) -> float | None:
    """The run-level value an SLO is judged on: the SLO's percentile of its metric (ms).

    Uses the error-adjusted distribution for a metric whose failures count as +inf
    (``Metric.failures``: ttft, e2el) when requests failed (a failure can only make the
    percentile worse; None = infinite). Percentiles outside the stored set raise ValueError.
    """
    if slo.percentile not in LATENCY_PERCENTILES:
        raise ValueError(f"percentile p{slo.percentile:g} is not stored; use 50, 90, 95, 99, 99.9 or 100")
    name = stat_name(slo.percentile)
    if metric(slo.metric).failures == "inf" and metrics.requests_failed:
        return metrics.error_adjusted.distribution(slo.metric).percentile(name)
    return metrics.distribution(slo.metric).percentile(name)
