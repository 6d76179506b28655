"""Which measuring mode a run's settings ask for (harness/app/run/modes.py), issue 39."""

from __future__ import annotations

from workloads.options import WorkloadOptions

from harness.app.settings.run import EngineSettings, RunSettings
from harness.app.run.ladder_mode import LadderMode, TunedLadderMode
from harness.app.run.modes import mode_for
from harness.app.run.point_mode import PointMode


def test_the_settings_pick_one_mode_a_count_a_point_a_tune_the_tuned_ladder() -> None:
    assert type(mode_for(RunSettings(engine=EngineSettings(names=["own"])))) is LadderMode
    assert type(mode_for(RunSettings(workload=WorkloadOptions(name="chat", num_requests=8)))) is PointMode
    assert type(mode_for(RunSettings(workload=WorkloadOptions(name="chat", request_rate=2.0)))) is PointMode
    tuned = mode_for(RunSettings.from_cli({"engine": {"names": "own"}, "tune": {"seconds": "3m"}}))
    assert type(tuned) is TunedLadderMode
    plans: list = []
    assert tuned.started(plans) == [] and LadderMode().started(plans) is plans  # a search starts its own configurations
