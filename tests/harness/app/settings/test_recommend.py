"""``bench recommend`` and ``bench report`` are generated from settings models
(harness/app/settings/recommend.py) whose options shared with ``bench run`` are its declarations
(harness/app/settings/shared.py): one flag, one parser, one check, one message. Fast: nothing is measured."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harness.app.cli.options import cli_params
from harness.app.settings.fields import error_line
from harness.app.settings.recommend import CompareSettings, HistorySettings, RecommendSettings, ReportSettings
from harness.app.settings.run import RunSettings
from tests.harness.app.settings.test_run import help_options

SHARED = {"--slo", "--hardware", "--preset", "--max-failure-rate", "--price-per-hour", "--output-dir"}


def test_the_options_recommend_shares_with_run_are_its_declarations() -> None:
    run = {p.cli.flag: p for p in cli_params(RunSettings)}
    rec = {p.cli.flag: p for p in cli_params(RecommendSettings)}
    assert SHARED <= set(run) and SHARED <= set(rec)
    assert all(rec[f].cli.flags == run[f].cli.flags for f in SHARED)  # -o too
    assert {p.cli.flag for p in cli_params(ReportSettings)} == {"run", "--output-dir"}
    for model in (CompareSettings, HistorySettings):  # the other readers of stored runs: the same --slo and -o
        flags = {p.cli.flag: p.cli for p in cli_params(model)}
        assert flags["--output-dir"].flags == ("--output-dir", "-o") and flags["--slo"].type is str
    run_help, rec_help = help_options(["run"]), help_options(["recommend", "x"])
    assert run_help["--preset"] == rec_help["--preset"] and run_help["--max-failure-rate"] == rec_help["--max-failure-rate"]


@pytest.mark.parametrize("values, line", [
    ({"preset": "cheap"}, "unknown --preset 'cheap': choose from latency, throughput, balanced, agentic, cost"),
    ({"max_failure_rate": 1.0}, "--max-failure-rate is a share of requests in [0, 1) (0.05 = 5%), got 1"),
    ({"price_per_hour": 0.0}, "--price-per-hour is USD per device-hour, a number > 0 (e.g. 2.5), got 0"),
    ({"slos": "ttft_p99"}, "--slo: SLO 'ttft_p99' has no value: write it as e.g. ttft_p99=500 (ms)"),
])
def test_a_bad_shared_value_is_one_line_whichever_command(values: dict, line: str) -> None:
    cases = ((RunSettings, {"engine": {"names": ["own"]}, "decision": values}),  # bench run: the decision's group
             (RecommendSettings, {"run": ["latest"], **values}))
    for model, given in cases:
        with pytest.raises(ValidationError) as err:
            model.model_validate(given)
        assert error_line(err.value, model) == line


def test_recommend_leaves_the_slos_to_the_run_unless_given() -> None:
    assert RecommendSettings.model_validate({"run": ["a"]}).slos is None
    assert RecommendSettings.from_cli({"run": ["a"], "slos": None}).slos is None
    assert [s.key for s in RecommendSettings.from_cli({"run": ["a"], "slos": "ttft_p99=500"}).slos or []] == ["ttft_p99"]
