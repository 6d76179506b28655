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
