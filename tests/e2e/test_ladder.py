"""The main job end to end on real engines: `bench run --engine own,transformers --workload agentic`
with no load point asked for climbs each engine's load ladder (closed-loop sessions in flight),
decides on the capacity at the default SLOs and writes ladder.json, the verdict first."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from harness.app.cli import app
from results.store import load_run
from tests.quick_reports import quick_reports

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _no_charts(monkeypatch):
    quick_reports(monkeypatch)  # no assertion here reads a chart's pixels or the winner map: seconds saved


def test_bench_run_climbs_ladders_and_decides_on_capacity(tmp_path):
    res = CliRunner().invoke(app, [
        "run", "--engine", "own,transformers", "--workload", "agentic", "--ladder-budget", "25", "--max-load", "2",
        "--time-budget", "100",
        "--warmup", "1", "--no-feature-probes", "--threads", "1", "-o", str(tmp_path), "--run-id", "ladder"])
    assert res.exit_code == 0, res.output
    run = load_run(tmp_path / "ladder")
    ladder = run.ladder
    assert ladder is not None and ladder.slos_default and ladder.slos == {"ttft_p90": 4000.0, "tpot_p90": 200.0}
    for name in ("own", "transformers"):
        e = ladder.engines[name]
        assert e.status.value == "ok" and e.points and e.points[0].load == 1, e
        assert all(p.metrics is not None and p.metrics.requests_completed > 0 for p in e.points)
        loads = [p.load for p in e.points]
        assert loads == sorted(loads) and set(loads) <= {1, 2, 3, 4}
        # every point's records are stored, labelled with the point (probe) and measurement (repeat)
        assert {r.probe for r in run.records if r.engine == name and r.phase == "measured"} == {p.index for p in e.points}
    d = ladder.decision
    assert d.yardsticks == ["own"] or ladder.engines["own"].excluded  # the reference engine: never the winner
    assert d.winner in ("", "transformers") and d.sentence
    assert d.unit == "sessions"
    # the console and the report open with the verdict
    assert res.output.index("Verdict") < res.output.index("Details")
    md = (tmp_path / "ladder" / "report.md").read_text()
    assert md.index("## Verdict") < md.index("report-plots/frontier.png") < md.index("## Weighted score")
    # summary.json holds each engine's capacity point, so the weighted view still reads it
    summary = json.loads((tmp_path / "ladder" / "summary.json").read_text())
    assert summary["slos"] == {"ttft_p90": 4000.0, "tpot_p90": 200.0}
    assert all(summary["engines"][n]["metrics"]["requests_completed"] > 0 for n in ("own", "transformers"))
    # one gates list: the weighted lens excludes exactly the engines the ladder excluded, at the same stage
    rec = run.recommendation
    assert rec is not None
    assert rec.elimination_stage == {n: e.excluded_stage for n, e in ladder.engines.items() if e.excluded}
    # one figure per point: summary.json's throughput at an engine's capacity point is the judge's, and so
    # is its judged percentile (the same steady-state requests)
    for name, e in ladder.engines.items():
        if e.capacity is None or e.capacity.never_met:
            continue
        at = next(p for p in e.points if p.load == e.capacity.bracket[0])
        m = summary["engines"][name]["metrics"]
        assert m["output_throughput"] == pytest.approx(at.output_tps)
        assert m["tpot_ms"]["p90"] == pytest.approx(at.values["tpot_p90"])
        row = next((r for r in rec.ranking if r.engine == name), None)
        assert row is None or row.metrics["output_throughput"] == pytest.approx(at.output_tps)
