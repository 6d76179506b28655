"""The output-fidelity gate in the ladder decision (harness/scoring/verdict/decision.py ``gate``): a check
that could not run, or answered too few prompts, does not pass by not running. Two simulated
engines (harness/loadgen/simulated.py), 'fast' clearly ahead of 'slow'; only fast's fidelity
result changes from test to test."""

from __future__ import annotations

import pytest

from harness.loadgen.simulated import SimEngine, simulate
from harness.metrics import parse_slos
from harness.scoring.verdict.decision import gate, judge
from reports.frontier import capacity_rows
from results.schema import EngineLadder, EngineStatus, FidelityResult, Interval, LadderPoint, LadderSummary

SLOS = parse_slos("ttft_p90=1000,tpot_p90=60")
ERROR = "ContentTypeError: 200, message='Attempt to decode JSON with unexpected mimetype: text/event-stream'"


@pytest.fixture(scope="module")
def measured() -> tuple[dict[str, list[LadderPoint]], list]:
    """Each engine's ladder points and all the records (simulated once for the module)."""
    engines = {"fast": SimEngine("fast", slots=16, prefill_ms=60, tpot_ms=18, jitter=0.05),
               "slow": SimEngine("slow", slots=8, prefill_ms=90, tpot_ms=30, jitter=0.05)}
    points, records = {}, []
    for name, engine in engines.items():
        points[name] = []
        for index, load in enumerate((1, 2, 4, 8, 16, 32)):
            recs, duration = simulate(engine, load, max(16, 4 * load), 32, seed=index)
            for r in recs:
                r.engine, r.probe, r.request_id = name, index, f"{name}-{index}-{r.request_id}"
            records += recs
            points[name].append(LadderPoint(index=index, load=load, seeds=[index], wall_s=duration))
    return points, records


def _checked(prompts: int = 32, answered: int = 32) -> FidelityResult:
    return FidelityResult(prompts=prompts, positions=64 * answered, agreement_outside_near_ties=1.0, passed=True,
                          agreement_interval=Interval(point=1.0, low=0.99, high=1.0, n=answered),
                          first_divergence=[None] * prompts, prompts_answered=answered)


def _judged(measured, fast: FidelityResult | None, *, allow_unchecked: bool = False,
            slow: FidelityResult | None = None) -> LadderSummary:
    points, records = measured
    s = LadderSummary(run_id="g", workload="random", slos={x.key: x.threshold_ms for x in SLOS},
                      allow_unchecked=allow_unchecked)
    for name, fid in (("fast", fast), ("slow", slow if slow is not None else (_checked() if fast else None))):
        s.engines[name] = EngineLadder(status=EngineStatus.OK, points=[p.model_copy() for p in points[name]],
                                       startup_s=10.0, fidelity=fid)
    return judge(s, records, SLOS)


def _gates(s: LadderSummary) -> dict[str, str]:
    return {r["engine"].rstrip(" ★"): r["gates"] for r in capacity_rows(s)}


def test_no_check_asked_for_changes_nothing(measured) -> None:
    s = _judged(measured, None)  # --fidelity-prompts 0: no engine has a fidelity result
    assert s.decision.winner == "fast" and s.decision.excluded == {}
    assert _gates(s) == {"fast": "passed", "slow": "passed"}
    assert "fidelity" not in s.decision.sentence


def test_a_check_that_errored_excludes_the_engine(measured) -> None:
    errored = FidelityResult(prompts=32, error=ERROR, prompts_answered=0)
    s = _judged(measured, errored)
    fast = s.engines["fast"]
    assert fast.excluded == ("fidelity not checked (ContentTypeError: 200, message='Attempt to decode…); "
                             "--allow-unchecked lets it compete")
    assert fast.capacity.output_tps > s.engines["slow"].capacity.output_tps  # it measured more, and is out
    d = s.decision
    assert d.winner == "slow" and d.excluded == {"fast": fast.excluded}
    assert _gates(s)["fast"] == "fidelity not checked (ContentTypeError: 200, message='Attempt to decode…)"
    assert "the fidelity gate decided: fast measured" in d.sentence
    assert "but its fidelity not checked (ContentTypeError: 200, message='Attempt to decode…) (--allow-unchecked " \
           "lets it compete)" in d.sentence


