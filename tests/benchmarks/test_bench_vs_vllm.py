"""``benchmarks/bench_vs_vllm.py``: the bench commands it plans (engine order alternating by
repeat, the issue's workload sizes), the own ÷ vLLM ratios and goal verdicts computed from stored
summaries, and the whole script against a fake ``bench`` that writes synthetic run folders (no
server starts; the numbers are chosen so every ratio is checked against one computed by hand)."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from results.schema import Distribution, EngineResult, EngineStatus, Metrics, RequestRecord, RunSummary

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_vs_vllm", ROOT / "benchmarks" / "bench_vs_vllm.py")
bvv = importlib.util.module_from_spec(_spec)
sys.modules["bench_vs_vllm"] = bvv
_spec.loader.exec_module(bvv)

# per repeat (0, 1, 2): own and vllm output tok/s and TTFT p99 (ms); ratios by hand below
CHAT = {"own": {"tps": [30.0, 24.0, 27.0], "p99": [900.0, 1100.0, 1000.0]},
        "vllm": {"tps": [20.0, 20.0, 25.0], "p99": [1000.0, 1000.0, 1000.0]}}
AGENTIC = {"own": {"tps": [26.0, 28.0, 22.0], "p99": [500.0, 400.0, 800.0]},
           "vllm": {"tps": [20.0, 20.0, 20.0], "p99": [1000.0, 1000.0, 1000.0]}}
# chat tok/s: 1.5, 1.2, 1.08 → median 1.2 (meets >= 1.2), worst 1.08 (does not)
# chat TTFT p99: 0.9, 1.1, 1.0 → median 1.0 (meets <= 1.0), worst 1.1 (does not)
# agentic tok/s: 1.3, 1.4, 1.1 → median 1.3, worst 1.1 (does not); agentic TTFT p99: 0.5, 0.4, 0.8


def metrics(tps: float, p99: float, p50: float = 100.0, tpot: float = 40.0, n: int = 4) -> Metrics:
    return Metrics(requests_sent=n, requests_completed=n, duration_s=10.0, output_throughput=tps,
                   ttft_ms=Distribution(p50=p50, p99=p99), tpot_ms=Distribution(p50=tpot), rate_valid=True)


def summary(workload: str, repeat: int, data: dict, failed: str | None = None) -> RunSummary:
    engines = {}
    for e in ("own", "vllm"):
        if e == failed:
            engines[e] = EngineResult(status=EngineStatus.FAILED, reason="crashed")
            continue
        m = metrics(data[e]["tps"][repeat], data[e]["p99"][repeat])
        engines[e] = EngineResult(status=EngineStatus.OK, metrics=m, repeats=[m])
    return RunSummary(run_id=f"r{repeat + 1}-{workload}", workload=workload, engines=engines)


def table_of(data_by_workload: dict, failed: dict | None = None) -> dict:
    runs = bvv.plan_runs(3, list(data_by_workload))
    results = [(run, bvv.engine_metrics(summary(run.workload, run.repeat, data_by_workload[run.workload],
                                                (failed or {}).get(run.run_id))))
               for run in runs]
    return bvv.per_repeat(results, 3)


# -- pure logic ---------------------------------------------------------------------------------
def test_summarize_is_median_min_max():
    assert bvv.summarize([3.0, 1.0, 2.5]) == "2.50 [1.00..3.00]"
    assert bvv.summarize([1000.0, 1234.56], digits=1) == "1117.3 [1000.0..1234.6]"
    assert bvv.summarize([]) == "–"


def test_plan_alternates_engine_order_and_checks_equivalence_once():
    plan = bvv.plan_runs(3, ["chat", "agentic"])
    assert [(r.run_id, r.engines) for r in plan] == [
        ("r1-chat", ("own", "vllm")), ("r1-agentic", ("own", "vllm")),
        ("r2-chat", ("vllm", "own")), ("r2-agentic", ("vllm", "own")),
        ("r3-chat", ("own", "vllm")), ("r3-agentic", ("own", "vllm"))]
    assert [r.first for r in plan] == [True] + [False] * 5


def test_bench_args_size_the_workloads_as_issue_14_asks(tmp_path):
    s = bvv.Settings(engine_args=(("own", "speculative=ngram"), ("vllm", "max_num_seqs=64")))
    chat, agentic, chat2, _ = bvv.plan_runs(2, ["chat", "agentic"])
    a = bvv.bench_args(chat, s, tmp_path)
    assert a[:5] == ["run", "--engine", "own,vllm", "--workload", "chat"]
    for key, value in (("--num-requests", "48"), ("--request-rate", "inf"), ("--threads", "1"), ("--seed", "0"),
                       ("--output-dir", str(tmp_path)), ("--run-id", "r1-chat")):
        assert a[a.index(key) + 1] == value, key
    assert [a[i + 1] for i, x in enumerate(a) if x == "--engine-arg"] == ["own:speculative=ngram",
                                                                         "vllm:max_num_seqs=64"]
    assert "--no-feature-probes" in a and "--no-calibration" in a and "--no-equivalence" not in a
    g = bvv.bench_args(agentic, s, tmp_path)
    assert g[g.index("--num-requests") + 1] == "40" and "--request-rate" not in g  # the workload's session rate
    assert "--no-equivalence" in g
    assert bvv.bench_args(chat2, s, tmp_path)[:3] == ["run", "--engine", "vllm,own"]
    g = bvv.bench_args(agentic, bvv.Settings(turns=4, agentic_rate="inf", calibrate=True), tmp_path)
    assert g[g.index("--num-requests") + 1] == "4" and g[g.index("--request-rate") + 1] == "inf"
    assert "--no-calibration" not in g


def test_ratios_and_verdicts_match_the_hand_computed_ones():
    rows = {(r["workload"], r["metric"]): r
            for r in bvv.ratio_rows(table_of({"chat": CHAT, "agentic": AGENTIC}), ["chat", "agentic"], bvv.Settings())}
    assert list(rows) == [("chat", "output_tps"), ("agentic", "output_tps"), ("chat", "ttft_p99_ms"),
                          ("agentic", "ttft_p99_ms")]
    c = rows["chat", "output_tps"]
    assert c["per_repeat"] == [1.5, 1.2, 1.08]
    assert (c["median"], c["min"], c["max"], c["n"]) == (1.2, 1.08, 1.5, 3)
    assert (c["goal"], c["met_at_median"], c["worst"], c["met_at_worst"]) == (">= 1.2", True, 1.08, False)
    assert c["label"] == "output tok/s, own ÷ vLLM-CPU, chat, 48 requests at rate inf"
    t = rows["chat", "ttft_p99_ms"]
    assert t["per_repeat"] == [0.9, 1.1, 1.0]
    assert (t["median"], t["goal"], t["met_at_median"]) == (1.0, "<= 1.0", True)
    assert (t["worst"], t["met_at_worst"]) == (1.1, False)  # the highest ratio is the worst for a "<=" goal
    g = rows["agentic", "output_tps"]
    assert g["per_repeat"] == pytest.approx([1.3, 1.4, 1.1])
    assert g["median"] == pytest.approx(1.3) and g["met_at_median"] is True
    assert g["worst"] == pytest.approx(1.1) and g["met_at_worst"] is False
    assert g["label"] == "output tok/s, own ÷ vLLM-CPU, agentic, 40 turns"
    i = rows["agentic", "ttft_p99_ms"]
    assert i["per_repeat"] == [0.5, 0.4, 0.8] and i["median"] == 0.5
    assert (i["goal"], i["met_at_median"], i["worst"]) == (None, None, None)  # informational: no goal


def test_goal_met_at_every_repeat():
    row = bvv.ratio_row([1.25, 1.3, 1.21], bvv.Goal(">=", 1.2))
    assert (row["median"], row["worst"], row["met_at_median"], row["met_at_worst"]) == (1.25, 1.21, True, True)
    row = bvv.ratio_row([0.7, 0.95, 0.8], bvv.Goal("<=", 1.0))
    assert (row["median"], row["worst"], row["met_at_median"], row["met_at_worst"]) == (0.8, 0.95, True, True)
    row = bvv.ratio_row([1.1, 1.19, 1.3], bvv.Goal(">=", 1.2))
    assert (row["met_at_median"], row["worst"]) == (False, 1.1)


def test_a_failed_engine_leaves_its_repeat_out_of_the_ratios():
    table = table_of({"chat": CHAT}, failed={"r2-chat": "vllm"})
    assert table["chat"]["vllm"][1] is None and table["chat"]["own"][1]["output_tps"] == 24.0
    row = bvv.ratio_row(bvv.ratios(table, "chat", "output_tps"), bvv.Goal(">=", 1.2))
    assert row["per_repeat"] == [1.5, None, 1.08]
    assert (row["n"], row["median"], row["worst"]) == (2, (1.5 + 1.08) / 2, 1.08)
    assert bvv.ratio_row([None, None], bvv.Goal(">=", 1.2))["met_at_median"] is None
    failed = bvv.engine_metrics(summary("chat", 0, CHAT, failed="own"))
    assert failed["own"] == "failed: crashed" and failed["vllm"]["output_tps"] == 20.0


def test_absolute_rows_summarize_each_engine():
    rows = bvv.absolute_rows(table_of({"chat": CHAT}))
    own = next(r for r in rows if r["engine"] == "own")
    assert own["output_tps"]["summary"] == "27.00 [24.00..30.00]"
    assert own["ttft_p99_ms"]["summary"] == "1000.0 [900.0..1100.0]"
    assert own["ttft_p50_ms"]["per_repeat"] == [100.0] * 3 and own["requests"] == ["4/4"] * 3


def test_parity_lines_name_what_differs_and_what_was_not_reported():
    from results.schema import ParityAudit, ParityRow

    audit = ParityAudit(rows=[ParityRow(setting="block_size", label="block size", values={"own": "16", "vllm": "128"},
                                        differs=True),
                              ParityRow(setting="dtype", label="dtype", values={"own": "float32", "vllm": "float32"})],
                        not_reported={"vllm": ["max_num_seqs"], "own": []})
    assert bvv.parity_lines("chat", audit) == ["parity (chat): differs: block size: own 16 / vllm 128",
                                               "parity (chat): vllm did not report max_num_seqs"]


# -- the agentic arrival schedule, from request records written by the real writer ------------------
S = 1_000_000_000  # ns per s
B = 7 * S  # the fake run's perf_counter origin
OWN_LAST_END_S = [30.0, 29.0, 31.0]  # per repeat; vllm always ends at 33.5 s


def rec(engine: str, sid: str | None, turn: int | None, branch: int | None, sched_s: float, send_s: float,
        end_s: float, phase: str = "measured") -> RequestRecord:
    """One successful request, times in s after ``B``."""
    end = B + int(end_s * S)
    return RequestRecord(request_id=f"{sid}-b{branch}-t{turn}", engine=engine, workload="agentic", session_id=sid,
                         turn_id=turn, branch_id=branch, phase=phase, scheduled_ns=B + int(sched_s * S),
                         send_ns=B + int(send_s * S), first_token_ns=end - S // 2, last_token_ns=end, end_ns=end,
                         output_tokens_server=8, max_tokens=8, finish_reason="length", success=True)


def agentic_records(engine: str, repeat: int = 0) -> list[RequestRecord]:
    """Two sessions; the last (s1) is due at 22.0 s. own's first send is at 0 s, vllm's at 0.5 s
    (so vllm's last arrival is 21.5 s after its first send: each engine's own records count). A
    branch turn and a warm-up turn 0 due later than s1 must not count as arrivals."""
    first_send = 0.0 if engine == "own" else 0.5
    last_end = OWN_LAST_END_S[repeat] if engine == "own" else 33.5
    return [rec(engine, "s9", 0, 0, -5.0, -5.0, -4.0, phase="warmup"),
            rec(engine, "s9", 1, 0, 40.0, 40.0, 41.0, phase="warmup"),
            rec(engine, "s0", 0, 0, -0.25, first_send, 4.0),
            rec(engine, "s0", 1, 0, 6.0, 6.0, 10.0),
            rec(engine, "s1", 0, 0, 22.0, 22.1, 26.0),
            rec(engine, "s1", 1, 1, 27.0, 27.0, last_end)]


def write_run(run_dir: Path, records: dict[str, list[RequestRecord]], workload: str = "agentic") -> Path:
    """A run folder as bench run leaves it: records, and metrics computed from them by the harness."""
    from harness.metrics import compute_metrics
    from results.store import RunWriter

    with RunWriter(run_dir, run_dir.name, workload) as w:
        for engine, recs in records.items():
            for r in recs:
                w.add_record(r)
            m = compute_metrics(recs)
            w.set_engine(engine, EngineResult(status=EngineStatus.OK, metrics=m, repeats=[m]))
    return run_dir


def test_schedule_facts_from_stored_records(tmp_path):
    d = write_run(tmp_path / "r1-agentic", {e: agentic_records(e) for e in ("own", "vllm")})
    got = bvv.read_run(d)
    own, vllm = got["own"], got["vllm"]
    assert (own["duration_s"], own["last_arrival_s"], own["tail_s"]) == (30.0, 22.0, 8.0)
    assert (vllm["duration_s"], vllm["last_arrival_s"], vllm["tail_s"]) == (33.0, 21.5, 11.5)
    assert own["output_tps"] == 4 * 8 / 30.0  # the harness's duration: what output tok/s divides by
    # pure: the same from the records directly; nothing without sessions or sends
    assert bvv.schedule_facts(agentic_records("own"), 30.0) == {"last_arrival_s": 22.0, "tail_s": 8.0}
    assert bvv.schedule_facts([], 30.0) is None
    assert bvv.schedule_facts([rec("own", None, None, None, 0.0, 0.0, 1.0)], 1.0) is None  # chat: no session
    assert bvv.schedule_facts(agentic_records("own")[:2], 1.0) is None  # warm-up only: no measured send
    # rate inf: every session due at once, the first send a few ms after its schedule: arrival 0, not -0.01
    at_once = [rec("own", f"s{i}", 0, 0, 0.0, 0.004 + i * 0.001, 3.0) for i in range(3)]
    assert bvv.schedule_facts(at_once, 3.0) == {"last_arrival_s": 0.0, "tail_s": 3.0}


def test_schedule_rows_tails_and_ceiling_per_repeat(tmp_path):
    runs = bvv.plan_runs(3, ["agentic"])
    results = [(run, bvv.read_run(write_run(tmp_path / run.run_id, {e: agentic_records(e, run.repeat)
                                                                    for e in run.engines})))
               for run in runs]
    rows = {(r["key"], r["engine"]): r for r in bvv.schedule_rows(bvv.per_repeat(results, 3))}
    assert rows["last_arrival_s", "own"]["per_repeat"] == [22.0, 22.0, 22.0]
    assert rows["last_arrival_s", "vllm"]["per_repeat"] == [21.5, 21.5, 21.5]
    assert rows["tail_s", "own"]["per_repeat"] == [8.0, 7.0, 9.0]
    assert rows["tail_s", "own"]["summary"] == "8.00 [7.00..9.00]"
    assert rows["tail_s", "vllm"]["per_repeat"] == [11.5, 11.5, 11.5]
    assert rows["tail_ratio", None]["per_repeat"] == [11.5 / 8.0, 11.5 / 7.0, 11.5 / 9.0]
    assert rows["tail_ratio", None]["summary"] == "1.44 [1.28..1.64]"
    assert rows["ceiling", None]["per_repeat"] == [1.5, 1.5, 1.5]  # vllm's 33.0 s ÷ own's last arrival 22.0 s
    assert rows["ceiling", None]["n"] == 3
    # a repeat whose vllm failed: its ratios are left out, own's facts stay
    results[1] = (results[1][0], {"own": results[1][1]["own"], "vllm": "failed: crashed"})
    rows = {(r["key"], r["engine"]): r for r in bvv.schedule_rows(bvv.per_repeat(results, 3))}
    assert rows["ceiling", None]["per_repeat"] == [1.5, None, 1.5] and rows["ceiling", None]["n"] == 2
    assert rows["tail_s", "own"]["per_repeat"] == [8.0, 7.0, 9.0]


def test_schedule_section_is_skipped_without_session_records(tmp_path):
    d = tmp_path / "r1-agentic"
    d.mkdir()
    (d / "summary.json").write_text(summary("agentic", 0, AGENTIC).model_dump_json())  # an older folder: no records
    got = bvv.read_run(d)
    assert got["own"]["last_arrival_s"] is None and got["vllm"]["tail_s"] is None
    assert got["own"]["output_tps"] == 26.0
    results = [(bvv.plan_runs(1, ["agentic"])[0], got)]
    assert bvv.schedule_rows(bvv.per_repeat(results, 1)) is None
    assert bvv.schedule_rows(table_of({"chat": CHAT})) is None  # no agentic run
    assert bvv.schedule_rows(table_of({"agentic": AGENTIC})) is None  # metrics without the facts


def test_script_resumes_folders_with_records_and_prints_the_schedule(tmp_path, fake_bench):
    bench, log = fake_bench
    out, js = tmp_path / "runs", tmp_path / "all.json"
    for run in bvv.plan_runs(3, ["agentic"]):
        write_run(out / run.run_id, {e: agentic_records(e, run.repeat) for e in run.engines})
    res = CliRunner().invoke(bvv.app, ["--bench", bench, "--out", str(out), "--workloads", "agentic", "--resume",
                                       "--json", str(js)])
    assert res.exit_code == 0, res.output
    assert not log.exists() and res.output.count("reused") == 3
    assert "agentic: bounded by the arrival schedule" in res.output and "1.50 [1.50..1.50]" in res.output
    doc = json.loads(js.read_text())
    rows = {(r["key"], r["engine"]): r for r in doc["agentic_schedule"]}
    assert rows["tail_s", "own"]["per_repeat"] == [8.0, 7.0, 9.0] and rows["ceiling", None]["per_repeat"] == [1.5] * 3
    assert doc["runs"][0]["metrics"]["vllm"]["last_arrival_s"] == 21.5
    assert doc["runs"][2]["metrics"]["own"]["tail_s"] == 9.0


# -- the script against a fake bench ---------------------------------------------------------------
FAKE = textwrap.dedent('''
    """A stand-in for `bench`: `engines --json` and `run` writing a synthetic run folder."""
    import json, os, sys
    sys.path.insert(0, {root!r})
    from results.schema import Distribution, EngineResult, EngineStatus, Metrics, RunSummary

    args = sys.argv[1:]
    if args[:2] == ["engines", "--json"]:
        state = os.environ.get("FAKE_VLLM_STATE", "available")
        print(json.dumps([{{"engine": "own", "state": "available", "reason": "own: ok"}},
                          {{"engine": "vllm", "state": state,
                            "reason": "vllm: not installed - run `bench engines setup vllm`"}}]))
        sys.exit(0)
    opt = lambda k: args[args.index(k) + 1]
    engines, workload, run_id = opt("--engine").split(","), opt("--workload"), opt("--run-id")
    repeat = int(run_id[1:].split("-")[0]) - 1
    data = json.loads(os.environ["FAKE_DATA"])[workload]
    with open(os.environ["FAKE_LOG"], "a") as f:
        f.write(json.dumps([run_id, engines]) + "\\n")
    out = {{}}
    for e in engines:
        m = Metrics(requests_sent=4, requests_completed=4, duration_s=1.0, output_throughput=data[e]["tps"][repeat],
                    ttft_ms=Distribution(p50=100.0, p99=data[e]["p99"][repeat]), tpot_ms=Distribution(p50=40.0))
        out[e] = EngineResult(status=EngineStatus.OK, metrics=m, repeats=[m])
    d = os.path.join(opt("--output-dir"), run_id)
    os.makedirs(d)
    with open(os.path.join(d, "summary.json"), "w") as f:
        f.write(RunSummary(run_id=run_id, workload=workload, engines=out).model_dump_json())
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump({{"command": ["bench", *args]}}, f)
    print("fake run", run_id)
''')


@pytest.fixture
def fake_bench(tmp_path, monkeypatch):
    script = tmp_path / "fake_bench.py"
    script.write_text(FAKE.format(root=str(ROOT)))
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_DATA", json.dumps({"chat": CHAT, "agentic": AGENTIC}))
    monkeypatch.setenv("FAKE_LOG", str(log))
    return f"{sys.executable} {script}", log


def test_script_end_to_end_on_stored_results(tmp_path, fake_bench):
    bench, log = fake_bench
    out, js = tmp_path / "runs", tmp_path / "all.json"
    res = CliRunner().invoke(bvv.app, ["--bench", bench, "--out", str(out), "--json", str(js)])
    assert res.exit_code == 0, res.output
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls == [["r1-chat", ["own", "vllm"]], ["r1-agentic", ["own", "vllm"]], ["r2-chat", ["vllm", "own"]],
                     ["r2-agentic", ["vllm", "own"]], ["r3-chat", ["own", "vllm"]], ["r3-agentic", ["own", "vllm"]]]
    doc = json.loads(js.read_text())
    chat = doc["ratios"][0]
    assert chat["per_repeat"] == [1.5, 1.2, 1.08] and chat["met_at_median"] is True and chat["met_at_worst"] is False
    assert doc["ratios"][2]["per_repeat"] == [0.9, 1.1, 1.0]
    assert [r["order"] for r in doc["runs"]][:3] == [["own", "vllm"], ["own", "vllm"], ["vllm", "own"]]
    assert (out / "r1-chat.console.log").read_text() == "fake run r1-chat\n"
    # the fake folders hold no request records: the schedule section is skipped with one line
    assert doc["agentic_schedule"] is None and doc["runs"][1]["metrics"]["own"]["tail_s"] is None
    assert "arrival schedule section is skipped" in res.output
    assert "NOT met" in res.output and "met" in res.output

    # the same --out again: refused, or with --resume re-read without running anything
    again = CliRunner().invoke(bvv.app, ["--bench", bench, "--out", str(out)])
    assert again.exit_code == 2 and "--resume" in again.output
    js2 = tmp_path / "again.json"
    again = CliRunner().invoke(bvv.app, ["--bench", bench, "--out", str(out), "--resume", "--json", str(js2)])
    assert again.exit_code == 0, again.output
    assert len(log.read_text().splitlines()) == 6 and "reused" in again.output
    assert json.loads(js2.read_text())["ratios"] == doc["ratios"]
    # a run whose vllm failed is measured again by --resume, and only that one
    stored = RunSummary.model_validate_json((out / "r2-chat" / "summary.json").read_text())
    stored.engines["vllm"] = EngineResult(status=EngineStatus.FAILED, reason="crashed")
    (out / "r2-chat" / "summary.json").write_text(stored.model_dump_json())
    again = CliRunner().invoke(bvv.app, ["--bench", bench, "--out", str(out), "--resume"])
    assert again.exit_code == 0, again.output
    assert json.loads(log.read_text().splitlines()[-1]) == ["r2-chat", ["vllm", "own"]]
    assert len(log.read_text().splitlines()) == 7
    # --resume with other settings: the stored commands differ
    other = CliRunner().invoke(bvv.app, ["--bench", bench, "--out", str(out), "--resume", "--requests", "8"])
    assert other.exit_code == 2 and "another command" in other.output


def test_vllm_not_installed_is_one_line_and_exit_2(tmp_path, fake_bench, monkeypatch):
    bench, log = fake_bench
    monkeypatch.setenv("FAKE_VLLM_STATE", "not installed")
    res = CliRunner().invoke(bvv.app, ["--bench", bench, "--out", str(tmp_path / "runs"), "--repeats", "1"])
    assert res.exit_code == 2
    lines = [x for x in res.output.splitlines() if x.strip() and not x.startswith("note:")]
    assert len(lines) == 1 and "vllm is not installed here" in lines[0] and "Traceback" not in res.output
    assert not log.exists()


def test_dry_run_prints_the_commands_and_runs_nothing(tmp_path, fake_bench):
    bench, log = fake_bench
    res = CliRunner().invoke(bvv.app, ["--bench", bench, "--out", str(tmp_path / "runs"), "--dry-run",
                                       "--repeats", "2", "--workloads", "agentic", "--turns", "4"])
    assert res.exit_code == 0, res.output
    runs = [x for x in res.output.splitlines() if " run " in x]
    assert len(runs) == 2 and "--engine own,vllm --workload agentic --num-requests 4" in runs[0]
    assert "--engine vllm,own" in runs[1]
    assert not log.exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("args", [["--workloads", "chat,rag"], ["--workloads", "chat,chat"],
                                  ["--agentic-rate", "0"], ["--engine-args-own", "novalue"]])
def test_bad_options_are_refused(args, fake_bench):
    bench, log = fake_bench
    res = CliRunner().invoke(bvv.app, ["--bench", bench, "--dry-run", *args])
    assert res.exit_code == 2 and "Traceback" not in res.output
