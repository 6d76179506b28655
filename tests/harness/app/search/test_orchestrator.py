"""``bench search`` end to end through the CLI against capacity servers exposed as engines, and
the capacity ranking and report on their own.

The capacity server (harness.loadgen.capacity_server) serves ``slots`` streams at once and
FIFO-queues the rest; one request takes S = prefill_ms + (T - 1) * per_token_ms. Under a
concurrency cap c with every request due at once, TTFT = prefill_ms for c <= slots and about
S + prefill_ms above (one request always waits for a completion): with prefill 40 ms, 20 ms per
token, T = 12 (S = 260 ms) and a p99 TTFT SLO of 150 ms (~40 ms below capacity, ~300 ms above:
wide margins on a shared 2-core machine), the capacity is exactly c = slots, and
the integer search probes 1, 2, 4, 8, 6, 5 for slots = 4 and 1, 2, 4, 3 for slots = 2
(tests/harness/app/search/test_capacity.py derives it by hand).
"""

from __future__ import annotations

import json
import math
import re
from contextlib import contextmanager

import pytest
from typer.testing import CliRunner

import adapters.registry as registry
from adapters.base import Capabilities, Endpoint, ProbeResult
from harness.app.search.capacity import CapacityResult
from harness.app.cli import app
from harness.loadgen.capacity_server import capacity_server
from harness.metrics import SLO
from harness.scoring.verdict.capacity_ranking import rank_capacity
from results.schema import LoadProbe, EngineSearch, EngineStatus, RequestRecord, SearchProbe, SearchSummary
from results.store import load_run, read_records

pytestmark = pytest.mark.serial  # searches that find paced servers' slots from wall-clock latencies: run alone (make test)


class CapacityEngine:
    """An engine adapter serving from an already running capacity server (no process of its own)."""

    capabilities = Capabilities(hardware=("cpu",))

    def __init__(self, name: str, url: str) -> None:
        self.name, self.url = name, url

    def probe(self) -> ProbeResult:
        return ProbeResult(True, "fake", "0")

    @contextmanager
    def launch(self, config):
        yield Endpoint(base_url=self.url, model_name="capacity", display_name=f"{self.name} (capacity server)")


@pytest.fixture(scope="module")
def servers():
    with capacity_server(4, 40.0, 20.0) as four, capacity_server(2, 40.0, 20.0) as two, \
            capacity_server(1, 300.0, 1.0) as slow:
        yield {"four": four, "two": two, "slow": slow}


def _engines(monkeypatch, mapping: dict[str, str]) -> None:
    fakes = {name: CapacityEngine(name, url) for name, url in mapping.items()}
    monkeypatch.setattr(registry, "get_adapter", lambda n, hardware=None: fakes[n])


ASKED = 8  # requests asked per probe: what a probe below 2 slots sends (probe_requests: at least 4 per slot)
CONCURRENCY = ["--workload", "random", "--num-requests", str(ASKED), "--input-len", "8", "--output-len", "12",
               "--slo", "ttft_p99=150", "--search-var", "concurrency", "--warmup", "1"]


