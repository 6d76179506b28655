"""The reference server against bad requests (issue 16): body size limit, prompt length checked
before tokenizing, deep JSON nesting, strict field types, integer ranges, keep-alive after errors.

Reuses tests/own_engine/server/test_app.py's fake engine (byte-level fake tokenizer, scripted
steps) and its uvicorn-in-a-thread ``serve``. Keep-alive is checked with ``http.client`` on one
socket: the second request must be answered on the same local port (a closed connection makes the
second request fail, a ``Connection: close`` makes http.client open a new socket on another port).
"""

from __future__ import annotations

import http.client
import json
import math
from urllib.parse import urlparse

import aiohttp
import pytest

from own_engine.server.protocol import APIError, CompletionRequest
from own_engine.server.validation import RequestValidator, default_max_body_bytes, max_token_chars
from tests.own_engine.server.test_app import EOS, FakeEngine, FakeTokenizer, b, serve

FAKE_L = 6  # FakeTokenizer: the longest decoded token is "P more" / " world" (6 characters)
OK_BODY = {"prompt": "x", "max_tokens": 2}


class CountingTokenizer(FakeTokenizer):
    """FakeTokenizer that records the length of every text it tokenizes."""

    def __init__(self) -> None:
        self.encoded: list[int] = []

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self.encoded.append(len(text))
        return super().encode(text, add_special_tokens)


def counting_engine(**kw) -> FakeEngine:
    engine = FakeEngine([b("ok"), [EOS]], **kw)
    engine.tokenizer = CountingTokenizer()
    return engine


class Conn:
    """One HTTP/1.1 keep-alive connection (stdlib client, blocking)."""

    def __init__(self, url: str) -> None:
        u = urlparse(url)
        self.http = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        self.http.connect()
        self.port = self.http.sock.getsockname()[1]

    def post(self, path: str, body: bytes | dict, headers: dict | None = None) -> tuple[int, dict, dict]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.http.request("POST", path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        resp = self.http.getresponse()
        return resp.status, json.loads(resp.read()), {k.lower(): v for k, v in resp.getheaders()}

    def same_socket(self) -> bool:
        return self.http.sock is not None and self.http.sock.getsockname()[1] == self.port


def assert_one_line_error(payload: dict, status: int, needle: str) -> dict:
    err = payload["error"]
    assert err["code"] == status, payload
    assert needle in err["message"], (needle, err["message"])
    assert "\n" not in err["message"]
    return err


# --------------------------------------------------------------------------- body size


def test_default_body_limit_is_12_bytes_per_char_of_the_longest_prompt_that_fits():
    engine = FakeEngine([[EOS]])  # max_model_len 64
    assert max_token_chars(engine.tokenizer) == FAKE_L
    assert default_max_body_bytes(64, FAKE_L) == 12 * 6 * 64 + 2**20 == 1_053_184
    assert default_max_body_bytes(4096, 81) == 5_029_888  # SmolLM2 at its default context
    assert default_max_body_bytes(None, 81) is None
    from own_engine.server.app import create_app

    assert create_app(engine).state.serving.max_body_bytes == 1_053_184
    assert create_app(engine, max_body_bytes=777).state.serving.max_body_bytes == 777


def test_oversized_body_gets_413_before_parsing_and_the_connection_stays_usable():
    engine = counting_engine()
    big = json.dumps({"prompt": "y" * 5000, "max_tokens": 2}).encode()
    with serve(engine, max_body_bytes=1000) as url:
        conn = Conn(url)
        status, payload, _ = conn.post("/v1/completions", big)
        assert status == 413
        err = assert_one_line_error(payload, 413, f"is {len(big)} bytes, over this server's limit of 1000 bytes")
        assert err["type"] == "RequestTooLargeError" and "--max-body-bytes" in err["message"]
        status, payload, _ = conn.post("/v1/completions", OK_BODY)  # same socket: the body was drained
        assert status == 200 and payload["choices"][0]["text"] == "ok" and conn.same_socket()
        # a body of more than 64 x the limit is answered at once and the connection closed
        status, payload, headers = conn.post("/v1/completions", b"[" + b" " * 70_000 + b"]")
        assert status == 413 and headers.get("connection") == "close"
    assert engine.tokenizer.encoded == [1]  # only the small prompt was ever tokenized
    assert len(engine.added) == 1


async def test_oversized_chunked_body_without_content_length_gets_413():
    engine = counting_engine()

    async def chunks():
        for _ in range(20):
            yield b" " * 100  # 2,000 bytes, no Content-Length (chunked transfer encoding)

    with serve(engine, max_body_bytes=1000) as url:
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{url}/v1/completions", data=chunks(),
                              headers={"content-type": "application/json"}) as resp:
                assert resp.request_info.headers.get("Transfer-Encoding") == "chunked"
                assert resp.status == 413
                assert_one_line_error(await resp.json(), 413, "the request body is over this server's limit of 1000")
            async with s.post(f"{url}/v1/completions", json=OK_BODY) as resp:
                assert resp.status == 200
    assert engine.tokenizer.encoded == [1]


