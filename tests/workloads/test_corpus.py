"""Workload-side cases of the field's known benchmark bugs (issue 16, "Metric correctness"):

- (9) ``--burstiness inf`` is vLLM's constant spacing: gaps of exactly ``1/rate``;
- (7) a multi-turn session's history carries the previous reply's answer, never its
  reasoning, and the turns a failure aborts are counted;
- (10) a per-run prompt salt keeps an endpoint's prefix cache from serving an earlier run's
  prompts (sharing within the run kept), and a repeated identical run against the same
  endpoint is warned about.
"""

from __future__ import annotations

import asyncio
import json
import math
import re

import pytest
from typer.testing import CliRunner

from harness.app.core.model import resolve_model
from workloads.arrivals import arrival_offsets
from workloads.errors import WorkloadError
from workloads.options import parse_options
from workloads.registry import build_workload
from workloads.stats import schedule_rate
from workloads.tokens import TokenKit

pytestmark = pytest.mark.slow  # needs the prepared default model folder (tokenizer only)


@pytest.fixture(scope="module")
def kit():
    from transformers import AutoTokenizer

    return TokenKit(AutoTokenizer.from_pretrained(str(resolve_model(None))))


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


# --- (9) burstiness inf: constant spacing ---------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 17])
def test_burstiness_inf_gives_exactly_constant_gaps(seed):
    assert arrival_offsets(5, rate=4.0, burstiness=math.inf, seed=seed) == [0.25, 0.5, 0.75, 1.0, 1.25]
    off = arrival_offsets(4, rate=3.0, burstiness=math.inf, seed=seed)
    assert off == [1 / 3.0, 2 / 3.0, 3 / 3.0, 4 / 3.0]  # the "constant" process, never rescaled
    assert off == arrival_offsets(4, rate=3.0, seed=seed, process="constant")
    with pytest.raises(ValueError, match="burstiness must be a number > 0"):
        arrival_offsets(3, rate=1.0, burstiness=math.nan, seed=seed)


@pytest.mark.parametrize("spelling", ["inf", "Infinity", "+INF", " inf ", "∞", math.inf])
def test_burstiness_inf_is_accepted_however_it_is_spelled(spelling, kit):
    opts = parse_options(name="random", burstiness=spelling, request_rate=8.0, num_requests=6, input_len=8, output_len=2)
    assert opts.burstiness == math.inf
    w = build_workload(opts, kit, with_stats=False)
    assert [s.start_offset_s for s in w.sessions] == [k / 8.0 for k in range(1, 7)]
    assert w.offered_rate == 8.0 and schedule_rate([s.start_offset_s for s in w.sessions]) == pytest.approx(8.0, rel=1e-12)
    assert w.spec["burstiness"] == "inf"  # JSON-safe in the manifest


def test_bench_workloads_stats_takes_burstiness_inf():
    from harness.app.cli import app

    res = CliRunner().invoke(app, ["workloads", "show", "random", "-n", "4", "--input-len", "8", "--output-len", "2",
                                   "--request-rate", "2", "--burstiness", "inf"])
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output


# --- (7) multi-turn: the answer, not the reasoning; aborted turns ---------------------------------
def test_reasoning_is_not_in_the_next_turns_messages(kit):
    from workloads.base import Reply

    w = build_workload("agentic", kit, num_requests=6, seed=2)
    s = w.sessions[0]
    r0 = s.first_request()
    reply = Reply(answer="  ls -la /tmp/xyzzy\n", reasoning="SECRET-PLAN: first list the files", success=True)
    (fu,) = s.on_complete(r0, reply)
    r1 = fu.request
    assert r1.messages[len(r0.messages)] == {"role": "assistant", "content": "ls -la /tmp/xyzzy"}
    assert not any("SECRET-PLAN" in m["content"] for m in r1.messages)
    assert r1.prompt_token_ids[: len(r0.prompt_token_ids)] == r0.prompt_token_ids  # the prefix still grows exactly
    # a reply whose content carries a <think> block (a server without a reasoning parser):
    # stripped as Qwen3's / DeepSeek-R1's chat templates strip it from earlier turns
    (fu2,) = s.on_complete(r1, Reply(answer="<think>SECRET-PLAN again</think>\n\ncat setup.py"))
    assert fu2.request.messages[-2] == {"role": "assistant", "content": "cat setup.py"}
    # the older (text, success) call: a tagged block is stripped too, untagged text is kept whole
    s2 = w.sessions[1]
    (fu3,) = s2.on_complete(s2.first_request(), "<think>SECRET-PLAN</think>pwd", True)
    assert fu3.request.messages[-2] == {"role": "assistant", "content": "pwd"}
    s3 = build_workload("agentic", kit, num_requests=6, seed=2).sessions[0]
    (fu4,) = s3.on_complete(s3.first_request(), "  plain reply  ", True)
    assert fu4.request.messages[-2] == {"role": "assistant", "content": "plain reply"}
    with pytest.raises(TypeError, match="needs success"):
        s3.on_complete(fu4.request, "text only")


