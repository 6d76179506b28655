"""``bench import`` (issue 17, "Other tools' results"): small fixture files in each tool's real
format import as runs, recomputed metrics equal what our definitions give on the same
per-request numbers, copied ones say so with the tool's definition, an imported run reports and
compares with a native run (and alone is never the recommendation), and bad input is one line with
exit 2.

The fixtures under tests/fixtures/imports/ were written from each tool's own code or schema:

- ``vllm_detailed.json`` / ``vllm_summary.json``: vLLM 0.32.0 as installed in .engines/vllm,
  ``vllm/benchmarks/serve.py`` (``benchmark()``'s result dict, ``main()``'s run settings and the
  fields it drops without --save-detailed; the summary numbers by ``calculate_metrics``'s
  formulas) and ``vllm/benchmarks/lib/endpoint_request_func.py``.
- ``sglang_details.jsonl``: SGLang 0.5 as installed in .engines/sglang,
  ``sglang/benchmark/serving.py`` (``result`` and ``result_details`` as appended to
  ``--output-file`` by ``benchmark()``; request_rate inf is written as JSON ``Infinity``).
- ``aiperf/``: ai-dynamo/aiperf ``docs/tutorials/working-with-profile-exports.md`` (the record
  layout of profile_export.jsonl, its failed-request form), ``docs/reference/json-export-schema.md``
  (profile_export_aiperf.json's metric blocks and top-level fields), ``docs/metrics-reference.md``
  (the metric tags and their formulas).
- ``guidellm_benchmarks.json``: vllm-project/guidellm ``src/guidellm/benchmark/schemas/generative/
  report.py`` and ``benchmark.py`` (report and benchmark layout), ``src/guidellm/schemas/
  request_stats.py``, ``info.py``, ``request.py`` (a request's fields, timings and usage) and
  ``src/guidellm/schemas/statistics.py`` (DistributionSummary).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from harness.app.cli import app
from results import load_run

from tests.helpers import CPU_ONLY, make_records, ok_entry, write_run

FIX = Path(__file__).parents[3] / "fixtures" / "imports"
TOKENIZER = "/root/.cache/llm-serve-bench/models/SmolLM2-135M-Instruct"


def outcome(res: Any) -> str | None:
    """None when ``res`` is a clean bad-input exit (2, one ``error:`` line on stderr, nothing on
    stdout, no traceback); else what was wrong."""
    err = [line for line in res.stderr.splitlines() if line.strip()]
    if res.exit_code != 2:
        return f"exit {res.exit_code}"
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        return f"exception {type(res.exception).__name__}"
    if "Traceback" in res.output or res.stdout.strip():
        return "traceback or stdout"
    if len(err) != 1 or not err[0].startswith("error: "):
        return f"{len(err)} stderr lines"
    return None


def bench(*argv: str):
    return CliRunner().invoke(app, list(argv))


def imported(tmp_path: Path, file: Path, tool: str, *extra: str, run_id: str = "imp"):
    res = bench("import", str(file), "--from", tool, "-o", str(tmp_path), "--run-id", run_id, *extra)
    assert res.exit_code == 0, res.output
    run = load_run(tmp_path / run_id)
    entry = next(iter(run.summary.engines.values()))
    # the manifest reads back key for key; its engine entry names the tool and the file, typed
    assert json.loads(run.manifest.model_dump_json()) == json.loads((tmp_path / run_id / "manifest.json").read_text())
    facts, prov = run.manifest.engines[next(iter(run.summary.engines))], run.manifest.imported_from
    assert facts.imported_from == prov.label and facts.file == prov.file and facts.adapter_config() == prov.config
    return run, entry.metrics, run.manifest.imported_from, res


def test_vllm_detailed_is_recomputed_under_our_definitions(tmp_path: Path) -> None:
    run, m, prov, _ = imported(tmp_path, FIX / "vllm_detailed.json", "vllm", "--workload", "random",
                               "--input-len", "64", "--output-len", "4")
    src = json.loads((FIX / "vllm_detailed.json").read_text())
    ok = [i for i, e in enumerate(src["errors"]) if not e]
    ttfts = [src["ttfts"][i] * 1000 for i in ok]
    gaps = [g * 1000 for i in ok for g in src["itls"][i]]
    tpots = [sum(src["itls"][i]) * 1000 / (src["output_lens"][i] - 1) for i in ok]
    # ours, on vLLM's per-request numbers: numpy linear percentiles, request-weighted TPOT, pooled ITL
    assert m.ttft_ms.p50 == pytest.approx(12.5, abs=1e-9)
    assert m.ttft_ms.p99 == pytest.approx(float(np.percentile(ttfts, 99)), abs=1e-9)
    assert m.itl_ms.mean == pytest.approx(float(np.mean(gaps)), abs=1e-9)
    assert m.tpot_ms.mean == pytest.approx(float(np.mean(tpots)), abs=1e-9)
    assert m.e2el_ms.max == pytest.approx(41.0, abs=1e-9)  # 20 + 6 + 7 + 8 ms
    # vLLM's percentiles are numpy linear too: on the same numbers its own p99 TTFT is ours
    assert prov.tool_summary["ttft_ms.p99"] == pytest.approx(m.ttft_ms.p99, abs=1e-9)
    # duration: first send -> last token (0.004 s + 0.041 s), not vLLM's benchmark duration of 0.05 s
    assert m.duration_s == pytest.approx(0.045, abs=1e-9)
    assert m.output_throughput == pytest.approx(12 / 0.045)
    assert prov.tool_summary["output_throughput"] == pytest.approx(240.0)
    assert prov.metrics["output_throughput"].startswith("recomputed: output tokens / our duration")
    assert "benchmark duration" in prov.metrics["output_throughput"]
    assert "'choices'" in prov.metrics["ttft_ms"] and "first chunk carrying a token" in prov.metrics["ttft_ms"]
    assert (m.requests_completed, m.requests_failed, m.failures_by_class) == (3, 1, {"http_500": 1})
    # the records: times rebuilt from start_times, ttfts, itls; marked imported
    recs = run.records_for("vllm-bench-serve")
    assert [r.imported_from for r in recs] == ["vllm bench serve"] * 4
    assert recs[1].send_ns == 2_000_000 and recs[1].first_token_ns - recs[1].send_ns == 12_500_000
    assert [b - a for a, b in zip(recs[0].chunk_times_ns, recs[0].chunk_times_ns[1:])] == [5_000_000, 5_000_000, 6_000_000]
    assert recs[3].success is False and recs[3].error_message == "Internal Server Error"
    assert prov.tool == "vllm" and prov.per_request and prov.config["model_id"] == "smollm2"
    assert any("pass --temperature 0" in c for c in prov.caveats) and any("prefix cache" in c for c in prov.caveats)
    assert run.manifest.workload == {"kind": "random", "api": "completions", "tokenizer": TOKENIZER,
                                     "input_len": 64, "output_len": 4}
    assert len(run.requests) == 4 and run.requests["imported_from"].tolist() == ["vllm bench serve"] * 4


def test_vllm_without_save_detailed_is_copied_with_its_definitions(tmp_path: Path) -> None:
    run, m, prov, res = imported(tmp_path, FIX / "vllm_summary.json", "vllm")
    src = json.loads((FIX / "vllm_summary.json").read_text())
    assert not prov.per_request and run.records == []
    assert m.ttft_ms.p99 == src["p99_ttft_ms"] and m.ttft_ms.median == src["median_ttft_ms"]
    assert m.output_throughput == 240.0 and m.duration_s == 0.05 and m.peak_output_throughput == 12.0
    assert (m.requests_completed, m.requests_failed) == (3, 1)
    assert prov.metrics["ttft_ms"] == "copied: vLLM's TTFT (first chunk with non-empty 'choices', from before session.post)"
    assert prov.metrics["peak_output_throughput"].startswith("copied: vLLM's max_output_tokens_per_s (one token per chunk")
    assert prov.metrics["ttft_from_scheduled_ms"].startswith("unavailable")
    assert "--save-detailed" in res.stderr


def test_sglang_latencies_recomputed_rates_copied(tmp_path: Path) -> None:
    run, m, prov, res = imported(tmp_path, FIX / "sglang_details.jsonl", "sglang")
    src = json.loads((FIX / "sglang_details.jsonl").read_text().splitlines()[-1])
    assert "holds 2 results; imported the last one (--entry 2)" in res.stderr
    # recomputed: TTFT as SGLang's (same definition), TPOT from the ITLs (SGLang's includes [DONE])
    assert m.ttft_ms.p99 == pytest.approx(src["p99_ttft_ms"], abs=1e-9)
    assert m.tpot_ms.mean == pytest.approx(17 / 3, abs=1e-9)  # (15 + 15 + 21) ms / 3 tokens / 3 requests
    assert prov.tool_summary["tpot_ms.mean"] == pytest.approx(6.0, abs=1e-9)
    # no send times in the file: duration and rates are SGLang's, marked copied
    assert m.duration_s == 0.06 and m.output_throughput == pytest.approx(200.0)
    assert prov.metrics["output_throughput"].startswith("copied: SGLang's sum(output_lens) / its benchmark duration")
    assert prov.metrics["ttft_from_scheduled_ms"] == "unavailable: SGLang records no send times"
    assert m.failures_by_class == {"http_400": 1} and "output_throughput" not in next(
        iter(run.summary.engines.values())).intervals
    # the file names its workload: SGLang's random with range ratio 1 is our random with fixed lengths
    assert run.summary.workload == "random"
    assert run.manifest.workload == {"kind": "random", "input_len": 64, "output_len": 4, "range_ratio": 0.0,
                                     "api": "completions"}
    assert prov.version == "0.5.23" and (prov.entry, prov.entries) == (2, 2)
    earlier = imported(tmp_path, FIX / "sglang_details.jsonl", "sglang", "--entry", "1", run_id="first")[2]
    assert not earlier.per_request and earlier.metrics["ttft_ms"].startswith("copied: SGLang's TTFT")


def test_aiperf_folder_with_both_exports(tmp_path: Path) -> None:
    run, m, prov, _ = imported(tmp_path, FIX / "aiperf", "aiperf")
    lines = [json.loads(x) for x in (FIX / "aiperf" / "profile_export.jsonl").read_text().splitlines()]
    good = [x for x in lines if x["error"] is None]
    icl = [g for x in good for g in x["metrics"]["inter_chunk_latency"]["value"]]
    assert m.itl_ms.mean == pytest.approx(float(np.mean(icl)), abs=1e-9)  # AIPerf's ICL is our ITL
    # AIPerf's per-request inter_token_latency is our TPOT (same formula, same OSL here)
    aiperf_itl = [x["metrics"]["inter_token_latency"]["value"] for x in good]
    assert m.tpot_ms.mean == pytest.approx(float(np.mean(aiperf_itl)), abs=1e-9)
    assert prov.tool_summary["tpot_ms.mean"] == pytest.approx(m.tpot_ms.mean, abs=1e-9)
    start = min(x["metadata"]["request_start_ns"] for x in lines)
    end = max(x["metadata"]["request_end_ns"] for x in good)
    assert m.duration_s == pytest.approx((end - start) / 1e9, abs=1e-12)
    assert m.token_drift.output_estimated == 3  # AIPerf's OSL is its tokenizer's count, not server usage
    assert (m.requests_failed, m.failures_by_class) == (1, {"http_503": 1})
    assert prov.version == "0.5.0" and prov.file.endswith("profile_export.jsonl")
    assert "our TPOT" in prov.metrics["itl_ms"]
    # the aggregated export alone: every number AIPerf's, its std the sample std
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(FIX / "aiperf" / "profile_export_aiperf.json", alone)
    _, m2, prov2, _ = imported(tmp_path, alone / "profile_export_aiperf.json", "aiperf", run_id="alone-run")
    summ = json.loads((FIX / "aiperf" / "profile_export_aiperf.json").read_text())
    assert m2.ttft_ms.std == summ["time_to_first_token"]["std"] and m2.ttft_ms.p99 == summ["time_to_first_token"]["p99"]
    assert prov2.metrics["tpot_ms"].startswith("copied: AIPerf's inter_token_latency")
    assert any("sample standard deviation" in c for c in prov2.caveats)


def test_guidellm_timings_recomputed_itl_unavailable(tmp_path: Path) -> None:
    run, m, prov, _ = imported(tmp_path, FIX / "guidellm_benchmarks.json", "guidellm")
    b = json.loads((FIX / "guidellm_benchmarks.json").read_text())["benchmarks"][0]
    tms = [r["info"]["timings"] for r in b["requests"]["successful"]]

    def ns(a: float, b_: float) -> int:
        return int(round((b_ - a) * 1e9))

    ttfts = [ns(t["request_start"], t["first_token_iteration"]) / 1e6 for t in tms]
    assert m.ttft_ms.mean == pytest.approx(float(np.mean(ttfts)), abs=1e-9)
    tpots = [(ns(t["request_start"], t["last_token_iteration"]) - ns(t["request_start"], t["first_token_iteration"]))
             / 1e6 / 3 for t in tms]
    assert m.tpot_ms.mean == pytest.approx(float(np.mean(tpots)), abs=1e-9)
    # our TPOT is GuideLLM's inter_token_latency_ms, not its time_per_output_token_ms (which includes TTFT)
    assert m.tpot_ms.mean == pytest.approx(prov.tool_summary["tpot_ms.mean"], abs=1e-3)
    assert prov.tool_summary["time_per_output_token_ms.mean"] == pytest.approx((25 + 30 + 40) / 4 / 3)  # (last - start) / n
    assert m.itl_ms.mean is None and prov.metrics["itl_ms"].startswith("unavailable: GuideLLM records no per-chunk")
    # targeted_start is the schedule: TTFT from scheduled is 0.5 ms longer
    assert m.ttft_from_scheduled_ms.mean == pytest.approx(m.ttft_ms.mean + 0.5, abs=1e-3)
    assert (m.requests_completed, m.requests_failed) == (3, 1) and prov.version == "0.4.0"
    # GuideLLM's incomplete request (cut off at the end) is our third outcome, out of latencies and failures
    assert m.requests_incomplete == 1 and m.requests_sent == 5
    assert [r.error_class for r in run.records if not r.success] == ["incomplete", "http_500"]  # aiohttp's "ClientResponseError: 500, ..."
    assert prov.config["strategy.type_"] == "constant" and m.offered_rate == 2.0


def _native(root: Path, input_len: int = 64) -> Path:
    recs = make_records("openai", 4, ttft_ms=30.0, tpot_ms=8.0, out_tokens=4, in_tokens=64, workload="random")
    write_run(root, "native", {"openai": ok_entry(recs, CPU_ONLY, offered_rate=None)}, recs, workload="random",
              manifest={"workload": {"kind": "random", "seed": 0, "num_requests": 4, "request_rate": None, "api":
                                     "completions", "ignore_eos": True, "input_len": input_len, "output_len": 4,
                                     "range_ratio": 0.0, "tokenizer": TOKENIZER}})
    return root / "native"


def test_imported_run_reports_and_compares_with_a_native_run(tmp_path: Path) -> None:
    native = _native(tmp_path)
    run, *_ = imported(tmp_path, FIX / "vllm_detailed.json", "vllm", "--workload", "random", "--input-len", "64",
                       "--output-len", "4")
    res = bench("report", str(native), str(run.run_dir))
    assert res.exit_code == 0, res.output
    assert "Definitions differ: imp was imported from vllm bench serve" in res.stdout
    assert "  output_throughput: recomputed: output tokens / our duration" in res.stdout
    md = (native / "report-compare.md").read_text()
    assert "## Definitions differ: imp (imported from vllm bench serve)" in md
    assert "| output tok/s | 266.7 | 240.0 | recomputed |" in md  # ours next to vLLM's own
    assert "native/openai" in md and "imp/vllm-bench-serve" in md  # both in the summary table
    html = (native / "report-compare.html").read_text()
    assert "Definitions differ: imp" in html
    # ranked next to the native run for comparison, never recommended: it is another client's measurement
    # (the fixture's 1 failed request of 4 is above the default 5 % reliability bound: allow it here)
    rec = bench("recommend", str(native), str(run.run_dir), "--hardware", "CPU", "--json", "--max-failure-rate", "0.3")
    data = json.loads(rec.stdout[rec.stdout.index("{"):])
    assert data["winner"] == "openai"
    imported_row = next(row for row in data["ranking"] if row["engine"] == "vllm-bench-serve")
    assert any("imported from vllm bench serve" in note and "never the recommendation" in note
               for note in imported_row["notes"])
    # a single imported run reports on its own too
    assert bench("report", str(run.run_dir)).exit_code == 0
    assert "Definitions differ" in (run.run_dir / "report.md").read_text()
    # the recorded shape is what the like-for-like check compares: another prompt length is refused
    other = tmp_path / "other"
    other.mkdir()
    res = bench("report", str(_native(other, input_len=128)), str(run.run_dir))
    assert res.exit_code == 2 and "input_len 128 vs 64" in res.stderr


def _truncated(tmp_path: Path) -> Path:
    p = tmp_path / "cut.json"
    text = (FIX / "vllm_detailed.json").read_text()
    p.write_text(text[: len(text) // 2])
    return p


BAD = [
    ("unknown tool", lambda t: ["import", str(FIX / "vllm_detailed.json"), "--from", "genai-perf"],
     "--from 'genai-perf' is not a tool bench can import: choose from vllm, sglang, aiperf, guidellm"),
    ("vllm file as sglang", lambda t: ["import", str(FIX / "vllm_detailed.json"), "--from", "sglang"],
     "looks like vllm bench serve output, not sglang bench_serving's: pass --from vllm"),
    ("sglang file as vllm", lambda t: ["import", str(FIX / "sglang_details.jsonl"), "--from", "vllm"],
     "looks like sglang bench_serving output, not vllm bench serve's: pass --from sglang"),
    ("guidellm file as aiperf", lambda t: ["import", str(FIX / "guidellm_benchmarks.json"), "--from", "aiperf"],
     "pass --from guidellm"),
    ("truncated json", lambda t: ["import", str(_truncated(t)), "--from", "vllm"], "not valid JSON"),
    ("missing file", lambda t: ["import", str(t / "nope.json"), "--from", "vllm"], "no such file"),
    ("entry out of range", lambda t: ["import", str(FIX / "sglang_details.jsonl"), "--from", "sglang", "--entry", "3"],
     "--entry 3: sglang_details.jsonl holds 2 results; pass 1..2"),
    ("length contradicts file", lambda t: ["import", str(FIX / "sglang_details.jsonl"), "--from", "sglang",
                                           "--input-len", "128"], "--input-len 128 contradicts sglang_details.jsonl"),
    ("unknown workload", lambda t: ["import", str(FIX / "vllm_detailed.json"), "--from", "vllm", "--workload", "rnd"],
     "unknown --workload 'rnd'"),
]


@pytest.mark.parametrize("name,argv,needle", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, name: str, argv, needle: str) -> None:
    res = bench(*argv(tmp_path), "-o", str(tmp_path / "out"))
    assert outcome(res) is None, (outcome(res), res.output)
    assert needle in res.stderr.splitlines()[0], res.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # nothing half-written


def test_an_internal_error_is_one_line_with_the_traceback_in_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.app.importers as importers

    def broken(*_a: Any, **_k: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(importers, "write_import", broken)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    res = bench("import", str(FIX / "vllm_detailed.json"), "--from", "vllm", "-o", str(tmp_path / "out"))
    err = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 1 and len(err) == 1 and "Traceback" not in res.output
    assert err[0].startswith("error: internal error while importing") and "RuntimeError: boom" in err[0]
    assert "RuntimeError: boom" in (tmp_path / "bench-error.log").read_text()


def test_only_an_imported_run_left_is_said_so(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    res = CliRunner().invoke(app, ["import", str(FIX / "vllm_detailed.json"), "--from", "vllm", "-o", str(out),
                                   "--run-id", "imp", "--workload", "random", "--input-len", "64", "--output-len", "4"])
    assert res.exit_code == 0, res.output
    rec = CliRunner().invoke(app, ["recommend", str(out / "imp"), "--json", "--max-failure-rate", "0.3"])
    data = json.loads(rec.stdout[rec.stdout.index("{"):])
    assert data["winner"] is None
    assert data["deciding_constraint"].startswith(
        "no production engine survives the hard constraints; only vllm-bench-serve (imported: another client's "
        "measurement) does, and it is never the recommendation")