def test_allow_unchecked_lets_it_compete_and_still_says_not_checked(measured) -> None:
    errored = FidelityResult(prompts=32, error=ERROR, prompts_answered=0)
    s = _judged(measured, errored, allow_unchecked=True)
    d = s.decision
    assert s.engines["fast"].excluded == "" and d.winner == "fast" and d.excluded == {}
    assert _gates(s) == {"fast": "passed (--allow-unchecked): fidelity not checked (ContentTypeError: 200, "
                                 "message='Attempt to decode…)", "slow": "passed"}
    assert "; fast's fidelity not checked (ContentTypeError: 200, message='Attempt to decode…) (--allow-unchecked)" \
        in d.sentence


def test_low_coverage_excludes_and_full_coverage_passes(measured) -> None:
    s = _judged(measured, _checked(answered=1))
    assert s.engines["fast"].excluded == ("fidelity checked on 1 of 32 prompts (< 90 %); --allow-unchecked lets it "
                                          "compete")
    assert s.decision.winner == "slow" and _gates(s)["fast"] == "fidelity checked on 1 of 32 prompts (< 90 %)"
    s = _judged(measured, _checked(answered=29))  # 90.6 %
    assert s.engines["fast"].excluded == "" and s.decision.winner == "fast"
    assert _gates(s) == {"fast": "passed", "slow": "passed"}
    s = _judged(measured, _checked(answered=1), allow_unchecked=True)
    assert s.decision.winner == "fast" and _gates(s)["fast"] == ("passed (--allow-unchecked): fidelity checked on 1 "
                                                                 "of 32 prompts (< 90 %)")


def test_the_gate_itself() -> None:
    ok = EngineLadder(status=EngineStatus.OK)
    cap = type("Cap", (), {"never_met": False})()  # a capacity that met the SLO: gate() reads only ``never_met``
    assert gate("e", ok, cap, 0.05) is None  # no check asked for
    errored = ok.model_copy(update={"fidelity": FidelityResult(prompts=8, error="Refused: HTTP 404")})
    assert gate("e", errored, cap, 0.05) == (
        "fidelity", "fidelity not checked (Refused: HTTP 404); --allow-unchecked lets it compete")
    assert gate("e", errored, cap, 0.05, allow_unchecked=True) is None
    below = ok.model_copy(update={"fidelity": FidelityResult(
        prompts=8, positions=256, agreement_outside_near_ties=0.8, passed=False, prompts_answered=8,
        agreement_interval=Interval(point=0.8, low=0.75, high=0.85, n=8), first_divergence=[3] * 8)})
    stage, why = gate("e", below, cap, 0.05, allow_unchecked=True)
    assert stage == "fidelity" and why.startswith("fidelity 0.800 [0.750, 0.850]")


def test_an_old_ladder_json_still_loads() -> None:
    """A ladder.json written before the coverage and --allow-unchecked: no ``allow_unchecked``, no
    ``prompts_answered``; it loads, an unknown coverage excludes nothing, an error still does."""
    old = {"run_id": "old", "workload": "chat", "engines": {
        "a": {"status": "ok", "fidelity": {"prompts": 32, "positions": 2048, "agreement_outside_near_ties": 1.0,
                                           "passed": True}},
        "b": {"status": "ok", "fidelity": {"prompts": 32, "error": "ContentTypeError: text/plain"}}}}
    s = LadderSummary.model_validate(old)
    assert s.allow_unchecked is False and s.engines["a"].fidelity.prompts_answered is None
    assert s.engines["a"].fidelity.exclusion() == ""
    assert s.engines["b"].fidelity.exclusion().startswith("fidelity not checked (ContentTypeError: text/plain)")
