"""reports/fidelity.py: a fidelity check without a row says why, instead of an empty table (an
own-only ladder run: the check goes to the production engines the verdict rests on, and the
reference engine is a yardstick)."""

from __future__ import annotations

from jinja2 import Environment

from reports.fidelity import fidelity_context
from reports.writer import _environment
from results.schema import CapacityAtSLO, EngineLadder, EngineStatus, FidelityCheck, LadderPoint, LadderSummary


def _ladder(**engines: bool) -> LadderSummary:
    """Engines (name → is the reference engine) that each climbed one point."""
    return LadderSummary(run_id="r", workload="agentic", engines={
        n: EngineLadder(status=EngineStatus.OK, reference=ref, points=[LadderPoint(index=0, load=1, passed=True)],
                        capacity=CapacityAtSLO(output_tps=10.0)) for n, ref in engines.items()})


def _section(env: Environment, ctx: dict) -> str:
    """report.md.j2's output-fidelity section alone, rendered with ``ctx``."""
    template = env.from_string(env.loader.get_source(env, "report.md.j2")[0].split("{% if fidelity %}")[1]
                               .split("{% if replay %}")[0].rsplit("{% endif %}", 1)[0])
    return template.render(fidelity=ctx)


def test_an_own_only_run_says_why_its_fidelity_table_is_empty() -> None:
    ctx = fidelity_context(FidelityCheck(reference_key="k", prompts=8, max_tokens=32), _ladder(own=True))
    assert ctx is not None and ctx["rows"] == []
    assert ctx["empty"] == ("No engine's outputs were checked: the check runs on the production engines the verdict "
                            "rests on (the leader, and the runner-up while not separated from it), and this run measured "
                            "none: own is the reference engine, a yardstick the verdict never rests on. Measure a "
                            "production engine beside it (--engine) to check one.")
    section = _section(_environment(), ctx)
    assert ctx["empty"] in section and "| engine | top-1 agreement" not in section  # the sentence, not an empty table


def test_a_run_with_production_engines_gives_the_other_reason_and_a_checked_one_no_sentence() -> None:
    ctx = fidelity_context(FidelityCheck(reference_key="k"), _ladder(own=True, vllm=False))
    assert ctx["empty"].endswith("and this run reached no verdict that rests on one.")
    from results.schema import FidelityResult

    checked = FidelityCheck(reference_key="k", engines={"vllm": FidelityResult(numerics="bf16", floor=0.99)})
    ctx = fidelity_context(checked, _ladder(own=True, vllm=False))
    assert ctx["empty"] == "" and [r["engine"] for r in ctx["rows"]] == ["vllm"]
    assert "| vllm |" in _section(_environment(), ctx)
