"""The scripted engine with a known prefix cache (an LRU of N blocks): what it reports per
request, accounted for from the records, matches the theoretical LRU hit rate under N of the
prompts it was sent (:mod:`workloads.prefix_cache`) within 2 points at every load (issue 40,
item 3)."""

from __future__ import annotations

import pytest

from harness.loadgen.simulated import SimEngine
from harness.loadgen.simulated_sessions import AgentScript, PrefixLRU, simulate_sessions
from harness.metrics.cache import cache_figures
from workloads.prefix_cache import hit_rate

SCRIPT = AgentScript(turns=4, first_prompt=64, growth=64, output_tokens=16, tool_ms=500)  # 4, 8, 12, 16 blocks of 16


@pytest.mark.parametrize("blocks", [40, 72, 200])
@pytest.mark.parametrize("load", [1, 2, 4, 8, 16])
def test_the_measured_hit_rate_is_the_theoretical_lru_rate_under_its_size(load: int, blocks: int) -> None:
    engine = SimEngine("lru", slots=8, prefill_ms=30, tpot_ms=10, prefill_ms_per_token=0.2, jitter=0.2,
                       cache_blocks=blocks, block_tokens=16)
    script = AgentScript(turns=4, first_prompt=64, growth=64, output_tokens=16, tool_ms=300, shared_prefix=32)
    records, duration, prompts = simulate_sessions(engine, script, load, 3 * load, seed=load)
    measured = cache_figures(records, duration).measured_hit_rate
    assert measured is not None
    assert measured == pytest.approx(hit_rate(prompts, 16, blocks), abs=0.02)
    assert hit_rate(prompts, 16) >= measured  # no cache beats an infinite one


def test_sessions_within_the_cache_hit_everything_their_history_allows() -> None:
    """Turn t reuses turn t−1's whole prompt: 4 + 8 + 12 of 4 + 8 + 12 + 16 blocks = 60 %."""
    engine = SimEngine("lru", cache_blocks=72, block_tokens=16)
    records, _, _ = simulate_sessions(engine, SCRIPT, 4, 8)
    assert [r.cached_tokens_server for r in records if r.session_id == "s0"] == [0, 64, 128, 192]
    assert cache_figures(records, 1.0).measured_hit_rate == pytest.approx(0.6)


def test_a_cache_that_misses_costs_prefill_time() -> None:
    """Past the cliff every turn prefills its whole prompt: later first tokens."""
    fits = SimEngine("fits", slots=16, prefill_ms=10, prefill_ms_per_token=1.0, cache_blocks=1000)
    small = SimEngine("small", slots=16, prefill_ms=10, prefill_ms_per_token=1.0, cache_blocks=20)
    last = lambda e: [r for r in simulate_sessions(e, SCRIPT, 8, 8)[0] if r.turn_id == 3]  # noqa: E731
    ttft = lambda r: (r.first_token_ns - r.send_ns) / 1e6  # noqa: E731
    assert [ttft(r) for r in last(fits)] == pytest.approx([10 + 64] * 8)  # 192 of its 256 tokens cached
    assert [ttft(r) for r in last(small)] == pytest.approx([10 + 256] * 8)


def test_an_engine_without_a_cache_reports_no_cached_tokens() -> None:
    records, _, _ = simulate_sessions(SimEngine("none"), SCRIPT, 2, 2)
    assert all(r.cached_tokens_server is None for r in records)
    assert cache_figures(records, 1.0).measured_hit_rate is None
    with pytest.raises(ValueError, match="blocks and block_tokens"):
        PrefixLRU(0, 16)
    with pytest.raises(ValueError, match="concurrency"):
        simulate_sessions(SimEngine("none"), SCRIPT, 0, 2)
