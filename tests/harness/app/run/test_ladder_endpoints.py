"""``bench run`` with load ladders against deployments that already run (``--endpoint NAME=URL``):
three paced servers (tests/fake_servers/paced_server.py) that differ only in their slots (FIFO, an
engine's max_num_seqs: 1, 2 and 4), so their capacities at a TTFT SLO are known to be ordered
four > two > one, about 2x apart. One run ranks them, salts the prompts and writes the verdict."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.app.cli import app
from results.store import load_run, read_records
from tests.quick_reports import quick_reports

pytestmark = pytest.mark.serial  # capacities of paced servers read from wall-clock latencies: run alone (make test)


@pytest.fixture(autouse=True)
def _no_charts(monkeypatch):
    quick_reports(monkeypatch)  # no assertion here reads a chart or the winner map: seconds a run saved


SERVER = Path(__file__).parents[3] / "fake_servers" / "paced_server.py"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _servers(specs: dict[str, list[str]]):
    """Paced servers by name (30 ms to the first token, 10 ms per token), with their extra flags."""
    procs, urls = [], {}
    for name, extra in specs.items():
        port = _port()
        procs.append(subprocess.Popen([sys.executable, str(SERVER), "--port", str(port), *extra]))
        urls[name] = f"http://127.0.0.1:{port}"
    try:
        for url in urls.values():
            deadline = time.monotonic() + 30
            while True:
                try:
                    urllib.request.urlopen(url + "/health", timeout=1)
                    break
                except OSError:
                    assert time.monotonic() < deadline, f"{url} did not start"
                    time.sleep(0.1)
        yield urls
    finally:
        for p in procs:
            p.kill()
            p.wait(10)


@pytest.fixture(scope="module")
def slotted():
    """Three paced servers with 1, 2 and 4 slots."""
    yield from _servers({"one": ["--slots", "1"], "two": ["--slots", "2"], "four": ["--slots", "4"]})


ARGS = ["--model", "paced", "--workload", "random", "--input-len", "8", "--output-len", "8", "--slo",
        "ttft_p90=150,tpot_p90=50", "--warmup", "1", "--no-calibration", "--no-feature-probes", "--no-equivalence"]


def test_three_endpoints_are_ranked_by_their_capacity(slotted, tmp_path):
    # a request holds its slot 30 + 7 x 10 = 100 ms; TTFT p90 <= 150 ms holds while at most one
    # request waits per slot, so each server's capacity is about its slots x 8 tokens / 0.1 s
    res = CliRunner().invoke(app, [
        "run", "--endpoint", f"one={slotted['one']}", "--endpoint", f"two={slotted['two']}",
        "--endpoint", f"four={slotted['four']}", *ARGS, "--ladder-budget", "40", "-o", str(tmp_path), "--run-id", "three"])
    assert res.exit_code == 0, res.output
    run = load_run(tmp_path / "three")
    d = run.ladder.decision
    assert d.winner == "four" and d.ranking == ["four", "two", "one"] and not d.tie
    assert d.ratio_interval is not None and d.ratio_interval[0] > 1.3  # four vs two: about 2x
    caps = {n: e.capacity.output_tps for n, e in run.ladder.engines.items()}
    assert caps["four"] > 1.5 * caps["two"] > 1.5 * 1.5 * caps["one"] > 0
    assert all(e.excluded == "" and not e.reference for e in run.ladder.engines.values())
    # the race: once their first climbs bracket them, 'one' and 'two' cannot reach four's floor and are measured no
    # more (each point once), while the leader's bracket is measured again on a fresh start
    for name in ("one", "two"):
        e = run.ladder.engines[name]
        assert e.race.startswith("at most ") and "below four's floor of " in e.race and all(len(p.seeds) == 1 for p in e.points), e.race
        assert e.capacity.ceiling < e.capacity.floor * 1.5 < run.ladder.engines["four"].capacity.floor
    assert "Out of the race, measured no more: " in res.output
    four = run.ladder.engines["four"]
    assert max(len(p.seeds) for p in four.points) == 2 and "four: repeat — the leader's bracket" in res.output
    # the ladder path writes each engine's validity facts too (token counts against our tokenizer's)
    assert set(run.manifest.validity) == {"one", "two", "four"}
    # the prompts were salted (an endpoint's warm prefix cache serves none of them) and the verdict comes first
    assert run.manifest.workload["prompt_salt"]
    assert res.output.index("Verdict") < res.output.index("Details")
    assert d.sentence.startswith("four sustains") and len(d.sentence) <= 320
    assert json.loads((tmp_path / "three" / "ladder.json").read_text())["decision"]["winner"] == "four"


def test_an_endpoint_crashing_mid_ladder_keeps_its_points_and_is_excluded(tmp_path):
    # 'crashy' has more slots but dies after 70 completions (its warm-up, then loads 1, 2 and 4 = 12 + 12 + 16 ...)
    for urls in _servers({"sturdy": ["--slots", "2"], "crashy": ["--slots", "4", "--die-after", "70"]}):
        res = CliRunner().invoke(app, ["run", "--endpoint", f"sturdy={urls['sturdy']}", "--endpoint",
                                       f"crashy={urls['crashy']}", *ARGS, "--ladder-budget", "30", "-o", str(tmp_path),
                                       "--run-id", "crash"])
    assert res.exit_code == 0, res.output
    run = load_run(tmp_path / "crash")
    crashy = run.ladder.engines["crashy"]
    assert crashy.stopped == "crashed" and "stopped answering" in crashy.crash and crashy.crashed_at is not None
    assert [p.load for p in crashy.points][:3] == [1, 2, 4]  # what it measured before dying is kept
    assert crashy.capacity is not None and crashy.capacity.output_tps > 0
    assert crashy.excluded.startswith(f"crashed under load ({crashy.crashed_at} in flight)")
    assert run.ladder.decision.winner == "sturdy" and run.ladder.decision.excluded["crashy"] == crashy.excluded
    report = (tmp_path / "crash" / "report.md").read_text()  # reported, in the capacity table's gates
    assert report.count("crashed under load") >= 1 and "| crashy |" in report


@pytest.mark.parametrize("start", [[], ["--sequential-start"]])
def test_the_decisive_points_are_measured_again_each_on_a_fresh_start(start, tmp_path, monkeypatch):
    """Two identical engines, both open at --max-load 2 (nothing separates them): the allocation
    repeats their bracket points three times each (its most), interleaved, each time on a fresh
    start of the engine (so the interval holds the spread between starts) after a ramp (a whole pass
    at the passing load, stored with phase "ramp", judged nowhere), whether the engines were kept
    frozen since their climb (all fit at once) or not (--sequential-start)."""
    import adapters.registry as registry
    from tests.fake_servers.ray_engines import PacedEngine

    (tmp_path / "pids").mkdir()
    monkeypatch.setattr(registry, "get_adapter", lambda n, hardware=None: PacedEngine(n, str(tmp_path / "pids")))
    res = CliRunner().invoke(app, ["run", "--engine", "transformers,vllm", *start, "--workload", "random", "--input-len",
                                   "8", "--output-len", "4", "--ladder-budget", "20", "--max-load", "2", "--warmup", "1",
                                   "--slo", "ttft_p90=2000,tpot_p90=200", "--no-calibration", "--no-feature-probes",
                                   "--no-equivalence", "-o", str(tmp_path), "--run-id", "decisive"])
    assert res.exit_code == 0, res.output
    ladder = load_run(tmp_path / "decisive").ladder
    for name in ("transformers", "vllm"):
        e = ladder.engines[name]
        assert [p.load for p in e.points] == [1, 2] and e.stopped == "max_load"
        # the bracket point (2 in flight, the highest allowed): 1 + 3 more, fresh prompts each; the
        # ramp (at 2) is in no point
        assert [len(p.seeds) for p in e.points] == [1, 4] and len(set(e.points[1].seeds)) == 4
        repeats = res.output.split(f"{name}: repeat — ", 1)[1]
        assert repeats.count(f"{name}: starting") == 3 and f"{name}: thawing its started server" not in repeats  # 3 fresh starts
        assert repeats.count(f"{name} ramp at 2 in flight") == 3
        ramps = [r for r in read_records(tmp_path / "decisive" / "requests.jsonl") if r.engine == name and r.phase == "ramp"]
        # stored, 3 whole passes, each as many requests as a measurement of the point it ramps to
        assert len(ramps) == 3 * e.points[1].planned_requests[-1] and all(r.error_class is None for r in ramps)
    # one figure for a point measured three times: summary.json's, the weighted lens's and the ladder's
    run = load_run(tmp_path / "decisive")
    for name, e in ladder.engines.items():
        at = next(p for p in e.points if p.index == run.summary.engines[name].ladder_point)
        assert run.summary.engines[name].metrics.output_throughput == pytest.approx(at.output_tps)
        assert run.summary.engines[name].metrics.request_throughput == pytest.approx(at.request_rate)  # requests/s
        row = next(r for r in run.recommendation.ranking if r.engine == name)
        assert row.metrics["output_throughput"] == pytest.approx(at.output_tps) and row.repeats == 1
        assert row.condition == f"random at {at.load} requests in flight (closed loop)"
    assert run.recommendation.on_ladder


def test_ctrl_c_mid_ladder_keeps_the_points_and_says_so(slotted, tmp_path, monkeypatch):
    from harness.app.run import ladder_trial

    real, calls = ladder_trial._Points.__call__, []

    def second_is_interrupted(self, load, seed, repeat, **kw):
        calls.append(load)
        if len(calls) == 2:  # four's second point (its low end: 1 briefly, then 2)
            raise KeyboardInterrupt
        return real(self, load, seed, repeat, **kw)

    monkeypatch.setattr(ladder_trial._Points, "__call__", second_is_interrupted)
    res = CliRunner().invoke(app, ["run", "--endpoint", f"four={slotted['four']}", "--endpoint", f"two={slotted['two']}",
                                   *ARGS, "-o", str(tmp_path), "--run-id", "ctrlc"])
    assert res.exit_code == 130, res.output
    ladder = load_run(tmp_path / "ctrlc").ladder
    four = ladder.engines["four"]
    assert [p.load for p in four.points] == [1] and four.status.value == "interrupted"
    why = "interrupted by the user (Ctrl-C) while climbing its ladder; its 1 measurement is kept"
    assert four.reason == why
    # shown once, as interrupted (issue 39's review: "failed", and the reason twice in Details' note)
    entry = load_run(tmp_path / "ctrlc").summary.engines["four"]
    assert entry.status.value == "interrupted" and entry.reason.count(why) == 1
    details = " ".join(res.output.split()).split("─ Details ─")[1]
    assert details.count(why) == 1 and "│ four │ interrupted │" in details and "failed" not in details
    assert ladder.engines["two"].status.value == "not_measured"
    assert ladder.decision.interrupted == "the user (Ctrl-C)"
    assert ladder.decision.sentence.startswith("Interrupted by the user (Ctrl-C), on what was measured: ")


def test_the_leader_climbs_first_and_an_open_runner_up_stops_once_it_cannot_reach_it(tmp_path):
    """Both low ends (1 and 2 in flight) pass, so both are open and the verdict undecided; 'quick'
    streams twice as fast with 4 times the slots. The allocation climbs the leader first (its
    climb raises the bar), to where its SLO breaks; then 'slow', which could still lead while
    nothing bounded it, climbs on one point (4 in flight: three points bound its ceiling) and
    stops there, its ceiling below quick's floor: out of the race, the verdict decided. The
    stored line, the capacity table's note and the verdict give the same figures."""
    for urls in _servers({"quick": ["--slots", "8", "--itl-ms", "5"], "slow": ["--slots", "2", "--ttft-ms", "10"]}):
        res = CliRunner().invoke(app, ["run", "--endpoint", f"quick={urls['quick']}", "--endpoint",
                                       f"slow={urls['slow']}", *ARGS, "--ladder-budget", "2", "-o", str(tmp_path),
                                       "--run-id", "settle"])
    assert res.exit_code == 0, res.output
    ladder = load_run(tmp_path / "settle").ladder
    quick, slow = ladder.engines["quick"], ladder.engines["slow"]
    assert [p.load for p in quick.points][:3] == [1, 2, 4] and not quick.capacity.open
    assert [p.load for p in slow.points] == [1, 2, 4] and slow.stopped == "race" and slow.capacity.open
    said = " ".join(res.output.split())
    assert said.index("quick: climb — the leader's capacity is not found yet") < \
        said.index("slow: climb — its ladder stopped before any SLO broke and it could still lead quick")
    d = ladder.decision
    assert not d.undecided and d.winner == "quick" and d.runner_up == "slow"
    bar, top = quick.capacity.floor, slow.capacity.ceiling
    lo, hi = quick.capacity.interval
    what = "the low end of its 95 % interval" if f"{bar:,.1f}" == f"{lo:,.1f}" else \
        "the throughput its passing load sustained, below its 95 % interval"
    assert top < bar and slow.race == (f"at most {top:,.1f} tok/s, below quick's floor of {bar:,.1f} tok/s ({what} "
                                       f"[{lo:,.1f}–{hi:,.1f}]): stopped after 3 points")
    assert f"at most {top:,.1f} tok/s, below quick's floor of {bar:,.1f}: the least its capacity can be" in d.sentence


