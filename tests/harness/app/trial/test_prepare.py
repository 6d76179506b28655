"""Before the first measurement (``harness.app.trial.prepare.context_overflow``): requests longer
than the model's context window are said in one warning line, counted over the whole trace for an
agentic workload (the review's Mooncake run found them only when the engine refused them)."""

from __future__ import annotations

from types import SimpleNamespace

from harness.app.trial.prepare import context_overflow
from workloads.options import parse_options
from workloads.registry import build_workload, resolve_spec
from workloads.replay_stats import offered_statistics, trace_sessions
from workloads.tokens import as_kit

from tests.harness.app.run.test_replay_check import CharTokenizer


def test_requests_past_the_context_are_counted_over_the_whole_trace() -> None:
    tok = CharTokenizer()  # one token per character
    options = parse_options(name="agentic")  # the shipped trajectories
    workload = build_workload(options, tok)
    spec = resolve_spec(options)
    stats = offered_statistics(trace_sessions(spec, as_kit(tok)), spec.cache_block_tokens, spec.cache_blocks)
    needs = sorted(i + o for i, o in zip(stats["input_tokens"], stats["output_tokens"]))
    assert len(needs) > len(workload.sessions)  # the trace holds more than the sessions built for one point
    cfg = SimpleNamespace(workload=options)
    limit = needs[len(needs) // 2]  # half the trace's requests need more than this
    line = context_overflow(cfg, workload, tok, limit)
    over = sum(n > limit for n in needs)
    assert line == (f"{over:,} of {len(needs):,} requests of the workload need more than the model's {limit:,}-token "
                    f"context (prompt + max_tokens; the longest {needs[-1]:,}): every engine will refuse them and is "
                    "judged on those failures; shrink the prompts (--scale for a trace, --input-len) or the outputs "
                    "(--output-len)")
    assert context_overflow(cfg, workload, tok, needs[-1]) is None  # the longest fits exactly
    assert context_overflow(cfg, workload, tok, None) is None  # the model's context is not known


def test_another_workload_is_checked_over_its_requests() -> None:
    def session(prompt: int, out: int) -> SimpleNamespace:
        return SimpleNamespace(first_request=lambda: SimpleNamespace(prompt_token_ids=[7] * prompt, max_tokens=out))

    workload = SimpleNamespace(name="random", sessions=[session(100, 20), session(90, 20), session(99, 21), session(50, 5)])
    cfg = SimpleNamespace(workload=parse_options(name="random"))
    assert context_overflow(cfg, workload, None, 120) is None
    line = context_overflow(cfg, workload, None, 119)
    assert line is not None and line.startswith("2 of 4 requests of the workload need more than the model's 119-token "
                                                "context (prompt + max_tokens; the longest 120)")
