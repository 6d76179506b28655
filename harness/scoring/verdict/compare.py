"""The regression guard: one engine's capacity in two stored runs, compared (issue 41).

Each run's ladder is decided at the same SLOs from its own records
(:func:`harness.scoring.verdict.decision.engine_capacity`); the capacity ratio *after ÷ before* (run B
over run A) carries the percentile interval of the ratio of the two runs' bootstrap draws
(:func:`harness.scoring.verdict.verdict.ratio_interval`; each run draws from its own random stream, so
the pairs are independent). The outcome reads the verdict's three outcomes (Schuirmann's two
one-sided tests, margin :data:`harness.scoring.verdict.verdict.EQUIVALENCE_MARGIN`, 5 %):

- **moved up** / **moved down**: the 95 % interval lies wholly above 1 + margin / below
  1 / (1 + margin);
- **equivalent**: the 90 % interval lies inside [1 / (1 + margin), 1 + margin] (unchanged within
  the margin, shown);
- **within the noise**: neither, and the 95 % interval holds 1: no change these two runs can see,
  which is not a claim that none happened (the *why* names the least margin the pair is
  equivalent at; measure more for a narrower one). The field's usage: a difference "within the
  noise" is one not told apart from it, as a ranking inside the noise is a tie;
- **not separated**: the 95 % interval excludes 1 but reaches inside the margin (a change beyond
  the noise, not shown to exceed the margin; the *why* names the margin it moved at), or a lower
  bound keeps either claim from being made.

The verdict's three outcomes map onto these: separated = moved, equivalent = equivalent, not
separated = within the noise or not separated. A capacity that is a lower bound (its ladder
stopped before an SLO broke) bounds the ratio on one side only: an open *before* cannot show a
rise, an open *after* cannot show a fall, and either rules out "equivalent" and "within the
noise" (climb it further). An engine that misses the SLO at its lowest load in B but not in A
has moved down to 0; in both, it has no capacity to compare.

The gate (:func:`fails`): a ratio whose 95 % interval lies wholly below ``fail_below`` fails
(a fall beyond the noise); a fall inside the noise never fails a CI job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

from harness.metrics import SLO
from results.schema import LadderSummary, RequestRecord

from ..capacity.frontier import Capacity
from .decision import engine_capacity
from .verdict import EQUIVALENCE_CONFIDENCE, EQUIVALENCE_MARGIN, SEPARATION_CONFIDENCE, ratio_interval

Moved = Literal["moved_up", "moved_down", "equivalent", "within_noise", "not_separated", "no_capacity"]
WORDS = {"moved_up": "moved up", "moved_down": "moved down", "equivalent": "equivalent", "within_noise": "within the noise",
         "not_separated": "not separated", "no_capacity": "no capacity in either run"}


@dataclass
class Change:
    """One engine across two runs: ``before`` / ``after`` its capacity in run A / B (None: no
    measured point; each drawn from the stream its run's own verdict draws from, so its interval
    is the one its capacity table shows); ``ratio`` after ÷ before (output tokens/s per device at the SLO) with its
    95 % ``interval`` and 90 % ``equivalence`` interval; ``moved`` (module docstring); ``why``:
    what limits the claim ("" = nothing)."""

    engine: str
    before: Capacity | None
    after: Capacity | None
    ratio: float | None = None
    interval: tuple[float, float] | None = None
    equivalence: tuple[float, float] | None = None
    moved: Moved = "no_capacity"
    why: str = ""


def _met(cap: Capacity | None) -> bool:
    return cap is not None and not cap.never_met and cap.output_tps > 0


def change(engine: str, before: Capacity | None, after: Capacity | None, margin: float = EQUIVALENCE_MARGIN) -> Change:
    """The comparison of one engine's two capacities (module docstring)."""
    c = Change(engine, before, after)
    if before is None or after is None:
        c.why = f"run {'A' if before is None else 'B'} measured no point of it"
        return c
    if not _met(before) and not _met(after):
        c.why = "misses the SLO at its lowest load in both runs"
        return c
    if not _met(before):
        c.moved, c.why = "moved_up", "run A missed the SLO at its lowest load, run B meets it"
        return c
    if not _met(after):
        c.ratio, c.interval, c.moved = 0.0, (0.0, 0.0), "moved_down"
        c.why = "run B misses the SLO at its lowest load"
        return c
    assert after is not None
    c.ratio = after.output_tps / before.output_tps
    c.interval = ratio_interval(after, before, SEPARATION_CONFIDENCE)
    c.equivalence = ratio_interval(after, before, EQUIVALENCE_CONFIDENCE)
    up = c.interval is not None and c.interval[0] > 1 + margin
    down = c.interval is not None and c.interval[1] < 1 / (1 + margin)
    inside = c.equivalence is not None and 1 / (1 + margin) <= c.equivalence[0] and c.equivalence[1] <= 1 + margin
    if up and not before.open:
        c.moved = "moved_up"
    elif down and not after.open:
        c.moved = "moved_down"
    elif inside and not before.open and not after.open:
        c.moved = "equivalent"
    elif (opens := [run for run, cap in (("A", before), ("B", after)) if cap.open]):
        c.moved, c.why = "not_separated", f"a lower bound in {' and '.join(opens)} (no SLO broke): climb it further"
    elif c.interval is not None and c.interval[0] <= 1 <= c.interval[1]:
        c.moved, c.why = "within_noise", f"its 95 % interval holds 1: {_what_margin(c)}"
    else:
        c.moved, c.why = "not_separated", f"straddles the {100 * margin:g} % margin: {_what_margin(c)}"
    return c


