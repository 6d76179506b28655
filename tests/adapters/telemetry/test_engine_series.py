"""adapters/telemetry/engine_series.py: the engine's /metrics sampled into its time series, read by the
adapter's named parser; the reference engine's own page (own_engine/server/metrics.py) and a
scripted /metrics server over HTTP."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from adapters.telemetry.engine_series import SeriesSampler
from adapters.engines.own import OwnAdapter
from adapters.engines.vllm import VllmAdapter
from own_engine.server.metrics import ServerCounters, render_metrics


def own_page(used: int, running: int, waiting: int, preemptions: int, hits: int, queries: int) -> str:
    stats = {"num_running": running, "num_waiting": waiting, "kv_blocks_used": used, "kv_blocks_total": 100,
             "prefix_cache_queries": queries, "prefix_cache_hits": hits, "num_preemptions": preemptions}
    return render_metrics(stats, ServerCounters(), "m").decode()


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


def test_the_reference_engines_page_becomes_its_series() -> None:
    assert OwnAdapter.series_parser == "own" and VllmAdapter.series_parser == "vllm"
    pages = iter([own_page(10, 1, 0, 3, 50, 100), own_page(60, 4, 2, 3, 80, 200), own_page(100, 8, 5, 10, 180, 400)])
    # the thread's interval is an hour: start() scrapes once, one scrape by hand, stop() the last
    sampler = SeriesSampler("http://own/metrics", "own", fetch=lambda url: next(pages), clock=Clock(), interval_s=3600)
    sampler.start()
    sampler.scrape()
    series = sampler.stop().samples
    assert [s.t_s for s in series] == [1.0, 2.0, 3.0]
    assert [s.kv_cache_usage for s in series] == [0.1, 0.6, 1.0]
    assert [(s.running, s.waiting) for s in series] == [(1, 0), (4, 2), (8, 5)]
    assert [s.preemptions for s in series] == [0, 0, 7]  # the phase's own, since its first scrape
    assert series[1].prefix_hit_rate == pytest.approx(30 / 100) and series[2].prefix_hit_rate == pytest.approx(130 / 300)


def test_no_endpoint_or_parser_gives_an_empty_series_with_the_reason() -> None:
    with SeriesSampler(None, "own") as s:
        pass
    assert s.result.samples == [] and s.result.reason == "the engine has no Prometheus metrics endpoint"
    with SeriesSampler("http://x/metrics", None) as s:
        pass
    assert s.result.reason == "no series parser for this engine's metrics (none named on its adapter)"


def test_a_scripted_metrics_server_is_sampled_over_http() -> None:
    pages = [own_page(20 * i, i, max(0, i - 2), i // 3, 0, 0) for i in range(1, 6)]
    served: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = pages[min(len(served), len(pages) - 1)].encode()
            served.append(1)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sampler = SeriesSampler(f"http://127.0.0.1:{server.server_address[1]}/metrics", "own", interval_s=0.01)
        sampler.start()
        while len(served) < 4:
            threading.Event().wait(0.01)
        result = sampler.stop()
    finally:
        server.shutdown()
    samples = result.samples
    assert result.parser == "own" and result.reason == "" and len(samples) == len(served)
    # each sample is one page, in the order served (the last page repeats once they run out)
    kv = [s.kv_cache_usage for s in samples]
    assert kv[:5] == [0.2, 0.4, 0.6, 0.8, 1.0][:len(kv[:5])] and all(k == 1.0 for k in kv[5:])


def test_speculative_acceptance_is_the_phase_s_accepted_over_proposed_draft_tokens() -> None:
    def page(accepted: int, drafted: int) -> str:
        stats = {"num_running": 2, "num_waiting": 0, "kv_blocks_used": 10, "kv_blocks_total": 100,
                 "spec_num_draft_tokens": drafted, "spec_num_accepted_tokens": accepted, "spec_num_verify_steps": drafted // 4}
        return render_metrics(stats, ServerCounters(), "m").decode()

    # the engine's counters since its start: 40 of 100 before the phase; 30 of 40 and then 70 of 100 more in it
    pages = iter([page(40, 100), page(70, 140), page(110, 200)])
    sampler = SeriesSampler("http://own/metrics", "own", fetch=lambda url: next(pages), clock=Clock(), interval_s=3600)
    sampler.start()
    sampler.scrape()
    series = sampler.stop().samples
    assert series[0].spec_acceptance_rate is None  # no draft yet in the phase
    assert series[1].spec_acceptance_rate == pytest.approx(30 / 40) and series[2].spec_acceptance_rate == pytest.approx(70 / 100)
    plain = SeriesSampler("http://own/metrics", "own", fetch=lambda url: own_page(10, 1, 0, 0, 0, 0), clock=Clock(),
                          interval_s=3600)
    plain.start()
    assert plain.stop().samples[-1].spec_acceptance_rate is None  # no speculation: no figure, never 0
