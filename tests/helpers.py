"""Builders for hand-made run folders (summary.json, manifest.json, requests.jsonl) whose right
answers are known. Shared by the scorer's, the reports', the results' and the CLI's tests
(``from tests.helpers import ...``); the builder's own sanity test is tests/test_helpers.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.metrics import compute_metrics, parse_slos
from results.schema import RequestRecord
from results.store import Run, load_run

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000

SMOLLM2 = {
    "name": "SmolLM2-135M-Instruct",
    "architecture": "LlamaForCausalLM",
    "num_layers": 30,
    "hidden_size": 576,
    "num_heads": 9,
    "num_kv_heads": 3,
    "head_dim": 64,
    "vocab_size": 49152,
    "max_position_embeddings": 8192,
    "dtype": "float32",
    "num_params": 134_515_008,
}

CPU_ONLY = {"hardware": ["cpu"], "features": ["continuous_batching"], "quantization": [], "api": "shim", "complexity": 1}
OWN_CAPS = {
    "hardware": ["cpu", "nvidia"],
    "features": ["paged_kv", "prefix_caching", "chunked_prefill", "continuous_batching", "speculative_decoding"],
    "quantization": [],
    "api": "server",
    "complexity": 1,
}
TRT_CAPS = {"hardware": ["nvidia"], "features": ["paged_kv", "continuous_batching"], "quantization": ["fp8"],
            "api": "server", "complexity": 5}


def make_records(
    engine: str,
    n: int,
    *,
    ttft_ms: float,
    tpot_ms: float,
    out_tokens: int = 10,
    in_tokens: int = 100,
    interval_s: float = 0.25,
    workload: str = "chat",
    turns: int = 1,
    ttft_by_turn_ms: list[float] | None = None,
    fail: int = 0,
    start_ns: int = 10 * NS_PER_S,
) -> list[RequestRecord]:
    """``n`` requests sent every ``interval_s`` (0 = all at once), each with exactly the given
    TTFT and a constant TPOT (chunk gaps of ``tpot_ms``), so every percentile is known.
    ``turns > 1`` makes sessions of that many turns (turn i sent 2 s after the session start of turn 0);
    the last ``fail`` requests fail with ``http_500``."""
    out = []
    for i in range(n):
        sess, turn = divmod(i, turns)
        send = start_ns + int(sess * interval_s * NS_PER_S) + turn * 2 * NS_PER_S
        t_ms = ttft_by_turn_ms[turn] if ttft_by_turn_ms else ttft_ms
        first = send + int(t_ms * NS_PER_MS)
        chunks = [first + int(k * tpot_ms * NS_PER_MS) for k in range(out_tokens)]
        ok = i < n - fail
        out.append(
            RequestRecord(
                request_id=f"{engine}-{i}",
                engine=engine,
                workload=workload,
                session_id=f"s{sess}" if turns > 1 else None,
                turn_id=turn if turns > 1 else None,
                scheduled_ns=send,
                send_ns=send,
                first_token_ns=chunks[0] if ok else None,
                last_token_ns=chunks[-1] if ok else None,
                end_ns=chunks[-1] if ok else send + 5 * NS_PER_MS,
                chunk_times_ns=chunks if ok else [],
                input_tokens_server=in_tokens,
                output_tokens_server=out_tokens if ok else None,
                finish_reason="length" if ok else None,
                success=ok,
                error_class=None if ok else "http_500",
            )
        )
    return out


def ok_entry(
    records: list[RequestRecord],
    caps: dict[str, Any] | None,
    *,
    offered_rate: float | None = 4.0,
    slos: str = "",
    display_name: str | None = None,
    engine_metrics: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``summary.json`` engine entry with status ok and metrics computed from ``records``."""
    entry: dict[str, Any] = {
        "status": "ok",
        "reason": "",
        "display_name": display_name or records[0].engine,
        "version": "0.1.0",
        "metrics": compute_metrics(records, parse_slos(slos), offered_rate=offered_rate).model_dump(mode="json"),
    }
    if caps is not None:
        entry["capabilities"] = caps
    if engine_metrics is not None:
        entry["engine_metrics"] = engine_metrics
    return entry


def skipped(reason: str, status: str = "skipped", **extra: Any) -> dict[str, Any]:
    return {"status": status, "reason": reason, "metrics": {}, **extra}


