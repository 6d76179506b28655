"""Feature probes (issue 13): each probe against scripted servers (a correct one, and one fault at a
time), the typed verdicts in summary.json, the probe phase of bench run (after the measured phase,
never in requests.jsonl, skipped by --no-feature-probes), and the scorer using verified results only."""

from __future__ import annotations

import asyncio
import itertools
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from aiohttp import web
from typer.testing import CliRunner

from harness.app.cli import app as cli_app
from harness.app.cli.summary import summary_table
from harness.app.trial.feature_phase import probe_line
from harness.loadgen.client import EndpointTarget
from harness.loadgen.feature_checks import ProbeReply, _limited_errors, error_message, http_verdict, schema_errors
from harness.loadgen.features import CITY_SCHEMA, N_BEST_TEMPERATURE, pick_stop, probe_features
from harness.scoring import recommend
from reports.context import build_context
from results.hardware import GiB, HardwareProfile
from results.schema import FEATURE_PROBES, FeatureProbe, FeatureStatus, RunSummary

from tests.helpers import make_records, ok_entry, write_run

VERIFIED, FAILED, UNSUPPORTED = FeatureStatus.VERIFIED, FeatureStatus.FAILED, FeatureStatus.UNSUPPORTED
COUNT = "1 2 3 4 5 6 7 8 9 10 11 12"  # what the scripted model says to a plain prompt
MAX_LEN = 600


