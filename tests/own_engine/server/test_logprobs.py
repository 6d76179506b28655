"""Logprobs on both OpenAI APIs of the reference server.

Against a real :class:`~own_engine.engine.LLMEngine` on a locally written random-weight model (word
tokenizer ``t3`` ... ``t299``): the legacy completions shape (``tokens``, ``token_logprobs``,
``top_logprobs``, ``text_offset``) and the chat shape (``content`` = ``[{token, logprob, bytes,
top_logprobs}]``), streamed and not, with the values of the engine's own ``generate`` (itself checked
against transformers in tests/own_engine/test_logprobs.py), ``logprobs=0``, ``n > 1``, and the bounds
errors. Against test_app.py's scripted fake engine: which chunk carries which token's logprobs when
text is held back (half a UTF-8 character, a stop-string prefix), tokens cut by a stop string, the
hidden EOS token.
"""

from __future__ import annotations

import os

import aiohttp
import pytest
import torch

from own_engine.config import EngineConfig
from own_engine.engine import LLMEngine
from own_engine.outputs import TokenLogprobs
from own_engine.random_model import RandomLlamaSpec, write_random_llama
from own_engine.sampling_params import SamplingParams
from own_engine.server.protocol import APIError, ChatCompletionRequest, CompletionRequest
from own_engine.server.validation import RequestValidator
from tests.own_engine.server.test_app import EOS, FakeEngine, FakeTokenizer, b, post, read_sse, serve, w

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

SPEC = RandomLlamaSpec(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16,
                       intermediate_size=128, vocab_size=300, max_position_embeddings=512, seed=2)
PROMPT = "t5 t17 t42 t99 t7 t123"
NEW = 6
TEMPLATE = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
CHAT = [{"role": "user", "content": PROMPT}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_random_llama(tmp_path_factory.mktemp("random_llama"), SPEC)


def make_engine(model_dir) -> LLMEngine:
    e = LLMEngine(EngineConfig(model_dir=model_dir, max_model_len=128, device="cpu"))
    e.tokenizer.chat_template = TEMPLATE  # the random model's tokenizer has none
    return e


@pytest.fixture(scope="module")
def url(model_dir):
    with serve(make_engine(model_dir)) as u:
        yield u


@pytest.fixture(scope="module")
def reference(model_dir):
    """The engine's own greedy tokens and logprobs (k = 3) for the completion and the chat prompt."""
    e = make_engine(model_dir)
    params = SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True, logprobs=3)
    chat_ids = e.tokenizer.encode(e.tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False),
                                  add_special_tokens=False)
    comp, chat = e.generate([e.tokenizer.encode(PROMPT), chat_ids], params)
    return {"comp": comp, "chat": chat, "decode": lambda t: e.tokenizer.decode([t])}


GREEDY = {"max_tokens": NEW, "temperature": 0, "ignore_eos": True}


def completion_lps_of_stream(events) -> dict:
    """Concatenate the streamed completions logprobs objects of choice 0."""
    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for e in events:
        if e == "[DONE]" or not e["choices"]:
            continue
        lp = e["choices"][0]["logprobs"]
        if e["choices"][0]["text"]:
            assert lp is not None and lp["tokens"], e  # a chunk with text carries its tokens' logprobs
        for key in out:
            out[key] += lp[key]
    return out


def check_completion_logprobs(lp: dict, text: str, ref, decode, k: int) -> None:
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert lp["tokens"] == [decode(t) for t in ref.output_token_ids]
    assert lp["token_logprobs"] == pytest.approx([x.logprob for x in ref.logprobs], abs=1e-5)
    assert len(lp["top_logprobs"]) == NEW
    for tok, value, top, r in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], ref.logprobs):
        if k == 0:
            assert top == {tok: value}  # OpenAI: up to logprobs + 1 entries, the sampled token always
        else:
            assert list(top) == [decode(t) for t in r.top_token_ids[:k]]  # descending
            assert list(top.values()) == pytest.approx(list(r.top_logprobs[:k]), abs=1e-5)
            assert next(iter(top.items())) == (tok, value)  # greedy: the token is the top-1 entry
    offsets = lp["text_offset"]
    assert offsets == sorted(offsets) and offsets[-1] < len(text)
    for off, tok in zip(offsets, lp["tokens"]):
        assert text[off:].lstrip().startswith(tok)  # the word tokenizer puts a space between words


