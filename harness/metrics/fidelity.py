"""Output fidelity: an engine's greedy answers against the ground-truth reference.

Input: the :class:`~results.schema.FidelityReference` (Hugging Face transformers, fp32, greedy)
and the engine's :class:`~results.schema.EngineAnswers` (``harness.loadgen.fidelity``: greedy
completions resumed on the reference's prefix after every divergence, i.e. teacher forcing).
Output: one :class:`~results.schema.FidelityResult`.

Definitions (per reference position checked, all prompts pooled):

- a **divergence**: the engine's greedy token is not the reference's
  (:meth:`~results.schema.ReferencePrompt.follow`); at a **near-tie** when the reference's top-1
  minus top-2 logprob is below ``epsilon`` nats (:data:`~results.schema.NEAR_TIE_EPSILON`);
- **top-1 agreement** = 1 − divergences / positions; the gate reads the agreement **outside
  near-ties** = 1 − (divergences − near-tie divergences) / (positions − near-tie positions), with
  its 95 % interval (:func:`agreement_interval`): a **cluster bootstrap over prompts**. The
  positions of one prompt are not independent (an engine that breaks on one kind of text breaks
  on every position of those prompts), so the prompts are resampled with replacement, not the
  positions, 1,999 times, and the interval is the 2.5th and 97.5th percentiles (the 50th and
  1,950th of the sorted resampled ratios) of summed agreements over summed positions (Davison &
  Hinkley 1997, *Bootstrap Methods and their Application*, §3.8, resampling clustered data at the
  top level; the percentile interval, §5.3).
  Where the prompt-level tallies cannot be resampled (fewer than two prompts with a position
  outside near-ties, or every prompt at the same ratio, e.g. all agreeing, when every resample
  repeats the point), the Wilson score interval of the pooled counts stands in (Wilson 1927,
  "Probable inference, the law of succession, and statistical inference", JASA 22: p̂ and z²/n
  shrunk towards ½, never outside [0, 1]);
- **coverage**: the prompts answered (no error, at least one position checked) over the
  reference's prompts;
- **exact match**: the first, free-running answer equals the reference's whole continuation
  (Wilson 95 % interval over prompts); **first divergence**: where that answer first left it;
- with logprobs: the largest |engine − reference| logprob of the reference's token, and the mean
  total-variation distance ½ Σ|p − q| between the two top-k distributions, each renormalised
  over its own top-k (tokens matched by their text), at positions whose context is the
  reference's (the engine's tokens before them in that segment are the reference's).

Text is compared on decoded prefixes (:meth:`~results.schema.ReferencePrompt.follow`), never
on per-token pieces, so a character whose bytes span two tokens is no divergence.

The gate: ``passed`` when the interval's upper bound reaches the floor (so a short check never
throws out an engine on noise): :data:`~results.schema.STRICT_FLOOR` for an engine running the
reference's numerics, ``other_floor`` (``--fidelity-floor``) for other numerics. A check that
could not run, or answered fewer than :data:`~results.schema.COVERAGE_FLOOR` of the prompts, is
"not checked" (:meth:`~results.schema.FidelityResult.exclusion`): the decision excludes the
engine unless ``--allow-unchecked``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Sequence

import numpy as np

from results.schema import (
    DEFAULT_OTHER_FLOOR,
    NEAR_TIE_EPSILON,
    STRICT_FLOOR,
    AnswerSegment,
    EngineAnswers,
    FidelityCheck,
    FidelityReference,
    FidelityResult,
    Interval,
    ReferencePrompt,
)


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> Interval | None:
    """The Wilson score interval of ``successes / trials`` (None for no trials)."""
    if trials <= 0:
        return None
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p, zz = successes / trials, z * z / trials
    center = (p + zz / 2) / (1 + zz)
    half = z * math.sqrt(p * (1 - p) / trials + zz / (4 * trials)) / (1 + zz)
    return Interval(point=p, low=max(0.0, center - half), high=min(1.0, center + half), n=trials, confidence=confidence,
                    method="Wilson score interval")


# prompt-level resamples of the agreement's interval: (R + 1) × 0.025 is a whole number, so the
# percentile interval's ends are order statistics of the resampled ratios (Davison & Hinkley §5.2-5.3)
BOOTSTRAP_RESAMPLES = 1999
BOOTSTRAP_SEED = 0  # fixed: the same answers give the same interval


def agreement_interval(per_prompt: Sequence[tuple[int, int]] | None, successes: int, trials: int,
                       confidence: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES,
                       seed: int = BOOTSTRAP_SEED) -> Interval | None:
    """The ``confidence`` interval of the pooled ratio ``successes / trials`` whose positions
    cluster by prompt: ``per_prompt`` is each prompt's ``(trials, successes)``. A cluster
    (prompt-level) bootstrap percentile interval (module docstring; Davison & Hinkley 1997
    §3.8): ``resamples`` (R) draws of the prompts with replacement (numpy, seeded ``seed``), each
    the ratio of its summed successes over its summed trials; the interval's ends are the
    ``(R + 1) α``-th and ``(R + 1)(1 − α)``-th smallest ratios (α = (1 − ``confidence``) / 2;
    their §5.2–5.3: order statistics, never a value interpolated between two resamples, which on
    the few distinct ratios of a short check would reach past what any resample gave); the point
    is the pooled ratio.
    The Wilson score interval of the pooled counts stands in where the tallies are unavailable
    (``per_prompt`` None or empty), cannot be resampled (fewer than two prompts with a trial) or
    give every resample the same ratio (every prompt at one ratio: the bootstrap says nothing of
    the noise within a prompt). None for no trials."""
    if trials <= 0:
        return None
    clusters = [(t, a) for t, a in (per_prompt or ()) if t > 0]
    if len(clusters) < 2 or len({a / t for t, a in clusters}) < 2:
        return wilson_interval(successes, trials, confidence)
    t = np.array([c[0] for c in clusters], dtype=np.int64)
    a = np.array([c[1] for c in clusters], dtype=np.int64)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(clusters), size=(resamples, len(clusters)))
    ratios = np.sort(a[draws].sum(axis=1) / t[draws].sum(axis=1))
    tail = (1 - confidence) / 2

    def order(q: float) -> float:  # the (R + 1) q-th smallest resampled ratio
        return float(ratios[min(resamples, max(1, round((resamples + 1) * q))) - 1])

    low, high = order(tail), order(1 - tail)
    point = successes / trials
    return Interval(point=point, low=min(low, point), high=max(high, point), n=len(clusters), confidence=confidence,
                    method=f"cluster bootstrap percentile, {len(clusters)} prompts resampled {resamples:,} times",
                    basis="prompts")


@dataclass
class _Tally:
    positions: int = 0
    divergences: int = 0
    near_tie_divergences: int = 0
    near_tie_positions: int = 0
    unchecked: int = 0
    exact: int = 0
    per_prompt: list[tuple[int, int]] = field(default_factory=list)  # (positions, agreements) outside near-ties
    first: list[int | None] = field(default_factory=list)
    lp_errors: list[float] = field(default_factory=list)
    tvs: list[float] = field(default_factory=list)


def _distribution(pairs: list[tuple[str, float]] | dict[str, float]) -> dict[str, float]:
    """Top-k ``{text: probability}`` renormalised over the top-k."""
    items = pairs.items() if isinstance(pairs, dict) else pairs
    probs: dict[str, float] = {}
    for text, lp in items:
        if lp is not None and math.isfinite(lp):
            probs[text] = probs.get(text, 0.0) + math.exp(lp)
    total = sum(probs.values())
    return {t: p / total for t, p in probs.items()} if total > 0 else {}


def _compare_logprobs(ref: ReferencePrompt, seg: AnswerSegment, end: int, tally: _Tally) -> None:
    """Logprob error and top-k distance at the positions ``seg.start .. end`` whose context is
    the reference's (the engine's tokens before them in the segment equal the reference's)."""
    if not seg.tokens or not seg.top_logprobs:
        return
    for i, k in enumerate(range(seg.start, min(end + 1, len(ref.tokens)))):
        if i >= len(seg.tokens) or i >= len(seg.top_logprobs):
            return
        top = seg.top_logprobs[i] or {}
        ref_lp = dict(ref.top[k]).get(ref.pieces[k]) if ref.top[k] else None
        if ref_lp is not None and ref.pieces[k] in top:
            tally.lp_errors.append(abs(top[ref.pieces[k]] - ref_lp))
        p, q = _distribution(ref.top[k]), _distribution(top)
        if p and q:
            tally.tvs.append(0.5 * sum(abs(p.get(t, 0.0) - q.get(t, 0.0)) for t in set(p) | set(q)))
        if seg.tokens[i] != ref.pieces[k]:
            return  # the engine's context leaves the reference's after this position


