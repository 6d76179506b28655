"""Bad CLI input across every command (issue 16): each case gives one line ``error: ...`` on
stderr, exit status 2, nothing on
stdout and never a traceback. Fast: no engine starts — runs point at ``--engine openai
--base-url http://127.0.0.1:9`` (nothing listens there) with calibration off, so a case that
slipped through validation would fail quickly instead of measuring anything.

``CASES`` is also what the sweep in the closing note of issue 16 counted (run this file's
``main`` under another checkout's PYTHONPATH to count how many were clean there).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.helpers import CPU_ONLY, SMOLLM2, make_records, ok_entry, write_run

NOWHERE = "http://127.0.0.1:9"
RUN = ["run", "--engine", "openai", "--base-url", NOWHERE, "--no-calibration", "--no-equivalence"]
SEARCH = ["search", "--engine", "openai", "--base-url", NOWHERE]


SPECS = {"bad_yaml": "kind: chat\nnum_requests: [1, 2\n", "huge_yaml": "kind: chat\nnum_requests: 1000000000\n",
         "sessions_yaml": "kind: agentic\nnum_sessions: 5000000\n", "list_yaml": "- kind\n- chat\n",
         "kind_yaml": "kind: rag\n", "neg_yaml": "kind: chat\nnum_requests: -3\n"}
# issue 40: an agent trace of each format whose second line is malformed (one error naming file:2)
TRACES = {"agent": '{"session_id": "a", "turns": [{"output_tokens": 3}]}\n{"session_id": "b", "turns": []}\n',
          "mooncake": '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
                      '{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [1, 2]}\n',
          "otel": '{"resourceSpans": []}\n{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "x"}]}]}]}\n',
          "chat-log": '{"conversation_id": "c", "request": {"messages": [{"role": "user", "content": "hi"}]}, '
                      '"response": {"usage": {"completion_tokens": 3}}}\n{"conversation_id": "c"}\n'}


def _paths(root: Path) -> dict[str, Path]:
    """The files and folders the cases point at, under ``root`` (created by :func:`make_files`)."""
    f = {"root": root, "file": root / "a-file.txt", "empty": root / "empty-dir", "out": root / "out",
         "binary_yaml": root / "binary.yaml", "tok_no_config": root / "tokenizer-only",
         "tok_broken": root / "broken-tokenizer", "runs": root / "runs"}
    f.update({name: root / f"{name}.yaml" for name in SPECS})
    f.update({f"trace_{name}": root / f"trace-{name}.jsonl" for name in TRACES})
    return f


def make_files(root: Path) -> None:
    f = _paths(root)
    for folder in ("empty", "out", "tok_no_config", "tok_broken"):
        f[folder].mkdir(parents=True, exist_ok=True)
    f["file"].write_text("not a folder\n")
    for name, text in SPECS.items():
        f[name].write_text(text)
    for name, text in TRACES.items():
        f[f"trace_{name}"].write_text(text)
    f["binary_yaml"].write_bytes(b"kind: chat\n\xff\xfe\x00")
    (f["tok_no_config"] / "tokenizer.json").write_text("{}")  # a tokenizer file but no config.json
    (f["tok_broken"] / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (f["tok_broken"] / "tokenizer.json").write_text("{not json")
    recs = make_records("own", 4, ttft_ms=50.0, tpot_ms=5.0)
    write_run(f["runs"], "chat-run", {"own": ok_entry(recs, CPU_ONLY)}, recs)
    other = make_records("vllm", 4, ttft_ms=40.0, tpot_ms=5.0, workload="agentic")
    write_run(f["runs"], "agentic-run", {"vllm": ok_entry(other, CPU_ONLY)}, other, workload="agentic",
              manifest={"model": SMOLLM2, "workload": {"kind": "agentic", "seed": 0}})
    (f["runs"] / "not-a-run").mkdir()


def cases(root: Path) -> list[tuple[str, list[str], str]]:
    """``(id, argv, a fragment the one-line error must contain)`` for every bad input tried
    (paths under ``root``; :func:`make_files` creates them)."""
    f = _paths(root)
    out = str(f["out"])
    runs = str(f["runs"])
    R = [*RUN, "-o", out]
    S = [*SEARCH, "-o", out]
    return [
        # ---- bench run --workload agentic --trace: a malformed line of each format (issue 40)
        *[(f"run-trace-{name}", [*R, "-w", "agentic", "--trace", str(f[f"trace_{name}"])], f"{f[f'trace_{name}']}:2: ")
          for name in TRACES],
        ("run-trace-format", [*R, "-w", "agentic", "--trace", str(f["trace_agent"]), "--trace-format", "csv"],
         "--trace-format must be one of"),
        ("run-trace-missing", [*R, "-w", "agentic", "--trace", str(root / "nope.jsonl")], "does not exist"),
        # ---- bench run: numbers (bad, negative, zero, huge, nan, inf)
        ("run-n-text", [*R, "-n", "abc"], "--num-requests takes a whole number, got 'abc': e.g. --num-requests 4"),
        ("run-n-negative", [*R, "-n", "-5"], "--num-requests must be > 0, got -5"),
        ("run-n-zero", [*R, "-n", "0"], "--num-requests must be > 0, got 0"),
        ("run-n-huge", [*R, "-n", "1000000000"], "--num-requests must be <= 100,000, got 1000000000"),
        ("run-input-len-zero", [*R, "-w", "random", "--input-len", "0"], "--input-len must be > 0"),
        ("run-input-len-huge", [*R, "-w", "random", "--input-len", "2000000"], "--input-len must be <= 1,048,576"),
        ("run-output-len-negative", [*R, "-w", "random", "--output-len", "-1"], "--output-len must be > 0"),
        ("run-random-too-many-tokens", [*R, "-w", "random", "-n", "100000", "--input-len", "1000"],
         "at most 50,000,000 fit in memory"),
        ("run-rate-nan", [*R, "--request-rate", "nan"], "--request-rate must be > 0"),
        ("run-watts-negative", [*R, "--watts", "-350"], "--watts is the machine's draw in watts, a number > 0 (e.g. 350), got -350"),
        ("run-watts-inf", [*R, "--watts", "inf"], "--watts is the machine's draw in watts, a number > 0"),
        ("run-price-per-kwh-zero", [*R, "--price-per-kwh", "0"], "--price-per-kwh is USD per kWh, a number > 0 (e.g. 0.15), got 0"),
        ("run-price-per-kwh-text", [*R, "--price-per-kwh", "cheap"], "--price-per-kwh takes a number, got 'cheap'"),
        ("run-time-budget-text", [*R, "--time-budget", "15x"], "--time-budget '15x' is not a duration: give seconds"),
        ("run-time-budget-zero", [*R, "--time-budget", "0"], "--time-budget must be above 0 s"),
        ("run-time-budget-one-point", [*R, "-n", "8", "--time-budget", "10m"],
         "--time-budget applies to load ladders, and this run measures one load point (--num-requests"),
        # given at their default value they are given all the same (what was typed counts, not the value)
        ("run-time-budget-default-one-point", [*R, "-n", "8", "--time-budget", "900"],
         "--time-budget applies to load ladders, and this run measures one load point (--num-requests"),
        ("run-ladder-budget-default-one-point", [*R, "-n", "8", "--ladder-budget", "150"],
         "--ladder-budget applies to load ladders, and this run measures one load point"),
        ("run-max-load-default-one-point", [*R, "-n", "8", "--max-load", "64"],
         "--max-load applies to load ladders, and this run measures one load point"),
        ("run-tune-zero-one-point", [*R, "-n", "8", "--tune", "0"], "--tune applies to load ladders"),
        ("run-two-ladder-options-one-point", [*R, "-n", "8", "--max-load", "64", "--ladder-budget", "150"],
         "--ladder-budget and --max-load apply to load ladders"),
        ("run-tune-configs-default-no-tune", [*R, "--tune-configs", "4"],
         "--tune-configs sets how many configurations --tune tries: add --tune SECONDS or drop it"),
        ("run-rate-negative", [*R, "--request-rate", "-1"], "--request-rate must be > 0"),
        ("run-rate-zero", [*R, "--request-rate", "0"], "--request-rate must be > 0"),
        ("run-rate-text", [*R, "--request-rate", "fast"], "--request-rate must be a number"),
        ("run-burstiness-nan", [*R, "--burstiness", "nan"], "--burstiness"),
        ("run-burstiness-zero", [*R, "--burstiness", "0"], "--burstiness must be > 0"),
        ("run-burstiness-negative", [*R, "--burstiness", "-2"], "--burstiness must be > 0"),
        ("run-range-ratio-one", [*R, "-w", "random", "--range-ratio", "1.5"], "--range-ratio must be < 1"),
        ("run-range-ratio-nan", [*R, "-w", "random", "--range-ratio", "nan"], "--range-ratio"),
        ("run-scale-zero", [*R, "--scale", "0"], "--scale must be > 0"),
        ("run-scale-inf", [*R, "--scale", "inf"], "--scale must be a finite number"),
        ("run-scale-above-one", [*R, "-w", "chat", "--scale", "2"], "scale"),
        ("run-max-concurrency-zero", [*R, "--max-concurrency", "0"], "--max-concurrency must be > 0"),
        ("run-max-concurrency-huge", [*R, "--max-concurrency", "10000000"], "--max-concurrency must be <= 100,000"),
        ("run-timeout-zero", [*R, "--request-timeout", "0"], "--request-timeout must be > 0"),
        ("run-timeout-nan", [*R, "--request-timeout", "nan"], "--request-timeout must be > 0"),
        ("run-timeout-inf", [*R, "--request-timeout", "inf"], "--request-timeout must be > 0"),
        ("run-startup-timeout-negative", [*R, "--startup-timeout", "-1"], "--startup-timeout must be > 0"),
        ("run-threads-zero", [*R, "--threads", "0"], "--threads must be > 0"),
        ("run-threads-huge", [*R, "--threads", "100000"], "exceeds the"),
        ("run-warmup-negative", [*R, "--warmup", "-1"], "--warmup must be >= 0"),
        ("run-repeats-zero", [*R, "--repeats", "0"], "--repeats must be >= 1, got 0"),
        ("run-repeats-huge", [*R, "--repeats", "1000"], "--repeats must be <= 20, got 1000"),
        ("run-seed-negative", [*R, "--seed", "-1"], "--seed must be >= 0, got -1"),
        ("run-max-failure-rate", [*R, "--max-failure-rate", "2"], "--max-failure-rate"),
        # ---- bench run: malformed --slo specs
        ("run-slo-text", [*R, "--slo", "ttft_p99=abc"], "ttft_p99"),
        ("run-slo-no-key", [*R, "--slo", "=5"], "SLO"),
        ("run-slo-negative", [*R, "--slo", "ttft_p99=-5"], "ttft_p99"),
        ("run-slo-nan", [*R, "--slo", "ttft_p99=nan"], "ttft_p99"),
        ("run-slo-inf", [*R, "--slo", "ttft_p99=inf"], "ttft_p99"),
        ("run-slo-no-value", [*R, "--slo", "ttft_p99"], "no value"),
        ("run-slo-unknown-metric", [*R, "--slo", "speed_p99=5"], "speed"),
        ("run-slo-twice", [*R, "--slo", "ttft_p99=5,ttft_p99=6"], "given twice"),
        # a bare metric once meant p99 while the default SLOs judge p90: refused, with both spellings
        ("run-slo-bare", [*R, "--slo", "ttft=500"], "write ttft_p90=500 or ttft_p99=500"),
        # ---- bench run: endpoints, tokenizer, conflicting options
        ("run-openai-no-url", ["run", "--engine", "openai", "-o", out], "--engine openai needs --base-url"),
        ("run-url-no-scheme", ["run", "--engine", "openai", "--base-url", "127.0.0.1:9", "-o", out], "needs a scheme"),
        ("run-url-ftp", ["run", "--engine", "openai", "--base-url", "ftp://host", "-o", out], "must be http or https"),
        ("run-url-no-host", ["run", "--engine", "openai", "--base-url", "http://", "-o", out], "has no host"),
        ("run-url-bad-port", ["run", "--engine", "openai", "--base-url", "http://h:abc", "-o", out], "is not a URL"),
        ("run-url-credentials-masked", ["run", "--engine", "openai", "--base-url", "host:1@x", "-o", out], "needs a scheme"),
        ("run-url-without-openai", ["run", "--engine", "tensorrt_llm", "--base-url", NOWHERE, "--no-calibration", "-o", out],
         "--base-url is the endpoint of --engine openai"),
        ("run-tokenizer-missing", [*R, "--tokenizer", str(root / "nope")], "no such folder"),
        ("run-tokenizer-file", [*R, "--tokenizer", str(f["file"])], "is a file"),
        ("run-tokenizer-empty", [*R, "--tokenizer", str(f["empty"])], "has no tokenizer"),
        ("run-tokenizer-no-config", [*R, "--tokenizer", str(f["tok_no_config"])], "has no config.json"),
        ("run-tokenizer-broken", [*R, "--tokenizer", str(f["tok_broken"])], "the tokenizer does not load"),
        ("run-tokenizer-local-engine", ["run", "--engine", "tensorrt_llm", "--tokenizer", str(f["empty"]), "-o", out],
         "local engines tokenize with --model"),
        ("run-tokenizer-mixed", ["run", "--engine", "own,openai", "--base-url", NOWHERE, "--tokenizer",
                                 str(f["empty"]), "-o", out], "--engine openai run alone"),
        ("run-allow-unchecked-without-check", [*R, "--allow-unchecked", "--fidelity-prompts", "0"],
         "--allow-unchecked lets an engine whose output-fidelity check could not run compete, and --fidelity-prompts 0 "
         "runs no check: drop one or the other"),
        ("search-allow-unchecked", [*S, "--allow-unchecked"], "No such option: --allow-unchecked"),
        ("run-devices-shape", [*R, "--devices", "prod"], "--devices 'prod' is not NAME=N, e.g. --devices prod=8"),
        ("run-devices-zero", [*R, "--devices", "openai=0"], "--devices openai: '0' is not a whole number of devices >= 1"),
        ("run-devices-unknown", [*R, "--devices", "nosuch=2"], "--devices nosuch: no engine or --endpoint of that name"),
        ("run-devices-bad-tp", [*R, "--engine-arg", "vllm:tensor_parallel_size=two"],
         "--engine-arg vllm: engine arg tensor_parallel_size='two' must be a whole number of devices >= 1"),
        ("run-engine-unknown", ["run", "--engine", "nosuch", "-o", out], "unknown engine 'nosuch'"),
        ("run-engine-mii", ["run", "--engine", "deepspeed-mii", "-o", out], "unknown engine 'deepspeed-mii'"),
        ("run-engine-empty", ["run", "--engine", " , ", "-o", out], "--engine is empty"),
        ("run-engine-all-and-more", ["run", "--engine", "all,own", "-o", out], "cannot be combined"),
        ("run-engine-twice", ["run", "--engine", "own,own", "-o", out], "twice"),
        ("run-engine-arg-shape", [*R, "--engine-arg", "vllm"], "is not ENGINE:key=value"),
        ("run-engine-arg-engine", [*R, "--engine-arg", "nosuch:a=b"], "unknown engine 'nosuch'"),
        ("run-engine-arg-unselected", [*R, "--engine-arg", "vllm:max_num_seqs=64"],
         "--engine-arg vllm:max_num_seqs=64 is for vllm, which this run does not start (--engine openai)"),
        ("run-engine-arg-no-flag", ["run", "--engine", "own", "--no-calibration", "--engine-arg", "own:bogus_key=1"],
         "--engine-arg own:bogus_key=1 names no flag of own's server: see python -m own_engine --help"),
        ("run-engine-arg-bad-value", ["run", "--engine", "own", "--no-calibration", "--engine-arg", "own:max_num_seqs=abc"],
         "--engine-arg own: --max-num-seqs takes a whole number, got 'abc'"),
        ("run-engine-arg-bad-choice", ["run", "--engine", "own", "--no-calibration", "--engine-arg", "own:speculative=eagle"],
         "'eagle' is not one of 'none', 'ngram', 'draft'"),
        ("run-engine-arg-reserved", ["run", "--engine", "own", "--no-calibration", "--engine-arg", "own:port=1234"],
         "--engine-arg own:port is set by the harness (a free port it picks per start): drop it"),
        ("run-workload-unknown", [*R, "-w", "nosuch"], "unknown workload 'nosuch'"),
        ("run-workload-markup", [*R, "-w", "x[/]"], "unknown workload 'x[/]'"),
        ("run-api-unknown", [*R, "--api", "grpc"], "--api"),
        ("run-option-not-for-workload", [*R, "-w", "agentic", "--input-len", "5"], "does not apply to the agentic"),
        ("run-trace-unknown", [*R, "-w", "trace", "--trace", "nosuch"], "nosuch"),
        ("run-time-scale-zero", [*R, "-w", "trace", "--time-scale", "0"], "--time-scale must be > 0"),
        # ---- bench run: files and folders
        ("run-spec-missing", [*R, "--workload-spec", str(root / "nope.yaml")], "does not exist"),
        ("run-spec-folder", [*R, "--workload-spec", str(f["empty"])], "does not exist"),
        ("run-spec-bad-yaml", [*R, "-w", "chat", "--workload-spec", str(f["bad_yaml"])], "fix the YAML"),
        ("run-spec-binary", [*R, "-w", "chat", "--workload-spec", str(f["binary_yaml"])], "not UTF-8"),
        ("run-spec-list", [*R, "-w", "chat", "--workload-spec", str(f["list_yaml"])], "expected a YAML mapping"),
        ("run-spec-other-kind", [*R, "-w", "chat", "--workload-spec", str(f["kind_yaml"])], "pass --workload rag"),
        ("run-spec-huge", [*R, "-w", "chat", "--workload-spec", str(f["huge_yaml"])], "num_requests must be <= 100,000"),
        ("run-spec-sessions-huge", [*R, "-w", "agentic", "--workload-spec", str(f["sessions_yaml"])],
         "num_sessions must be <= 100,000"),
        ("run-spec-negative", [*R, "-w", "chat", "--workload-spec", str(f["neg_yaml"])], "num_requests"),
        ("run-output-dir-file", [*RUN, "-o", str(f["file"])], "is a file"),
        ("run-run-id-path", [*R, "--run-id", "../escape"], "plain folder name"),
        ("run-run-id-empty", [*R, "--run-id", " "], "plain folder name"),
        ("run-model-missing", ["run", "--engine", "own", "--model", "/nonexistent/model", "-o", out], "not a folder"),
        ("run-hardware-unknown", [*R, "--hardware", "NOPE"], "--hardware"),
        ("run-preset-unknown", [*R, "--preset", "cheap"], "unknown --preset 'cheap'"),
        ("run-unknown-option", [*R, "--bogus"], "No such option: --bogus"),
        ("run-option-typo", [*R, "--num-requets", "3"], "No such option: --num-requets"),
        # ---- bench search
        ("search-low-zero", [*S, "--low", "0"], "--low must be a finite number > 0"),
        ("search-low-nan", [*S, "--low", "nan"], "--low must be a finite number > 0"),
        ("search-high-below-low", [*S, "--low", "2", "--high", "1"], "must be >= --low"),
        ("search-tolerance-big", [*S, "--tolerance", "2"], "must be < 1"),
        ("search-budget-inf", [*S, "--budget", "inf"], "--budget needs a finite duration (e.g. 3m)"),
        ("search-max-probes-zero", [*S, "--max-probes", "0"], "--max-probes must be >= 1"),
        ("search-repeats-zero", [*S, "--repeats", "0"], "--repeats must be between 1 and"),
        ("search-var-unknown", [*S, "--search-var", "speed"], "--search-var must be one of"),
        ("search-trace-by-rate", [*S, "-w", "trace"], "--search-var concurrency"),
        ("search-n-zero", [*S, "-n", "0"], "--num-requests must be > 0"),
        ("search-slo-empty", [*S, "--slo", ""], "--slo"),
        ("search-url-no-scheme", ["search", "--engine", "openai", "--base-url", "localhost:8000", "-o", out],
         "needs a scheme"),
        ("search-unknown-option", [*S, "--rate", "3"], "No such option: --rate"),
        # ---- bench report
        ("report-no-run", ["report"], "Missing argument"),
        ("report-missing", ["report", str(root / "nope")], "no run '"),
        ("report-file", ["report", str(f["file"])], "no run '"),
        ("report-not-a-run", ["report", "not-a-run", "-o", runs], "no run 'not-a-run'"),
        ("report-unlike-runs", ["report", "chat-run", "agentic-run", "-o", runs], "cannot rank these runs together"),
        # ---- bench recommend
        ("recommend-gpus-zero", ["recommend", "chat-run", "-o", runs, "--gpus", "0"], "--gpus must be at least 1"),
        ("recommend-gpus-text", ["recommend", "chat-run", "-o", runs, "--gpus", "two"], "--gpus takes a whole number, got 'two'"),
        ("recommend-weights-twice", ["recommend", "chat-run", "-o", runs, "--weights", "throughput=1,throughput=2"],
         "weight throughput is given twice"),
        ("recommend-weights-negative", ["recommend", "chat-run", "-o", runs, "--weights", "latency=-1"], "≥ 0"),
        ("recommend-weights-nan", ["recommend", "chat-run", "-o", runs, "--weights", "latency=nan"], "≥ 0"),
        ("recommend-weights-no-value", ["recommend", "chat-run", "-o", runs, "--weights", "latency"], "has no value"),
        ("recommend-weights-empty", ["recommend", "chat-run", "-o", runs, "--weights", ","], "--weights is empty"),
        ("recommend-weights-unknown", ["recommend", "chat-run", "-o", runs, "--weights", "speed=3"], "unknown weight"),
        ("recommend-feature-unknown", ["recommend", "chat-run", "-o", runs, "--feature", "teleport"], "teleport"),
        ("recommend-slo-zero", ["recommend", "chat-run", "-o", runs, "--slo", "ttft_p99=0"], "ttft_p99"),
        ("recommend-hardware-unknown", ["recommend", "chat-run", "-o", runs, "--hardware", "B999"], "B999"),
        ("recommend-preset-unknown", ["recommend", "chat-run", "-o", runs, "--preset", "cheap"], "cheap"),
        ("recommend-unlike-runs", ["recommend", "chat-run", "agentic-run", "-o", runs],
         "measured different workloads (chat vs agentic)"),
        ("recommend-missing", ["recommend", "nope", "-o", runs], "no run 'nope'"),
        # ---- bench results
        ("results-show-unknown", ["results", "show", "nope", "-o", runs], "no run 'nope'"),
        ("results-show-latest-empty", ["results", "show", "latest", "-o", str(f["empty"])], "no runs under"),
        ("results-show-folder", ["results", "show", str(f["empty"])], "no run '"),
        ("results-show-bad-option", ["results", "show", "--x"], "No such option: --x"),
        ("results-extra-argument", ["results", "show", "a", "b"], "unexpected extra argument"),
        # ---- bench workloads
        ("workloads-show-unknown", ["workloads", "show", "nosuch"], "unknown workload 'nosuch'"),
        ("workloads-show-n-huge", ["workloads", "show", "chat", "-n", "1000000000"], "--num-requests must be <= 100,000"),
        ("workloads-show-n-text", ["workloads", "show", "chat", "-n", "many"], "--num-requests takes a whole number, got 'many'"),
        ("workloads-show-input-len-huge", ["workloads", "show", "random", "--input-len", "2000000"], "<= 1,048,576"),
        ("workloads-show-too-many-tokens", ["workloads", "show", "random", "-n", "100000", "--input-len", "1000"],
         "at most 50,000,000"),
        ("workloads-show-spec-huge", ["workloads", "show", "chat", "--workload-spec", str(f["huge_yaml"])],
         "num_requests must be <= 100,000"),
        ("workloads-show-rate-nan", ["workloads", "show", "chat", "--request-rate", "nan"], "--request-rate"),
        ("workloads-show-seed-negative", ["workloads", "show", "chat", "--seed", "-1"], "--seed must be >= 0"),
        ("workloads-show-not-for-kind", ["workloads", "show", "agentic", "--input-len", "5"], "does not apply"),
        ("workloads-show-model-missing", ["workloads", "show", "chat", "--model", "/nonexistent/m"], "not a folder"),
        ("workloads-show-no-name", ["workloads", "show"], "Missing argument 'NAME'"),
        # ---- bench calibrate
        ("calibrate-burst-zero", ["calibrate", "--burst", "0"], "--burst must be between 1 and 100,000, got 0"),
        ("calibrate-burst-huge", ["calibrate", "--burst", "2000000"], "--burst must be between 1 and 100,000"),
        ("calibrate-streams-zero", ["calibrate", "--streams", "0"], "--streams must be between 1 and 1,000"),
        ("calibrate-streams-huge", ["calibrate", "--streams", "5000"], "--streams must be between 1 and 1,000"),
        ("calibrate-streams-text", ["calibrate", "--streams", "lots"], "--streams takes a whole number, got 'lots'"),
        # ---- bench engines / model
        ("engines-setup-unknown", ["engines", "setup", "nosuch"], "unknown engine 'nosuch'"),
        ("engines-setup-own", ["engines", "setup", "own"], "needs no setup"),
        ("engines-check-unknown", ["engines", "check", "--engine", "nosuch"], "unknown engine 'nosuch'"),
        ("engines-check-former-spelling", ["engines", "check", "--engines", "nosuch"], "unknown engine 'nosuch'"),
        ("engines-check-empty", ["engines", "check", "--engine", ","], "--engine is empty"),
        ("engines-check-max-tokens", ["engines", "check", "--max-tokens", "0"], "--max-tokens must be >= 1, got 0"),
        ("engines-check-engine-arg", ["engines", "check", "--engine-arg", "bad"], "is not ENGINE:key=value"),
        ("engines-check-engine-arg-unselected", ["engines", "check", "--engine", "own", "--engine-arg", "vllm:max_num_seqs=64"],
         "--engine-arg vllm:max_num_seqs=64 is for vllm, which this run does not start (--engine own): add vllm to "
         "--engine or drop the argument"),
        ("engines-fidelity-prompts-zero", ["engines", "fidelity", "--fidelity-prompts", "0"], "--fidelity-prompts must be >= 1, got 0"),
        ("engines-fidelity-former-tokens", ["engines", "fidelity", "--tokens", "0"], "--tokens must be >= 1, got 0"),
        ("run-fidelity-floor-above-1", [*RUN, "--fidelity-floor", "2"], "--fidelity-floor must be <= 1.0, got 2.0"),
        ("search-budget-not-a-duration", [*SEARCH, "--budget", "2x"],
         "--budget '2x' is not a duration: give seconds (900) or with a unit (900s, 15m, 1h)"),
        ("engines-fidelity-engine-arg-unselected", ["engines", "fidelity", "--engine", "own", "--engine-arg",
                                                    "vllm:max_num_seqs=64"], "is for vllm, which this run does not start"),
        ("engines-fidelity-engine-arg-shape", ["engines", "fidelity", "--engine-arg", "vllm"], "is not ENGINE:key=value"),
        ("run-engine-arg-unselected-own", ["run", "--engine", "own", "--engine-arg", "vllm:max_num_seqs=64"],
         "--engine-arg vllm:max_num_seqs=64 is for vllm, which this run does not start (--engine own): add vllm to "
         "--engine or drop the argument"),
        ("engines-check-model", ["engines", "check", "--model", "/nonexistent/m"], "not a folder"),
        ("engines-bad-option", ["engines", "--bogus"], "No such option: --bogus"),
        ("model-info-missing", ["model", "info", "/nonexistent/m"], "not a folder"),
        ("unknown-command", ["benchmark"], "No such command 'benchmark'"),
    ]


def outcome(res: Any) -> str | None:
    """None when ``res`` is clean (exit 2, one ``error:`` line, nothing on stdout, no traceback);
    else what was wrong."""
    err = [line for line in res.stderr.splitlines() if line.strip()]
    if res.exit_code != 2:
        return f"exit {res.exit_code}"
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        return f"exception {type(res.exception).__name__}"
    if "Traceback" in res.output or res.stdout.strip():
        return "traceback or stdout"
    if not err or not err[0].startswith("error: ") or len(err) > 1:
        return f"{len(err)} stderr lines"
    if "Input should be" in err[0] or "Field required" in err[0]:  # pydantic's wording, not the fix
        return "pydantic's wording"
    return None


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bad-inputs")


CASE_IDS = [case[0] for case in cases(Path("/bad-inputs"))]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[str], str]]:
    root = tmp_path_factory.mktemp("bad-inputs")
    make_files(root)
    return {name: (argv, needle) for name, argv, needle in cases(root)}


def test_the_cases_have_distinct_names() -> None:
    assert len(CASE_IDS) == len(set(CASE_IDS)) and len(CASE_IDS) >= 60


@pytest.mark.parametrize("name", CASE_IDS)
def test_bad_input_is_one_line_and_exit_2(name: str, built: dict[str, tuple[list[str], str]],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.app.cli import app

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    argv, needle = built[name]
    res = CliRunner().invoke(app, argv)
    assert outcome(res) is None, (outcome(res), res.output)
    assert needle in res.stderr.splitlines()[0], res.stderr


def _no_weights(tmp_path: Path) -> str:
    """The default model's folder without its weights: config.json and the tokenizer only."""
    import shutil

    from harness.app.core.model import resolve_model

    folder = tmp_path / "no-weights"
    folder.mkdir()
    for f in resolve_model(None).iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and not f.name.startswith("."):
            shutil.copy(f, folder / f.name)
    return str(folder)