def write_run(
    root: Path,
    run_id: str,
    engines: dict[str, dict[str, Any]],
    records: list[RequestRecord],
    *,
    workload: str = "chat",
    slos: dict[str, float] | None = None,
    manifest: dict[str, Any] | None = None,
) -> Run:
    """Write a run folder under ``root`` and load it back with ``results.store.load_run``."""
    d = root / run_id
    d.mkdir(parents=True)
    summary = {"schema_version": "1.0", "run_id": run_id, "workload": workload, "slos": slos or {}, "engines": engines}
    (d / "summary.json").write_text(json.dumps(summary))
    if manifest is None:
        manifest = {
            "command": ["bench", "run", "--engine", "all"],
            "harness_version": "0.1.0",
            "git_sha": "abc1234",
            "created_at": "2026-11-29T19:35:00",
            "hardware": {"cpu_model": "Test CPU", "cpu_count": 2, "memory_bytes": 8 * 1024**3, "gpus": []},
            "model": SMOLLM2,
            "workload": {"name": workload, "seed": 7, "scale": 1.0},
        }
    (d / "manifest.json").write_text(json.dumps(manifest))
    (d / "requests.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))
    return load_run(d)


def sim_ladder_run(root: Path, run_id: str, engines: dict[str, Any], slos: str = "ttft_p90=1000,tpot_p90=60",
                   loads: tuple[int, ...] = (1, 2, 4, 8, 16, 32), requests: int = 24, seed: int = 0,
                   workload: str = "random", with_metrics: bool = False, repeats: int = 1,
                   hardware: dict[str, Any] | None = None, platform: str | None = None) -> Path:
    """A run folder ``root/run_id`` whose scripted engines (name → ``SimEngine``) climbed load
    ladders of ``loads`` (``max(requests, 4 × load)`` requests of 32 output tokens per point,
    simulated with seeds ``seed + index``), judged at ``slos`` and stored as ``ladder.json``;
    ``with_metrics``: each engine's summary.json entry holds the metrics of its capacity point
    (``ladder_point``, over the point's steady state) as ``bench run`` stores it; ``repeats``:
    measurements of every point (measurement k simulated with seed ``seed + index + 1000 k``);
    ``hardware`` / ``platform``: the manifest's (what ``harness.app.run.spread_history`` matches on)."""
    from harness.loadgen.simulated import simulate
    from harness.scoring.verdict.decision import judge
    from results.schema import LADDER_FILE, EngineLadder, EngineResult, EngineStatus, LadderPoint, LadderSummary
    from results.store import RunWriter, read_records, write_model_atomic

    parsed = parse_slos(slos)
    writer = RunWriter(root / run_id, run_id, workload)
    summary = LadderSummary(run_id=run_id, workload=workload, slos={s.key: s.threshold_ms for s in parsed})
    for name, engine in engines.items():
        points = []
        for index, load in enumerate(loads):
            seeds, wall = [seed + index + 1000 * k for k in range(repeats)], 0.0
            for k, measured in enumerate(seeds):
                records, duration = simulate(engine, load, max(requests, 4 * load), 32, seed=measured)
                wall += duration
                for r in records:
                    r.probe, r.repeat = index, k
                    r.request_id = f"{name}-{index}-{r.request_id}" if repeats == 1 else f"{name}-{index}-{k}-{r.request_id}"
                    writer.add_record(r)
            points.append(LadderPoint(index=index, load=load, seeds=seeds, wall_s=wall))
        summary.engines[name] = EngineLadder(status=EngineStatus.OK, points=points, startup_s=10.0,
                                             reference=name == "own")  # own is the yardstick, as in bench run
        writer.set_engine(name, EngineResult(status=EngineStatus.OK))
    if hardware is not None:
        from results.schema.facts import HardwareFacts

        writer.manifest.hardware, writer.manifest.platform = HardwareFacts(**hardware), platform
    writer.close()
    records = read_records(root / run_id / "requests.jsonl")
    judge(summary, records, parsed)
    if with_metrics:
        from harness.metrics.summarise import Condition, summarise
        from harness.scoring.capacity.samples import judged_records

        for name, e in summary.engines.items():  # as harness.app.run.ladder_run stores an engine: its capacity point
            at = next(p for p in e.points if p.load == e.capacity.bracket[0])
            point = judged_records([r for r in records if r.engine == name and r.probe == at.index])
            writer.set_engine(name, EngineResult(status=EngineStatus.OK, ladder_point=at.index,
                                                 metrics=summarise(point, Condition(tuple(parsed))).pooled))
        writer.close()
    write_model_atomic(root / run_id / LADDER_FILE, summary)
    return root / run_id


def sim_session_ladder_run(root: Path, run_id: str, engines: dict[str, Any], script: Any = None,
                           slos: str = "ttft_p90=4000,tpot_p90=200", loads: tuple[int, ...] = (1, 2, 4, 8, 16),
                           sessions: int = 3, devices: int = 1, cache_optimal: float | None = None) -> Path:
    """An agentic run folder ``root/run_id`` whose scripted engines (name → ``SimEngine``) climbed
    load ladders of agent sessions (``harness.loadgen.simulated_sessions``: ``sessions × load``
    sessions of ``script`` per point, at ``loads`` agents in flight), judged at ``slos`` with the
    workload's infinite-cache hit rate ``cache_optimal`` and stored as ``ladder.json``."""
    from harness.loadgen.simulated_sessions import AgentScript, simulate_sessions
    from harness.scoring.verdict.decision import judge
    from results.schema import LADDER_FILE, EngineLadder, EngineResult, EngineStatus, LadderPoint, LadderSummary
    from results.store import RunWriter, read_records, write_model_atomic

    parsed = parse_slos(slos)
    writer = RunWriter(root / run_id, run_id, "agentic")
    summary = LadderSummary(run_id=run_id, workload="agentic", slos={s.key: s.threshold_ms for s in parsed},
                            devices=devices, cache_optimal=cache_optimal)
    for name, engine in engines.items():
        points = []
        for index, load in enumerate(loads):
            records, duration, _ = simulate_sessions(engine, script or AgentScript(), load, sessions * load, seed=index)
            for r in records:
                r.probe, r.request_id = index, f"{name}-{index}-{r.request_id}"
                writer.add_record(r)
            points.append(LadderPoint(index=index, load=load, seeds=[index], wall_s=duration))
        summary.engines[name] = EngineLadder(status=EngineStatus.OK, points=points, startup_s=10.0)
        writer.set_engine(name, EngineResult(status=EngineStatus.OK))
    writer.close()
    judge(summary, read_records(root / run_id / "requests.jsonl"), parsed)
    write_model_atomic(root / run_id / LADDER_FILE, summary)
    return root / run_id
