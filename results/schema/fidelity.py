"""``fidelity.json``: each engine's outputs checked against a ground-truth reference.

The reference (:class:`FidelityReference`) is Hugging Face transformers at fp32, greedy, on the
run's own model folder, over prompts drawn from the run's own workload: per prompt its greedy
continuation and, at every position, the reference's top-k log-probabilities and the gap between
its two most likely tokens. The engine's answers (:class:`EngineAnswers`) are greedy completions of
the same prompts, resumed after every divergence on the reference's own prefix (teacher forcing,
so one early divergence does not make every later position disagree). The comparison
(:class:`FidelityResult`, ``harness.metrics.fidelity``) counts, position by position, whether the
engine's greedy token is the reference's; a divergence where the reference's top-2 gap is below
:data:`NEAR_TIE_EPSILON` is a near-tie and counted apart (float noise decides those, not a bug).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import Artefact
from .metrics import Interval

FIDELITY_FILE = "fidelity.json"
# A divergence where the reference's top-1 and top-2 log-probabilities are closer than this
# (nats; e^0.05 = 1.05, the two tokens' probabilities within 5 % of each other) is a near-tie:
# fp32 engines on the same weights differ in logits by ~1e-4 relative, far below this, so a
# flip past it is not float noise.
NEAR_TIE_EPSILON = 0.05
# The floor for an engine that runs the reference's precision: the 95 % upper bound of its
# top-1 agreement outside near-ties must reach it (a healthy fp32 engine agrees at every such
# position; a token flipped every 16 positions is 0.94).
STRICT_FLOOR = 0.99
# The floor for configurations of other numerics (a quantised KV cache or weights), unless the
# user sets ``--fidelity-floor``.
DEFAULT_OTHER_FLOOR = 0.90
# The share of the reference's prompts an engine must answer for its check to vouch for it: a
# check that covered fewer (the engine refused or failed the rest) is "not checked", which the
# gate excludes unless the user passes ``--allow-unchecked``.
COVERAGE_FLOOR = 0.90


def _common(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    if b.startswith(a):
        return len(a)
    i = 0
    for x, y in zip(a, b):
        if x != y:
            break
        i += 1
    return i


class ReferencePrompt(Artefact):
    """One prompt's ground truth: ``prompt`` (the text sent to ``/v1/completions``),
    ``prompt_token_ids`` (its tokens, sent instead of the text where the engine takes token ids),
    ``tokens`` (the reference's greedy continuation, at most ``max_tokens``; ``eos`` when it
    ended on the end-of-sequence token, which is then the last entry), ``pieces`` (each token's
    text, ``decode([id])``), ``texts`` (per position ``k``, the decoded text of the whole
    continuation up to and including it, ``decode(tokens[:k + 1])``: a character whose bytes span
    two tokens is whole only there, while each of its tokens' own piece is a replacement
    character; empty in references written before it, whose joined pieces stand in), ``top``
    (per position, the reference's top-k ``[token text, logprob]`` pairs, descending) and ``gap``
    (per position, top-1 minus top-2 logprob, nats)."""

    prompt: str
    prompt_token_ids: list[int]
    tokens: list[int]
    pieces: list[str]
    top: list[list[tuple[str, float]]]
    gap: list[float]
    eos: bool = False
    texts: list[str] = Field(default_factory=list)

    def decoded(self) -> list[str]:
        """The decoded prefixes ``D``: ``D[k]`` is the text of the reference's first ``k`` tokens
        (``D[0] = ""``), from ``texts`` where stored, else the pieces joined."""
        if len(self.texts) == len(self.tokens):
            return ["", *self.texts]
        out, acc = [""], ""
        for piece in self.pieces:
            acc += piece
            out.append(acc)
        return out

    def resume_text(self, start: int) -> str:
        """The text of the reference's first ``start`` tokens as a text prompt resumes it: the
        decoded prefix, less a character still incomplete there (its bytes continue in the next
        token; the engine writes it whole)."""
        decoded = self.decoded()
        return decoded[start][:_common(decoded[start], decoded[-1])]

    def follow(self, start: int, text: str, finish_reason: str | None) -> tuple[int, bool]:
        """How far an engine's greedy ``text``, generated after the prompt and the reference's
        first ``start`` tokens, follows the reference: ``(end, diverged)``. Positions
        ``start .. end - 1`` agree; when ``diverged``, the engine's token at ``end`` was another
        (an end of text with ``finish_reason`` ``"stop"`` is an end-of-sequence token); else
        ``end`` is where the text ran out before a verdict (``end == len(tokens)``: all agree).

        Compared on **decoded prefixes** (:meth:`decoded`), never on per-token pieces: position
        ``k`` agrees when the reference's text of positions ``start .. k`` is a prefix of
        ``text``, so a different segmentation of the same text is no divergence, and a
        multibyte character whose bytes span several tokens (each token's own piece a
        replacement character) is judged once it is whole: its tokens agree together, or the
        divergence is charged to the first of them. A character the reference leaves incomplete
        at its very end is judged by the text before it."""
        decoded, n = self.decoded(), len(self.tokens)
        final = decoded[n]
        whole = len(final.rstrip("\ufffd"))  # past it, a character the reference leaves incomplete at its end
        cut = _common(decoded[start], final)  # the resumed prefix's whole characters

        def ref(k: int) -> str:  # the reference's text of positions start .. k - 1
            return decoded[k][cut:]

        verified, said = start, ""  # positions start .. verified - 1 agree; said: their text
        for k in range(start, n):
            if self.eos and k == n - 1:  # the reference stops here (its token has no text)
                want = ref(k)
                if text == want and finish_reason == "stop":
                    return n, False
                if text.startswith(want):  # all before agree; the engine wrote on, or stopped elsewhere
                    return k, True
                break  # a disagreement among the positions before, still unverified
            if k < n - 1 and (len(decoded[k + 1]) > whole or not final.startswith(decoded[k + 1])):
                continue  # a character still incomplete after this token: judged once it is whole
            want = ref(k + 1)
            if text.startswith(want[len(said):], len(said)):  # ``said`` is a prefix of ``want``
                verified, said = k + 1, want
                continue
            if k == n - 1 and want.endswith("\ufffd") and text == want.rstrip("\ufffd"):
                return n, False  # the reference ends inside a character the engine held back
            break
        else:
            return n, False
        if text == said and finish_reason != "stop":
            return verified, False  # ran out of tokens with the text still agreeing
        return verified, True


class FidelityReference(Artefact):
    """The ground truth of a run's fidelity check, cached by ``key`` (a hash of the model's
    files, the prompts and the settings)."""

    key: str
    source: str = "transformers fp32 greedy"
    model: str = ""  # the folder whose weights it ran ("" = not recorded)
    max_tokens: int
    top_k: int
    prompts: list[ReferencePrompt]


class AnswerSegment(Artefact):
    """One greedy completion of a prompt resumed at reference position ``start`` (the prompt plus
    the reference's first ``start`` tokens): its ``text``, ``finish_reason`` and, when the engine
    returns logprobs, per generated token its text (``tokens``) and top-k ``{token text:
    logprob}`` (``top_logprobs``)."""

    start: int
    text: str
    finish_reason: str | None = None
    tokens: list[str] | None = None
    top_logprobs: list[dict[str, float]] | None = None


class EngineAnswer(Artefact):
    """An engine's answer to one prompt: the segments in order (the first starts at 0), or the
    ``error`` that stopped it."""

    segments: list[AnswerSegment] = Field(default_factory=list)
    error: str | None = None


class EngineAnswers(Artefact):
    """What an engine answered to the reference's prompts: ``prompt_format`` (``"token_ids"``
    or ``"text"``, what it accepted), ``logprobs`` (it returned them), ``numerics``
    (``"reference"``, or the name of the other numerics its configuration runs, e.g. ``q8_0``),
    one :class:`EngineAnswer` per prompt, or the ``error`` that stopped the check."""

    prompt_format: Literal["token_ids", "text"] = "token_ids"
    logprobs: bool = False
    numerics: str = "reference"
    answers: list[EngineAnswer] = Field(default_factory=list)
    error: str | None = None


class FidelityResult(Artefact):
    """One engine against the reference (``harness.metrics.fidelity.compare``).

    ``positions``: reference positions checked (teacher-forced); ``divergences``: those where
    the engine's greedy token was another; ``near_tie_divergences``: those among them at a
    near-tie (reference top-2 gap < ``epsilon`` nats); ``near_tie_positions``: all near-tie
    positions checked; ``top1_agreement``: 1 − divergences / positions;
    ``agreement_outside_near_ties`` (with its 95 % ``agreement_interval``, a cluster bootstrap
    over prompts: ``harness.metrics.fidelity``): 1 − (divergences − near-tie divergences) /
    (positions − near-tie positions), what the gate reads; ``prompt_tallies``: per prompt, its
    positions outside near-ties and its agreements among them (what the interval resamples;
    empty in results written before it); ``exact_matches``: prompts whose free-running greedy
    output equals the reference's (``exact_match_interval``: Wilson 95 %);
    ``first_divergence``: per prompt, the first position where the free-running output left the
    reference (None: never); ``unchecked_positions``: positions never reached (errors, or past
    :data:`harness.loadgen.fidelity.MAX_RESUMES`); ``prompts_answered``: prompts the engine
    answered without an error with at least one position checked (the check's coverage is
    ``prompts_answered / prompts``; None in results written before it: coverage unknown);
    ``logprob_error_max``: max |engine − reference| logprob of the reference's token where both
    are known (nats); ``topk_tv_mean``: mean total-variation distance between the two top-k
    distributions (each truncated to its top-k and renormalised); ``floor`` and ``passed``: the
    agreement's gate (passed when the interval's upper bound reaches the floor); ``error``: the
    check could not run. Whether the engine may compete is :meth:`exclusion`: below the floor,
    or not checked (an error, or fewer than :data:`COVERAGE_FLOOR` of the prompts answered)."""

    prompts: int = 0
    max_tokens: int = 0
    positions: int = 0
    divergences: int = 0
    near_tie_divergences: int = 0
    near_tie_positions: int = 0
    unchecked_positions: int = 0
    top1_agreement: float | None = None
    agreement_outside_near_ties: float | None = None
    agreement_interval: Interval | None = None
    prompt_tallies: list[tuple[int, int]] = Field(default_factory=list)
    exact_matches: int = 0
    exact_match_interval: Interval | None = None
    first_divergence: list[int | None] = Field(default_factory=list)
    prompts_answered: int | None = None
    logprobs: bool = False
    logprob_error_max: float | None = None
    topk_tv_mean: float | None = None
    prompt_format: str = "token_ids"
    numerics: str = "reference"
    epsilon: float = NEAR_TIE_EPSILON
    floor: float = STRICT_FLOOR
    passed: bool | None = None
    error: str | None = None

    @property
    def coverage(self) -> float | None:
        """The share of the reference's prompts answered (None: not recorded, or no prompts)."""
        if self.prompts_answered is None or self.prompts <= 0:
            return None
        return self.prompts_answered / self.prompts

    def unchecked(self) -> str:
        """Why this check does not vouch for the engine, in one line ("" when it does): it could
        not run (``"fidelity not checked (ContentTypeError: …)"``), or it answered fewer than
        :data:`COVERAGE_FLOOR` of the prompts (``"fidelity checked on 1 of 32 prompts (< 90 %)"``)."""
        if self.error is not None:
            first = (self.error.strip().splitlines() or [""])[0]
            first = first if len(first) <= 50 else first[:49] + "…"  # one line, short enough for a table cell
            return f"fidelity not checked ({first})"
        if self.agreement_outside_near_ties is None:
            what = "every position checked was a near-tie" if self.positions else "no position checked"
            return f"fidelity not checked ({what})"
        coverage = self.coverage
        if coverage is not None and coverage < COVERAGE_FLOOR:
            return (f"fidelity checked on {self.prompts_answered} of {self.prompts} prompts "
                    f"(< {COVERAGE_FLOOR * 100:.0f} %)")
        return ""

    def exclusion(self, allow_unchecked: bool = False) -> str:
        """The gate's one line ("" = the engine may compete): below the floor (:meth:`reason`),
        or not checked (:meth:`unchecked`) unless ``allow_unchecked`` (``--allow-unchecked``)."""
        if self.passed is False:
            return self.reason()
        why = self.unchecked()
        if why and not allow_unchecked:
            return f"{why}; --allow-unchecked lets it compete"
        return ""

    def reason(self) -> str:
        """The gate's one line: ``"fidelity 0.87 [0.85, 0.88] top-1 agreement outside near-ties
        < floor 0.99 (31 of 32 prompts left the reference, first at token 3)"``."""
        iv = self.agreement_interval
        spread = f" [{iv.low:.3f}, {iv.high:.3f}]" if iv is not None else ""
        left = sum(1 for d in self.first_divergence if d is not None)
        firsts = [d for d in self.first_divergence if d is not None]
        where = f", first at token {min(firsts)}" if firsts else ""
        return (f"fidelity {self.agreement_outside_near_ties:.3f}{spread} top-1 agreement outside near-ties "
                f"< floor {self.floor:.2f} ({left} of {self.prompts} prompts left the reference{where})")