@pytest.mark.parametrize("model", ["missing", "no-weights"])
def test_a_bad_model_leaves_no_run_folder(tmp_path: Path, model: str) -> None:
    """Issue 41 (review item 19): a run refused on its --model writes nothing that `bench results
    list` would show; issue 39's review: a folder with config.json but no weights is refused the
    same way, before the run folder (it used to start the engines, which failed, and leave it)."""
    from harness.app.cli import app

    folder = "/nonexistent/model" if model == "missing" else _no_weights(tmp_path)
    res = CliRunner().invoke(app, ["run", "--engine", "own", "--model", folder, "-o", str(tmp_path / "out"),
                                   "--no-calibration"])
    assert outcome(res) is None, res.output
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
    if model == "no-weights":
        assert res.stderr.startswith(f"error: --model {folder} has no weights (*.safetensors, *.bin, *.gguf, "), res.stderr


def test_a_run_with_no_engine_that_can_run_leaves_no_run_folder(tmp_path: Path) -> None:
    """Issue 41 (review item 20): an --endpoint that is not reachable, and nothing else to
    measure: one error line naming why (after the skip line), exit 2, no run folder."""
    from harness.app.cli import app

    res = CliRunner().invoke(app, ["run", "--endpoint", f"prod={NOWHERE}", "--model", "x", "--no-calibration",
                                   "-o", str(tmp_path / "out")])
    err = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(err) == 1, res.output
    assert err[0].startswith("error: no engine can run here, so nothing was measured and no run folder is kept (prod: ")
    assert "is not reachable" in err[0] and "Traceback" not in res.output
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
    # issue 39's review: nor is the removed folder announced ("Run ID → FOLDER", "Results: FOLDER")
    assert str(tmp_path / "out") not in res.stdout and "→" not in res.stdout, res.stdout


