"""The fidelity comparison (harness/metrics/fidelity.py) on hand-made answers to a synthetic
reference whose structure is known (tests/fake_servers/fidelity_server.py)."""

from __future__ import annotations

import math

import pytest

from harness.metrics.fidelity import compare, fidelity_check, wilson_interval
from results.schema import AnswerSegment, EngineAnswer, EngineAnswers, STRICT_FLOOR
from tests.fake_servers.fidelity_server import synthetic_reference

REF = synthetic_reference(prompts=4, tokens=10, near_tie_every=5, eos_prompts=(1,))


def _text(i: int, start: int, end: int) -> str:
    return "".join(REF.prompts[i].pieces[start:end])


def _faithful(i: int) -> EngineAnswer:
    r = REF.prompts[i]
    return EngineAnswer(segments=[AnswerSegment(start=0, text=_text(i, 0, len(r.tokens)),
                                                finish_reason="stop" if r.eos else "length")])


def test_identical_answers_agree_everywhere() -> None:
    res = compare(REF, EngineAnswers(answers=[_faithful(i) for i in range(4)]))
    assert res.positions == 40 and res.divergences == 0 and res.unchecked_positions == 0
    assert res.exact_matches == 4 and res.first_divergence == [None] * 4
    assert res.top1_agreement == 1.0 and res.agreement_outside_near_ties == 1.0
    assert res.near_tie_positions == 8  # positions 4 and 9 of each prompt
    assert res.passed is True and res.floor == STRICT_FLOOR
    assert res.agreement_interval.high == pytest.approx(1.0) and res.agreement_interval.low < 1.0  # 32 trials


def test_a_divergence_is_counted_once_and_the_resumed_tail_is_checked() -> None:
    answers = [_faithful(i) for i in range(4)]
    # prompt 0 leaves the reference at position 2 (gap 2: a real error), resumed at 3 it follows it
    answers[0] = EngineAnswer(segments=[AnswerSegment(start=0, text=_text(0, 0, 2) + " nope" + _text(0, 3, 10),
                                                      finish_reason="length"),
                                        AnswerSegment(start=3, text=_text(0, 3, 10), finish_reason="length")])
    res = compare(REF, EngineAnswers(answers=answers))
    assert res.positions == 40 and res.divergences == 1 and res.near_tie_divergences == 0
    assert res.first_divergence == [2, None, None, None] and res.exact_matches == 3
    assert res.agreement_outside_near_ties == pytest.approx(31 / 32)
    assert res.top1_agreement == pytest.approx(39 / 40)
    assert res.passed is True  # one error in 32: the interval still reaches 0.99


def test_a_near_tie_divergence_is_counted_apart() -> None:
    answers = [_faithful(i) for i in range(4)]
    answers[2] = EngineAnswer(segments=[AnswerSegment(start=0, text=_text(2, 0, 4) + " alt", finish_reason="length"),
                                        AnswerSegment(start=5, text=_text(2, 5, 10), finish_reason="length")])
    res = compare(REF, EngineAnswers(answers=answers))
    assert res.divergences == 1 and res.near_tie_divergences == 1 and res.first_divergence[2] == 4
    assert res.agreement_outside_near_ties == 1.0 and res.top1_agreement == pytest.approx(39 / 40)
    assert res.passed is True


def test_end_of_sequence_early_or_missing_is_a_divergence() -> None:
    answers = [_faithful(i) for i in range(4)]
    # prompt 0 stops after 6 tokens (an end-of-sequence token where the reference has its 7th)
    answers[0] = EngineAnswer(segments=[AnswerSegment(start=0, text=_text(0, 0, 6), finish_reason="stop"),
                                        AnswerSegment(start=7, text=_text(0, 7, 10), finish_reason="length")])
    # prompt 1's reference ends on end-of-sequence at 9: the engine writes on instead
    answers[1] = EngineAnswer(segments=[AnswerSegment(start=0, text=_text(1, 0, 9) + " more", finish_reason="length")])
    res = compare(REF, EngineAnswers(answers=answers))
    assert res.first_divergence[:2] == [6, 9] and res.divergences == 2 and res.unchecked_positions == 0


