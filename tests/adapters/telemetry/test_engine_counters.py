"""Engine counters (prefix cache, preemptions, speculation) count the measured phase only."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
from aiohttp import web
from typer.testing import CliRunner

import adapters.registry as registry
from adapters.base import Capabilities, Endpoint, ProbeResult
from adapters.telemetry.prom import counter_delta, measured_phase, parse_prometheus
from harness.app.cli import app
from harness.loadgen.nullserver import create_app

from tests.fake_servers.threaded import serve_in_thread


def own_text(hits: float, queries: float, preemptions: float = 0, usage: float = 0.25) -> str:
    return (f"# TYPE own:prefix_cache_hits counter\nown:prefix_cache_hits_total {hits}\n"
            f"# TYPE own:prefix_cache_queries counter\nown:prefix_cache_queries_total {queries}\n"
            f"# TYPE own:num_preemptions counter\nown:num_preemptions_total {preemptions}\n"
            f"# TYPE own:kv_cache_usage_perc gauge\nown:kv_cache_usage_perc {usage}\n")


def test_counters_are_differences_and_gauges_final_values() -> None:
    before, after = parse_prometheus(own_text(90, 100, 2, 0.5)), parse_prometheus(own_text(90, 300, 5, 0.1))
    delta = counter_delta(before, after)
    assert delta["own:prefix_cache_queries_total"] == 200 and delta["own:prefix_cache_hits_total"] == 0
    assert delta["own:num_preemptions_total"] == 3 and delta["own:kv_cache_usage_perc"] == 0.1
    scoped = measured_phase("own", before, after)
    assert scoped["prefix_cache_hit_rate"] == 0.0 and scoped["num_preemptions"] == 3
    assert scoped["counters_scope"] == "measured phase"
    cumulative = measured_phase("own", None, after)
    assert cumulative["prefix_cache_hit_rate"] == pytest.approx(0.3) and cumulative["counters_scope"] == "since engine start"
    restarted = counter_delta(parse_prometheus(own_text(500, 900)), after)  # counters went down: a restart
    assert restarted["own:prefix_cache_queries_total"] == 300


def test_sglang_hit_rate_from_counters_or_marked_as_a_gauge() -> None:
    counters = ("# TYPE sglang:cached_tokens counter\nsglang:cached_tokens_total {c}\n"
                "# TYPE sglang:prompt_tokens counter\nsglang:prompt_tokens_total {p}\n"
                "# TYPE sglang:cache_hit_rate gauge\nsglang:cache_hit_rate 0.9\n")
    scoped = measured_phase("sglang", parse_prometheus(counters.format(c=900, p=1000)),
                            parse_prometheus(counters.format(c=950, p=2000)))
    assert scoped["prefix_cache_hit_rate"] == pytest.approx(0.05) and "prefix_cache_hit_rate_scope" not in scoped
    gauge = "# TYPE sglang:cache_hit_rate gauge\nsglang:cache_hit_rate 0.9\n"
    only = measured_phase("sglang", parse_prometheus(gauge), parse_prometheus(gauge))
    assert only["prefix_cache_hit_rate"] == 0.9
    assert only["prefix_cache_hit_rate_scope"] == "engine gauge (includes warm-up)"


@pytest.fixture()
def warm_cache_server():
    """Completions from the null server and a /metrics whose prefix-cache counters start at
    90 hits of 100 queries (a warm-up that hit the cache) and grow by 10 queries, 0 hits, per
    measured request (a measured phase that never hits)."""
    state = {"hits": 90.0, "queries": 100.0}
    null = create_app()
    complete = next(r.handler for r in null.router.routes() if r.method == "POST")

    async def counted(request):
        state["queries"] += 10
        return await complete(request)

    async def metrics(_):
        return web.Response(text=own_text(state["hits"], state["queries"]), content_type="text/plain")

    async def ok(_):
        return web.json_response({"data": [{"id": "null"}]})

    served = web.Application()
    served.router.add_get("/health", ok)
    served.router.add_get("/v1/models", ok)
    served.router.add_get("/metrics", metrics)
    served.router.add_post("/v1/completions", counted)
    served.router.add_post("/v1/chat/completions", counted)
    with serve_in_thread(served) as url:
        yield url


def test_a_warm_up_that_hit_the_cache_leaves_the_measured_phase_at_0_percent(warm_cache_server, tmp_path, monkeypatch):
    class CountingEngine:
        name = "own"  # mapped with the own engine's metric names
        capabilities = Capabilities(hardware=("cpu",))

        def probe(self) -> ProbeResult:
            return ProbeResult(True, "fake", "0")

        @contextmanager
        def launch(self, config):
            yield Endpoint(base_url=warm_cache_server, model_name="null", display_name="counting fake",
                           metrics_url=warm_cache_server + "/metrics")

    monkeypatch.setattr(registry, "get_adapter", lambda n, hardware=None: CountingEngine())
    res = CliRunner().invoke(app, ["run", "--engine", "own", "--workload", "random", "--num-requests", "6",
                                   "--input-len", "8", "--output-len", "3", "--warmup", "0", "--no-calibration",
                                   "--no-equivalence", "--request-rate", "inf", "-o", str(tmp_path), "--run-id", "warm"])
    assert res.exit_code in (0, 1), res.output  # 1: the reference engine alone is never recommended
    em = json.loads((tmp_path / "warm" / "summary.json").read_text())["engines"]["own"]["engine_metrics"]
    assert em["prefix_cache_hit_rate"] == 0.0  # cumulative counters would say 90 / 160 = 56%
    assert em["counters_scope"] == "measured phase"
    md = (tmp_path / "warm" / "report.md").read_text()
    assert "| 0.0% |" in md and "measured phase" in md