@pytest.mark.parametrize("k", [3, 0])
async def test_completions_logprobs_streamed_and_not(url, reference, k):
    ref, decode = reference["comp"], reference["decode"]
    body = {"prompt": PROMPT, "logprobs": k, **GREEDY}
    async with aiohttp.ClientSession() as s:
        st, plain = await post(f"{url}/v1/completions", body, s)
        async with s.post(f"{url}/v1/completions", json={**body, "stream": True,
                                                          "stream_options": {"include_usage": True}}) as resp:
            events, _ = await read_sse(resp)
    assert st == 200
    (choice,) = plain["choices"]
    assert plain["usage"]["completion_tokens"] == NEW
    check_completion_logprobs(choice["logprobs"], choice["text"], ref, decode, k)
    streamed = completion_lps_of_stream(events)
    assert "".join(e["choices"][0]["text"] for e in events if e != "[DONE]" and e["choices"]) == choice["text"]
    assert streamed == choice["logprobs"]  # the same tokens, values and offsets, chunk by chunk


def check_chat_logprobs(lp: dict, ref, decode, k: int) -> None:
    assert set(lp) == {"content"}
    content = lp["content"]
    assert [c["token"] for c in content] == [decode(t) for t in ref.output_token_ids]
    for c, r in zip(content, ref.logprobs):
        assert set(c) == {"token", "logprob", "bytes", "top_logprobs"}
        assert c["bytes"] == list(c["token"].encode()) and c["logprob"] == pytest.approx(r.logprob, abs=1e-5)
        assert len(c["top_logprobs"]) == k
        assert [t["token"] for t in c["top_logprobs"]] == [decode(t) for t in r.top_token_ids[:k]]
        assert [t["logprob"] for t in c["top_logprobs"]] == pytest.approx(list(r.top_logprobs[:k]), abs=1e-5)
        assert all(t["bytes"] == list(t["token"].encode()) for t in c["top_logprobs"])
        if k:  # greedy: the sampled token is the top-1 entry
            assert (c["top_logprobs"][0]["token"], c["top_logprobs"][0]["logprob"]) == (c["token"], c["logprob"])


@pytest.mark.parametrize("extra,k", [({"logprobs": True, "top_logprobs": 2}, 2), ({"logprobs": True}, 0)])
async def test_chat_logprobs_streamed_and_not(url, reference, extra, k):
    ref, decode = reference["chat"], reference["decode"]
    body = {"messages": CHAT, **GREEDY, **extra}
    async with aiohttp.ClientSession() as s:
        st, plain = await post(f"{url}/v1/chat/completions", body, s)
        async with s.post(f"{url}/v1/chat/completions", json={**body, "stream": True}) as resp:
            events, _ = await read_sse(resp)
    assert st == 200
    (choice,) = plain["choices"]
    check_chat_logprobs(choice["logprobs"], ref, decode, k)
    content = []
    chunks = [e["choices"][0] for e in events if e != "[DONE]"]
    assert chunks[0]["delta"] == {"role": "assistant", "content": ""} and chunks[0]["logprobs"] is None
    for c in chunks[1:]:
        if c["delta"].get("content"):
            assert c["logprobs"]["content"], c
        content += (c["logprobs"] or {"content": []})["content"]
    assert content == choice["logprobs"]["content"]
    assert "".join(c["delta"].get("content", "") for c in chunks) == choice["message"]["content"]