class WordTokenizer:
    """One token per whitespace-separated word; the chat template adds two."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(range(len(text.split())))

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True,
                            tokenize: bool = False) -> str:
        return "<user> " + " ".join(m["content"] for m in messages) + " <assistant>"


def _choice(content: str | None, index: int = 0, finish: str = "stop", **message: Any) -> dict[str, Any]:
    return {"index": index, "message": {"role": "assistant", "content": content, **message}, "finish_reason": finish}


def _error(status: int, message: str, param: str | None = None) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "BadRequestError", "param": param}}, status=status)


def scripted_app(faults: frozenset[str] = frozenset(), seen: list[dict[str, Any]] | None = None) -> web.Application:
    """A chat server that does each feature right, except for the named ``faults``; streaming
    requests (the measured phase) get 'x' tokens; every body is appended to ``seen``."""
    seen = seen if seen is not None else []

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": MAX_LEN}]})

    async def stream(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = int(body.get("max_tokens") or 4)
        for i in range(n):
            piece = {"text": "x"} if "prompt" in body else {"delta": {"content": "x"}}
            choice = {"index": 0, **piece, "finish_reason": "length" if i == n - 1 else None}
            await resp.write(b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n")
        usage = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
        await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append(body)
        return await stream(request, body)

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append(body)
        if body.get("stream"):
            return await stream(request, body)
        if "crash" in faults:
            return web.Response(status=500, text="Internal Server Error")
        content = " ".join(m["content"] for m in body["messages"])
        usage = {"prompt_tokens": len(content.split()) + 2, "completion_tokens": 4}
        if "response_format" in body and "format_ignored" in faults:  # a model that follows instructions
            choices = [_choice('{"city": "Paris", "country": "France"}' if "JSON" in content
                               else "The capital of France is Paris.")]
        elif "response_format" in body:
            text = '{"city": "Paris", "country": ' if "malformed_json" in faults else '{"city": "Paris", "country": "France"}'
            choices = [_choice(text, finish="length" if "malformed_json" in faults else "stop")]
        elif "tools" in body:
            if "tools_400" in faults:
                return _error(400, "tools not supported")
            if "tools_500" in faults:
                return _error(500, "tools not supported")
            call = {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
            choices = [_choice(None, finish="tool_calls", tool_calls=[call])]
        elif body.get("n", 1) > 1:
            if "slow" in faults:
                await asyncio.sleep(3.0)
            n = 1 if "n_one" in faults else body["n"]
            choices = [_choice("Hello there, friend", index=i) for i in range(n)]
        elif body.get("logprobs"):
            if "logprobs_ignored" in faults:
                choices = [_choice("Hello!")]
            else:
                tokens = [{"token": t, "logprob": -0.25, "top_logprobs": [{"token": t, "logprob": -0.25}]}
                          for t in ("Hello", "!")]
                choices = [{**_choice("Hello!"), "logprobs": {"content": tokens}}]
        elif usage["prompt_tokens"] > 100:  # the max-context probe
            if "slow" in faults:
                await asyncio.sleep(0.6)
            if usage["prompt_tokens"] + body["max_tokens"] > MAX_LEN:
                return _error(400, f"This model's maximum context length is {MAX_LEN} tokens", "messages")
            choices = [_choice("Fox.")]
        else:  # a plain prompt: the stop probe
            text = COUNT
            for stop in body.get("stop") or [] if "stop_ignored" not in faults else []:
                text = text.split(stop)[0] if stop in text else text
            choices = [_choice(text)]
        return web.json_response({"id": "c", "object": "chat.completion", "model": "m", "choices": choices,
                                  "usage": usage})

    app = web.Application(client_max_size=16 * 2**20)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def _probe(app: web.Application, **options: Any) -> dict[str, FeatureProbe]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        return await probe_features(EndpointTarget(f"http://127.0.0.1:{port}", "m"), **options)
    finally:
        await runner.cleanup()


def probe(faults: set[str] | None = None, seen: list[dict[str, Any]] | None = None, **options: Any) -> dict[str, FeatureProbe]:
    options.setdefault("tokenizer", WordTokenizer())
    return asyncio.run(_probe(scripted_app(frozenset(faults or ()), seen), **options))


# -- the probes against scripted servers -----------------------------------------------------------

def test_a_correct_server_verifies_every_probe() -> None:
    seen: list[dict[str, Any]] = []
    probes = probe(seen=seen)
    assert list(probes) == list(FEATURE_PROBES)
    assert {f: p.status for f, p in probes.items()} == dict.fromkeys(FEATURE_PROBES, VERIFIED)
    assert probes["structured_output"].detail == (
        'the reply parses as JSON and matches the schema: "{\\"city\\": \\"Paris\\", \\"country\\": \\"France\\"}"')
    assert probes["tool_calling"].detail == ('get_weather called with arguments matching its parameters: '
                                             '"{\\"city\\": \\"Paris\\"}"')
    assert probes["n_best"].detail == "2 choices (indices 0-1), the same text"
    assert probes["stop"].detail == 'stopped before "5": 8 characters, the unstopped reply had it at character 8'
    assert probes["logprobs"].detail == '2 tokens with logprobs (first "Hello" -0.250)'
    # the max-context prompt: within max(16, 1%) tokens of max_model_len after 4 for the reply
    words = len(seen[-1]["messages"][0]["content"].split()) + 2
    assert MAX_LEN - 4 - 16 - 9 < words <= MAX_LEN - 4 - 16  # one 9-word unit of slack
    assert probes["max_context"].detail == (f"a prompt of {words} tokens by the server's count (max_model_len 600, "
                                            "from the endpoint's /v1/models) was answered")
    # greedy (but the n-best probe, which samples with a fixed seed), non-streaming, bounded
    assert all(b["temperature"] == (0.0 if "n" not in b else N_BEST_TEMPERATURE) and b["stream"] is False
               and b["max_tokens"] <= 96 for b in seen)
    assert [b.get("seed") for b in seen if "n" in b] == [1234]
    assert seen[0]["response_format"]["json_schema"]["schema"] == CITY_SCHEMA
    assert seen[1]["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


def test_malformed_json_for_response_format_fails_with_the_reason() -> None:
    result = probe({"malformed_json"})["structured_output"]
    assert result.status is FAILED
    assert result.detail == ('the reply is not valid JSON (Expecting value at character 29) - cut at max_tokens=96: '
                             '"{\\"city\\": \\"Paris\\", \\"country\\": "')


def test_a_server_ignoring_response_format_fails_even_with_an_obliging_model() -> None:
    result = probe({"format_ignored"})["structured_output"]
    assert result.status is FAILED
    assert result.detail == ('the reply is not valid JSON (Expecting value at character 0): '
                             '"The capital of France is Paris."')


def test_tools_rejected_as_not_supported_is_unsupported_and_a_5xx_is_failed() -> None:
    result = probe({"tools_400"})["tool_calling"]
    assert (result.status, result.detail) == (UNSUPPORTED, "HTTP 400: tools not supported")
    result = probe({"tools_500"})["tool_calling"]
    assert (result.status, result.detail) == (FAILED, "HTTP 500: tools not supported")


def test_a_stop_sequence_violation_fails() -> None:
    result = probe({"stop_ignored"})["stop"]
    assert result.status is FAILED
    assert result.detail == f'the reply contains the stop string "5": "{COUNT}"'


def test_n_greater_than_one_returning_one_choice_fails() -> None:
    result = probe({"n_one"})["n_best"]
    assert (result.status, result.detail) == (FAILED, "asked for n=2 choices, got 1")


def test_ignored_logprobs_and_a_crashing_server_fail() -> None:
    result = probe({"logprobs_ignored"})["logprobs"]
    assert (result.status, result.detail) == (FAILED, 'no logprobs in the reply (choices[0].logprobs is "null")')
    probes = probe({"crash"})
    assert {p.status for p in probes.values()} == {FAILED}
    assert probes["n_best"].detail == "HTTP 500: Internal Server Error"


def test_elapsed_time_and_the_phase_budget_use_the_given_clock() -> None:
    ticks = itertools.count(0.0, 0.25)  # every clock reading is 0.25 s after the last
    probes = probe(clock=lambda: next(ticks))
    assert {p.elapsed_ms for p in probes.values()} == {250.0}
    ticks = itertools.count(0.0, 0.5)  # deadline 0 + 2 s; the first probe starts at 0.5 and ends at 1.0
    probes = probe(clock=lambda: next(ticks), budget_s=2.0)
    assert probes["structured_output"].status is VERIFIED and probes["structured_output"].elapsed_ms == 500.0
    rest = [probes[f] for f in FEATURE_PROBES[1:]]
    assert {(p.status, p.detail) for p in rest} == {(FAILED, "not run: the probe phase used its 2 s budget")}


def test_a_probe_past_its_timeout_fails_and_the_long_prompt_has_its_own() -> None:
    probes = probe({"slow"}, timeout_s=0.3, context_timeout_s=10.0)
    assert (probes["n_best"].status, probes["n_best"].detail) == (FAILED, "no reply within 0.3 s (the probe's timeout)")
    assert probes["max_context"].status is VERIFIED  # 0.6 s: past timeout_s, within context_timeout_s
    assert probe({"slow"}, timeout_s=0.3)["max_context"].status is FAILED  # the same limit for all by default


def test_max_context_is_left_out_without_a_length_or_tokenizer() -> None:
    assert "max_context" not in probe(tokenizer=None)


def test_the_schema_checks_and_error_bodies() -> None:
    # schema_errors: jsonschema's words when it is installed, else the limited check's
    assert schema_errors({"city": "Paris", "country": "France"}, CITY_SCHEMA) is None
    assert "country" in (schema_errors({"city": "Paris"}, CITY_SCHEMA) or "")
    assert _limited_errors({"city": "Paris"}, CITY_SCHEMA, "$") == "$ lacks the required key 'country'"
    assert _limited_errors({"city": 1, "country": "France"}, CITY_SCHEMA, "$") == '$.city is "1", not of type string'
    assert _limited_errors({"city": "a", "country": "b", "x": 1}, CITY_SCHEMA, "$") == (
        "$ has the key 'x', which the schema does not allow")
    assert _limited_errors([], CITY_SCHEMA, "$") == '$ is "[]", not of type object'
    assert _limited_errors({"city": "a", "country": "b"}, CITY_SCHEMA, "$") is None
    # FastAPI / pydantic extra="forbid": unsupported, naming the field
    reply = ProbeReply(422, {"detail": [{"loc": ["body", "response_format"], "msg": "Extra inputs are not permitted"}]}, "")
    assert error_message(reply) == ("response_format: Extra inputs are not permitted", "response_format")
    assert http_verdict(reply, ("response_format",)).status is UNSUPPORTED
    # a 400 about a value of the probed field (its param) is unsupported; one about something else failed
    assert http_verdict(ProbeReply(400, {"error": {"message": "n must be between 1 and 1, got 2", "param": "n"}}, ""),
                        ("n",)).status is UNSUPPORTED
    context = ProbeReply(400, {"error": {"message": "maximum context length is 512 tokens", "param": "messages"}}, "")
    assert http_verdict(context, ()).status is FAILED
    assert pick_stop("1 2 3 4 5 6") == ("3", 4) and pick_stop("Hi") is None


# -- bench run: the probe phase --------------------------------------------------------------------

@contextmanager
def served(seen: list[dict[str, Any]]) -> Iterator[str]:
    """The scripted server in a thread of its own (bench run runs its own event loops)."""
    from tests.fake_servers.threaded import serve_in_thread

    with serve_in_thread(scripted_app(seen=seen)) as url:
        yield url


ARGS = ["--engine", "openai", "--model", "m", "--workload", "random", "--num-requests", "4", "--input-len", "8",
        "--output-len", "3", "--warmup", "0", "--no-calibration", "--no-equivalence", "--repeats", "2",
        "--request-rate", "inf"]  # one load point (no ladder)


def test_bench_run_probes_once_after_the_measured_phase_and_stores_the_verdicts(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []
    with served(seen) as url:
        res = CliRunner().invoke(cli_app, ["run", *ARGS, "--base-url", url, "-o", str(tmp_path), "--run-id", "fp"])
    assert res.exit_code == 0, res.output
    summary = RunSummary.model_validate_json((tmp_path / "fp" / "summary.json").read_text())
    probes = summary.engines["openai"].feature_probes
    assert {f: p.status for f, p in probes.items()} == dict.fromkeys(FEATURE_PROBES, VERIFIED)
    # repeat 1's 4 streamed requests, then the 7 probe requests (stop sends 2), then repeat 2's 4
    assert [b["stream"] for b in seen] == [True] * 4 + [False] * 7 + [True] * 4
    records = (tmp_path / "fp" / "requests.jsonl").read_text().splitlines()
    assert len(records) == 8 and all(json.loads(r)["phase"] == "measured" for r in records)
    assert "openai: features ✓ structured_output, tool_calling, n_best, stop, logprobs, max_context" in res.output
    report = (tmp_path / "fp" / "report.md").read_text()
    assert "| openai | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ |" in report


def test_no_feature_probes_skips_the_phase(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []
    with served(seen) as url:
        res = CliRunner().invoke(cli_app, ["run", *ARGS, "--base-url", url, "-o", str(tmp_path), "--run-id", "nofp",
                                           "--no-feature-probes"])
    assert res.exit_code == 0, res.output
    assert all(b["stream"] for b in seen) and len(seen) == 8
    summary = json.loads((tmp_path / "nofp" / "summary.json").read_text())
    assert summary["engines"]["openai"]["feature_probes"] == {}
    assert "## Feature probes" not in (tmp_path / "nofp" / "report.md").read_text()


# -- the scorer uses verified results only ---------------------------------------------------------

CPU = HardwareProfile("CPU", "cpu", 64 * GiB)
DECLARES_ALL = {"hardware": ["cpu"], "features": ["structured_output", "prefix_caching"], "quantization": []}


def _verdicts(**status: FeatureStatus) -> dict[str, Any]:
    return {f: FeatureProbe(feature=f, status=status.get(f, VERIFIED), detail=f"{f} detail").model_dump(mode="json")
            for f in FEATURE_PROBES}


def _scored_run(tmp_path: Path, run_id: str, probes: dict[str, dict[str, Any] | None]):
    engines, records = {}, []
    for name, verdicts in probes.items():
        recs = make_records(name, 8, ttft_ms=100.0, tpot_ms=10.0, out_tokens=10)
        entry = ok_entry(recs, DECLARES_ALL)
        entry.update(startup_s=10.0, startup_parallel=False)
        if verdicts is not None:
            entry["feature_probes"] = verdicts
        engines[name], records = entry, records + recs
    return write_run(tmp_path, run_id, engines, records)


def test_a_failed_structured_output_probe_does_not_meet_the_requirement(tmp_path: Path) -> None:
    run = _scored_run(tmp_path, "r", {"passes": _verdicts(),
                                      "fails": _verdicts(structured_output=FAILED, logprobs=UNSUPPORTED)})
    plain = recommend([run], hardware=CPU)
    components = {r.engine: r.components["features"] for r in plain.ranking}
    assert components == {"passes": 1.0, "fails": round(4 / 6, 6)}  # verified counts 6 and 4
    assert {r.engine: r.verified_features for r in plain.ranking}["fails"] == ["tool_calling", "n_best", "stop",
                                                                              "max_context"]
    assert plain.ranking[0].score == plain.ranking[1].score  # weight 0 in the preset: no score moves
    weighted = recommend([run], hardware=CPU, weights={"features": 1.0})
    assert weighted.winner == "passes" and weighted.ranking[0].score > weighted.ranking[1].score
    assert "decided by features (verified features 6 vs 4" in weighted.deciding_constraint
    required = recommend([run], hardware=CPU, required_features=["structured_output"])
    assert required.winner == "passes" and [r.engine for r in required.ranking] == ["passes"]
    assert required.elimination_stage["fails"] == "feature"
    assert required.eliminated["fails"] == "needs structured_output, and its structured_output probe failed: " \
                                           "structured_output detail"
    note = next(n for n in plain.notes if n.startswith("features = the verified feature probes"))
    assert "fails: verified tool_calling, n_best, stop, max_context; failed structured_output; unsupported " \
           "logprobs" in note


def test_without_probes_a_declaration_stands_and_a_probe_only_feature_is_unmet(tmp_path: Path) -> None:
    run = _scored_run(tmp_path, "old", {"declared": None, "probed": _verdicts(structured_output=FAILED)})
    rec = recommend([run], hardware=CPU, required_features=["structured_output"])
    assert rec.winner == "declared"  # declared, unverified: its run had no probes
    assert rec.eliminated["probed"].startswith("needs structured_output, and its structured_output probe failed")
    assert any("declared, unverified only for a feature no probe covers" in n for n in rec.notes)
    rec = recommend([run], hardware=CPU, required_features=["tool_calling", "prefix_caching"])
    assert rec.winner == "probed"
    assert rec.eliminated["declared"] == ("needs tool_calling, which only a feature probe verifies, and its runs have "
                                          "none (rerun bench run without --no-feature-probes)")
    assert {r.engine: r.components["features"] for r in rec.ranking} == {"probed": 1.0}


def test_a_feature_verified_in_one_run_and_failed_in_another_is_not_verified(tmp_path: Path) -> None:
    first = _scored_run(tmp_path, "a", {"e": _verdicts()})
    second = _scored_run(tmp_path, "b", {"e": _verdicts(stop=FAILED)})
    rec = recommend([first, second], hardware=CPU, required_features=["stop"])
    assert rec.winner is None and rec.eliminated["e"].endswith("its stop probe failed: stop detail")


def test_the_matrix_in_the_report_and_the_console(tmp_path: Path) -> None:
    run = _scored_run(tmp_path, "m", {"a": _verdicts(structured_output=FAILED, tool_calling=UNSUPPORTED),
                                      "b": None})
    context = build_context([run], None)
    assert context["feature_rows"] == [{"label": "a", "cells": {
        "structured_output": "✗", "tool_calling": "–", "n_best": "✓", "stop": "✓", "logprobs": "✓", "max_context": "✓"}}]
    assert "a structured_output: ✗ failed — structured_output detail" in context["feature_details"]
    _, notes = summary_table(run.summary)
    assert ("a: features ✓ n_best, stop, logprobs, max_context · ✗ structured_output (structured_output detail) · "
            "– tool_calling") in notes
    assert not any(n.startswith("b: features") for n in notes)
    assert probe_line("b", {}) == "b: features not probed"


def test_a_feature_that_needs_a_server_flag_is_unsupported_and_n_best_samples() -> None:
    from harness.loadgen.feature_checks import ProbeReply, http_verdict
    from results.schema import FeatureStatus

    # vLLM 0.32 started without a tool parser (a real message from this machine's run)
    body = {"object": "error", "message": 'tool_choice=function "get_weather" requires --tool-call-parser to be set'}
    verdict = http_verdict(ProbeReply(400, body, json.dumps(body), "application/json"), ("tools", "tool_choice"))
    assert verdict.status is FeatureStatus.UNSUPPORTED
    other = {"object": "error", "message": "n must be 1 when using greedy sampling, got 2."}
    assert http_verdict(ProbeReply(400, other, json.dumps(other), "application/json"), ("n",)).status is FeatureStatus.FAILED
    assert N_BEST_TEMPERATURE > 0  # several choices of a greedy request are one choice repeated
