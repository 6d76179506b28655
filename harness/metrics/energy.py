"""Energy per output token of a load point, with its interval (issue 43).

Inputs: each measurement's energy (J, :class:`results.schema.PhaseEnergy`, read by
:mod:`adapters.telemetry.energy`) and its output tokens (the successful measured requests' server counts,
the tokens throughput counts). The point's figure is the ratio of sums, ``J/token = ΣE / ΣT``
over its measurements (a ratio of means, so a long measurement weighs as much as its tokens).

Its 95 % interval is the ratio estimator's (Cochran, *Sampling Techniques*, 3rd ed. 1977,
§6.3-6.4): with ``k`` groups (measurements, or time windows of one measurement) of energy
``E_i`` and tokens ``T_i``, ``R = ΣE/ΣT``, ``SE(R) = sqrt(Σ(E_i − R·T_i)² / (k(k−1))) / mean(T)``,
and ``R ± t(0.975, k−1) · SE(R)`` (Student t's 97.5 % quantile: :data:`T975`, the
NIST/SEMATECH e-Handbook's table 1.3.6.7.2, for 1–30 degrees of freedom; beyond, the normal's
with the first Cornish-Fisher term, ``z + (z³ + z) / 4ν``). Groups are the point's measurements when
it has several (fresh starts: run-to-run noise included), else :data:`WINDOWS` equal time
windows of its one measurement (batch means: the noise within the phase only), whose energy is
the counter's series interpolated at the windows' edges and whose tokens are each request's
output tokens spread evenly over its token-bearing chunks. Fewer than 2 groups: no interval.

``tokens/J`` is ``1 / (J/token)`` with the interval's bounds inverted (a lower bound at or
below 0 gives an upper bound of infinity). A point whose energy was not read has every figure
None and the reason; **provisioned** figures (``--watts W``) are ``W × duration / tokens`` with
the throughput's duration (first send → last completion: ``W / output tok/s``), labelled apart.
The cost of the energy: ``J/token × 1e6 / 3.6e6 kWh × USD/kWh`` per 1M output tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from statistics import NormalDist

import numpy as np

from results.schema import EnergyFigures, EnergySource, PhaseEnergy, RequestRecord

WINDOWS = 5
J_PER_KWH = 3.6e6
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
"""Student t's 97.5 % quantile for 1, 2, … 30 degrees of freedom (a 95 % two-sided interval)."""


def t975(df: int) -> float:
    """Student t's 97.5 % quantile for ``df`` >= 1 degrees of freedom (module docstring)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(T975):
        return T975[df - 1]
    z = NormalDist().inv_cdf(0.975)
    return z + (z ** 3 + z) / (4 * df)


@dataclass(frozen=True)
class EnergySample:
    """One measurement of a point: its ``energy`` (None: not read), output ``tokens``, the
    throughput's ``duration_s`` (s) and the (J, tokens) of its time ``windows``."""

    energy: PhaseEnergy | None
    tokens: int
    duration_s: float
    windows: tuple[tuple[float, float], ...] = field(default_factory=tuple)


def ratio_interval(energy: Sequence[float], tokens: Sequence[float]) -> tuple[float, tuple[float, float] | None]:
    """``ΣE/ΣT`` (J per token) and its 95 % interval by the ratio estimator (module docstring);
    no interval for fewer than 2 groups or no tokens. Raises ValueError when the lengths differ."""
    e, t = np.asarray(energy, float), np.asarray(tokens, float)
    if e.shape != t.shape:
        raise ValueError(f"{len(e)} energies for {len(t)} token counts")
    total = t.sum()
    if total <= 0:
        return math.nan, None
    r = float(e.sum() / total)
    k = len(e)
    if k < 2:
        return r, None
    se = math.sqrt(float(((e - r * t) ** 2).sum()) / (k * (k - 1))) / float(t.mean())
    half = t975(k - 1) * se
    return r, (r - half, r + half)