async def test_without_logprobs_they_are_null_and_n_choices_each_get_theirs(url, reference):
    async with aiohttp.ClientSession() as s:
        st, plain = await post(f"{url}/v1/completions", {"prompt": PROMPT, **GREEDY}, s)
        async with s.post(f"{url}/v1/chat/completions", json={"messages": CHAT, **GREEDY, "stream": True}) as resp:
            events, _ = await read_sse(resp)
        st2, two = await post(f"{url}/v1/completions", {"prompt": PROMPT, "logprobs": 3, "n": 2, **GREEDY}, s)
        st3, sampled = await post(f"{url}/v1/chat/completions",
                                  {"messages": CHAT, "logprobs": True, "top_logprobs": 1, "max_tokens": NEW,
                                   "temperature": 1.0, "seed": 1, "n": 2, "ignore_eos": True}, s)
    assert st == st2 == st3 == 200
    assert plain["choices"][0]["logprobs"] is None
    assert all(e["choices"][0]["logprobs"] is None for e in events if e != "[DONE]")
    for choice in two["choices"]:  # greedy n = 2: both choices are the n = 1 reply, logprobs included
        check_completion_logprobs(choice["logprobs"], choice["text"], reference["comp"], reference["decode"], 3)
    for choice in sampled["choices"]:
        content = choice["logprobs"]["content"]
        assert len(content) == NEW and all(-50 < c["logprob"] <= 0 for c in content)
        assert all(c["top_logprobs"][0]["logprob"] >= c["logprob"] for c in content)


BAD = [
    ("/v1/completions", {"prompt": PROMPT, "logprobs": 21}, "logprobs", "logprobs must be between 0 and 20, got 21"),
    ("/v1/completions", {"prompt": PROMPT, "logprobs": -1}, "logprobs", "logprobs must be between 0 and 20, got -1"),
    ("/v1/completions", {"prompt": PROMPT, "logprobs": 2, "echo": True}, "echo", "echo is not supported"),
    ("/v1/chat/completions", {"messages": CHAT, "logprobs": True, "top_logprobs": 21}, "top_logprobs",
     "top_logprobs must be between 0 and 20, got 21"),
    ("/v1/chat/completions", {"messages": CHAT, "top_logprobs": 2}, "top_logprobs",
     'top_logprobs needs logprobs: send "logprobs": true'),
    ("/v1/chat/completions", {"messages": CHAT, "logprobs": False, "top_logprobs": 2}, "top_logprobs",
     'top_logprobs needs logprobs: send "logprobs": true'),
]


async def test_logprobs_bounds_are_one_line_400s(url):
    async with aiohttp.ClientSession() as s:
        for path, body, param, needle in BAD:
            st, payload = await post(f"{url}{path}", {**body, "max_tokens": 2}, s)
            assert st == 400, (body, payload)
            err = payload["error"]
            assert (err["code"], err["type"], err["param"]) == (400, "BadRequestError", param), err
            assert needle in err["message"] and "\n" not in err["message"], err
        # top_logprobs 0 without logprobs asks for nothing (vLLM accepts it): no logprobs
        st, ok = await post(f"{url}/v1/chat/completions", {"messages": CHAT, "top_logprobs": 0, "max_tokens": 2}, s)
    assert st == 200 and ok["choices"][0]["logprobs"] is None


def test_a_validator_without_max_logprobs_rejects_them_as_the_shims_need():
    v = RequestValidator(FakeTokenizer(), "m", 64)  # the shims' validator: their backends return no logprobs
    with pytest.raises(APIError, match="logprobs are not supported"):
        v.completion(CompletionRequest(prompt="x", logprobs=0))
    with pytest.raises(APIError, match="logprobs are not supported"):
        v.chat(ChatCompletionRequest(messages=[{"role": "user", "content": "x"}], logprobs=True))
    assert v.completion(CompletionRequest(prompt="x")).sampling_params.logprobs is None
    v20 = RequestValidator(FakeTokenizer(), "m", 64, max_logprobs=20)
    assert v20.completion(CompletionRequest(prompt="x", logprobs=0)).sampling_params.logprobs == 0
    chat = v20.chat(ChatCompletionRequest(messages=[{"role": "user", "content": "x"}], max_tokens=2, logprobs=True,
                                          top_logprobs=4))
    assert chat.sampling_params.logprobs == 4


# --------------------------------------------------------------------------- chunk alignment (fake engine)