def _tally_prompt(ref: ReferencePrompt, segments: list[AnswerSegment], epsilon: float, tally: _Tally) -> None:
    """Walk one prompt's segments over the reference's positions (module docstring); the
    prompt's own tally (positions and agreements outside near-ties) goes to ``per_prompt``."""
    before = (tally.positions, tally.near_tie_positions, tally.divergences, tally.near_tie_divergences)
    n, checked_to, first = len(ref.tokens), 0, None
    for j, seg in enumerate(segments):
        if seg.start != checked_to:
            break  # a segment that does not continue the walk: the rest is unchecked
        end, diverged = ref.follow(seg.start, seg.text, seg.finish_reason)
        _compare_logprobs(ref, seg, end if diverged else end - 1, tally)
        agreed = end - seg.start
        tally.positions += agreed
        tally.near_tie_positions += sum(1 for g in ref.gap[seg.start:end] if g < epsilon)
        if j == 0:
            first = end if diverged else None
            if not diverged and end == n:
                tally.exact += 1
        if not diverged:
            checked_to = end
            break
        tally.positions += 1
        tally.divergences += 1
        if ref.gap[end] < epsilon:
            tally.near_tie_divergences += 1
            tally.near_tie_positions += 1
        checked_to = end + 1
    tally.unchecked += n - checked_to
    tally.first.append(first)
    outside = (tally.positions - before[0]) - (tally.near_tie_positions - before[1])
    real = (tally.divergences - before[2]) - (tally.near_tie_divergences - before[3])
    tally.per_prompt.append((outside, outside - real))