def test_concurrency_search_finds_each_servers_slots(servers, tmp_path, monkeypatch):
    _engines(monkeypatch, {"own": servers["four"], "vllm": servers["two"]})
    res = CliRunner().invoke(app, ["search", "--engine", "own,vllm", *CONCURRENCY, "--budget", "120",
                                   "-o", str(tmp_path), "--run-id", "conc"])
    assert res.exit_code == 0, res.output
    run = tmp_path / "conc"
    s = SearchSummary.model_validate_json((run / "search.json").read_text())
    own, vllm = s.engines["own"], s.engines["vllm"]
    # the capacity is read between the last passing and the first failing probe, where the SLO margin crosses 1
    assert own.stopped == "converged" and 4 <= own.capacity < 5 and own.bracket == (4.0, 5.0), own.message
    margins = {p.load: p.margin for p in own.probes}
    assert own.capacity == pytest.approx(4 + (1 - margins[4]) / (margins[5] - margins[4]))
    assert [p.load for p in own.probes] == [1, 2, 4, 8, 6, 5]
    assert 2 <= vllm.capacity < 3 and vllm.bracket == (2.0, 3.0) and [p.load for p in vllm.probes] == [1, 2, 4, 3]
    assert [p.seed for p in own.probes] == list(range(6))  # probe i: seed 0 + i
    # each probe sends at least 4 requests per in-flight slot (probe_requests), else the ASKED
    assert all(p.metrics is not None and p.metrics.requests_completed == max(ASKED, 4 * int(p.load)) for p in own.probes)
    assert s.unit == "concurrent requests" and s.search_var == "concurrency" and s.slos == {"ttft_p99": 150.0}
    assert not s.slos_default and s.budget_per_engine_s == 60.0 and s.requests_per_probe == ASKED
    assert own.elapsed_s <= 60.0 and s.wall_s > 0
    rec = s.capacity_recommendation
    assert rec is not None and rec.recommended == "vllm"  # own has more, but is the yardstick
    assert re.match(r"vllm sustains 2\.\d+ concurrent requests at p99 TTFT ≤ 150 ms; own 4\.\d+ \(yardstick\)", rec.sentence), \
        rec.sentence
    assert [r.engine for r in rec.ranking] == ["own", "vllm"] and rec.tie_groups == []
    # every probe's requests are stored, labelled with their probe; warm-up apart
    records = read_records(run / "requests.jsonl")
    measured = [r for r in records if r.engine == "own" and r.phase == "measured"]
    assert sorted({r.probe for r in measured}) == list(range(6)) and len(measured) == sum(max(ASKED, 4 * int(p.load)) for p in own.probes)
    assert {r.probe for r in records if r.phase == "warmup"} == {None}
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["search"]["search_var"] == "concurrency" and manifest["slos"] == {"ttft_p99": 150.0}
    loaded = load_run(run)  # summary.json: each engine at its found capacity
    assert loaded.summary.engines["own"].metrics.requests_completed == 16  # capacity 4: 4 per slot
    md = (run / "search.md").read_text()
    assert rec.sentence in md and "## Probes: own" in md and "search_latency_vs_load.png" in md
    assert (run / "search_latency_vs_load.png").read_bytes()[:4] == b"\x89PNG"
    assert "own probe 3: 8 concurrent requests → TTFT p99" in res.output and "✗" in res.output
    assert "Decision: vllm sustains 2" in res.output


