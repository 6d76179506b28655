"""Workload generators on the default model's tokenizer: token-exact lengths (checked with the
raw Hugging Face tokenizer the way an OpenAI server tokenizes), determinism under a seed,
agentic turns built from the actual replies, branching stems, Mooncake hash blocks, warm-up
isolation, statistics and the ``bench workloads`` CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from harness.app.core.model import resolve_model
from workloads.arrivals import arrival_offsets
from workloads.base import RequestSpec, Workload
from workloads.errors import WorkloadError
from workloads.registry import build_warmup, build_workload, list_workloads
from workloads.stats import prefix_reuse, simulate
from workloads.tokens import TokenKit

pytestmark = pytest.mark.slow  # needs the prepared default model folder (tokenizer only)


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(resolve_model(None)))


@pytest.fixture(scope="module")
def kit(tok):
    return TokenKit(tok)


def server_ids(tok, req: RequestSpec) -> list[int]:
    """How vLLM tokenizes: completions = tokenizer(prompt) with its default special tokens;
    chat = the chat template rendered to text, then encoded without extra special tokens."""
    if req.messages is not None:
        text = tok.apply_chat_template(req.messages, tokenize=False, add_generation_prompt=True)
        return tok(text, add_special_tokens=False)["input_ids"]
    return tok(req.prompt)["input_ids"]


def all_requests(w: Workload) -> list[RequestSpec]:
    return [r for _, r in simulate(w.sessions)]


def test_smollm2_adds_no_bos(tok):
    assert tok("Hello world")["input_ids"] == tok("Hello world", add_special_tokens=False)["input_ids"]


def test_list_workloads_names_all_kinds():
    names = [n for n, _ in list_workloads()]
    assert names == ["agentic", "chat", "rag", "summarization", "code", "random", "trace"]
    assert all(desc for _, desc in list_workloads())


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("random", {"input_len": 100, "range_ratio": 0.5, "api": "completions"}),
        ("random", {"input_len": 100, "range_ratio": 0.5, "api": "chat"}),
        ("chat", {}),
        ("chat", {"api": "completions"}),
        ("rag", {}),
        ("rag", {"api": "chat", "num_requests": 8}),
        ("summarization", {"num_requests": 6}),
        ("code", {"num_requests": 8, "api": "chat"}),
        ("trace", {"num_requests": 12}),
        ("trace", {"trace": "azure-conv", "num_requests": 12, "api": "chat"}),
        ("trace", {"trace": "servegen-language", "num_requests": 12}),
        ("agentic", {"num_requests": 10}),
        ("agentic", {"num_requests": 6, "api": "completions"}),
    ],
)
def test_prompts_are_token_exact(tok, kit, name, kwargs):
    w = build_workload(name, kit, seed=1, **kwargs)
    reqs = all_requests(w)
    assert reqs
    for r in reqs:
        ids = server_ids(tok, r)
        assert ids == r.prompt_token_ids, r.request_id
        assert len(ids) == r.input_tokens_expected
        # the text survives a decode/encode round trip unchanged
        text = r.prompt if r.prompt is not None else r.messages[-1]["content"]
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_random_lengths_follow_vllm_range_semantics(kit):
    w = build_workload("random", kit, num_requests=64, input_len=100, output_len=20, range_ratio=0.5, seed=3)
    ins = [s.request.input_tokens_expected for s in w.sessions]
    outs = [s.request.max_tokens for s in w.sessions]
    assert min(ins) >= 50 and max(ins) <= 150 and min(ins) < 65 and max(ins) > 135
    assert min(outs) >= 10 and max(outs) <= 30
    fixed = build_workload("random", kit, num_requests=5, input_len=77, output_len=9, range_ratio=0.0)
    assert {s.request.input_tokens_expected for s in fixed.sessions} == {77}
    assert {s.request.max_tokens for s in fixed.sessions} == {9}
    with pytest.raises(WorkloadError, match="below the 30-token overhead of the chat template"):
        build_workload("random", kit, input_len=20, api="chat")


@pytest.mark.parametrize("name", ["agentic", "chat", "rag", "random", "trace", "summarization", "code"])
def test_same_seed_same_workload(kit, name):
    kw = {"num_requests": 8}
    a, b, c = (build_workload(name, kit, seed=s, **kw) for s in (4, 4, 5))

    def fingerprint(w):
        return [(t, r.request_id, r.prompt, json.dumps(r.messages), r.max_tokens) for t, r in simulate(w.sessions)]

    assert fingerprint(a) == fingerprint(b)
    assert a.spec == b.spec and a.spec["seed"] == 4 and "scale" in a.spec
    assert fingerprint(a) != fingerprint(c)


def drive(session, reply_for):
    """Run a session to the end with scripted replies; returns every request in send order."""
    sent, queue = [], [session.first_request()]
    while queue:
        req = queue.pop(0)
        sent.append(req)
        for fu in session.on_complete(req, reply_for(req), True):
            assert fu.delay_s >= 0
            queue.append(fu.request)
    return sent


def test_agentic_turns_extend_the_previous_prompt_with_the_actual_reply(tok, kit):
    w = build_workload("agentic", kit, num_requests=8, seed=2)
    session = w.sessions[0]
    r0 = session.first_request()
    assert r0.keep_output_text and r0.turn_id == 0 and r0.messages[0]["role"] == "system"
    reply = "  FAKE-REPLY-7 ls -la /tmp/xyzzy  \n"
    (fu,) = session.on_complete(r0, reply, True)
    r1 = fu.request
    assert r1.turn_id == 1 and r1.session_id == r0.session_id
    assert r1.messages[: len(r0.messages)] == r0.messages
    assert r1.messages[len(r0.messages)] == {"role": "assistant", "content": reply.strip()}
    assert r1.messages[-1]["role"] == "user" and len(r1.messages) == len(r0.messages) + 2
    # token level: the previous prompt is an exact prefix, the reply's tokens follow it
    assert r1.prompt_token_ids[: len(r0.prompt_token_ids)] == r0.prompt_token_ids
    reply_ids = tok(reply.strip(), add_special_tokens=False)["input_ids"]
    n = len(r0.prompt_token_ids)
    assert r1.prompt_token_ids[n : n + len(reply_ids)] == reply_ids
    # completions API: the text prompt is extended the same way
    wc = build_workload("agentic", kit, num_requests=2, seed=2, api="completions")
    c0 = wc.sessions[0].first_request()
    (cfu,) = wc.sessions[0].on_complete(c0, "echo hi", True)
    assert cfu.request.prompt.startswith(c0.prompt + "echo hi<|im_end|>\n<|im_start|>user\n")
    # failure ends the path; an unknown request is a runner bug
    assert w.sessions[1].on_complete(w.sessions[1].first_request(), "", False) == []
    with pytest.raises(ValueError, match="unknown or already completed"):
        session.on_complete(r0, "again", True)


def test_agentic_branches_share_their_stem_exactly(kit):
    w = build_workload("agentic", kit, seed=0)  # default: 4 sessions, 1 of them branching
    branching = [s for s in w.sessions if s.script.branches]
    assert len(branching) == 1 and all(len(s.script.branches) == 2 for s in branching)
    s = branching[0]
    sent = drive(s, lambda r: f"reply-of-{r.request_id}")
    stem = [r for r in sent if r.branch_id == 0]
    branch_first = [r for r in sent if r.branch_id != 0 and r.turn_id == len(stem)]
    assert len(stem) == 2 and {r.branch_id for r in branch_first} == {1, 2}
    stem_ids = stem[-1].prompt_token_ids
    shared = stem[-1].messages + [{"role": "assistant", "content": f"reply-of-{stem[-1].request_id}"}]
    for r in branch_first:
        assert r.prompt_token_ids[: len(stem_ids)] == stem_ids
        assert r.messages[: len(shared)] == shared
    a, b = branch_first
    assert a.messages[-1] != b.messages[-1]  # each branch continues with its own observation
    assert len(sent) == s.script.num_turns == 2 + 2 * 1  # stem of 2 turns, 2 branches of max_turns - 2 = 1
    assert len({r.request_id for r in sent}) == len(sent)


def test_agentic_sessions_share_system_prompts_and_num_requests_counts_turns(kit):
    w = build_workload("agentic", kit, num_requests=9, seed=0)
    assert w.stats["requests"] == 9 == len(all_requests(w))
    # three trajectories recorded with the same 'default' config share their system prompt
    from workloads.registry import resolve_spec
    from workloads.agentic import build_agentic_sessions

    spec = resolve_spec("agentic").model_copy(update={"trajectories": ["pydicom", "test-repo-i1", "install_from_source"], "num_sessions": 3, "branch_fraction": 0.0})
    sessions = build_agentic_sessions(spec, kit)
    firsts = [s.first_request() for s in sessions]
    system = {f.messages[0]["content"] for f in firsts}
    assert len(system) == 1
    reused, total = prefix_reuse([f.prompt_token_ids for f in firsts])
    sys_tokens = len(kit.chat_ids([firsts[0].messages[0]])) - 5  # without the generation prompt
    assert reused >= 2 * sys_tokens


def test_agentic_default_scale_fits_the_cpu_profile(kit):
    w = build_workload("agentic", kit)
    st = w.stats
    # sized so `bench run --engine all` measures 7 CPU engines in under 5 minutes on 2 cores
    assert st["sessions"] == 4 and 12 <= st["requests"] <= 16 and st["branching_sessions"] == 1
    assert 150 <= st["input_tokens"]["p50"] and st["input_tokens"]["max"] <= 1000
    assert 16 <= st["output_tokens"]["mean"] <= 32
    assert st["prefix_reuse_ratio"] > 0.5  # the growing conversation is re-sent every turn
    assert w.spec["scale"] == 0.1 and w.spec["request_rate"] == 0.5
    # 0.5 sessions/s asked for, 0.5 offered (the raw draw of these 4 starts offered 1.44)
    assert w.requested_rate == w.offered_rate == 0.5
    assert st["offered_rate"] == pytest.approx(0.5, abs=1e-9) and w.schedule_rate == st["offered_rate"]
    assert "recorded replies" in st["note"]
    json.dumps(w.spec), json.dumps(w.stats)  # manifest-safe


def test_mooncake_hash_ids_map_to_identical_token_blocks(tmp_path, kit):
    rows = [
        (0, 1500, [10, 11, 12]),
        (100, 1400, [10, 11, 13]),
        (250, 1100, [20, 11, 12]),
        (250, 700, [10, 14]),
        (900, 1536, [10, 11, 12]),
    ]
    p = tmp_path / "mini.jsonl"
    p.write_text("".join(json.dumps({"timestamp": t, "input_length": n, "output_length": 20, "hash_ids": h}) + "\n" for t, n, h in rows))
    w = build_workload("trace", kit, trace=str(p), scale=0.05, time_scale=2.0)
    reqs = [s.request for s in w.sessions]
    assert [s.start_offset_s for s in w.sessions] == pytest.approx([0.0, 0.05, 0.125, 0.125, 0.45])
    # a trace replays its timestamps, never rescaled: it offers its own rate, nothing was requested
    assert w.offered_rate == pytest.approx(4 / 0.45) and w.schedule_rate == w.offered_rate and w.requested_rate is None
    B = 26  # round(512 * 0.05)
    blocks = [[r.prompt_token_ids[k * B : (k + 1) * B] for k in range(len(h))] for r, (_, _, h) in zip(reqs, rows)]
    for i, (_, _, hi) in enumerate(rows):
        for j, (_, _, hj) in enumerate(rows):
            for k in range(min(len(hi), len(hj))):
                m = min(len(blocks[i][k]), len(blocks[j][k]))  # a last block may be partial
                if hi[k] == hj[k]:
                    assert blocks[i][k][:m] == blocks[j][k][:m], (i, j, k)
                else:
                    assert blocks[i][k][:m] != blocks[j][k][:m], (i, j, k)
    # scaled length: (n-1) full blocks + the last block's share of 512
    assert [r.input_tokens_expected for r in reqs] == [2 * B + round(476 * B / 512), 2 * B + round(376 * B / 512), 2 * B + round(76 * B / 512), B + round(188 * B / 512), 3 * B]
    assert [r.max_tokens for r in reqs] == [2] * 5  # round(20 * 0.05) = 1 -> min_output_tokens 2


def test_rag_documents_are_shared_within_groups(kit):
    w = build_workload("rag", kit, num_requests=16, seed=0)
    reqs = [s.request for s in w.sessions]
    groups = {}
    for r in reqs:
        groups.setdefault(r.request_id.split("-")[1], []).append(r)
    assert len(groups) == 4 and all(len(g) == 4 for g in groups.values())
    doc = round(np.mean([9151, 4887, 11214]) * 1.3 * 0.05)  # LongBench multi-doc QA words x 1.3 x scale
    for g in groups.values():
        heads = {tuple(r.prompt_token_ids[:doc]) for r in g}
        assert len(heads) == 1
    assert len({tuple(g[0].prompt_token_ids[:doc]) for g in groups.values()}) == 4
    expected = 12 * doc / (16 * (doc + 32))  # every request after its group's first re-uses the document
    assert w.stats["prefix_reuse_ratio"] == pytest.approx(expected, abs=0.01)


def test_warmup_shares_no_prefix_with_workloads(tok, kit):
    warm = build_warmup(tok, 4, seed=7)
    assert warm == build_warmup(kit, 4, seed=7) and len(warm) == 4
    assert all(len(server_ids(tok, r)) == r.input_tokens_expected == 64 for r in warm)
    # synthetic workloads start with a word token, chat-API ones with the template's first
    # token, agentic completions with the template text, chat completions with ShareGPT text
    firsts = {int(i) for i in kit.word_ids} | {kit.chat_ids([{"role": "user", "content": "x"}])[0]}
    for name, api in (("chat", "completions"), ("agentic", "completions"), ("random", "completions"), ("rag", "chat")):
        for r in all_requests(build_workload(name, kit, num_requests=6, api=api)):
            firsts.add(r.prompt_token_ids[0])
    assert not {r.prompt_token_ids[0] for r in warm} & firsts
    with pytest.raises(WorkloadError):
        build_warmup(tok, -1, seed=0)


def test_bad_input_is_one_line_workload_error(kit):
    cases = [
        (("nope",), {}),
        (("agentic",), {"input_len": 5}),
        (("random",), {"range_ratio": 1.5}),
        (("random",), {"request_rate": -1.0}),
        (("trace",), {"trace": "nonexistent"}),
        (("trace",), {"trace": "/tmp/none.csv"}),
        (("rag",), {"num_requests": 2}),
        (("agentic",), {"scale": 0.0}),
    ]
    for args, kw in cases:
        with pytest.raises(WorkloadError) as exc:
            build_workload(*args, kit, **kw)
        assert "\n" not in str(exc.value) and isinstance(exc.value, ValueError)


def test_offered_rate_and_stats_shapes(kit):
    w = build_workload("random", kit, num_requests=200, input_len=8, output_len=2, request_rate=4.0, burstiness=0.5, seed=1)
    starts = sorted(s.start_offset_s for s in w.sessions)
    assert w.offered_rate == pytest.approx(199 / (starts[-1] - starts[0]))  # the schedule's own rate
    # ... which is the requested one: the drawn schedule is rescaled to it
    assert w.offered_rate == w.requested_rate == 4.0 and w.stats["offered_rate"] == pytest.approx(4.0, abs=1e-9)
    assert w.schedule_rate == w.stats["offered_rate"]
    assert w.spec["request_rate"] == 4.0 and w.spec["burstiness"] == 0.5
    inf = build_workload("random", kit, num_requests=3, input_len=8, output_len=2)
    assert inf.spec["request_rate"] == "inf" and math.isinf(inf.offered_rate) and math.isinf(inf.requested_rate)
    assert inf.stats["offered_rate"] == "inf" and math.isinf(inf.schedule_rate)


def test_offered_rate_is_the_requested_rate(kit):
    # --request-rate 2, 32 requests, seed 0: the raw Poisson draw offered 1.71 req/s; now 2.00
    w = build_workload("random", kit, num_requests=32, input_len=8, output_len=2, request_rate=2.0, seed=0)
    starts = sorted(s.start_offset_s for s in w.sessions)
    assert (len(starts) - 1) / (starts[-1] - starts[0]) == pytest.approx(2.0, abs=1e-9)  # the metrics' formula
    assert w.requested_rate == w.offered_rate == 2.0 and w.schedule_rate == pytest.approx(2.0, abs=1e-9)
    # the shape is the raw draw's: gaps proportional to it (ratio constant)
    raw = arrival_offsets(32, rate=2.0, seed=0, rescale=False)
    ratio = np.diff(np.concatenate([[0.0], starts])) / np.diff(np.concatenate([[0.0], raw]))
    assert ratio == pytest.approx(np.full(32, ratio[0]), rel=1e-9) and ratio[0] == pytest.approx(1.7085664 / 2, rel=1e-6)
    # the same for every non-trace kind and for a gamma draw; agentic session starts too
    bursty = build_workload("chat", kit, num_requests=20, request_rate=3.0, burstiness=0.3, seed=4)
    assert bursty.offered_rate == 3.0 and bursty.schedule_rate == pytest.approx(3.0, abs=1e-9)
    agentic = build_workload("agentic", kit, num_requests=40, request_rate=0.25, seed=2, with_stats=False)
    starts = sorted(s.start_offset_s for s in agentic.sessions)
    assert len(starts) > 2 and (len(starts) - 1) / (starts[-1] - starts[0]) == pytest.approx(0.25, abs=1e-9)
    assert agentic.offered_rate == agentic.requested_rate == 0.25


def test_cli_lists_and_shows(monkeypatch):
    from harness.app.cli.workloads import app

    runner = CliRunner()
    res = runner.invoke(app, [])
    assert res.exit_code == 0 and "agentic" in res.output and "trace" in res.output
    res = runner.invoke(app, ["show", "agentic", "--num-requests", "6", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["stats"]["requests"] == 6 and data["spec"]["num_requests"] == 6
    res = runner.invoke(app, ["show", "rag", "-n", "8"])
    assert res.exit_code == 0 and "prefix-reuse ratio" in res.output and "p90" in res.output
    res = runner.invoke(app, ["show", "nope"])
    assert res.exit_code == 2 and "unknown workload 'nope'" in res.output
    res = runner.invoke(app, ["show", "random", "--request-rate", "fast"])
    assert res.exit_code == 2 and "--request-rate must be a number" in res.output


def test_run_takes_the_spec_files_seed_unless_seed_is_given(tmp_path, tok):
    from harness.app.settings.run import RunSettings
    from harness.app.run.orchestrator import Orchestrator
    from workloads.options import WorkloadOptions

    spec = tmp_path / "s.yaml"
    spec.write_text("kind: agentic\nseed: 7\nnum_requests: 3\n")
    from_spec = Orchestrator(RunSettings(workload=WorkloadOptions(spec_file=spec)), None)._workload(tok)
    assert from_spec.spec["seed"] == 7
    flag = Orchestrator(RunSettings(workload=WorkloadOptions(spec_file=spec, seed=3)), None)._workload(tok)
    assert flag.spec["seed"] == 3
    spec.write_text("kind: agentic\nseed: -5\n")
    with pytest.raises(WorkloadError, match="seed"):
        Orchestrator(RunSettings(workload=WorkloadOptions(spec_file=spec)), None)._workload(tok)


def test_workload_options_are_validated_once_with_one_line_errors_naming_the_flag(kit):
    from workloads.options import WorkloadOptions, parse_options

    opts = parse_options(name="random", num_requests=4, input_len=8, request_rate=math.inf)
    assert opts.overrides() == {"num_requests": 4, "input_len": 8, "request_rate": math.inf}
    assert WorkloadOptions.kinds("input_len") == ("random",) and WorkloadOptions.kinds("seed") is None
    cases = {
        "num_requests": (0, "--num-requests must be > 0, got 0"),
        "range_ratio": (1.0, "--range-ratio must be < 1, got 1.0"),
        "burstiness": (math.nan, "--burstiness must be a number > 0 or inf (constant spacing), got nan"),
        "prompt_salt": ("a\nb", "--prompt-salt must be printable text without leading/trailing spaces or newlines, got 'a\\nb'"),
        "seed": (-1, "--seed must be >= 0, got -1"),
        "api": ("grpc", "--api must be one of 'chat' or 'completions', got 'grpc'"),
    }
    for field, (value, message) in cases.items():
        with pytest.raises(WorkloadError) as err:
            parse_options(name="random", **{field: value})
        assert str(err.value) == message
    with pytest.raises(WorkloadError, match="unknown workload option 'input_length'"):
        parse_options(name="random", input_length=3)
    with pytest.raises(WorkloadError, match="--input-len does not apply to the agentic workload"):
        build_workload(parse_options(name="agentic", input_len=8), kit)


def test_the_word_vocabulary_is_computed_once_per_tokenizer_content(tok, monkeypatch):
    """Each run loads its own tokenizer and builds several kits (its workload, each engine's
    ladder): the word tokens (about a second to find) are shared by content, never by accident."""
    from transformers import AutoTokenizer

    import workloads.tokens as tokens

    calls = []
    real = tokens._word_ids
    monkeypatch.setattr(tokens, "_WORD_IDS", tokens._WordIdsMemo())
    monkeypatch.setattr(tokens, "_word_ids", lambda t, special: calls.append(len(special)) or real(t, special))
    first = TokenKit(tok).word_ids
    again = TokenKit(AutoTokenizer.from_pretrained(str(resolve_model(None)))).word_ids  # a fresh load, equal content
    assert calls == [calls[0]] and again is first and not first.flags.writeable
    fewer = TokenKit(tok, exclude_token_ids=[int(first[0])]).word_ids  # other exclusions: computed apart
    assert len(calls) == 2 and len(fewer) == len(first) - 1 and int(first[0]) not in set(fewer.tolist())

    class NoVocab:  # a tokenizer that cannot list its vocabulary is never memoised
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            if name == "get_vocab":
                raise AttributeError(name)
            return getattr(self.inner, name)

        def __len__(self):
            return len(self.inner)

        def __call__(self, *args, **kwargs):
            return self.inner(*args, **kwargs)

    TokenKit(NoVocab(tok)).word_ids
    TokenKit(NoVocab(tok)).word_ids
    assert len(calls) == 4


def test_a_tokenizer_without_word_pieces_is_one_line_not_a_crash() -> None:
    # a synthetic tokenizer whose pieces are no words (a random test checkpoint's): the kit says why
    # in one line instead of handing the tokenizer an empty batch (IndexError inside transformers)
    from workloads.tokens import _word_ids

    class Glyphs:
        def __len__(self) -> int:
            return 8

        def batch_decode(self, ids, clean_up_tokenization_spaces=False):
            return ["<%d>" % i[0] for i in ids]

        def __call__(self, texts, add_special_tokens=False):
            raise AssertionError("never called with no candidates")

    with pytest.raises(WorkloadError, match="only 0 stable word tokens"):
        _word_ids(Glyphs(), frozenset())


def _tasks(w) -> list[str]:
    """The task (first user message) of every session's first request."""
    return [next(m["content"] for m in s.first_request().messages if m["role"] == "user") for s in w.sessions]