def test_another_segmentation_of_the_same_text_is_no_divergence_and_a_short_text_is_unchecked() -> None:
    answers = [_faithful(i) for i in range(4)]
    answers[3] = EngineAnswer(segments=[AnswerSegment(start=0, text=_text(3, 0, 6), finish_reason="length")])
    res = compare(REF, EngineAnswers(answers=answers))
    assert res.divergences == 0 and res.unchecked_positions == 4 and res.positions == 36
    assert res.exact_matches == 3 and res.first_divergence[3] is None


def test_an_engine_that_errs_every_fourth_token_fails_the_gate() -> None:
    ref = synthetic_reference(prompts=8, tokens=32, near_tie_every=7, eos_prompts=())
    answers = []
    for r in ref.prompts:
        segs, start = [], 0
        while start < len(r.tokens):
            wrong = next((p for p in range(start, len(r.tokens)) if (p + 1) % 4 == 0 and r.gap[p] >= 0.05), None)
            end = len(r.tokens) if wrong is None else wrong
            segs.append(AnswerSegment(start=start, text="".join(r.pieces[start:end]) + ("" if wrong is None else " X"),
                                      finish_reason="length"))
            start = end + 1 if wrong is not None else len(r.tokens)
        answers.append(EngineAnswer(segments=segs))
    res = compare(ref, EngineAnswers(answers=answers))
    errors = sum(1 for r in ref.prompts for p in range(32) if (p + 1) % 4 == 0 and r.gap[p] >= 0.05)
    assert res.divergences == errors and res.near_tie_divergences == 0 and res.positions == 256
    assert res.agreement_outside_near_ties == pytest.approx(1 - errors / (256 - res.near_tie_positions))
    assert res.passed is False and res.agreement_interval.high < STRICT_FLOOR
    assert res.reason().startswith(f"fidelity {res.agreement_outside_near_ties:.3f} [")
    assert "8 of 8 prompts left the reference, first at token 3" in res.reason()


def test_other_numerics_face_the_users_floor_and_a_failed_check_no_gate() -> None:
    ref = synthetic_reference(prompts=8, tokens=32, near_tie_every=7, eos_prompts=())
    answers = []
    for r in ref.prompts:  # one real error per prompt, at position 10
        answers.append(EngineAnswer(segments=[
            AnswerSegment(start=0, text="".join(r.pieces[:10]) + " X", finish_reason="length"),
            AnswerSegment(start=11, text="".join(r.pieces[11:]), finish_reason="length")]))
    strict = compare(ref, EngineAnswers(answers=answers))
    quantised = compare(ref, EngineAnswers(answers=answers, numerics="q8_0"), other_floor=0.9)
    assert strict.agreement_outside_near_ties == quantised.agreement_outside_near_ties == pytest.approx(1 - 8 / 224)
    assert strict.passed is False and quantised.passed is True and quantised.floor == 0.9
    failed = compare(ref, EngineAnswers(error="Refused: HTTP 404"))
    assert failed.error == "Refused: HTTP 404" and failed.passed is None and failed.positions == 0


def test_logprob_error_and_top_k_distance() -> None:
    r = REF.prompts[0]
    exact = [dict(t) for t in r.top]
    shifted = [{k: v - 0.3 if k == r.pieces[p] else v for k, v in dict(t).items()} for p, t in enumerate(r.top)]
    answers = [_faithful(i) for i in range(4)]
    answers[0] = EngineAnswer(segments=[AnswerSegment(start=0, text=_text(0, 0, 10), finish_reason="length",
                                                      tokens=list(r.pieces), top_logprobs=exact)])
    same = compare(REF, EngineAnswers(answers=answers, logprobs=True))
    assert same.logprob_error_max == pytest.approx(0.0) and same.topk_tv_mean == pytest.approx(0.0)
    answers[0].segments[0].top_logprobs = shifted
    moved = compare(REF, EngineAnswers(answers=answers, logprobs=True))
    assert moved.logprob_error_max == pytest.approx(0.3)
    # per position: the top-3 (ref piece, alternative, filler) renormalised, the ref piece 0.3 lower
    def tv(top: list) -> float:
        p = [math.exp(lp) for _, lp in top]
        q = [math.exp(lp - 0.3 if i == 0 else lp) for i, (_, lp) in enumerate(top)]
        p, q = [x / sum(p) for x in p], [x / sum(q) for x in q]
        return 0.5 * sum(abs(a - b) for a, b in zip(p, q))

    assert moved.topk_tv_mean == pytest.approx(sum(tv(t) for t in r.top) / len(r.top))
    assert moved.divergences == 0  # logprobs differ, the greedy tokens do not