class FidelityCheck(Artefact):
    """``fidelity.json``: the reference's description, each engine's :class:`FidelityResult` and
    ``allow_unchecked`` (``--allow-unchecked``: an engine whose check could not run competes)."""

    reference_key: str
    source: str = "transformers fp32 greedy"
    prompts: int = 0
    max_tokens: int = 0
    epsilon: float = NEAR_TIE_EPSILON
    strict_floor: float = STRICT_FLOOR
    other_floor: float = DEFAULT_OTHER_FLOOR
    allow_unchecked: bool = False
    engines: dict[str, FidelityResult] = Field(default_factory=dict)


ACCURACY_FILE = "accuracy.json"


class AccuracyItem(Artefact):
    """One question of a user's accuracy set (``--accuracy FILE``, one JSON object a line):
    ``prompt`` (``/v1/completions``) or ``messages`` (``/v1/chat/completions``), the
    ``expected`` answer, how it is scored (``match``: ``"exact"``, the reply stripped equals
    ``expected`` stripped; ``"regex"``, ``expected`` is a regular expression searched in the
    reply) and ``max_tokens`` (the reply's length bound)."""

    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    expected: str
    match: Literal["exact", "regex"] = "exact"
    max_tokens: int = Field(default=32, ge=1, le=4096)


class AccuracyResult(Artefact):
    """One engine on the accuracy set: ``correct`` of ``total`` (failed requests count as wrong
    and are also counted in ``failed``), the accuracy with its Wilson 95 % ``interval``, and per
    item whether it was right (``per_item``)."""

    correct: int = 0
    total: int = 0
    failed: int = 0
    accuracy: float | None = None
    interval: Interval | None = None
    per_item: list[bool] = Field(default_factory=list)


class AccuracyCheck(Artefact):
    """``accuracy.json``: the set (``source``: its file, ``items``: its size) and each engine's result."""

    source: str
    items: int
    engines: dict[str, AccuracyResult] = Field(default_factory=dict)
