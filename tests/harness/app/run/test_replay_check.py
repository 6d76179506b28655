"""The infinite-cache hit rate an agentic run's ladder points are held against
(``harness.app.run.replay_check.optimal_hit_rate``, stored as ``LadderSummary.cache_optimal``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.app.core.model import resolve_model
from harness.app.run.replay_check import optimal_hit_rate
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