def test_wilson_interval_and_the_stored_check() -> None:
    iv = wilson_interval(95, 100)
    assert iv.point == 0.95 and 0.88 < iv.low < 0.89 and 0.978 < iv.high < 0.979  # Wilson 1927, n = 100
    assert wilson_interval(0, 0) is None
    res = compare(REF, EngineAnswers(answers=[_faithful(i) for i in range(4)]))
    check = fidelity_check(REF, {"own": res}, other_floor=0.8)
    assert check.prompts == 4 and check.max_tokens == 10 and check.other_floor == 0.8 and check.engines["own"] is res


# ---- the interval clustered by prompt (Davison & Hinkley 1997 §3.8) ------------------------------

def _one_error_at(ref, errors: dict[int, list[int]]) -> EngineAnswers:
    """Answers to ``ref`` that are the reference's own text except at the real (not near-tie)
    positions ``errors[i]`` of prompt ``i``, each resumed after (teacher forcing)."""
    answers = []
    for i, r in enumerate(ref.prompts):
        segs, start = [], 0
        for p in sorted(errors.get(i, [])) + [None]:
            end = len(r.tokens) if p is None else p
            segs.append(AnswerSegment(start=start, text="".join(r.pieces[start:end]) + ("" if p is None else " X"),
                                      finish_reason="length"))
            if p is None:
                break
            start = p + 1
        answers.append(EngineAnswer(segments=segs))
    return EngineAnswers(answers=answers)


def test_divergences_held_by_one_prompt_give_a_wider_interval_than_wilson() -> None:
    """8 prompts × 28 positions outside near-ties, 8 real divergences: all in prompt 0, or one
    in each prompt. Pooled, both are 216/224; the positions cluster by prompt, so the interval
    is wider where one prompt holds them all (a resample without prompt 0 agrees everywhere)."""
    ref = synthetic_reference(prompts=8, tokens=32, near_tie_every=7, eos_prompts=())
    real = [p for p in range(32) if (p + 1) % 7 != 0]  # 28 positions outside near-ties
    one = compare(ref, _one_error_at(ref, {0: real[:8]}))
    spread = compare(ref, _one_error_at(ref, {i: [real[5]] for i in range(8)}))
    wilson = wilson_interval(216, 224)
    for res in (one, spread):
        assert res.positions == 256 and res.divergences == 8 and res.near_tie_positions == 32
        assert res.agreement_outside_near_ties == pytest.approx(216 / 224) == wilson.point
    assert one.prompt_tallies == [(28, 20)] + [(28, 28)] * 7
    iv = one.agreement_interval
    assert iv.method.startswith("cluster bootstrap percentile, 8 prompts resampled 1,999 times")
    assert iv.basis == "prompts" and iv.n == 8 and iv.low <= iv.point <= iv.high
    assert iv.high == 1.0 and iv.low < wilson.low and iv.high - iv.low > 1.5 * (wilson.high - wilson.low)
    # the percentiles of the ratio 1 - 8k/224, k ~ Binomial(8, 1/8) the draws of prompt 0: k = 3 at 2.5 %
    assert iv.low == pytest.approx(1 - 3 * 8 / 224)
    # every prompt at the same ratio: a resample always repeats the point; the pooled Wilson stands in
    assert spread.agreement_interval == wilson
    # the same answers, the same interval (seeded)
    assert compare(ref, _one_error_at(ref, {0: real[:8]})).agreement_interval == iv


