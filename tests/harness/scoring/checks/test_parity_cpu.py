"""The parity audit flags an engine that used more cores than the threads it was given (the review of
2026-12-06: vLLM-CPU averaged 189 % CPU with 1 thread while the table said every engine ran 1 thread)."""

from __future__ import annotations

from harness.scoring.checks.parity import audit_summary, cpu_over_threads
from results.schema import EffectiveSettings, EngineResult, EngineStatus, ResourceUse, RunSummary


def _engine(cpu_percent: float) -> EngineResult:
    return EngineResult(status=EngineStatus.OK, effective=EffectiveSettings(threads=1),
                        resources=ResourceUse(samples=10, mean_cpu_percent=cpu_percent))


def test_an_engine_using_two_cores_with_one_thread_is_flagged_and_one_within_it_is_not() -> None:
    summary = RunSummary(run_id="r", workload="agentic", engines={"vllm": _engine(189.0), "openvino": _engine(98.0)})
    over = cpu_over_threads(summary)
    assert list(over) == ["vllm"] and "vllm used 1.9 cores on average with 1 thread(s) given" in over["vllm"]
    audit = audit_summary(summary, "cpu")
    assert audit is not None
    flag = next(f for f in audit.flags if f.setting == "threads")
    assert flag.engines == ["vllm"]
    assert next(r for r in audit.rows if r.setting == "threads").unfair
