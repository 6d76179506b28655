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
noise" (climb it further). A capacity of 0 (the lowest load missed the SLO) is read from its
draws like any other, so a fall to 0 whose lowest point failed by a hair is not *moved down*. An
engine with points in one run only is listed too: **failed in run B** where it failed to start or
stay up there (a regression the gate fails on), else **not compared** (skipped, interrupted,
never asked for), each saying why; one that crashed in run B before any SLO broke reads failed
in run B too (its capacity would read as a lower bound). An engine that misses the SLO at its lowest load in both
runs has no capacity to compare (not compared).

The gate (:func:`fails`): a ratio whose 95 % interval lies wholly below ``fail_below`` fails
(a fall beyond the noise), and so does an engine that failed in run B after a capacity in run A;
a fall inside the noise never fails a CI job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal, Sequence

import numpy as np

from harness.metrics import SLO
from results.schema import LadderSummary, RequestRecord
from results.schema.engine import EngineStatus
from results.schema.ladder import EngineLadder

from ..capacity.frontier import Capacity, PointSample, capacity_draws, engine_stream
from .decision import engine_capacity, run_points, run_spread
from .verdict import EQUIVALENCE_CONFIDENCE, EQUIVALENCE_MARGIN, SEPARATION_CONFIDENCE, ratio_interval

Moved = Literal["moved_up", "moved_down", "equivalent", "within_noise", "not_separated", "failed", "no_capacity"]
WORDS = {"moved_up": "moved up", "moved_down": "moved down", "equivalent": "equivalent", "within_noise": "within the noise",
         "not_separated": "not separated", "failed": "failed in run B", "no_capacity": "not compared"}


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


def _drawn(cap: Capacity, n: int) -> Capacity:
    """``cap`` with draws to pair: its own, or, for a capacity of 0 read without any (a direct
    caller's, never :func:`compare`'s: it draws a never-met ladder too), ``n`` draws of 0 (its
    point estimate, taken as certain)."""
    if cap.draws.size or _met(cap):
        return cap
    return replace(cap, draws=np.zeros(n))


def change(engine: str, before: Capacity | None, after: Capacity | None, margin: float = EQUIVALENCE_MARGIN) -> Change:
    """The comparison of one engine's two capacities (module docstring). A side that misses the
    SLO at its lowest load is read from its draws too (a lowest point that failed by a hair passes
    in some), so a fall to 0 is *moved down* only when the 95 % interval says so."""
    c = Change(engine, before, after)
    if before is None or after is None:
        c.why = ("neither run measured a point of it" if before is None and after is None else
                 f"run {'A' if before is None else 'B'} measured no point of it")
        return c
    if not _met(before) and not _met(after):
        c.why = "misses the SLO at its lowest load in both runs"
        return c
    n = max(before.draws.size, after.draws.size)
    before_d, after_d = _drawn(before, n), _drawn(after, n)
    c.ratio = after.output_tps / before.output_tps if before.output_tps > 0 else math.inf
    c.interval = ratio_interval(after_d, before_d, SEPARATION_CONFIDENCE)
    c.equivalence = ratio_interval(after_d, before_d, EQUIVALENCE_CONFIDENCE)
    if c.interval is None:
        c.moved, c.why = "not_separated", "no bootstrap draws in a run: no interval to compare by"
        return c
    up = c.interval[0] > 1 + margin
    down = c.interval[1] < 1 / (1 + margin)
    inside = c.equivalence is not None and 1 / (1 + margin) <= c.equivalence[0] and c.equivalence[1] <= 1 + margin
    missed = ("run A missed the SLO at its lowest load, run B meets it" if not _met(before) else
              "run B misses the SLO at its lowest load" if not _met(after) else "")
    if up and not before.open:
        c.moved, c.why = "moved_up", missed
    elif down and not after.open:
        c.moved, c.why = "moved_down", missed
    elif inside and not before.open and not after.open:
        c.moved = "equivalent"
    elif (opens := [run for run, cap in (("A", before), ("B", after)) if cap.open]):
        c.moved, c.why = "not_separated", f"a lower bound in {' and '.join(opens)} (no SLO broke): climb it further"
    elif c.interval[0] <= 1 <= c.interval[1]:
        c.moved, c.why = "within_noise", f"its 95 % interval holds 1: {_what_margin(c)}"
    else:
        bounds = f"{100 * (1 / (1 + margin) - 1):+.3g} % / +{100 * margin:.3g} %"
        c.moved, c.why = "not_separated", f"straddles the margin ({bounds}): {_what_margin(c)}"
    if missed and c.moved not in ("moved_up", "moved_down"):
        c.why = f"{missed}, within its own noise; {c.why}"
    return c


def _absent(engine: str, label: str, ladder: EngineLadder | None) -> tuple[Moved, str]:
    """Why run ``label`` holds no point of ``engine`` (its ladder ``ladder``, None: not in the
    run), and whether that is a regression: *failed* when the engine failed to start or stay up
    there (a gate fails on it), else *not compared* (skipped, interrupted, never asked for)."""
    if ladder is None:
        return "no_capacity", f"not in run {label}"
    reason = f": {ladder.reason}" if ladder.reason else ""
    if ladder.status == EngineStatus.FAILED:
        return ("failed" if label == "B" else "no_capacity"), f"it failed in run {label}{reason}"
    return "no_capacity", f"not measured in run {label} ({ladder.status.value}{reason})"


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