def test_repeats_pool_each_probe_and_draw_fresh_seeds(servers, tmp_path, monkeypatch):
    import workloads.registry as workloads_registry

    _engines(monkeypatch, {"own": servers["four"]})
    real_build, drawn = workloads_registry.build_workload, []

    def build_and_note(opts, *args, **kwargs):  # every probe's workload (built without stats): seed, prompts
        w = real_build(opts, *args, **kwargs)
        if kwargs.get("with_stats") is False:
            drawn.append((opts.seed, tuple(tuple(sess.request.prompt_token_ids) for sess in w.sessions)))
        return w

    monkeypatch.setattr(workloads_registry, "build_workload", build_and_note)
    res = CliRunner().invoke(app, ["search", "--engine", "own", *CONCURRENCY, "--repeats", "2", "--low", "2", "--budget", "120",
                                   "-o", str(tmp_path), "--run-id", "reps"])
    assert res.exit_code == 0, res.output
    s = SearchSummary.model_validate_json((tmp_path / "reps" / "search.json").read_text())
    own = s.engines["own"]
    assert s.repeats == 2 and s.requests_per_probe == ASKED
    assert own.stopped == "converged" and 4 <= own.capacity < 5 and own.bracket == (4.0, 5.0), own.message
    assert [p.load for p in own.probes] == [2, 4, 8, 6, 5]
    for p in own.probes:  # pooled over both repeats, each repeat's metrics and verdict kept
        assert len(p.repeats) == 2 and len(p.repeat_passed) == 2
        per = max(ASKED, 4 * int(p.load))
        assert [m.requests_completed for m in p.repeats] == [per, per] and p.metrics.requests_completed == 2 * per
        assert p.seeds == [2 * p.index, 2 * p.index + 1] and p.seed == 2 * p.index  # seed 0 + i * 2 + k
        assert p.passed == (p.load <= 4) and all(p.repeat_passed) == (p.load <= 4)
        ci = p.intervals["ttft_ms.p99"]  # over the two repeats
        assert ci.n == 2 and ci.low <= ci.high, ci
    # the seeds differ per repeat and per probe, and so do the drawn prompts: none reused
    assert [seed for seed, _ in drawn] == list(range(10))
    assert len({prompts for _, prompts in drawn}) == 10
    prompts = [pr for _, ps in drawn for pr in ps]
    assert len(set(prompts)) == len(prompts)
    records = [r for r in read_records(tmp_path / "reps" / "requests.jsonl") if r.phase == "measured"]
    for p in own.probes:
        mine = [r for r in records if r.probe == p.index]
        assert sorted({r.repeat for r in mine}) == [0, 1] and len(mine) == 2 * max(ASKED, 4 * int(p.load))
    assert "own probe 1: 4 concurrent requests → TTFT p99" in res.output and "(2 of 2 repeats pass)" in res.output
    assert "(0 of 2 repeats pass)" in res.output and "2 repeats per probe" in res.output
    md = (tmp_path / "reps" / "search.md").read_text()
    assert "pass (2 of 2 repeats pass)" in md and "seed 0 + i × 2 + k" in md and "| 2, 3 |" in md
    loaded = load_run(tmp_path / "reps")  # summary.json: the capacity probe's pooled metrics and its repeats
    assert loaded.summary.engines["own"].metrics.requests_completed == 2 * 16  # capacity 4: 4 × 4 per repeat
    assert len(loaded.summary.engines["own"].repeats) == 2


def test_a_server_that_never_meets_the_slo_stops_within_budget(servers, tmp_path, monkeypatch):
    _engines(monkeypatch, {"vllm": servers["slow"]})
    res = CliRunner().invoke(app, ["search", "--engine", "vllm", "--workload", "random", "--num-requests", "4",
                                   "--input-len", "8", "--output-len", "2", "--slo", "ttft_p99=100", "--low", "2",
                                   "--budget", "20", "--warmup", "0", "-o", str(tmp_path), "--run-id", "never"])
    assert res.exit_code == 0, res.output
    s = SearchSummary.model_validate_json((tmp_path / "never" / "search.json").read_text())
    e = s.engines["vllm"]
    # 2 req/s fails (17 requests: 8 s of arrivals at least); halving to 1 req/s would take about
    # twice as long, more than the budget leaves
    assert e.stopped == "budget" and e.capacity == 0 and e.elapsed_s <= 20
    assert e.probes[0].load == 2.0 and e.probes[0].metrics.requests_sent == 17
    assert not any(p.passed for p in e.probes)
    assert e.probes[0].values["ttft_p99"] >= 300 and not e.probes[0].passed
    assert s.unit == "req/s"
    rec = s.capacity_recommendation
    assert rec.recommended is None
    lowest = min(p.load for p in e.probes)
    assert rec.sentence == f"no engine sustains p99 TTFT ≤ 100 ms at the lowest load searched ({lowest:g} req/s): vllm 0"
    assert "no probe passed before the time budget (20 s) is spent" in res.output
    assert (tmp_path / "never" / "search.md").exists()