def test_a_failed_turn_counts_the_turns_it_aborted(kit):
    from workloads.agentic import build_agentic_sessions
    from workloads.base import Reply
    from workloads.registry import resolve_spec

    # one session: a stem of 2 turns forking into 2 branches of 2 turns (planned 2 + 2*2 = 6)
    spec = resolve_spec("agentic").model_copy(update={"num_sessions": 1, "branch_fraction": 1.0, "max_turns": 4,
                                                      "branch_after": 2, "branch_factor": 2})
    (s,) = build_agentic_sessions(spec, kit)
    assert s.planned_turns == 6 and s.aborted_turns == 0
    assert s.on_complete(s.first_request(), Reply("", success=False)) == []
    assert s.aborted_turns == 5  # the stem's second turn and both branches
    # a new replay starts the count again; a failure at the stem's last turn aborts both branches
    (t1,) = s.on_complete(s.first_request(), Reply("ok"))
    assert s.aborted_turns == 0
    assert s.on_complete(t1.request, "", False) == []
    assert s.aborted_turns == 4
    # a failure on a branch's first turn aborts the rest of that branch only
    (t1,) = s.on_complete(s.first_request(), Reply("ok"))
    b1, b2 = s.on_complete(t1.request, Reply("ok"))
    assert s.on_complete(b1.request, Reply("", success=False)) == []
    assert s.aborted_turns == 1
    (b2_last,) = s.on_complete(b2.request, Reply("ok"))
    assert s.on_complete(b2_last.request, Reply("", success=False)) == [] and s.aborted_turns == 1


def test_aborted_turns_through_the_runner_and_from_the_records(kit):
    """Against a server that fails every request: each session's first turn fails and the rest
    are never sent; the sessions count them, and the records with the workload's planned turns
    give the same number (what session metrics can compute)."""
    import aiohttp

    from harness.loadgen.client import EndpointTarget
    from harness.loadgen.nullserver import null_server
    from harness.loadgen.runner import Runner, RunnerOptions
    from workloads.base import count_aborted

    w = build_workload("agentic", kit, num_requests=6, request_rate=math.inf, seed=0)
    planned = w.planned_turns()
    assert sum(planned.values()) == 6 and len(planned) == 2  # two linear sessions of 3 turns

    async def replay(url: str):
        async with aiohttp.ClientSession() as http:
            async with http.put(f"{url}/_script/down", json={"status": 503, "pieces": []}) as r:
                assert r.status == 200
        runner = Runner(EndpointTarget(url, "script:down"), "null", w.name, lambda rec: None, None, RunnerOptions())
        return await runner.measure(w)

    with null_server() as url:
        for _ in range(2):  # a second replay (the next engine, or a repeat) counts afresh
            records = asyncio.run(replay(url))
            assert len(records) == 2 and not any(r.success for r in records)
            assert w.aborted_turns() == 4
            assert count_aborted(planned, [(r.session_id, r.success) for r in records]) == 4
    assert count_aborted(planned, [("agentic-s000", True)] * 3) == 0  # a session that completed aborted nothing