Run = tuple[LadderSummary, Sequence[RequestRecord]]  # a stored run's ladder and records


def compare(a: Run, b: Run, slos: Sequence[SLO], engines: Sequence[str] = (), seed: int = 0,
            margin: float = EQUIVALENCE_MARGIN) -> list[Change]:
    """Every engine of ``engines`` (default: every engine either run's ladder measured a point
    of, run A's first) compared between run A and run B at ``slos`` (:func:`compare_engine`;
    ``margin``: the equivalence margin, a fraction). Raises KeyError naming an engine of
    ``engines`` that neither run holds."""
    names = list(dict.fromkeys(engines)) or list(dict.fromkeys(
        [n for n in a[0].engines if a[0].engines[n].points] + [n for n in b[0].engines if b[0].engines[n].points]))
    for name in names:
        if name not in a[0].engines and name not in b[0].engines:
            raise KeyError(f"neither run ({a[0].run_id}, {b[0].run_id}) has a ladder for {name!r}")
    return [compare_engine(a, b, name, slos, seed, margin) for name in names]


def compare_engine(a: Run, b: Run, name: str, slos: Sequence[SLO], seed: int = 0,
                   margin: float = EQUIVALENCE_MARGIN) -> Change:
    """Engine ``name`` between run A and run B (module docstring): each capacity read as its run's
    verdict reads it, run B's drawn from another stream for the ratio. An engine with points in
    one run only reads *failed* where it failed to start or stay up in run B, else *not
    compared*; one that failed in run B after some points, before any SLO broke (a crash on the
    way up: its capacity would read as a lower bound), reads *failed* too."""
    ladders = {label: summary.engines.get(name) for label, (summary, _) in (("A", a), ("B", b))}
    if not all(lad is not None and lad.points for lad in ladders.values()):
        before = run_capacity(a, name, slos, seed)[0] if ladders["A"] is not None and ladders["A"].points else None
        after = run_capacity(b, name, slos, seed)[0] if ladders["B"] is not None and ladders["B"].points else None
        c = Change(name, before, after)
        label = "B" if before is not None else "A"
        c.moved, c.why = _absent(name, label, ladders[label])
        if before is None and after is None:
            c.moved, c.why = "no_capacity", "neither run measured a point of it"
        return c
    before, _ = run_capacity(a, name, slos, seed)
    drawn, _ = run_capacity(b, name, slos, seed + 1)  # another stream: independent draws for the ratio
    c = change(name, before, drawn, margin)
    c.after, _ = run_capacity(b, name, slos, seed)  # shown as run B's own table shows it
    crashed = ladders["B"]
    if crashed is not None and crashed.status == EngineStatus.FAILED and (c.after is None or c.after.open):
        what = crashed.crash or crashed.reason
        c.moved, c.why = "failed", f"it failed in run B{': ' + what if what else ''} (before any SLO broke)"
    return c


def run_capacity(run: Run, name: str, slos: Sequence[SLO], seed: int) -> tuple[Capacity | None, list[PointSample]]:
    """``name``'s capacity in ``run`` as its verdict reads it (:func:`engine_capacity`), with
    bootstrap draws even where it misses the SLO at its lowest load (the verdict needs none there;
    a comparison does: its lowest point may pass in some)."""
    summary, records = run
    cap, points = engine_capacity(summary, name, records, slos, seed)
    if cap is not None and cap.never_met and points:
        spread = run_spread(run_points(summary, records), summary)
        cap.draws = capacity_draws(points, slos, summary.max_failure_rate, seed=engine_stream(seed, name), spread=spread)
        cap.lowest_fails = float(np.mean(cap.draws == 0.0))
    return cap, points


def fails(c: Change, fail_below: float) -> bool:
    """The gate: the engine *failed* in run B where it had a capacity in run A, or the ratio's 95 %
    interval lies wholly below ``fail_below`` (module docstring) and run B's capacity is not a
    lower bound (its true value could lie above)."""
    if c.moved == "failed":
        return _met(c.before)
    return c.interval is not None and c.interval[1] < fail_below and not (c.after is not None and c.after.open)


def ratio_text(c: Change) -> str:
    """``0.81× [0.76–0.86]``, ``≥ 1.2× [1.1–1.3]`` over an open after / closed before, ``—`` without."""
    if c.ratio is None:
        return "—"
    sign = ""
    if c.before is not None and c.after is not None and c.after.open != c.before.open:
        sign = "≥ " if c.after.open else "≤ "
    if c.interval is None:
        return f"{sign}{_x(c.ratio)}×"
    return f"{sign}{_x(c.ratio)}× [{_x(c.interval[0])}–{_x(c.interval[1])}]"


def _x(v: float) -> str:
    return "∞" if v == math.inf else f"{v:.2f}"


__all__ = ["Change", "Run", "WORDS", "change", "compare", "compare_engine", "equivalence_margin", "fails", "ratio_text",
           "run_capacity"]