def test_cli_max_body_bytes_reaches_the_app(monkeypatch, tmp_path, capsys):
    import own_engine.server.cli as cli_main

    seen = {}
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(cli_main, "_load_engine", lambda options: FakeEngine([[EOS]]))
    monkeypatch.setattr(cli_main, "_run_server", lambda app, *a: seen.setdefault("app", app))
    assert cli_main.main(["--model", str(tmp_path), "--max-body-bytes", "12345"]) == 0
    assert seen["app"].state.serving.max_body_bytes == 12345
    capsys.readouterr()
    assert cli_main.main(["--model", str(tmp_path), "--max-body-bytes", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "--max-body-bytes" in err, err


# --------------------------------------------------------------------------- prompt length before tokenizing


async def test_prompt_too_long_by_characters_is_rejected_without_tokenizing():
    engine = counting_engine()  # max_model_len 64, L = 6
    with serve(engine) as url:
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{url}/v1/completions", json={"prompt": "z" * 10_000, "max_tokens": 4}) as resp:
                assert resp.status == 400
                err = assert_one_line_error(await resp.json(), 400, "maximum context length is 64 tokens")
            assert "10000 characters, so at least 1667 tokens" in err["message"] and err["param"] == "prompt"
            assert "no token of this model stands for more than 6 characters" in err["message"]
            chat = {"messages": [{"role": "user", "content": "z" * 10_000}]}
            async with s.post(f"{url}/v1/chat/completions", json=chat) as resp:
                assert resp.status == 400
                err = assert_one_line_error(await resp.json(), 400, "maximum context length is 64 tokens")
            assert err["param"] == "messages"
            # short enough by characters, too long by tokens: tokenized, then the exact check
            async with s.post(f"{url}/v1/completions", json={"prompt": "z" * 60, "max_tokens": 10}) as resp:
                assert resp.status == 400
                assert_one_line_error(await resp.json(), 400, "you requested 70 tokens (60 in the prompt")
    assert engine.tokenizer.encoded == [60]
    assert engine.added == []


def _bpe_tokenizer(normalizer=None):
    """A real fast tokenizer (HF tokenizers BPE, no special tokens): "abab" is one 4-character token."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"a": 0, "b": 1, "ab": 2, "abab": 3}
    tok = Tokenizer(models.BPE(vocab, [("a", "b"), ("ab", "ab")]))
    if normalizer is not None:
        tok.normalizer = normalizer
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def test_character_bound_is_exact_for_a_real_bpe_tokenizer_and_never_rejects_a_fitting_prompt():
    tok = _bpe_tokenizer()
    assert max_token_chars(tok) == 4
    v = RequestValidator(tok, "m", 64, max_n=1)
    fits = "abab" * 48  # 48 tokens + max_tokens 16 = 64: fits exactly
    assert len(tok.encode(fits)) == 48
    assert len(v.completion(CompletionRequest(prompt=fits)).prompt_token_ids) == 48
    with pytest.raises(APIError) as exc:  # 193 characters: at least ceil(193 / 4) = 49 tokens (and really 49)
        v.completion(CompletionRequest(prompt=fits + "a"))
    assert "193 characters, so at least 49 tokens" in exc.value.message
    assert len(tok.encode(fits + "a")) == 49


def test_character_bound_counts_the_normalized_text():
    from tokenizers import normalizers

    # the normalizer deletes every "x": 400 raw characters are only 192 the tokenizer sees
    tok = _bpe_tokenizer(normalizers.Replace("x", ""))
    v = RequestValidator(tok, "m", 64, max_n=1)
    text = "abab" * 48 + "x" * 208
    assert len(v.completion(CompletionRequest(prompt=text)).prompt_token_ids) == 48
    with pytest.raises(APIError) as exc:  # counted after normalizing: 196 characters, not 5,196
        v.completion(CompletionRequest(prompt="abab" * 49 + "x" * 5000))
    assert "196 characters, so at least 49 tokens" in exc.value.message


def test_tokenizers_without_a_per_token_bound_skip_the_character_check():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    wordpiece = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1},
                                                                                    unk_token="[UNK]")))
    assert max_token_chars(wordpiece) is None  # "[UNK]" may stand for a whole word
    fused = Tokenizer(models.BPE({"a": 0, "<unk>": 1}, [], unk_token="<unk>", fuse_unk=True))
    assert max_token_chars(PreTrainedTokenizerFast(tokenizer_object=fused)) is None
    assert RequestValidator(wordpiece, "m", 64, token_chars=0).token_chars is None


@pytest.mark.slow
def test_default_model_longest_token_and_the_bound_on_adversarial_text():
    from transformers import AutoTokenizer

    from harness.app.core.model import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model(None))
    L = max_token_chars(tok)
    assert L == 81  # "\n" + 80 spaces
    for text in ["\n" + " " * 80, " " * 5000, "\n" * 3000, "😀" * 500, "日本語のテキスト" * 300, "-" * 4000,
                 "The quick brown fox. " * 200, "".join(chr(c) for c in range(32, 3000))]:
        assert len(tok.encode(text, add_special_tokens=True)) >= math.ceil(len(text) / L), text[:20]


# --------------------------------------------------------------------------- nesting and keep-alive


def test_deeply_nested_json_is_a_400_and_the_connection_stays_alive():
    engine = FakeEngine([b("ok"), [EOS]])
    nested = b'{"prompt": "x", "extra": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with serve(engine) as url:
        conn = Conn(url)
        status, payload, _ = conn.post("/v1/completions", nested)
        assert status == 400
        assert_one_line_error(payload, 400, "nested too deeply")
        status, payload, _ = conn.post("/v1/completions", OK_BODY)
        assert status == 200 and payload["choices"][0]["text"] == "ok"
        assert conn.same_socket()


class BuggyEngine(FakeEngine):
    """``add_request`` raises an unexpected error (not ``ValueError``): an internal error."""

    def add_request(self, request_id, prompt_token_ids, sampling_params):
        if prompt_token_ids == b("bug"):
            raise RuntimeError("scripted bug")
        if prompt_token_ids == b("bug2"):
            raise RuntimeError("scripted\nbug on two lines")
        super().add_request(request_id, prompt_token_ids, sampling_params)


def test_internal_error_is_a_one_line_500_and_the_connection_stays_alive():
    engine = BuggyEngine([b("ok"), [EOS]])
    with serve(engine) as url:
        conn = Conn(url)
        status, payload, _ = conn.post("/v1/completions", {"prompt": "bug", "max_tokens": 2})
        assert status == 500
        err = assert_one_line_error(payload, 500, "internal error: RuntimeError: scripted bug")
        assert err["type"] == "InternalServerError"
        status, payload, _ = conn.post("/v1/completions", OK_BODY)
        assert status == 200 and conn.same_socket()
        status, payload, _ = conn.post("/v1/completions", {"prompt": "bug2", "max_tokens": 2})
        assert status == 500 and conn.same_socket()
        assert_one_line_error(payload, 500, "RuntimeError: scripted bug on two lines")


# --------------------------------------------------------------------------- strict types and ranges

STRICT = [
    ({"stream": "yes"}, "stream", 'must be true or false, got the string "yes"'),
    ({"stream": 1}, "stream", "must be true or false, got the integer 1"),
    ({"ignore_eos": "false"}, "ignore_eos", "must be true or false"),
    ({"echo": "no"}, "echo", "must be true or false"),
    ({"stream": True, "stream_options": {"include_usage": "yes"}}, "stream_options.include_usage",
     "must be true or false"),
    ({"max_tokens": "12"}, "max_tokens", 'must be an integer, got the string "12"'),
    ({"max_tokens": 12.5}, "max_tokens", "must be an integer, got the number 12.5"),
    ({"max_tokens": True}, "max_tokens", "must be an integer, got true"),
    ({"n": True}, "n", "must be an integer, got true"),
    ({"seed": "7"}, "seed", "must be an integer"),
    ({"top_k": "5"}, "top_k", "must be an integer"),
    ({"stop_token_ids": ["5"]}, "stop_token_ids.0", "must be an integer"),
    ({"temperature": "hot"}, "temperature", 'must be a number, got the string "hot"'),
    ({"temperature": "0.5"}, "temperature", "must be a number"),
    ({"temperature": True}, "temperature", "must be a number, got true"),
    ({"top_p": "1"}, "top_p", "must be a number"),
    ({"presence_penalty": "0"}, "presence_penalty", "must be a number"),
    ({"stop": 5}, "stop", "must be a string or a list, got the integer 5"),
    ({"seed": 2**64}, "seed", "seed must be a 64-bit integer"),
    ({"logprobs": "2"}, "logprobs", 'must be an integer, got the string "2"'),
    ({"logprobs": 21}, "logprobs", "logprobs must be between 0 and 20, got 21"),
]
CHAT_STRICT = [
    ({"logprobs": 0}, "logprobs", "must be true or false, got the integer 0"),
    ({"logprobs": True, "top_logprobs": "2"}, "top_logprobs", "must be an integer"),
    ({"max_completion_tokens": "2"}, "max_completion_tokens", "must be an integer"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content", "must be a string or a list"),
]


async def test_wrong_types_are_rejected_naming_the_field_not_coerced():
    engine = FakeEngine([b("ok"), [EOS]])
    cases = [("/v1/completions", {"prompt": "x", "max_tokens": 2, **extra}, field, needle)
             for extra, field, needle in STRICT]
    cases += [("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, **extra},
               field, needle) for extra, field, needle in CHAT_STRICT]
    cases += [("/v1/completions", b'{"prompt": "x", "temperature": NaN}', None, "NaN is not allowed"),
              ("/v1/completions", b'{"prompt": "x", "top_p": -Infinity}', None, "-Infinity is not allowed"),
              ("/v1/completions", b'{"prompt": "x", "temperature": 1e999}', None, "too large for a number")]
    with serve(engine) as url:
        async with aiohttp.ClientSession() as s:
            for path, body, field, needle in cases:
                kw = {"data": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes) \
                    else {"json": body}
                async with s.post(f"{url}{path}", **kw) as resp:
                    payload = await resp.json()
                    assert resp.status == 400, (body, payload)
                err = assert_one_line_error(payload, 400, needle)
                if field is not None:
                    assert err["param"] == field, (field, err)
    assert engine.added == []


async def test_top_k_at_or_beyond_the_vocabulary_means_all_tokens():
    engine = FakeEngine([b("ok"), [EOS]])
    with serve(engine) as url:
        async with aiohttp.ClientSession() as s:
            for top_k in (2**80, len(engine.tokenizer), 5):
                async with s.post(f"{url}/v1/completions", json={**OK_BODY, "top_k": top_k}) as resp:
                    assert resp.status == 200
    # a top_k past int64 used to reach the sampler, whose tensor overflowed and failed the step
    # of every request in flight; k >= the vocabulary keeps every token, as -1 does
    assert [r.params.top_k for r in engine.added] == [-1, -1, 5]
