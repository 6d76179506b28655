"""Measured criteria only (issue 12): no score rests on what an adapter declares about itself;
complexity comes from the recorded time to healthy and process count; features score nothing
until verified; the reference engine is a yardstick, never the recommendation."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from adapters.runtime.process import ServerProcess, find_free_port
from harness.scoring import recommend
from results.hardware import GiB, HardwareProfile
from results.store import Run, load_run

from tests.helpers import CPU_ONLY, OWN_CAPS, make_records, ok_entry, write_run

CPU = HardwareProfile("CPU", "cpu", 64 * GiB)
LEAN = {"hardware": ["cpu"], "features": [], "quantization": [], "api": "server", "complexity": 5}
RICH = {"hardware": ["cpu"], "features": ["paged_kv", "prefix_caching", "chunked_prefill", "continuous_batching",
                                          "speculative_decoding", "structured_output"],
        "quantization": [], "api": "server", "complexity": 1}


def entry(name: str, caps: dict[str, Any] | None, *, startup_s: float | None = 10.0, parallel: bool = False,
          ttft_ms: float = 100.0, out_tokens: int = 10) -> tuple[dict[str, Any], list]:
    records = make_records(name, 8, ttft_ms=ttft_ms, tpot_ms=10.0, out_tokens=out_tokens)
    result = ok_entry(records, caps)
    if startup_s is not None:
        result.update(startup_s=startup_s, startup_parallel=parallel)
    return result, records


def run_with(tmp_path: Path, run_id: str, engines: dict[str, tuple[dict[str, Any], list]],
             effective: dict[str, dict[str, Any]] | None = None) -> Run:
    """A run of ``engines`` (name → (summary entry, records)); ``effective``: the manifest's
    per-engine effective configuration (e.g. ``{"processes": 3}``)."""
    run = write_run(tmp_path, run_id, {name: e for name, (e, _) in engines.items()},
                    [r for _, records in engines.values() for r in records])
    if effective:
        path = run.run_dir / "manifest.json"
        manifest = json.loads(path.read_text())
        manifest["engines"] = effective
        path.write_text(json.dumps(manifest))
        run = load_run(run.run_dir)
    return run


def ranking(rec) -> list[tuple[str, float, dict[str, float]]]:
    return [(r.engine, r.score, r.components) for r in rec.ranking]


def test_swapping_declared_attributes_changes_nothing(tmp_path: Path) -> None:
    """Identical measured numbers, different declared complexity and features: swapping the
    declarations leaves the ranking and every score unchanged."""
    procs = {"alpha": {"processes": 2}, "beta": {"processes": 2}}
    before = recommend([run_with(tmp_path, "a", {"alpha": entry("alpha", LEAN), "beta": entry("beta", RICH)}, procs)],
                       hardware=CPU)
    after = recommend([run_with(tmp_path, "b", {"alpha": entry("alpha", RICH), "beta": entry("beta", LEAN)}, procs)],
                      hardware=CPU)
    assert ranking(before) == ranking(after)
    assert before.ranking[0].score == before.ranking[1].score
    assert all(r.components["features"] == 0.0 and r.components["complexity"] == 1.0 for r in before.ranking)
    assert before.deciding_constraint == after.deciding_constraint
    assert before.deciding_constraint.startswith("alpha: tied with beta on score")
    # the declarations are still listed, as declared and unverified
    assert before.ranking[[r.engine for r in before.ranking].index("beta")].declared_features == [
        "paged_kv", "prefix_caching", "chunked_prefill", "continuous_batching", "speculative_decoding",
        "structured_output"]
    note = next(n for n in before.notes if n.startswith("features = the verified feature probes"))
    assert "alpha: not probed; declared, unverified: none | beta: not probed; declared, unverified: paged_kv, " \
           "prefix_caching" in note
    # no weight on the features criterion can change anything
    heavy = recommend([run_with(tmp_path, "c", {"alpha": entry("alpha", LEAN), "beta": entry("beta", RICH)}, procs)],
                      hardware=CPU, weights={"features": 5.0})
    assert [r.engine for r in heavy.ranking] == ["alpha", "beta"]
    assert heavy.ranking[0].score == heavy.ranking[1].score


def test_complexity_is_time_to_healthy_and_processes(tmp_path: Path) -> None:
    engines = {"quick": entry("quick", LEAN, startup_s=12.3), "slow": entry("slow", RICH, startup_s=45.1)}
    run = run_with(tmp_path, "r", engines, {"quick": {"processes": 1, "install_bytes": 3 * 1024**3},
                                            "slow": {"processes": 4}})
    rec = recommend([run], hardware=CPU)
    components = {r.engine: r.components["complexity"] for r in rec.ranking}
    assert components["quick"] == 1.0
    assert math.isclose(components["slow"], (12.3 / 45.1 + 1 / 4) / 2, abs_tol=1e-6)
    assert rec.winner == "quick"
    assert "decided by complexity (time to healthy 12.3 s vs 45.1 s, 1 vs 4 processes" in rec.deciding_constraint
    note = next(n for n in rec.notes if n.startswith("complexity is measured"))
    assert "quick: time to healthy 12.3 s (started alone), 1 processes" in note
    assert ("install time not recorded in these runs; install size (shown, not scored) quick 3.00 GiB; "
            "not recorded: steps outside pip") in note
    assert ("no change of the features weight changes the winner: no survivor has a verified feature (no feature "
            "probe passed, or the runs have none), so features score 0 for every engine") in rec.sensitivity


def test_time_to_healthy_is_compared_like_with_like(tmp_path: Path) -> None:
    # one started alone, one alongside others: its time holds the contention, so it is not compared
    engines = {"alone": entry("alone", CPU_ONLY, startup_s=5.0), "crowd": entry("crowd", CPU_ONLY, startup_s=20.0,
                                                                                 parallel=True)}
    rec = recommend([run_with(tmp_path, "mixed", engines)], hardware=CPU)
    assert {r.components["complexity"] for r in rec.ranking} == {0.0}  # nothing comparable: scores 0 for all
    note = next(n for n in rec.notes if n.startswith("complexity is measured"))
    assert "time to healthy not compared: alone started alone, the others alongside other engines" in note
    assert "process count not compared: not recorded for alone, crowd" in note
    # all started together: compared, with the caveat
    together = {"a": entry("a", CPU_ONLY, startup_s=5.0, parallel=True),
                "b": entry("b", CPU_ONLY, startup_s=10.0, parallel=True)}
    rec = recommend([run_with(tmp_path, "together", together)], hardware=CPU)
    assert {r.engine: r.components["complexity"] for r in rec.ranking} == {"a": 1.0, "b": 0.5}
    assert any("all started alongside others" in n for n in rec.notes)
    # an endpoint the harness did not start has no time to healthy
    external = {"a": entry("a", CPU_ONLY, startup_s=5.0), "openai": entry("openai", None, startup_s=0.01)}
    rec = recommend([run_with(tmp_path, "ext", external, {"openai": {"base_url": "http://remote:8000"}})],
                    hardware=CPU)
    assert any("time to healthy not compared: not recorded for openai" in n for n in rec.notes)


def test_reference_engine_is_a_yardstick_never_the_recommendation(tmp_path: Path) -> None:
    engines = {"own": entry("own", OWN_CAPS, ttft_ms=50.0, out_tokens=20), "vllm": entry("vllm", CPU_ONLY)}
    rec = recommend([run_with(tmp_path, "r", engines)], hardware=CPU)
    assert [r.engine for r in rec.ranking] == ["own", "vllm"]  # ranked first, on its numbers
    assert rec.ranking[0].reference and not rec.ranking[1].reference
    assert rec.winner == "vllm" and rec.exit_code == 0
    assert rec.deciding_constraint.startswith("vllm: the only production engine measured")
    assert rec.yardstick.startswith("own (reference engine, a yardstick, never the recommendation) ranks 1 of 2 "
                                    "with score ")
    assert "above the recommended vllm" in rec.yardstick and "p99 TTFT 50.0 ms vs 100 ms" in rec.yardstick
    assert rec.notes[0] == rec.yardstick
    assert rec.sensitivity[0] == ("no weight change can change the winner: only one production engine survives "
                                  "the hard constraints")
    # the reference engine alone: ranked, but no recommendation
    alone = recommend([run_with(tmp_path, "alone", {"own": entry("own", OWN_CAPS)})], hardware=CPU)
    assert alone.winner is None and alone.exit_code == 1 and [r.engine for r in alone.ranking] == ["own"]
    assert alone.deciding_constraint.startswith("no production engine survives the hard constraints; only the "
                                                "reference engine own does")
    assert "is a yardstick, never the recommendation" in alone.message


def test_server_process_counts_its_processes_once_healthy(tmp_path: Path) -> None:
    fake = Path(__file__).parents[3] / "fake_servers" / "lifecycle_server.py"
    port = find_free_port()
    server = ServerProcess([sys.executable, str(fake), "--port", str(port), "--children", "2"],
                           log_path=tmp_path / "fake.log", port=port, startup_timeout_s=10, stop_grace_s=3, name="fake")
    with server:
        assert server.processes == 3  # the server and its two workers
