"""The allocation keeps the time budget for the output-fidelity check a step may call for, and a
job that ran past its budget says so in one line (issue 39: ``--time-budget 2m`` took 6 min 30 s,
the check of the engines still in the race starting after the budget was spent). A controlled
clock: each scripted step advances it by its cost."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from rich.console import Console

from harness.app.run import allocate
from harness.app.run.allocate import CHECK_MARGIN, Allocation, check_cost
from harness.app.run.ladder_mode import overrun_line
from harness.app.run.ladder_run import EngineClimb
from harness.loadgen.fidelity import CONCURRENCY
from harness.scoring.verdict.allocation import Step
from harness.scoring.capacity.race import Standing
from harness.scoring.verdict.verdict import Verdict


def _m(load: int, tps: float) -> SimpleNamespace:
    return SimpleNamespace(load=load, metrics=SimpleNamespace(output_throughput=tps), wall_s=10.0)


def test_a_check_costs_its_greedy_tokens_at_the_pace_measured_nearest_its_concurrency() -> None:
    ms = [_m(1, 20.0), _m(2, 35.0), _m(CONCURRENCY, 80.0), _m(2 * CONCURRENCY, 90.0)]
    assert check_cost(ms, 32, 64) == pytest.approx(CHECK_MARGIN * 32 * 64 / 80.0)
    # only the low end measured: its top load's pace (slower: the estimate errs long)
    assert check_cost(ms[:2], 32, 64) == pytest.approx(CHECK_MARGIN * 32 * 64 / 35.0)
    # fewer prompts than the check's concurrency: they are all in flight at once
    assert check_cost(ms, 2, 64) == pytest.approx(CHECK_MARGIN * 2 * 64 / 35.0)
    assert check_cost([_m(1, 0.0)], 32, 64) == 0.0 and check_cost([], 32, 64) == 0.0


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def _job(console: Console) -> SimpleNamespace:
    ref = SimpleNamespace(prompts=[object()] * 32, max_tokens=64)
    return SimpleNamespace(climb=lambda engines, first: "", console=console, race_out={},
                           executor=SimpleNamespace(release=lambda name: None),
                           spec=SimpleNamespace(trial=SimpleNamespace(fidelity=ref)))


class _Scripted(Allocation):
    """The race is scripted (leader ``a``, checked; ``b`` in the race, not checked, separated from
    ``a`` so its check is not due yet); every round asks to climb ``a`` for ``step_s``."""

    def __init__(self, job, deadline, clock, step_s):
        super().__init__(job, deadline)
        self.clock, self.step_s, self.done = clock, step_s, []
        self.checked = {"a"}

    def judge(self, engines):
        race = [Standing("a", 100, 90, 110, True), Standing("b", 60, 50, 95, False)]
        return race, Verdict(outcome="separated", winner="a", leader="a", runner_up="b"), {}

    def _ladders(self, engines, caps):
        return None

    def _cost(self, e, step):
        return self.step_s

    def _do(self, e, step, bar=0.0):
        self.done.append(step.engine)
        self.clock.now += self.step_s
        return ""


def _engines() -> list[EngineClimb]:
    out = []
    for name, tps in (("a", 100.0), ("b", 2048 * CHECK_MARGIN / 30.0)):  # b's check: 30 s at its measured pace
        e = EngineClimb(SimpleNamespace(name=name), outcome=SimpleNamespace(fidelity=None))
        e.measurements = [_m(CONCURRENCY, tps)]
        out.append(e)
    return out


def test_the_steps_leave_the_time_a_check_they_may_call_for_needs(monkeypatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(allocate, "time", clock)
    monkeypatch.setattr(allocate, "next_steps", lambda race, verdict, ladders, max_repeats: [Step("a", "climb", "why")])
    console = Console(record=True, width=400)
    run = _Scripted(_job(console), deadline=clock.now + 100, clock=clock, step_s=50.0)
    assert run.run(_engines()) == ""
    # 50 s + b's 30 s fit in 100 s; with 50 s left, 50 + 30 do not (without the reserve the second climb ran)
    assert run.done == ["a"]
    text = console.export_text()
    assert "Time budget: 50 s left, and the next step (climb a) needs about 50 s and 30 s kept for an output-fidelity " \
           "check it may call for" in text


def test_without_the_check_nothing_is_kept(monkeypatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(allocate, "time", clock)
    monkeypatch.setattr(allocate, "next_steps", lambda race, verdict, ladders, max_repeats: [Step("a", "climb", "why")])
    console = Console(record=True, width=400)
    job = _job(console)
    job.spec.trial.fidelity = None  # --fidelity-prompts 0
    run = _Scripted(job, deadline=clock.now + 100, clock=clock, step_s=50.0)
    run.run(_engines())
    assert run.done == ["a", "a"]
    assert "kept for" not in console.export_text()


def test_a_job_past_its_budget_says_by_how_much_and_what_covers_it() -> None:
    assert overrun_line(900.0, 899.0) == ""
    line = overrun_line(120.0, 390.0)
    assert line.startswith("Time budget: 2 min asked, the job took 6 min 30 s: what runs whatever the budget")
    assert line.endswith("--time-budget 7m or more covers it.")
    assert "\n" not in line