def test_ctrl_c_keeps_the_probes_and_exits_130(servers, tmp_path, monkeypatch):
    from harness.loadgen.runner import Runner  # what the one measurement step measures with

    _engines(monkeypatch, {"own": servers["four"]})
    real_measure, calls = Runner.measure, []

    async def measure_then_interrupt(self, workload):
        out = await real_measure(self, workload)
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(Runner, "measure", measure_then_interrupt)
    res = CliRunner().invoke(app, ["search", "--engine", "own", *CONCURRENCY, "--budget", "60",
                                   "-o", str(tmp_path), "--run-id", "ctrlc"])
    assert res.exit_code == 130, res.output
    s = SearchSummary.model_validate_json((tmp_path / "ctrlc" / "search.json").read_text())
    e = s.engines["own"]
    assert e.status is EngineStatus.INTERRUPTED and e.stopped == "interrupted" and "Ctrl-C" in e.reason
    assert len(e.probes) == 1 and e.capacity == 1.0  # the passing probe is kept: a lower bound
    records = read_records(tmp_path / "ctrlc" / "requests.jsonl")
    assert sorted({r.probe for r in records if r.phase == "measured"}) == [0, 1]  # the interrupted probe's too
    assert (tmp_path / "ctrlc" / "search.md").exists()