def test_agentic_measurements_share_the_system_prompt_but_never_a_task(kit, tmp_path):
    # two ladder measurements (seeds 0 and 1) of 90 turns each: more sessions than the 22 trajectories,
    # so each measurement cycles through some trajectories twice
    a, b = (build_workload("agentic", kit, seed=seed, num_requests=90, request_rate=math.inf) for seed in (0, 1))
    ta, tb = _tasks(a), _tasks(b)
    assert len(ta) > 22 and ta[0].startswith("[task 0.0]\n") and tb[3].startswith("[task 1.3]\n")
    assert len(set(ta)) == len(ta) and not set(ta) & set(tb)  # no task twice, in a measurement or across two
    systems = {(s.script.source, s.first_request().messages[0]["content"]) for s in (*a.sessions, *b.sessions)}
    assert len(systems) == len({source for source, _ in systems})  # a trajectory's system prompt: one, in every
    # measurement (shared by its agents, as in production)
    # fresh_tasks: false sends the trajectories' tasks verbatim: the cycled trajectories repeat, across seeds too
    spec = tmp_path / "verbatim.yaml"
    spec.write_text("kind: agentic\nfresh_tasks: false\n")
    va, vb = (build_workload("agentic", kit, seed=seed, num_requests=90, request_rate=math.inf, spec_file=str(spec))
              for seed in (0, 1))
    assert len(set(_tasks(va))) < len(_tasks(va)) and set(_tasks(va)) & set(_tasks(vb))
    assert {t.split("\n", 1)[1] for t in ta} == set(_tasks(va))  # the tag is all that differs