def compare(reference: FidelityReference, answers: EngineAnswers, *, epsilon: float = NEAR_TIE_EPSILON,
            other_floor: float = DEFAULT_OTHER_FLOOR) -> FidelityResult:
    """``answers`` against ``reference`` (module docstring); an engine whose check failed as a whole
    (``answers.error``) gets a result with that ``error`` and ``passed`` None (the gate does not
    apply). Raises ValueError when the answers are not for the reference's prompts."""
    floor = STRICT_FLOOR if answers.numerics == "reference" else other_floor
    base = dict(prompts=len(reference.prompts), max_tokens=reference.max_tokens, logprobs=answers.logprobs,
                prompt_format=answers.prompt_format, numerics=answers.numerics, epsilon=epsilon, floor=floor)
    if answers.error is not None:
        return FidelityResult(**base, error=answers.error, prompts_answered=0)
    if len(answers.answers) != len(reference.prompts):
        raise ValueError(f"{len(answers.answers)} answers for {len(reference.prompts)} reference prompts")
    tally = _Tally()
    errors, answered = [], 0
    for ref, ans in zip(reference.prompts, answers.answers):
        if ans.error is not None:
            errors.append(ans.error)
        checked = tally.positions
        _tally_prompt(ref, ans.segments, epsilon, tally)
        answered += ans.error is None and tally.positions > checked
    if tally.positions == 0:
        return FidelityResult(**base, unchecked_positions=tally.unchecked, first_divergence=tally.first, prompts_answered=0,
                              error=errors[0] if errors else "no reference position could be checked")
    outside = tally.positions - tally.near_tie_positions
    real = tally.divergences - tally.near_tie_divergences
    interval = agreement_interval(tally.per_prompt, outside - real, outside)
    return FidelityResult(
        **base, positions=tally.positions, divergences=tally.divergences,
        near_tie_divergences=tally.near_tie_divergences, near_tie_positions=tally.near_tie_positions,
        unchecked_positions=tally.unchecked, top1_agreement=1 - tally.divergences / tally.positions,
        agreement_outside_near_ties=interval.point if interval else None, agreement_interval=interval,
        prompt_tallies=tally.per_prompt, prompts_answered=answered,
        exact_matches=tally.exact, exact_match_interval=wilson_interval(tally.exact, len(reference.prompts)),
        first_divergence=tally.first, logprob_error_max=max(tally.lp_errors) if tally.lp_errors else None,
        topk_tv_mean=sum(tally.tvs) / len(tally.tvs) if tally.tvs else None,
        passed=interval.high >= floor if interval is not None else None)


def fidelity_check(reference: FidelityReference, results: dict[str, FidelityResult],
                   other_floor: float = DEFAULT_OTHER_FLOOR, allow_unchecked: bool = False) -> FidelityCheck:
    """``fidelity.json``'s content: the reference's description, each engine's result and
    whether an unchecked engine competes (``--allow-unchecked``)."""
    return FidelityCheck(reference_key=reference.key, source=reference.source, prompts=len(reference.prompts),
                         max_tokens=reference.max_tokens, other_floor=other_floor, allow_unchecked=allow_unchecked,
                         engines=dict(results))
