"""The metric registry: every per-request metric is one :class:`Metric` declaration.

A declaration holds the metric's formula over one :class:`RequestRecord`, its unit, label,
direction, whether ``--slo`` may judge it (and at which percentiles), how failed requests count,
and where it shows (the report's and the console's summary tables, ``summary.csv``, the headline
intervals, the report's CDFs). Everything that names metrics iterates :func:`metrics` instead:
the summariser (``harness.metrics.summary``), the schema (:class:`results.schema.Metrics` stores
each registered metric's distribution under :attr:`Metric.field`), the SLO parser and judge
(``harness.metrics.slo``), the scorer's sentences, the console table, the reports and the CSV
writer (``results.export``).

The registry lives here, in ``results``, because the reports and the writers may not import
``harness`` (tests/test_architecture.py); the declarations themselves (the formulas) live in
``harness/metrics/definitions/``, one module each, and are registered, in the order every table
shows them, when ``harness.metrics`` is imported (every command imports it). A test registers a
metric of its own for its duration with :func:`registered`.

The shape follows AIPerf's (``aiperf/metrics/types/``: one module per metric whose class names its
tag, header, unit, whether larger is better and its flags beside the formula over a record); here
a declaration is a frozen dataclass instance rather than a class, and also says where it shows.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from .records import RequestRecord

LATENCY_PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9, 100.0)
"""The percentiles a stored distribution holds (``p50`` … ``p99_9``, ``max`` = p100): the ones an
SLO may judge."""


def stat_name(percentile: float) -> str:
    """The stored statistic of a percentile: 50 → ``"p50"``, 99.9 → ``"p99_9"``, 100 → ``"max"``."""
    return "max" if percentile == 100.0 else "p" + f"{percentile:g}".replace(".", "_")


@dataclass(frozen=True)
class Metric:
    """One metric, declared once.

    - ``name``: the key stem (``"ttft"``): summary field :attr:`field` (``ttft_ms``), SLO keys
      ``ttft_p99``, CSV columns ``ttft_p99_ms``, CDF samples ``samples_ms.ttft``.
    - ``label``: for sentences (``"E2E latency"``); ``short``: for table headers (``"E2E"``;
      empty = the label).
    - ``value``: the request's own value in ``unit`` (None = it has none): what a per-request SLO
      judges (goodput, DistServe) and, unless ``samples`` is given, what it adds to the
      distribution. ``samples``: the values one request adds (ITL: every gap), when not its value.
    - ``over``: which measured requests enter the distribution: ``"ok"`` the successful ones,
      ``"measured"`` all (connection set-up: failed requests connected too).
    - ``direction``: ``"lower"`` or ``"higher"`` is better.
    - ``slo_percentiles``: the percentiles ``--slo NAME_pNN=…`` may judge; () = not an SLO.
    - ``failures``: how failed requests count: ``"inf"`` as +inf (the error-adjusted distribution,
      stored in ``error_adjusted``, and the SLOs judged on it), ``"excluded"`` not at all.
    - ``missing_meets_slo``: a successful request without a value (TPOT of a 1-token reply)
      cannot break a per-request SLO; else it breaks it.
    - ``report`` / ``console`` / ``csv``: the statistics (``"p50"``, ``"p99"`` …) shown in the
      report's summary table, the console's, and ``summary.csv``; ``decimals``: the most decimals
      a printed figure of it has (:func:`figure`: 3 significant digits, at most these decimals;
      ``summary.csv`` keeps full precision, being data). ``intervals``: the statistics given a 95 % bootstrap interval
      (``EngineResult.intervals``); ``cdf``: its values are stored for the report's CDFs.
    - ``source``: where the formula comes from (paper, section or tool convention).
    """

    name: str
    label: str
    value: Callable[[RequestRecord], float | None]
    source: str
    short: str = ""
    unit: str = "ms"
    samples: Callable[[RequestRecord], Sequence[float]] | None = None
    over: str = "ok"
    direction: str = "lower"
    slo_percentiles: tuple[float, ...] = ()
    failures: str = "excluded"
    missing_meets_slo: bool = False
    report: tuple[str, ...] = ()
    console: tuple[str, ...] = ()
    csv: tuple[str, ...] = ()
    intervals: tuple[str, ...] = ()
    decimals: int = 1
    cdf: bool = False

    def __post_init__(self) -> None:
        if self.over not in ("ok", "measured") or self.failures not in ("inf", "excluded") \
                or self.direction not in ("lower", "higher"):
            raise ValueError(f"metric {self.name!r}: over is 'ok'/'measured', failures 'inf'/'excluded', "
                             "direction 'lower'/'higher'")

    @property
    def field(self) -> str:
        """Its key in :class:`results.schema.Metrics` (``"ttft_ms"``; the name for a unit other than ms)."""
        return f"{self.name}_ms" if self.unit == "ms" else self.name

    @property
    def header(self) -> str:
        """Its name in a table header (``"TTFT"``, ``"E2E"``)."""
        return self.short or self.label

    def values_of(self, r: RequestRecord) -> list[float]:
        """The values ``r`` adds to the distribution (none when it has no value)."""
        if self.samples is not None:
            return list(self.samples(r))
        v = self.value(r)
        return [] if v is None else [v]


_REGISTRY: dict[str, Metric] = {}


def register(metric: Metric) -> Metric:
    """Add ``metric`` (at the end: tables show metrics in registration order) and return it.
    Registering the same declaration again is a no-op; another one under a taken name raises
    ValueError."""
    known = _REGISTRY.get(metric.name)
    if known is not None and known is not metric:
        raise ValueError(f"a metric named {metric.name!r} is already registered")
    _REGISTRY[metric.name] = metric
    return metric


def unregister(name: str) -> None:
    """Remove the metric ``name`` (KeyError when none is registered)."""
    del _REGISTRY[name]


@contextmanager
def registered(*declared: Metric) -> Iterator[tuple[Metric, ...]]:
    """Register ``declared`` for the ``with`` block only (tests): removed again however it ends."""
    done: list[Metric] = []
    try:
        for m in declared:
            done.append(register(m))
        yield declared
    finally:
        for m in done:
            _REGISTRY.pop(m.name, None)


def metrics() -> tuple[Metric, ...]:
    """Every registered metric, in registration order."""
    return tuple(_REGISTRY.values())


def metric(name: str) -> Metric:
    """The metric ``name``; KeyError for an unknown one."""
    return _REGISTRY[name]


def slo_metrics() -> tuple[Metric, ...]:
    """The metrics ``--slo`` may judge, in registration order."""
    return tuple(m for m in _REGISTRY.values() if m.slo_percentiles)


SIGNIFICANT = 3
"""A printed figure keeps this many significant digits (at most its metric's ``decimals``)."""
TPS_DECIMALS = 1
"""Output tokens/s (a throughput, a capacity, its interval, the race's bars): one decimal, everywhere."""


def figure_decimals(value: float, decimals: int) -> int:
    """The decimals :func:`figure` prints ``value`` with: enough for :data:`SIGNIFICANT` digits,
    never more than ``decimals`` (137.55 → 0, 13.755 → 1, 1.3755 → 2 when ``decimals`` is 2)."""
    if not math.isfinite(value) or value == 0:
        return decimals
    d = max(0, min(decimals, SIGNIFICANT - (math.floor(math.log10(abs(value))) + 1)))
    return d - 1 if d > 0 and abs(round(value, d)) >= 10 ** (SIGNIFICANT - d) else d  # 99.96 → "100", not "100.0"


def figure(value: float, decimals: int, low: float | None = None, high: float | None = None) -> str:
    """THE printed form of a metric value of an engine, wherever it is printed (the console's
    tables, the verdict's sentences, report.md/html, the weighted table): thousands separators,
    :func:`figure_decimals` decimals (``figure(137.55, 2)`` → ``"138"``), and, given an interval
    with ``low < high``, ``"138 [131–145]"``: its bounds with the value's decimals. ∞ → ``"∞"``."""
    if not math.isfinite(value):
        return "∞" if value > 0 else "-∞"
    d = figure_decimals(value, decimals)
    text = f"{value:,.{d}f}"
    if low is not None and high is not None and high > low:
        text += f" [{low:,.{d}f}–{high:,.{d}f}]".replace("inf", "∞")
    return text


def tps_figure(value: float) -> str:
    """Output tokens/s as every table and sentence prints it (:data:`TPS_DECIMALS`): ``"1,234.5"``."""
    return f"{value:,.{TPS_DECIMALS}f}" if math.isfinite(value) else "∞"


USD_DECIMALS = 4  # $/1M output tokens: 3 significant digits, down to $0.000123


def usd_figure(value: float, low: float | None = None, high: float | None = None) -> str:
    """$ per 1M output tokens as every table and sentence prints it: :func:`figure` at
    :data:`USD_DECIMALS` (``"$0.299"``, ``"$1.67"``, ``"$0.340"``; an interval ``"$0.299 [0.278–0.325]"``)."""
    return "$" + figure(value, USD_DECIMALS, low, high)


def jobs_figure(value: float) -> str:
    """Jobs (finished agent sessions) per hour as every table prints them: :func:`figure` at 1
    decimal (``"2,110"``, ``"436"``, ``"12.3"``)."""
    return figure(value, 1)


def metric_of(key: str) -> Metric:
    """The metric a key names, in any of its spellings: ``"tpot"``, ``"tpot_ms.p99"`` (a summary
    path), ``"tpot_p99_ms"`` (a CSV column, the weighted table's), ``"tpot_p99"`` (an SLO key).
    KeyError when none does."""
    stem = key.split(".")[0]
    for m in sorted(_REGISTRY.values(), key=lambda m: -len(m.name)):  # ttft_from_scheduled before ttft
        if stem in (m.name, m.field) or stem.startswith((f"{m.name}_p", f"{m.name}_max", f"{m.field}_")):
            return m
    raise KeyError(key)


def metric_figure(key: str, value: float, low: float | None = None, high: float | None = None) -> str:
    """:func:`figure` of the metric ``key`` names (:func:`metric_of`), at its registered ``decimals``."""
    return figure(value, metric_of(key).decimals, low, high)