def windows(phase: PhaseEnergy | None, records: Sequence[RequestRecord], tokens: int,
            count: int = WINDOWS) -> tuple[tuple[float, float], ...]:
    """(J, output tokens) in ``count`` equal time windows of the phase (module docstring); the
    tokens scaled to sum to ``tokens``; () without a read counter or a token."""
    if phase is None or phase.energy_j is None or len(phase.series) < 2 or tokens <= 0:
        return ()
    t = np.array([s[0] for s in phase.series], float)
    j = np.array([s[1] for s in phase.series], float)
    edges = np.linspace(t[0], t[-1], count + 1)
    joules = np.diff(np.interp(edges, t, j))
    per = np.zeros(count)
    for r in records:
        out = r.output_tokens_server or r.output_tokens_retok or 0
        if not r.success or not r.chunk_times_ns or not out:
            continue
        at = np.clip(np.searchsorted(edges, np.asarray(r.chunk_times_ns, float), side="right") - 1, 0, count - 1)
        np.add.at(per, at, out / len(r.chunk_times_ns))
    if per.sum() <= 0:
        return ()
    per *= tokens / per.sum()
    return tuple((float(a), float(b)) for a, b in zip(joules, per))


def _figures(source: str, label: str, groups: list[tuple[float, float]], over: str, seconds: float,
             above: float | None, price: float | None) -> EnergyFigures:
    joules = [g[0] for g in groups]
    r, ci = ratio_interval(joules, [g[1] for g in groups])
    inv_ci = None if ci is None else (1.0 / ci[1], 1.0 / ci[0] if ci[0] > 0 else math.inf)
    tokens = sum(g[1] for g in groups)
    return EnergyFigures(source=source, label=label, j_per_token=r, j_per_token_interval=ci, tokens_per_j=1.0 / r if r else None,  # type: ignore[arg-type]
                         tokens_per_j_interval=inv_ci, samples=len(groups) if ci is not None else 1, over=over if ci else "",  # type: ignore[arg-type]
                         j_per_token_above_idle=None if above is None else above / tokens,
                         mean_watts=sum(joules) / seconds if seconds > 0 else None, price_per_kwh=price,
                         usd_per_1m_output_tokens=None if price is None else r * 1e6 / J_PER_KWH * price)


def point_energy(samples: Sequence[EnergySample], source: EnergySource | None) -> EnergyFigures:
    """The point's measured figures (module docstring); every figure None with the reason when
    a measurement's energy was not read (never 0)."""
    if source is None:
        return EnergyFigures(reason="energy was not read in this run")
    unread = next((s.energy for s in samples if s.energy is None or s.energy.energy_j is None), False)
    if unread is not False or not samples:
        why = (unread.reason if isinstance(unread, PhaseEnergy) else "") or source.reason or "not read"
        return EnergyFigures(source="none", label=source.label, reason=why, price_per_kwh=source.price_per_kwh)
    tokens = sum(s.tokens for s in samples)
    if tokens <= 0:
        return EnergyFigures(source="none", label=source.label, reason="no output token was counted")
    phases = [s.energy for s in samples if s.energy is not None]
    several = len(samples) > 1
    groups = [(p.energy_j, float(s.tokens)) for p, s in zip(phases, samples)] if several else \
        list(samples[0].windows) or [(phases[0].energy_j, float(tokens))]
    above = [p.above_idle_j for p in phases]
    return _figures(source.kind, source.label, groups, "measurements" if several else "windows",  # type: ignore[arg-type]
                    sum(p.duration_s or 0.0 for p in phases), None if None in above else sum(above),  # type: ignore[arg-type]
                    source.price_per_kwh)


def provisioned_energy(samples: Sequence[EnergySample], watts: float | None,
                       price_per_kwh: float | None = None) -> EnergyFigures | None:
    """``--watts``'s figures: ``W × duration`` per measurement (module docstring); None without
    ``watts``; the interval over the measurements when there are several."""
    if watts is None or not samples or sum(s.tokens for s in samples) <= 0:
        return None
    groups = [(watts * s.duration_s, float(s.tokens)) for s in samples]
    return _figures("provisioned", f"provisioned (--watts {watts:g})", groups, "measurements",
                    sum(s.duration_s for s in samples), None, price_per_kwh)
