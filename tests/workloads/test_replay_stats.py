"""The trace side of the replay-fidelity certificate (workloads/replay_stats.py) on a known trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.app.core.model import resolve_model
from workloads.options import parse_options
from workloads.registry import resolve_spec
from workloads.replay_stats import offered_statistics, pooled_statistics, trace_sessions
from workloads.tokens import TokenKit

SLOW = pytest.mark.slow  # needs the prepared default model folder (tokenizer only)
FIX = Path(__file__).resolve().parents[1] / "fixtures" / "agent_traces"


@pytest.fixture(scope="module")
def kit():
    from transformers import AutoTokenizer

    return TokenKit(AutoTokenizer.from_pretrained(str(resolve_model(None))))


@SLOW
def test_the_otel_fixture_offers_what_its_spans_say(kit):
    spec = resolve_spec(parse_options(name="agentic", trace=str(FIX / "otel.jsonl"), num_requests=3))
    full = trace_sessions(spec, kit)  # every session once, whatever -n asked of the run
    st = offered_statistics(full, 16, 1024)
    assert st["turns_per_session"] == [5] and st["sub_agents_per_session"] == [1]
    assert sorted(st["output_tokens"]) == [8, 10, 12, 16, 20]
    # the planner's pauses 3.0 and 2.5 s, the researcher's 0.5 s (its start is a spawn, not a tool pause)
    assert sorted(st["tool_s"]) == pytest.approx([0.5, 2.5, 3.0])
    assert 0 < st["hit_rate_lru"] <= st["hit_rate_infinite"] < 1


@SLOW
def test_an_lru_cache_smaller_than_the_shared_prefix_loses_the_hits(kit):
    spec = resolve_spec(parse_options(name="agentic", trace=str(FIX / "mooncake.jsonl"), scale=0.25))
    full = trace_sessions(spec, kit)
    inf = offered_statistics(full, 16, 10_000)
    one = offered_statistics(full, 16, 1)
    assert inf["hit_rate_lru"] == inf["hit_rate_infinite"] > 0.3 and one["hit_rate_lru"] == 0.0


def test_pooled_measurements_count_each_once_and_share_one_cache():
    # two measurements of one 2-block prompt each (block 16): alone, neither hits; one after the
    # other, the second's shared first block (16 of 32 tokens) hits
    shared = list(range(16))
    a = {"input_tokens": [32], "output_tokens": [8], "turns_per_session": [1], "sub_agents_per_session": [0],
         "tool_s": [], "prompts": [shared + [100] * 16]}
    b = {"input_tokens": [32], "output_tokens": [4], "turns_per_session": [2], "sub_agents_per_session": [1],
         "tool_s": [1.5], "prompts": [shared + [200] * 16]}
    pooled = pooled_statistics([a, b], 16, 1024)
    assert pooled["output_tokens"] == [8, 4] and pooled["turns_per_session"] == [1, 2] and pooled["tool_s"] == [1.5]
    assert pooled["hit_rate_infinite"] == pooled["hit_rate_lru"] == 16 / 64
    assert pooled_statistics([a, b], 16, 1)["hit_rate_lru"] == 0.0  # one block: the second prompt's first is evicted


@SLOW
def test_the_readmes_agentic_prompt_sizes_are_what_the_default_workload_builds(kit):
    """README said "prompts of 150–500 tokens" while a ladder sent p99 ~1,370: the sizes it states
    now are the default workload's at a ladder point's size (120 requests), SmolLM2's tokenizer."""
    import numpy as np

    from workloads.registry import build_workload

    w = build_workload(parse_options(name="agentic", num_requests=120), kit.tokenizer)
    st = offered_statistics(w.sessions, 16, 1024)
    p50, p90, p99 = (float(np.percentile(st["input_tokens"], q)) for q in (50, 90, 99))
    assert 270 <= p50 <= 310 and 500 <= p90 <= 600 and 1_350 <= p99 <= 1_410 and max(st["input_tokens"]) <= 1_410
    assert set(st["output_tokens"]) <= set(range(16, 33)) and max(st["turns_per_session"]) == 4
    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    assert ("prompts of about 290 tokens at the median, 500–600 at p90 and 1,400 at p99" in readme
            and "150–500 tokens" not in readme)