def main() -> None:  # pragma: no cover - the sweep's count, for the closing note
    """``PYTHONPATH=CHECKOUT:. python tests/harness/app/cli/test_bad_inputs.py`` from this project's root
    (the code from CHECKOUT, ``tests.helpers`` from here): cases tried and clean."""
    import sys
    import tempfile

    from harness.app.cli import app

    import os

    root = Path(tempfile.mkdtemp(prefix="bad-inputs-"))
    make_files(root)
    dirty = []
    all_cases = cases(root)
    not_run = set(filter(None, os.environ.get("BAD_INPUTS_NOT_RUN", "").split(",")))  # cases that exhaust memory there
    for name, argv, _ in all_cases:
        if name in not_run:
            dirty.append(f"{name}: not run (exhausts memory or time without the bounds)")
            continue
        why = outcome(CliRunner().invoke(app, argv))
        if why:
            dirty.append(f"{name}: {why}")
    print(f"tried {len(all_cases)}, clean {len(all_cases) - len(dirty)}", *dirty, sep="\n", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    main()


def test_one_error_path_for_every_command() -> None:
    """One error console and one ``fail`` (harness/app/cli/common.py): no command module prints
    errors its own way."""
    cli = Path(__file__).parents[4] / "harness" / "app" / "cli"
    for path in cli.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        if path.name != "common.py":
            assert "stderr=True" not in text and "def _fail" not in text and "def fail" not in text, path.name
