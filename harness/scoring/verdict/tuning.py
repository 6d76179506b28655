"""Every engine at its best: the configuration search of ``bench run --tune`` (pure logic).

**The method: successive halving** (Jamieson & Talwalkar 2016, "Non-stochastic best arm
identification and hyperparameter optimization", Alg. 1; the shape of Hyperband's inner loop),
chosen for an objective that is noisy and expensive (each configuration is an engine restart and
a load ladder). ``n`` configurations are tried; the budget ``B`` (seconds of measuring) is split
equally over ``R = ceil(log2 n)`` rungs; rung ``r`` gives each of its ``ceil(n / 2**r)``
configurations ``B / (R * ceil(n / 2**r))`` seconds, and the better half by capacity point
estimate goes on to the next rung, where its ladder continues (climbs on, or re-measures the
points bracketing its SLO boundary), so the survivors' estimates sharpen as the field narrows.
The defaults win every comparison within 5 % (the verdict's tie margin): they go on to the next
rung over a configuration that is not 5 % better, and are kept at the end unless the best beats
them by more (:func:`best_of`); a pick by a hair is a pick by the noise.
Two configurations (one rung) is a plain grid. The objective is the capacity at the SLO
(:mod:`harness.scoring.capacity.frontier`), the same number the verdict compares.

**The candidates** (:func:`candidates`): the engine's defaults first (the out-of-the-box result
every gain is measured against), then every single-knob change (one knob moved from the defaults;
round-robin over the knobs, so a small limit still tries each), then combinations of knobs (a seeded shuffle of the rest of the grid), cut at the configuration
limit: with a small budget the knobs' main effects are tried before their interactions.

**A configuration the engine rejects** (it fails to start, or its server refuses the flag) is
reported with the engine's own line and dropped: never retried (:class:`Rejected`).

**A configuration that lowers precision** (``--tune-lower-precision``; a bf16 dtype, an fp8 KV
cache, q8_0 weights) answers the output-fidelity check before it is measured; below the floor
(``--fidelity-floor``) it is reported with its figures and dropped, never chosen
(:class:`Unfaithful`): capacity bought with wrong answers is no capacity.

The gain tuning gave (:func:`gain`) is the ratio of the chosen configuration's capacity over the
defaults', both climbed as the main job climbs (like with like: same budget, same loads, afresh;
:mod:`harness.app.run.tune`; the search's first rung is too short to be more than a lower bound
on a slow engine's defaults), with the percentile
interval of the ratio of their bootstrap draws (:func:`harness.scoring.verdict.verdict.ratio_interval`),
read with the verdict's three outcomes (:func:`harness.scoring.verdict.verdict.outcome_of`): a gain only
when *separated* (the 95 % interval's lower end above ``1 + EQUIVALENCE_MARGIN``); **no gain**
when *equivalent* (the 90 % interval inside the 5 % margin); **none shown** when neither (not
separated from the defaults: the noise hides whether it helped); and a ratio of lower bounds
says so. The tuned capacity the verdict uses is the main job's,
measured afresh at the chosen configuration: the search's best estimate is biased upwards by the
choice itself (the winner's curse), a fresh measurement is not.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..capacity.frontier import Capacity
from .verdict import EQUIVALENCE_CONFIDENCE, EQUIVALENCE_MARGIN, outcome_of, ratio_interval

Config = dict[str, str]
"""One configuration: engine arg key → value (``{}`` = the engine's defaults)."""


class Rejected(Exception):
    """The engine refused a configuration (a knob value it does not accept): reported, not retried."""


class Unfaithful(Exception):
    """A configuration that lowers precision failed the output-fidelity gate (its line is the
    message): reported, not measured, never chosen."""


def grid(space: dict[str, Sequence[str]]) -> list[Config]:
    """Every combination of the knobs' values (knob order kept), the defaults not included."""
    keys = list(space)
    return [dict(zip(keys, values)) for values in itertools.product(*(space[k] for k in keys))]


def candidates(space: dict[str, Sequence[str]], limit: int, seed: int = 0) -> list[Config]:
    """Up to ``limit`` configurations (>= 1): the defaults, the single-knob changes (round-robin over
    the knobs: every knob's first value, then every knob's second, ..., so a small limit still moves
    every knob; each knob's values in the order declared, the likeliest first), then
    seeded-shuffled combinations of two knobs or more (module docstring)."""
    out: list[Config] = [{}]
    depth = max((len(v) for v in space.values()), default=0)
    singles = [{k: values[j]} for j in range(depth) for k, values in space.items() if j < len(values)]
    combos = [c for c in grid(space) if len(c) > 1]
    random.Random(seed).shuffle(combos)
    for c in singles + combos:
        if len(out) >= max(1, limit):
            break
        if c not in out:
            out.append(c)
    return out


def rungs(n: int, budget_s: float) -> list[tuple[int, float]]:
    """The halving schedule for ``n`` configurations and ``budget_s`` seconds: ``(configurations
    in the rung, seconds each)`` per rung (module docstring); [] for one configuration or none."""
    if n < 2:
        return []
    count = math.ceil(math.log2(n))
    out, alive = [], n
    for _ in range(count):
        out.append((alive, budget_s / (count * alive)))
        alive = math.ceil(alive / 2)
    return out


@dataclass
class Tried:
    """One configuration's course through the search: ``config``; its point estimate after each
    rung it ran (output tokens/s per device at the SLO); ``seconds`` of measuring spent on it;
    ``status`` (``measured``, ``rejected``: the engine refused it, ``failed``: it crashed or
    measured nothing, ``unfaithful``: it lowers precision and failed the output-fidelity gate,
    ``interrupted``: the search was stopped (Ctrl-C, SIGTERM) while it measured or before its
    turn) with ``reason``."""

    config: Config
    estimates: list[float] = field(default_factory=list)
    seconds: float = 0.0
    status: str = "measured"
    reason: str = ""

    @property
    def estimate(self) -> float:
        return self.estimates[-1] if self.estimates else -math.inf


Evaluate = Callable[[int, int, float], tuple[float, float]]
"""``evaluate(config index, rung, seconds) -> (capacity point estimate, seconds spent)``: rung 0
starts the configuration's ladder, later rungs continue it. Raises :class:`Rejected` when the
engine refuses the configuration, or any ``Exception`` naming why it failed."""


def successive_halving(configs: Sequence[Config], budget_s: float, evaluate: Evaluate,
                       on_result: Callable[[int, Tried], None] | None = None,
                       tried: list[Tried] | None = None) -> tuple[list[Tried], int]:
    """Search ``configs`` within ``budget_s`` (module docstring). Returns every configuration's
    course (``tried``, filled in place when given: what was measured survives an interrupt) and
    the index of the best (:func:`best_of`). A configuration that was rejected, failed or was
    unfaithful (below the fidelity floor) leaves the search at once. ``on_result(i, tried)`` is told after each evaluation (progress). A
    KeyboardInterrupt passes through once the configuration it stopped is marked ``interrupted``
    (with the seconds it spent: the exception's ``spent_s``) and so is every one not measured yet."""
    tried = tried if tried is not None else []
    tried[:] = [Tried(dict(c)) for c in configs]
    alive = list(range(len(configs)))
    for r, (_, seconds) in enumerate(rungs(len(configs), budget_s)):
        if len(alive) < 2 and r > 0:
            break
        for i in alive:
            try:
                estimate, spent = evaluate(i, r, seconds)
            except KeyboardInterrupt as exc:
                tried[i].seconds += float(getattr(exc, "spent_s", 0.0))
                tried[i].status, tried[i].reason = "interrupted", f"interrupted while measuring (rung {r + 1})"
                for t in tried:
                    if t.status == "measured" and not t.estimates:
                        t.status, t.reason = "interrupted", "not measured: the search was interrupted before its turn"
                raise
            except Rejected as exc:
                tried[i].status, tried[i].reason = "rejected", str(exc)
            except Unfaithful as exc:
                tried[i].status, tried[i].reason = "unfaithful", str(exc)
            except Exception as exc:  # noqa: BLE001 - a failed configuration is reported, the search goes on
                tried[i].status, tried[i].reason = "failed", str(exc) or type(exc).__name__
            else:
                tried[i].estimates.append(estimate)
                tried[i].seconds += spent
            if on_result is not None:
                on_result(i, tried[i])
        alive = [i for i in alive if tried[i].status == "measured"]
        alive.sort(key=lambda i: -tried[i].estimate * (1 + EQUIVALENCE_MARGIN if i == 0 else 1))  # ties: the defaults
        alive = alive[:max(1, math.ceil(len(alive) / 2))]
    return tried, best_of(tried)


def best_of(tried: Sequence[Tried]) -> int:
    """The best configuration: most rungs reached, then the highest estimate; 0 (the defaults)
    when none measured, or when the best does not beat the defaults' last estimate by more than
    :data:`~harness.scoring.verdict.verdict.EQUIVALENCE_MARGIN` (5 %, the verdict's own tie margin): a
    pick by a hair is a pick by the noise (the search's estimates carry no interval), and the
    defaults are what the user already runs."""
    ok = [i for i, t in enumerate(tried) if t.status == "measured" and t.estimates]
    if not ok:
        return 0
    best = max(ok, key=lambda i: (len(tried[i].estimates), tried[i].estimate))
    defaults = tried[0]
    if best != 0 and 0 in ok and tried[best].estimate <= defaults.estimate * (1 + EQUIVALENCE_MARGIN):
        return 0
    return best


@dataclass(frozen=True)
class Gain:
    """What tuning gave an engine: ``ratio`` chosen / defaults capacity, its 95 % ``interval``
    (None without draws), ``none`` when it is not *separated* (``outcome``: the verdict's
    "separated", "equivalent" or "not_separated", :func:`~harness.scoring.verdict.verdict.outcome_of`), ``bound``: "≥" when
    the ratio is a lower bound (the chosen configuration's ladder stopped before an SLO broke,
    the defaults' did not), "≤" when it is an upper bound (the other way round), "≈" when both
    are lower bounds (then it is no measure of the gain), "" when both capacities are known;
    ``defaults_best``: the search kept the defaults."""

    ratio: float | None
    interval: tuple[float, float] | None
    none: bool
    bound: str = ""
    defaults_best: bool = False
    outcome: str = ""

    def text(self) -> str:
        """``1.32× [1.12–1.51]``, ``≥ 1.32× [...]``, ``none (1.02× [0.98–1.04], equivalent within 5 %)``,
        ``none shown (1.08× [0.93–1.25], not separated from the defaults)``,
        ``none shown (≤ 1.30× [...]: an upper bound, ...)``, ``none (0.80× [...]; the configuration chosen
        measured below the defaults when both were climbed again: ...)``, ``none: the defaults were the
        best configuration tried``, ``unknown: both ladders stopped ...`` (no ratio shown)."""
        if self.defaults_best:
            return "none: the defaults were the best configuration tried"
        if self.ratio is None:
            return "not measured (a configuration never met the SLO)"
        if self.bound == "≈":  # a ratio of two lower bounds measures nothing: none shown
            return "unknown: both ladders stopped before an SLO broke (lower bounds), so their ratio is no measure of it"
        shown = (f"{self.bound} " if self.bound else "") + f"{self.ratio:.2f}×"
        shown += f" [{self.interval[0]:.2f}–{self.interval[1]:.2f}]".replace("inf]", "∞]") if self.interval else ""
        below = ("" if self.ratio >= 1 else "; the configuration chosen measured below the defaults when both were climbed "
                 "again" + (": the search's pick did not hold up" if self.interval and self.interval[1] < 1 else
                            " (within the noise)"))
        if self.bound == "≤":
            return f"none shown ({shown}: an upper bound, the defaults' ladder stopped before an SLO broke{below})"
        if below:
            return f"none ({shown}{below})"
        if not self.none:
            return shown
        if self.outcome == "equivalent":
            return f"none ({shown}, equivalent within 5 %)"
        return f"none shown ({shown}, not separated from the defaults: inside the noise)"


def gain(chosen: Capacity | None, default: Capacity | None, defaults_best: bool = False) -> Gain:
    """The chosen configuration's capacity over the defaults' (module docstring: both climbed as
    the main job climbs); ``defaults_best``: the search kept the
    defaults (no gain, whatever the noise). A ratio of None when either never met the SLO."""
    if defaults_best:
        return Gain(1.0, None, True, defaults_best=True)
    if chosen is None or default is None or chosen.never_met or default.never_met or default.output_tps <= 0:
        return Gain(None, None, True)
    ratio = chosen.output_tps / default.output_tps
    interval = ratio_interval(chosen, default)
    bound = {(True, False): "≥", (False, True): "≤", (True, True): "≈"}.get((chosen.open, default.open), "")
    outcome = outcome_of(interval, ratio_interval(chosen, default, EQUIVALENCE_CONFIDENCE))
    none = bound in ("≤", "≈") or outcome != "separated"
    return Gain(ratio, interval, none, bound, outcome=outcome)


def upper_envelope(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The Pareto frontier of ``(tokens/s per user, output tokens/s per device)`` points, both
    higher-is-better (InferenceX's envelope over configurations): the points no other point beats
    on both axes, by tokens/s per user ascending."""
    out: list[tuple[float, float]] = []
    for x, y in sorted(points, key=lambda p: (-p[0], -p[1])):
        if not out or y > out[-1][1]:
            out.append((x, y))
    return sorted(out)


def label(config: Config) -> str:
    """``max_num_seqs=64 max_num_batched_tokens=2048``; ``defaults`` for ``{}``."""
    return " ".join(f"{k}={v}" for k, v in config.items()) or "defaults"