def test_the_clustered_interval_and_its_fallbacks() -> None:
    from harness.metrics.fidelity import agreement_interval

    tallies = [(10, 10), (10, 9), (10, 7), (10, 10), (10, 8), (10, 10)]
    iv = agreement_interval(tallies, 54, 60)
    assert iv.point == pytest.approx(0.9) and iv.method.startswith("cluster bootstrap") and iv.n == 6
    # the resampled ratios take values k/60; their 2.5th and 97.5th percentiles (seed 0)
    assert iv.low == pytest.approx(48 / 60) and iv.high == pytest.approx(59 / 60)
    assert agreement_interval(None, 54, 60) == wilson_interval(54, 60)  # no per-prompt tallies (an old result)
    assert agreement_interval([(60, 54)], 54, 60) == wilson_interval(54, 60)  # one prompt: nothing to resample
    assert agreement_interval([(0, 0), (60, 54)], 54, 60) == wilson_interval(54, 60)
    assert agreement_interval([], 0, 0) is None


# ---- coverage: the prompts answered --------------------------------------------------------------

def test_coverage_counts_the_prompts_answered() -> None:
    from results.schema import COVERAGE_FLOOR

    ref = synthetic_reference(prompts=32, tokens=8, near_tie_every=5, eos_prompts=())
    full = _one_error_at(ref, {})
    res = compare(ref, full)
    assert res.prompts_answered == 32 and res.coverage == 1.0 and res.unchecked() == "" and res.exclusion() == ""
    refused = [EngineAnswer(error="ContentTypeError: text/plain")] * 31
    one = full.model_copy(update={"answers": [full.answers[0]] + refused})
    res = compare(ref, one)
    assert res.passed is True and res.positions == 8 and res.prompts_answered == 1  # one prompt agreed everywhere
    assert res.unchecked() == "fidelity checked on 1 of 32 prompts (< 90 %)"
    assert res.exclusion() == "fidelity checked on 1 of 32 prompts (< 90 %); --allow-unchecked lets it compete"
    assert res.exclusion(allow_unchecked=True) == ""
    # 29 of 32 (90.6 %) is enough, 28 (87.5 %) is not
    some = lambda k: full.model_copy(update={"answers": full.answers[:k] + [EngineAnswer(error="HTTP 500")] * (32 - k)})
    assert COVERAGE_FLOOR == 0.9 and compare(ref, some(29)).exclusion() == ""
    assert compare(ref, some(28)).exclusion().startswith("fidelity checked on 28 of 32 prompts (< 90 %)")
    # an answer that checked no position (empty text, cut by length) is not an answer
    empty = full.model_copy(update={"answers": [EngineAnswer(segments=[AnswerSegment(start=0, text="",
                                                                                      finish_reason="length")])] * 32})
    res = compare(ref, empty)
    assert res.prompts_answered == 0 and res.error == "no reference position could be checked"


def test_a_check_that_could_not_run_is_not_checked() -> None:
    res = compare(REF, EngineAnswers(error="ContentTypeError: 200, message='Attempt to decode JSON with unexpected "
                                           "mimetype: text/event-stream', url='http://127.0.0.1:1234/v1/completions'"))
    assert res.passed is None and res.prompts_answered == 0
    # its first line, cut to 60 characters: one line in the capacity table's gate column
    assert res.unchecked() == "fidelity not checked (ContentTypeError: 200, message='Attempt to decode…)"
    assert res.exclusion() == res.unchecked() + "; --allow-unchecked lets it compete"
    assert res.exclusion(allow_unchecked=True) == ""
    # below the floor excludes whatever the flag
    ref = synthetic_reference(prompts=8, tokens=32, near_tie_every=7, eos_prompts=())
    bad = compare(ref, _one_error_at(ref, {i: [2, 10, 20] for i in range(8)}))
    assert bad.passed is False and bad.exclusion(allow_unchecked=True) == bad.reason() == bad.exclusion()