# --- (10) per-run prompt salt ------------------------------------------------------------------------
def test_salt_prefixes_every_sessions_first_prompt_the_same_within_a_run_and_differs_between_runs(kit):
    plain = build_workload("agentic", kit, seed=0)
    run1 = build_workload("agentic", kit, seed=0, prompt_salt="auto")
    run2 = build_workload("agentic", kit, seed=0, prompt_salt="auto")
    salt1, salt2 = run1.spec["prompt_salt"], run2.spec["prompt_salt"]
    assert re.fullmatch(r"run-[0-9a-f]{8}", salt1) and re.fullmatch(r"run-[0-9a-f]{8}", salt2) and salt1 != salt2
    assert plain.spec["prompt_salt"] is None
    firsts = [[s.first_request() for s in w.sessions] for w in (plain, run1, run2)]
    for p, a, b in zip(*firsts):
        # the salt sits at the very start of the shared system prompt, the rest unchanged
        assert a.messages[0]["content"] == f"[{salt1}]\n" + p.messages[0]["content"]
        assert b.messages[0]["content"] == f"[{salt2}]\n" + p.messages[0]["content"]
        assert a.messages[1:] == p.messages[1:]
        assert a.input_tokens_expected == len(a.prompt_token_ids) == len(kit.chat_ids(a.messages))
        # an unsalted run shares only the chat template's header ("<|im_start|>system\n") with a
        # salted one; two salted runs part within the salt (both start "[run-")
        header = 3
        assert common_prefix(a.prompt_token_ids, p.prompt_token_ids) == header
        assert header <= common_prefix(a.prompt_token_ids, b.prompt_token_ids) < header + len(kit.encode(f"[{salt1}]\n"))
    # within a run, sessions share exactly what they shared unsalted, plus the salt's tokens
    added = len(firsts[1][0].prompt_token_ids) - len(firsts[0][0].prompt_token_ids)
    assert added > 0
    for i in range(1, len(plain.sessions)):
        assert common_prefix(firsts[1][0].prompt_token_ids, firsts[1][i].prompt_token_ids) == \
            common_prefix(firsts[0][0].prompt_token_ids, firsts[0][i].prompt_token_ids) + added
    # multi-turn: every later turn still extends the salted previous prompt exactly
    s = run1.sessions[0]
    r0 = s.first_request()
    (fu,) = s.on_complete(r0, "ls", True)
    assert fu.request.prompt_token_ids[: len(r0.prompt_token_ids)] == r0.prompt_token_ids
    assert fu.request.messages[0]["content"].startswith(f"[{salt1}]\n")


def test_salt_on_single_turn_workloads_keeps_the_shared_prefix_and_exact_token_counts(kit, tmp_path):
    spec_file = tmp_path / "prefixed.yaml"
    spec_file.write_text("kind: random\nnum_requests: 4\ninput_len: 24\noutput_len: 2\nprefix_len: 12\nseed: 3\n")
    plain = build_workload("random", kit, spec_file=spec_file)
    salted = build_workload("random", kit, spec_file=spec_file, prompt_salt="exp-7")
    again = build_workload("random", kit, spec_file=spec_file, prompt_salt="exp-7")
    assert salted.spec["prompt_salt"] == "exp-7"
    assert [s.request.prompt for s in salted.sessions] == [s.request.prompt for s in again.sessions]  # a given salt is reproducible
    for p, s in zip(plain.sessions, salted.sessions):
        assert s.request.prompt == "[exp-7]\n" + p.request.prompt
        assert s.request.prompt_token_ids == kit.completion_ids(s.request.prompt)
        assert s.request.input_tokens_expected == len(s.request.prompt_token_ids)
    ids = [s.request.prompt_token_ids for s in salted.sessions]
    plain_ids = [s.request.prompt_token_ids for s in plain.sessions]
    added = len(ids[0]) - len(plain_ids[0])
    assert all(common_prefix(ids[0], x) == common_prefix(plain_ids[0], y) + added >= 12 + added
               for x, y in zip(ids[1:], plain_ids[1:]))
    # chat API: the first message's content is salted
    chat = build_workload("chat", kit, num_requests=2, seed=1, prompt_salt="exp-7")
    assert all(s.request.messages[0]["content"].startswith("[exp-7]\n") for s in chat.sessions)
    assert build_workload("chat", kit, num_requests=2, seed=1, prompt_salt="none").spec["prompt_salt"] is None