@pytest.mark.parametrize("args, message", [
    (["--low", "0"], "--low must be a finite number > 0"),
    (["--search-var", "foo"], "--search-var must be one of rate, concurrency"),
    (["--tolerance", "0"], "--tolerance must be a finite number > 0"),
    (["--search-var", "concurrency", "--low", "1.5"], "--low must be a whole number >= 1"),
    (["--low", "4", "--high", "2"], "--high (2) must be >= --low (4)"),
    (["--workload", "trace"], "search it with --search-var concurrency"),
    (["--slo", "ttft_p99=fast"], "SLO ttft_p99 needs a number"),
    (["--max-probes", "0"], "--max-probes must be >= 1"),
    (["--repeats", "0"], "--repeats must be between 1 and 10"),
    (["--repeats", "11"], "--repeats must be between 1 and 10"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    res = CliRunner().invoke(app, ["search", "--engine", "own", *args, "-o", str(tmp_path)])
    assert res.exit_code == 2, res.output
    assert message in res.output and len(res.output.strip().splitlines()) == 1, res.output


# ------------------------------------------------------------------------------------------
# the ranking and the stored models on their own


def _engine(capacity: float, bracket, *, status=EngineStatus.OK, probes=1, integer=False) -> EngineSearch:
    return EngineSearch(status=status, capacity=capacity, bracket=bracket, integer=integer, unit="req/s",
                        probes=[SearchProbe(index=i, load=1.0, meets_slo=True) for i in range(probes)])


SLOS = [SLO("ttft", 500.0), SLO("tpot", 50.0)]


def test_ranking_by_capacity_with_ties_and_the_yardstick():
    rec = rank_capacity({"own": _engine(2.2, (2.2, 2.3)), "vllm": _engine(2.4, (2.4, 2.5)),
                         "sglang": _engine(3.1, (3.1, 3.2))}, SLOS, "sessions/s")
    assert rec.recommended == "sglang" and [r.engine for r in rec.ranking] == ["sglang", "vllm", "own"]
    assert rec.sentence == ("sglang sustains 3.1 sessions/s at p99 TTFT ≤ 500 ms and p99 TPOT ≤ 50 ms; vllm 2.4; "
                            "own 2.2 (yardstick)")
    # overlapping brackets are a tie, and said so; the yardstick never wins even when highest
    rec = rank_capacity({"own": _engine(5.0, (5.0, 5.2)), "vllm": _engine(3.0, (3.0, 3.15)),
                         "sglang": _engine(3.1, (3.1, 3.25))}, SLOS, "req/s")
    assert rec.recommended == "sglang" and rec.tie_groups == [["sglang", "vllm"]]
    assert [r.rank for r in rec.ranking] == [1, 2, 2]
    assert "sglang sustains 3.1 req/s" in rec.sentence and "tied with vllm" in rec.sentence
    assert "own 5 (yardstick)" in rec.sentence


def test_ranking_lower_bounds_exclusions_and_nobody_passing():
    rec = rank_capacity({"vllm": _engine(4.0, (4.0, None)), "sglang": _engine(6.0, (6.0, 6.2)),
                         "trtllm": _engine(0.0, (None, None), status=EngineStatus.SKIPPED)}, SLOS, "req/s")
    vllm = next(r for r in rec.ranking if r.engine == "vllm")
    assert vllm.at_least and vllm.tied_with == ["sglang"]  # [4, inf) overlaps [6, 6.2)
    assert "vllm ≥ 4 (tied with sglang)" in rec.sentence and "trtllm (skipped)" in rec.sentence
    rec = rank_capacity({"own": _engine(0.0, (None, 1.0)), "vllm": _engine(0.0, (None, 1.0))}, SLOS, "req/s", low=1.0)
    assert rec.recommended is None and rec.sentence.startswith("no engine sustains p99 TTFT ≤ 500 ms")
    rec = rank_capacity({"own": _engine(2.0, (2.0, 2.1))}, SLOS, "req/s")
    assert rec.recommended is None and rec.sentence.startswith("only the reference engine own was searched")


def test_stored_models_mirror_the_search_result_and_old_records_load():
    # results cannot import harness: the stored engine search repeats CapacityResult's fields
    assert set(CapacityResult.model_fields) <= set(EngineSearch.model_fields)
    assert issubclass(SearchProbe, LoadProbe)  # one probe model, stored with its metrics
    old_probe = SearchProbe.model_validate({"index": 0, "load": 1.0, "meets_slo": True})  # from before --repeats
    assert old_probe.repeats == [] and old_probe.repeat_passed == [] and old_probe.intervals == {}
    assert SearchSummary.model_validate({"run_id": "x", "workload": "random", "search_var": "rate", "unit": "req/s",
                                         "low": 1, "tolerance": 0.05, "budget_s": 1, "budget_per_engine_s": 1,
                                         "max_probes": 1}).repeats == 1
    old = RequestRecord.model_validate({"request_id": "r", "engine": "own", "workload": "random", "scheduled_ns": 1})
    assert old.probe is None


def test_report_draws_infinite_values_and_fails(tmp_path):
    from reports.search import render_markdown, write_search_report

    probes = [SearchProbe(index=0, load=1.0, meets_slo=True, values={"ttft_p99": 40.0}),
              SearchProbe(index=1, load=2.0, meets_slo=False, values={"ttft_p99": None}),
              SearchProbe(index=2, load=1.5, meets_slo=False, saturated=True, values={"ttft_p99": 55.0})]
    e = EngineSearch(capacity=1.0, bracket=(1.0, 1.5), probes=probes, stopped="converged", unit="req/s")
    s = SearchSummary(run_id="x", workload="random", search_var="rate", unit="req/s", slos={"ttft_p99": 50.0},
                      low=1.0, tolerance=0.05, budget_s=60, budget_per_engine_s=60, max_probes=12,
                      engines={"vllm": e}, capacity_recommendation=rank_capacity({"vllm": e}, [SLO("ttft", 50.0)], "req/s"))
    (tmp_path / "search.json").write_text(s.model_dump_json())
    md, png = write_search_report(tmp_path)
    text = md.read_text()
    assert "| 1 | 2 | ∞ | ∞ | fail |" in text and "fail (saturated)" in text and png is not None and png.exists()
    assert math.isfinite(len(render_markdown(s, None)))


def test_bench_report_on_a_search_folder_writes_the_search_report(servers, tmp_path, monkeypatch):
    _engines(monkeypatch, {"own": servers["four"]})
    res = CliRunner().invoke(app, ["search", "--engine", "own", "--workload", "random", "--num-requests", "4",
                                   "--input-len", "8", "--output-len", "2", "--search-var", "concurrency",
                                   "--high", "2", "--slo", "ttft_p99=150", "--budget", "30", "--warmup", "0",
                                   "-o", str(tmp_path), "--run-id", "rep"])
    assert res.exit_code == 0, res.output
    (tmp_path / "rep" / "search.md").unlink()
    res = CliRunner().invoke(app, ["report", "rep", "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "Search report:" in res.output and (tmp_path / "rep" / "search.md").is_file()
    assert not (tmp_path / "rep" / "recommendation.json").exists()  # a search is not re-scored as a load point