def test_an_endpoint_that_is_not_reachable_is_said_once_and_nothing_is_built_for_it(tmp_path):
    """A review found a run against an unreachable endpoint build the fidelity reference (about
    100 s on the 2-core machine) before saying nothing was measured, and its verdict name the
    endpoint twice ("e: e: http://…"); since issue 41 nothing that cannot be measured leaves a
    run folder: one error line says why, exit 2."""
    res = CliRunner().invoke(app, ["run", "--endpoint", f"e=http://127.0.0.1:{_port()}", *ARGS, "-o", str(tmp_path),
                                   "--run-id", "dead"])
    assert res.exit_code == 2, res.output
    assert "Fidelity reference" not in res.output and not (tmp_path / "dead").exists()
    err = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: no engine can run here") and err[0].count("e: http://127.0.0.1:") == 1


def test_bench_run_and_bench_search_read_one_engines_capacity_alike(monkeypatch, tmp_path):
    """One scripted engine measured by ``bench run`` (its ladder, concurrency axis) and by
    ``bench search --search-var concurrency`` gives the same capacity: both judge points with the
    one judge (``harness.scoring.capacity.frontier.point_stats``) and read the capacity with the one
    estimator (``capacity_from``). One slot, a request holds it 30 + 7 x 10 = 100 ms: at c in
    flight the last waits for c - 1 others, so TTFT p90 is about 30 + 100 (c - 1) ms, and a
    180 ms SLO passes at 2 (130 ms, margin 0.72) and breaks at 3 (230 ms, 1.28): both brackets
    are [2, 3), the capacity about 2.5 where the margin crosses 1."""
    import adapters.registry as registry
    from contextlib import contextmanager

    from adapters.base import Capabilities, Endpoint, ProbeResult
    from results.schema import SearchSummary

    slo = "ttft_p90=180"
    # 'slow' misses the SLO at the lowest load (400 ms to its first token): excluded at the slo gate, by the
    # ladder and the weighted lens alike (a review found the lens crash on a run with one survivor and such an engine)
    for urls in _servers({"one": ["--slots", "1"], "slow": ["--ttft-ms", "400"]}):
        run = CliRunner().invoke(app, ["run", "--endpoint", f"one={urls['one']}", "--endpoint", f"slow={urls['slow']}",
                                       *ARGS[:8], "--slo", slo, *ARGS[10:], "--ladder-budget", "30", "-o", str(tmp_path),
                                       "--run-id", "run"])

        class Served:  # the same server as an engine adapter, for bench search (which takes no endpoints)
            name, capabilities = "vllm", Capabilities(hardware=("cpu",))

            def probe(self) -> ProbeResult:
                return ProbeResult(True, "scripted", "0")

            @contextmanager
            def launch(self, config):
                yield Endpoint(base_url=urls["one"], model_name="paced", display_name="one (paced server)")

        monkeypatch.setattr(registry, "get_adapter", lambda n, hardware=None: Served())
        search = CliRunner().invoke(app, ["search", "--engine", "vllm", "--workload", "random", "--input-len", "8",
                                          "--output-len", "8", "--num-requests", "8", "--slo", slo, "--search-var", "concurrency",
                                          "--warmup", "1", "--budget", "60", "-o", str(tmp_path), "--run-id", "search"])
    assert run.exit_code == 0, run.output
    assert search.exit_code == 0, search.output
    ran = load_run(tmp_path / "run").ladder.engines["one"].capacity
    found = SearchSummary.model_validate_json((tmp_path / "search" / "search.json").read_text()).engines["vllm"]
    assert ran.bracket == (2, 3) and found.bracket == (2.0, 3.0), (ran, found.message)
    assert 2 <= ran.load < 3 and 2 <= found.capacity < 3
    assert abs(ran.load - found.capacity) <= 0.3, (ran.load, found.capacity)
    stored = load_run(tmp_path / "run")
    assert stored.ladder.engines["slow"].excluded_stage == "slo" and stored.ladder.decision.winner == "one"
    assert stored.recommendation.elimination_stage == {"slow": "slo"} and stored.recommendation.winner == "one"
    assert "slow 2nd" in stored.recommendation.deciding_constraint
    assert (tmp_path / "run" / "report.md").is_file()