def _what_margin(c: Change) -> str:
    """What margin the noise allows a change neither moved nor equivalent: *moved* below one (its
    95 % interval excludes 1), else *equivalent* from one (the least, rounded up to hundredths),
    else measure more."""
    lo, hi = c.interval if c.interval is not None else (math.nan, math.nan)
    if lo > 1 or hi < 1:  # a change beyond the noise, smaller than the margin asked
        below = math.floor(100 * ((lo - 1) if lo > 1 else (1 / hi - 1))) / 100
        way = "up" if lo > 1 else "down"
        return (f"moved {way} at --margin {below:.2f} or less" if below > 0 else
                "a change under 1 %, beyond the noise") + "; measure more to tell it from the margin"
    least = equivalence_margin(c)
    if least is None or least >= 1:
        return "measure more to show any change is small"
    return f"equivalent from --margin {math.ceil(100 * least - 1e-9) / 100:.2f} (measure more for a narrower one)"


def equivalence_margin(c: Change) -> float | None:
    """The least margin (a fraction) at which ``c`` would read *equivalent*: its 90 %
    interval ``[lo, hi]`` lies inside ``[1 / (1 + m), 1 + m]`` from ``m = max(1 / lo − 1, hi − 1)``;
    None without an interval or when ``lo`` is 0."""
    if c.equivalence is None or not c.equivalence[0] > 0:
        return None
    lo, hi = c.equivalence
    return max(1 / lo - 1, hi - 1, 0.0)


def compare(a: tuple[LadderSummary, Sequence[RequestRecord]], b: tuple[LadderSummary, Sequence[RequestRecord]],
            slos: Sequence[SLO], engines: Sequence[str] = (), seed: int = 0,
            margin: float = EQUIVALENCE_MARGIN) -> list[Change]:
    """Every engine of ``engines`` (default: every engine both runs' ladders measured a point of,
    in run A's order) compared between run A and run B at ``slos`` (module docstring; ``margin``: the
    equivalence margin, a fraction). Raises KeyError naming
    an engine of ``engines`` that a run does not hold."""
    names = list(engines) or [n for n in a[0].engines if a[0].engines[n].points and n in b[0].engines
                              and b[0].engines[n].points]
    out = []
    for name in names:
        for label, (summary, _) in (("A", a), ("B", b)):
            if name not in summary.engines:
                raise KeyError(f"run {label} ({summary.run_id}) has no ladder for {name!r}")
        before, _ = engine_capacity(a[0], name, a[1], slos, seed)
        drawn, _ = engine_capacity(b[0], name, b[1], slos, seed + 1)  # another stream: independent draws for the ratio
        c = change(name, before, drawn, margin)
        c.after, _ = engine_capacity(b[0], name, b[1], slos, seed)  # shown as run B's own table shows it
        out.append(c)
    return out


def fails(c: Change, fail_below: float) -> bool:
    """The gate: the ratio's 95 % interval lies wholly below ``fail_below`` (module docstring), and
    run B's capacity is not a lower bound (its true value could lie above)."""
    return c.interval is not None and c.interval[1] < fail_below and not (c.after is not None and c.after.open)


def ratio_text(c: Change) -> str:
    """``0.81× [0.76–0.86]``, ``≥ 1.2× [1.1–1.3]`` over an open after / closed before, ``—`` without."""
    if c.ratio is None:
        return "—"
    sign = ""
    if c.before is not None and c.after is not None and c.after.open != c.before.open:
        sign = "≥ " if c.after.open else "≤ "
    lo, hi = c.interval if c.interval is not None else (math.nan, math.nan)
    return f"{sign}{c.ratio:.2f}× [{lo:.2f}–{hi:.2f}]"


__all__ = ["Change", "WORDS", "change", "compare", "equivalence_margin", "fails", "ratio_text"]