def test_an_old_result_without_coverage_still_loads_and_is_judged_on_its_error() -> None:
    from results.schema import FidelityResult

    old = FidelityResult.model_validate({"prompts": 32, "positions": 100, "agreement_outside_near_ties": 1.0,
                                         "passed": True})
    assert old.prompts_answered is None and old.coverage is None and old.prompt_tallies == []
    assert old.exclusion() == ""
    errored = FidelityResult.model_validate({"prompts": 32, "error": "Refused: HTTP 404"})
    assert errored.exclusion() == "fidelity not checked (Refused: HTTP 404); --allow-unchecked lets it compete"


# ---- text compared on decoded prefixes ----------------------------------------------------------

def _split_reference(text: str):
    """A one-prompt reference whose continuation is ``text`` as the embedded model's tokenizer
    splits it: pieces decoded one token at a time, texts decoded as whole prefixes (as
    :func:`harness.app.trial.fidelity_reference._greedy` stores them)."""
    from transformers import AutoTokenizer

    from harness.app.trial.fidelity_reference import decoded_prefix
    from harness.app.core.model import resolve_model
    from results.schema import FidelityReference, ReferencePrompt

    tok = AutoTokenizer.from_pretrained(str(resolve_model(None)))
    ids = tok(text, add_special_tokens=False)["input_ids"]
    ref = ReferencePrompt(prompt="Say:", prompt_token_ids=[1, 2], tokens=ids, pieces=[tok.decode([t]) for t in ids],
                          texts=[decoded_prefix(tok, ids[:k + 1]) for k in range(len(ids))],
                          top=[[(tok.decode([t]), -0.1), ("alt", -3.0)] for t in ids], gap=[2.9] * len(ids))
    return FidelityReference(key="split", max_tokens=len(ids), top_k=2, prompts=[ref]), ref


def test_a_multibyte_character_split_across_two_tokens_is_no_divergence() -> None:
    reference, ref = _split_reference(" 😀 ok")
    # the emoji's four bytes span two tokens: each decoded alone is a replacement character
    assert len(ref.tokens) == 3 and ref.pieces[:2] == [" \ufffd", "\ufffd"] and ref.texts[1] == " 😀"
    whole = AnswerSegment(start=0, text=" 😀 ok", finish_reason="length")
    healthy = EngineAnswers(answers=[EngineAnswer(segments=[whole])])
    res = compare(reference, healthy)
    assert res.positions == 3 and res.divergences == 0 and res.exact_matches == 1 and res.first_divergence == [None]
    assert ref.follow(0, " 😀 ok", "length") == (3, False)
    # per-token pieces (a reference stored before the decoded prefixes) charged it a divergence
    old = ref.model_copy(update={"texts": []})
    assert old.follow(0, " 😀 ok", "length") == (0, True)
    # another character there is a divergence, charged to the first of its tokens
    assert ref.follow(0, " 😃 ok", "length") == (0, True)
    # resumed inside the character (its first bytes forced): a text prompt stops before it (after
    # the space, a whole character), and the engine's text, the character whole, agrees
    assert ref.resume_text(1) == " "
    assert ref.follow(1, "😀 ok", "length") == (3, False)
    # the engine ran out of tokens inside the character: no verdict on it
    assert ref.follow(0, "", "length") == (0, False)


def test_a_longer_split_and_a_reference_that_ends_inside_a_character() -> None:
    reference, ref = _split_reference(" 日本語")
    assert any(p.endswith("\ufffd") for p in ref.pieces) and ref.texts[-1] == " 日本語"
    assert ref.follow(0, " 日本語", "length") == (len(ref.tokens), False)
    assert ref.follow(0, " 日本人", "length")[1] is True
    cut = ref.model_copy(update={"tokens": ref.tokens[:-1], "pieces": ref.pieces[:-1], "texts": ref.texts[:-1],
                                 "top": ref.top[:-1], "gap": ref.gap[:-1]})
    assert cut.texts[-1].endswith("\ufffd")
    # the engine held the incomplete last character back, or printed it as the reference did
    assert cut.follow(0, " 日本", "length") == (len(cut.tokens), False)
    assert cut.follow(0, cut.texts[-1], "length") == (len(cut.tokens), False)
