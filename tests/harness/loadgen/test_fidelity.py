"""The fidelity probe (harness/loadgen/fidelity.py) against scripted engines whose errors are known
(tests/fake_servers/fidelity_server.py), compared by harness/metrics/fidelity.py: a faithful
engine passes with one request per prompt, an engine wrong every N tokens is resumed after each
error and fails the gate, near-tie flips alone pass, a text-only or logprob-less engine is
still checked, a dead one is reported and not gated."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

import pytest

from harness.loadgen.fidelity import ask
from harness.metrics.fidelity import compare
from tests.fake_servers.fidelity_server import SCRIPT, make_app, synthetic_reference
from tests.fake_servers.threaded import serve_in_thread

REF = synthetic_reference(prompts=6, tokens=24, near_tie_every=5, eos_prompts=(1,))


@dataclass
class _Endpoint:
    base_url: str
    model_name: str = "scripted"
    api_key: str | None = None


def _check(**script):
    app = make_app(REF, **script)
    with serve_in_thread(app) as url:
        answers = asyncio.run(ask(_Endpoint(url), REF, timeout_s=10))
    return answers, compare(REF, answers), app[SCRIPT].served


def test_a_faithful_engine_passes_with_one_request_per_prompt() -> None:
    answers, res, served = _check()
    assert answers.prompt_format == "token_ids" and answers.logprobs and answers.error is None
    assert served == 6 and res.positions == 6 * 24 and res.divergences == 0 and res.exact_matches == 6
    assert res.passed is True and res.logprob_error_max == pytest.approx(0.0) and res.topk_tv_mean == pytest.approx(0.0)


def test_an_engine_wrong_every_fourth_token_is_resumed_and_fails_the_gate() -> None:
    answers, res, served = _check(flip_every=4)
    wrong = [p for p in range(24) if (p + 1) % 4 == 0 and (p + 1) % 5 != 0]  # p = 19 is a near-tie: not flipped
    assert res.divergences == 6 * len(wrong) and res.near_tie_divergences == 0
    assert res.first_divergence == [wrong[0]] * 6
    assert served == 6 * len(wrong)  # the first request, then one after each error but the last (p = 23 ends it)
    assert res.positions == 6 * 24 and res.unchecked_positions == 0
    assert res.passed is False and "fidelity" in res.reason()


def test_near_tie_flips_alone_pass() -> None:
    _, res, _ = _check(flip_near_ties=True)
    near = sum(1 for r in REF.prompts for g in r.gap if g < 0.05)
    assert res.divergences == res.near_tie_divergences == near > 0
    assert res.agreement_outside_near_ties == 1.0 and res.passed is True
    assert res.exact_matches == 0 and res.top1_agreement < 1.0


def test_a_text_only_engine_without_logprobs_is_still_checked() -> None:
    answers, res, _ = _check(text_only=True, no_logprobs=True)
    assert answers.prompt_format == "text" and not answers.logprobs
    assert res.divergences == 0 and res.passed is True and res.topk_tv_mean is None
    answers, res, _ = _check(text_only=True, flip_every=6)
    assert answers.prompt_format == "text" and res.divergences > 0 and res.unchecked_positions == 0


def test_a_dead_endpoint_is_reported_not_gated() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    answers = asyncio.run(ask(_Endpoint(f"http://127.0.0.1:{port}"), REF, timeout_s=5))
    res = compare(REF, answers)
    assert answers.error and "ClientConnectorError" in answers.error
    assert res.error == answers.error and res.passed is None and res.positions == 0
