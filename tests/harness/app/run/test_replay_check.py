"""The infinite-cache hit rate an agentic run's ladder points are held against
(``harness.app.run.replay_check.optimal_hit_rate``, stored as ``LadderSummary.cache_optimal``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.app.core.model import resolve_model
from harness.app.run.replay_check import optimal_hit_rate, replay_certificate
from workloads.options import parse_options
from workloads.prefix_cache import hit_rate
from workloads.registry import resolve_spec
from workloads.replay_stats import trace_sessions
from workloads.tokens import TokenKit

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "agent_traces"


def test_no_agentic_workload_or_no_tokenizer_gives_no_optimal() -> None:
    cfg = SimpleNamespace(workload=parse_options(name="agentic"))
    assert optimal_hit_rate(cfg, SimpleNamespace(workload=None, tokenizer=object())) is None
    assert optimal_hit_rate(cfg, SimpleNamespace(workload=SimpleNamespace(name="random"), tokenizer=object())) is None
    assert optimal_hit_rate(cfg, SimpleNamespace(workload=SimpleNamespace(name="agentic"), tokenizer=None)) is None


@pytest.mark.slow  # needs the prepared default model folder (tokenizer only)
def test_the_optimal_is_the_infinite_cache_rate_of_the_runs_own_sessions() -> None:
    from transformers import AutoTokenizer

    kit = TokenKit(AutoTokenizer.from_pretrained(str(resolve_model(None))))
    options = parse_options(name="agentic", trace=str(FIX / "mooncake.jsonl"), scale=0.25)
    sessions = trace_sessions(resolve_spec(options), kit)
    state = SimpleNamespace(workload=SimpleNamespace(name="agentic", sessions=sessions), tokenizer=kit)
    prompts = []
    for s in sessions:  # every session's first prompt and its follow-ups (the trace's recorded replies), in order
        live = s.clone()
        pending = [live.first_request()]
        while pending:
            req = pending.pop(0)
            prompts.append(req.prompt_token_ids or [])
            pending += [fu.request for fu in live.on_complete(req, live.recorded_reply(req), True)]
    optimal = optimal_hit_rate(SimpleNamespace(workload=options), state)
    assert optimal == pytest.approx(hit_rate(prompts, 16)) and optimal > 0.3  # order does not matter to an infinite cache


# --- the certificate of a ladder run: each measurement's sent records against its own sessions as built


class CharTokenizer:
    """One token per character (exact round trip), a plain chat template: fast, and enough for
    the agentic builder on the shipped trajectories."""

    chat_template = "stub"

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
        return {"input_ids": [ord(c) for c in text]}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids, **_: object) -> str:
        return "".join(chr(i) for i in ids)

    def apply_chat_template(self, messages, tokenize: bool = False, add_generation_prompt: bool = True) -> str:
        return "".join(f"<{m['role']}>{m.get('content') or ''}" for m in messages) + "<assistant>"


S = 1_000_000_000
# a ladder whose points drew differently sized, differently weighted samples of the trajectories:
# (index, load, seeds, planned requests): point 0 measured briefly then in full, point 2 twice
POINTS = [(0, 1, [0, 3], [6, 12]), (1, 2, [1], [12]), (2, 4, [2, 4], [30, 30])]


def _replay(sessions, probe, repeat, halve_output=False, no_tool_pause=False, drop_last_turn=False, service_s=0.5):
    """A scripted replayer: every turn served in ``service_s``; a faithful one sends each turn's
    prompt and max_tokens and honours its tool pause; the faults say what an unfaithful one breaks."""
    import heapq

    from results.schema import RequestRecord

    out, heap, seq = [], [], 0
    for s in sessions:
        live = s.clone()
        heapq.heappush(heap, (live.start_offset_s, seq, live, live.first_request()))
        seq += 1
    while heap:
        t, _, live, req = heapq.heappop(heap)
        end = t + service_s
        out.append(RequestRecord(request_id=req.request_id, engine="own", workload="agentic", session_id=req.session_id,
                                 turn_id=req.turn_id, branch_id=req.branch_id, probe=probe, repeat=repeat,
                                 scheduled_ns=int(t * S), send_ns=int(t * S), end_ns=int(end * S),
                                 input_tokens_server=len(req.prompt_token_ids),
                                 output_tokens_server=req.max_tokens // 2 if halve_output else req.max_tokens,
                                 success=True))
        for fu in live.on_complete(req, live.recorded_reply(req), True):
            heapq.heappush(heap, (end + (0.0 if no_tool_pause else fu.delay_s), seq, live, fu.request))
            seq += 1
    if drop_last_turn:  # each session's last turn on its main path never sent
        last = {}
        for r in out:
            if r.branch_id == 0:
                last[r.session_id] = max(last.get(r.session_id, 0), r.turn_id)
        out = [r for r in out if not (r.branch_id == 0 and r.turn_id == last[r.session_id] > 0)]
    return out


def _ladder_run(tmp_path, **faults):
    from results.schema import EngineLadder, LadderPoint, LadderSummary
    from results.store import REQUESTS_FILE
    from harness.app.run.ladder_trial import measurement_options
    from workloads.registry import build_workload

    cfg = SimpleNamespace(workload=parse_options(name="agentic"))
    tok = CharTokenizer()
    records = []
    for index, _load, seeds, planned in POINTS:
        for repeat, (seed, n) in enumerate(zip(seeds, planned)):
            w = build_workload(measurement_options(cfg.workload, seed, n), tok, with_stats=False)
            records += _replay(w.sessions, index, repeat, **faults)
    (tmp_path / REQUESTS_FILE).write_text("".join(r.model_dump_json() + "\n" for r in records))
    ladder = LadderSummary(run_id="r", workload="agentic", engines={"own": EngineLadder(status="ok", points=[
        LadderPoint(index=i, load=load, seeds=seeds, planned_requests=planned) for i, load, seeds, planned in POINTS])})
    base = build_workload(cfg.workload, tok, with_stats=False)
    state = SimpleNamespace(workload=base, tokenizer=tok, ladder=ladder, writer=SimpleNamespace(
        run_dir=tmp_path, summary=SimpleNamespace(run_id="r", engines={"own": None})))
    return replay_certificate(cfg, state).engines["own"], records


def test_a_faithful_ladder_replay_is_certified_without_a_flag(tmp_path) -> None:
    e, records = _ladder_run(tmp_path)
    assert e.flagged == [] and e.measurements == 5 and e.requests == len(records) == 90
    rows = {r.statistic: r for r in e.rows}
    assert rows["input_tokens p90"].sent == rows["input_tokens p90"].built and rows["input_tokens p90"].deviation == 0.0
    # the points' sample is not the whole trace, and the certificate says how far (coverage, never judged)
    assert any(r.coverage is not None and abs(r.coverage) > 0.05 for r in e.rows)
    assert all(r.within is None for r in e.rows if r.statistic.startswith("prefix hit rate"))


@pytest.mark.parametrize("fault, broken", [
    ({"halve_output": True}, ["output_tokens p50", "output_tokens p90", "output_tokens p99"]),
    ({"no_tool_pause": True}, ["tool_s p50", "tool_s p90", "tool_s p99"]),
    # a turn dropped per session: fewer turns, and the tool pause before it gone with it
    ({"drop_last_turn": True}, ["turns_per_session p50", "turns_per_session p90", "turns_per_session p99",
                                "tool_s p50", "tool_s p90", "tool_s p99"]),
])
def test_an_unfaithful_replay_is_flagged_on_what_it_breaks(tmp_path, fault, broken) -> None:
    e, _ = _ladder_run(tmp_path, **fault)
    assert e.flagged == broken
    rows = {r.statistic: r for r in e.rows}
    if "halve_output" in fault:  # every output 16 or 32 tokens as built: half of it sent
        assert all(rows[b].deviation == pytest.approx(-0.5) for b in broken)
    if "no_tool_pause" in fault:
        assert all(rows[b].sent == 0.0 and rows[b].deviation == -1.0 for b in broken)
    if "drop_last_turn" in fault:  # 3 turns a session as built at the median, 2 sent
        assert (rows["turns_per_session p50"].built, rows["turns_per_session p50"].sent) == (3.0, 2.0)