def test_bad_salt_is_one_line():
    for value, needle in (("", "1 to 64 characters"), ("x" * 65, "1 to 64 characters"), (" a", "printable text")):
        with pytest.raises(WorkloadError, match=needle) as err:
            parse_options(name="chat", prompt_salt=value)
        assert str(err.value).startswith("--prompt-salt ") and "\n" not in str(err.value)


# --- (10) the warm-cache warning ----------------------------------------------------------------------
def _run(url: str, out, run_id: str, *extra: str):
    from harness.app.cli import app

    return CliRunner().invoke(app, [
        "run", "--engine", "openai", "--base-url", url, "--model", "null", "--workload", "random",
        "--num-requests", "4", "--input-len", "16", "--output-len", "3", "--warmup", "0", "--no-calibration",
        "--no-equivalence", "-o", str(out), "--run-id", run_id, *extra,
    ])


def test_warning_when_an_identical_earlier_run_measured_the_same_endpoint(tmp_path):
    from harness.loadgen.nullserver import null_server

    warned = "the engine's prefix cache may be warm from run"
    with null_server() as url:
        first = _run(url, tmp_path, "r1")
        assert first.exit_code == 0, first.output
        assert warned not in first.output
        second = _run(url, tmp_path, "r2")
        assert second.exit_code == 0, second.output
        lines = [line for line in second.output.splitlines() if warned in line]
        assert lines == ["openai: the engine's prefix cache may be warm from run r1 (same endpoint, workload and seed: "
                         "identical prompts); pass --prompt-salt auto, or restart the engine, to measure a cold cache"]
        salted = _run(url, tmp_path, "r3", "--prompt-salt", "auto")
        assert salted.exit_code == 0, salted.output
        assert warned not in salted.output
        other_seed = _run(url, tmp_path, "r4", "--seed", "5")
        assert other_seed.exit_code == 0, other_seed.output
        assert warned not in other_seed.output
    salt = json.loads((tmp_path / "r3" / "manifest.json").read_text())["workload"]["prompt_salt"]
    assert re.fullmatch(r"run-[0-9a-f]{8}", salt)
    assert json.loads((tmp_path / "r1" / "manifest.json").read_text())["workload"]["prompt_salt"] is None


def test_identical_earlier_run_needs_the_same_endpoint_and_spec_and_skips_damaged_folders(tmp_path):
    from harness.app.trial.warm_cache import identical_earlier_run

    spec = {"kind": "random", "seed": 0, "input_len": 16, "prompt_salt": None}

    def write(name: str, workload, base_url="http://127.0.0.1:9/v1", created="2026-12-01T10:00:00+0000"):
        (tmp_path / name).mkdir()
        manifest = {"created_at": created, "workload": workload, "engines": {"openai": {"base_url": base_url}}}
        (tmp_path / name / "manifest.json").write_text(json.dumps(manifest))

    write("old", {k: v for k, v in spec.items() if k != "prompt_salt"})  # written before the salt existed
    write("newer", spec, created="2026-12-02T10:00:00+0000")
    write("elsewhere", spec, base_url="http://10.0.0.2:8000", created="2026-12-03T10:00:00+0000")
    write("seed1", {**spec, "seed": 1}, created="2026-12-03T10:00:00+0000")
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "manifest.json").write_bytes(b"\xff{")
    assert identical_earlier_run(tmp_path, "now", spec, "openai", "http://127.0.0.1:9") == "newer"
    assert identical_earlier_run(tmp_path, "newer", spec, "openai", "http://127.0.0.1:9/") == "old"
    assert identical_earlier_run(tmp_path, "now", {**spec, "prompt_salt": "run-1"}, "openai", "http://127.0.0.1:9") is None
    assert identical_earlier_run(tmp_path, "now", spec, "openai", "http://127.0.0.1:10") is None
    assert identical_earlier_run(tmp_path, "now", spec, "own", "http://127.0.0.1:9") is None