class LogprobEngine(FakeEngine):
    """The fake engine plus logprobs: token ``t`` gets logprob ``-t / 1000`` and top tokens ``t, t+1, ...``."""

    def __init__(self, script, **kw):
        super().__init__(script, **kw)
        self.params: dict[str, SamplingParams] = {}

    def add_request(self, request_id, prompt_token_ids, sampling_params):
        super().add_request(request_id, prompt_token_ids, sampling_params)
        self.params[request_id] = sampling_params

    def step(self):
        outs = super().step()
        for o in outs:
            k = self.params[o.request_id].logprobs
            if k is not None:
                o.new_logprobs = [TokenLogprobs(t, -t / 1000, tuple(range(t, t + k)),
                                                tuple(-(t + j) / 1000 for j in range(k))) for t in o.new_token_ids]
        return outs


def _completion_chunks(events):
    return [(e["choices"][0]["text"], e["choices"][0]["logprobs"]) for e in events
            if e != "[DONE]" and e["choices"]]


async def test_held_back_text_passes_its_logprobs_to_the_chunk_that_sends_it():
    emoji = "😀".encode()  # 4 bytes over three steps: the middle step sends nothing
    engine = LogprobEngine([b("a") + [emoji[0]], [emoji[1]], [emoji[2], emoji[3]], [EOS]])
    with serve(engine) as u:
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{u}/v1/completions", json={"prompt": "p", "max_tokens": 20, "logprobs": 1,
                                                           "stream": True}) as resp:
                events, _ = await read_sse(resp)
            st, plain = await post(f"{u}/v1/completions", {"prompt": "p", "max_tokens": 20, "logprobs": 1}, s)
    chunks = _completion_chunks(events)
    assert [(t, [-v * 1000 for v in lp["token_logprobs"]]) for t, lp in chunks] == [
        ("a", [ord("a"), emoji[0]]), ("😀", [emoji[1], emoji[2], emoji[3]]), ("", [EOS])]
    assert chunks[1][1]["text_offset"] == [1, 1, 1]  # the emoji's bytes all start at its character
    assert chunks[2][1]["tokens"] == ["<eos>"] and chunks[2][1]["text_offset"] == [2]  # counted, text hidden
    lp = plain["choices"][0]["logprobs"]
    assert plain["choices"][0]["text"] == "a😀" and plain["usage"]["completion_tokens"] == 6
    assert lp["text_offset"] == [0, 1, 1, 1, 1, 2]
    assert lp["top_logprobs"][0] == {"a": -ord("a") / 1000}  # k = 1: the top token, here the sampled one


async def test_stop_string_cuts_tokens_and_their_logprobs():
    # "Hel" | "lo S" | "TO" | "P more" | "zzz": "STOP" ends the text at "Hello "; "zzz" is never counted
    engine = LogprobEngine([w("Hel"), w("lo S"), w("TO"), w("P more"), b("zzz")], max_model_len=2000)
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 100, "stop": "STOP", "logprobs": True}
    with serve(engine) as u:
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{u}/v1/chat/completions", json={**body, "stream": True}) as resp:
                events, _ = await read_sse(resp)
            st, plain = await post(f"{u}/v1/completions", {"prompt": "p", "max_tokens": 100, "stop": "STOP",
                                                           "logprobs": 0}, s)
    chunks = [(e["choices"][0]["delta"].get("content"), e["choices"][0]["logprobs"]) for e in events[1:-1]]
    tokens = [[c["token"] for c in lp["content"]] for _, lp in chunks]
    assert [text for text, _ in chunks] == ["Hel", "lo ", None]
    assert tokens == [["Hel"], ["lo S"], ["TO", "P more"]]  # "TO" was held back with its text
    lp = plain["choices"][0]["logprobs"]
    assert plain["choices"][0]["text"] == "Hello " and plain["usage"]["completion_tokens"] == 4
    assert lp["tokens"] == ["Hel", "lo S", "TO", "P more"]
    assert lp["text_offset"] == [0, 3, 6, 6]  # clamped to the text that was returned
