"""``bench compare`` and ``bench results history`` (issue 41) on stored runs of scripted engines:
the table, the gate's exit code, what differed, the history's order and moves, and bad input in
one line."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from harness.app.cli import app
from tests.harness.scoring.verdict.test_compare import SLOWER, X
from tests.helpers import sim_ladder_run

runner = CliRunner()


def _stamp(run_dir: Path, when: str, version: str, **engine: object) -> Path:
    """Give a scripted run the manifest facts bench run records (when, the engine's version)."""
    path = run_dir / "manifest.json"
    m = json.loads(path.read_text())
    m["created_at"] = when
    m.setdefault("engines", {})["x"] = {"version": version, **engine}
    path.write_text(json.dumps(m))
    return run_dir


def _three(tmp_path: Path) -> tuple[Path, Path, Path]:
    a = _stamp(sim_ladder_run(tmp_path, "a", {"x": X}, requests=64, seed=0), "2026-12-01T10:00:00", "1.0")
    b = _stamp(sim_ladder_run(tmp_path, "b", {"x": X}, requests=64, seed=100), "2026-12-02T10:00:00", "1.0")
    c = _stamp(sim_ladder_run(tmp_path, "c", {"x": SLOWER}, requests=64, seed=200), "2026-12-03T10:00:00", "1.1",
               engine_args={"max_num_seqs": "8"})
    return a, b, c


def test_a_slower_engine_fails_the_gate_and_says_what_differed(tmp_path: Path) -> None:
    a, _, c = _three(tmp_path)
    res = runner.invoke(app, ["compare", str(a), str(c), "--fail-below", "0.95"])
    text = " ".join(res.output.split())
    assert res.exit_code == 1, res.output
    assert "moved down" in text and "Gate failed (--fail-below 0.95): x" in text
    assert "x version: 1.0 → 1.1" in text and "x engine args: {} → {'max_num_seqs': '8'}" in text
    out = runner.invoke(app, ["compare", str(a), str(c), "--json"])
    data = json.loads(out.stdout)
    assert out.exit_code == 0 and data["engines"][0]["moved"] == "moved_down" and 0.76 < data["engines"][0]["ratio"] < 0.9


def test_a_re_run_is_equivalent_and_passes_the_gate(tmp_path: Path) -> None:
    a, b, _ = _three(tmp_path)
    res = runner.invoke(app, ["compare", str(a), str(b), "--fail-below", "0.95"])
    text = " ".join(res.output.split())
    row = next(line for line in res.output.splitlines() if line.startswith("│ x"))
    assert res.exit_code == 0, res.output
    assert "equivalent" in row and "Gate held" in text and "What differed: nothing recorded differs" in text


def test_re_runs_on_a_drifting_machine_show_the_margin_they_can(tmp_path: Path) -> None:
    """Every measurement on a machine 8 % faster or slower than the last (``SimEngine.drift``), each
    point measured twice: the runs' intervals hold that spread, so two re-runs cannot show ±5 %
    (within the noise) and are equivalent at a margin the spread allows."""
    drifting = replace(X, drift=0.08)
    a = sim_ladder_run(tmp_path, "a", {"x": drifting}, requests=64, seed=0, repeats=2)
    b = sim_ladder_run(tmp_path, "b", {"x": drifting}, requests=64, seed=100, repeats=2)
    tight = json.loads(runner.invoke(app, ["compare", str(a), str(b), "--json"]).stdout)["engines"][0]
    assert tight["moved"] == "within_noise" and tight["why"].startswith("its 95 % interval holds 1: ")
    assert tight["interval"][0] <= 1 <= tight["interval"][1]
    lo, hi = tight["equivalence_interval"]
    least = math.ceil(100 * max(1 / lo - 1, hi - 1)) / 100  # the least margin the 90 % interval lies inside, rounded up
    assert f"equivalent from --margin {least:.2f}" in tight["why"]
    named = json.loads(runner.invoke(app, ["compare", str(a), str(b), "--json", "--margin", f"{least:.2f}"]).stdout)
    assert named["engines"][0]["moved"] == "equivalent"  # the margin it names is one it holds at
    wide = 1.05 * max(1 / lo, hi) - 1  # a margin the 90 % interval lies inside
    res = runner.invoke(app, ["compare", str(a), str(b), "--margin", f"{wide:.2f}"])
    text = " ".join(res.output.split())
    m = float(f"{wide:.2f}")
    row = next(line for line in res.output.splitlines() if line.startswith("│ x"))
    assert res.exit_code == 0 and "equivalent" in row
    assert f"outside [{1 / (1 + m):.3g}×, {1 + m:.3g}×] (--margin {m:g}: {100 * (1 / (1 + m) - 1):+.3g} % / +{100 * m:.3g} %)" in text


def test_an_engine_that_failed_in_run_b_is_listed_and_fails_the_gate(tmp_path: Path) -> None:
    """An engine with a capacity in run A that failed to start in run B is a regression: listed
    (not dropped because run B has no point of it), "failed in run B" with the reason, and the
    gate fails; one skipped in run B (not installed there) is not compared, and with no other
    engine the comparison is an error (exit 2), not a held gate."""
    a, b, _ = _three(tmp_path)
    ladder = json.loads((b / "ladder.json").read_text())
    ladder["engines"]["x"].update(points=[], status="failed", reason="server exited with code 1 during start-up")
    (b / "ladder.json").write_text(json.dumps(ladder))
    res = runner.invoke(app, ["compare", str(a), str(b), "--fail-below", "0.95"])
    text = " ".join(res.output.split())
    assert res.exit_code == 1, res.output
    assert "failed in run B" in text and "server exited with code 1" in text and "Gate failed (--fail-below 0.95): x" in text
    data = json.loads(runner.invoke(app, ["compare", str(a), str(b), "--json"]).stdout)
    x = data["engines"][0]
    assert x["moved"] == "failed" and x["after"] is None and x["before"]["output_tps"] > 0 and not x["before"]["open"]
    ladder["engines"]["x"].update(status="skipped", reason="x: not installed")
    (b / "ladder.json").write_text(json.dumps(ladder))
    res = runner.invoke(app, ["compare", str(a), str(b), "--fail-below", "0.95"])  # its only engine: nothing compared
    assert "measured no engine in common (and none failed in run B)" in _one_line(res)


def test_an_engine_that_crashed_on_the_way_up_in_run_b_fails_the_gate(tmp_path: Path) -> None:
    """An engine that crashed in run B after its first point, before any SLO broke: its capacity
    would read as a lower bound (≥, "climb it further") and pass the gate; it failed there."""
    a, b, _ = _three(tmp_path)
    ladder = json.loads((b / "ladder.json").read_text())
    ladder["engines"]["x"].update(points=ladder["engines"]["x"]["points"][:1], status="failed", stopped="crashed",
                                  crash="SIGSEGV")
    (b / "ladder.json").write_text(json.dumps(ladder))
    res = runner.invoke(app, ["compare", str(a), str(b), "--fail-below", "0.95", "--json"])
    x = json.loads(res.stdout)["engines"][0]
    assert res.exit_code == 1 and x["moved"] == "failed" and x["failed_gate"] and x["after"]["open"]
    assert x["why"] == "it failed in run B: SIGSEGV (before any SLO broke)"
    rows = [line for line in runner.invoke(app, ["results", "history", "x", "--output-dir", str(tmp_path)]).output.splitlines()
            if line.startswith("│")]
    assert "failed: SIGSEGV" in rows[1] and "failed in run B" in rows[1] and "not separated" in rows[2]  # from a lower bound


def test_a_run_b_that_measured_nothing_is_an_error_not_a_held_gate(tmp_path: Path) -> None:
    a, b, _ = _three(tmp_path)
    ladder = json.loads((b / "ladder.json").read_text())
    ladder["engines"]["x"].update(points=[], status="not_measured")
    (b / "ladder.json").write_text(json.dumps(ladder))
    assert "measured no engine in common" in _one_line(runner.invoke(app, ["compare", str(a), str(b), "--fail-below", "0.95"]))


def test_the_json_is_strict_json_whatever_the_ratio(tmp_path: Path) -> None:
    """A ratio over a capacity whose draws reach 0 has an infinite end: the JSON writes it as the
    string "Infinity" (as results.schema does), never a bare Infinity that JSON parsers refuse;
    each run's capacity rides along with its bound flags."""
    from harness.app.cli.compare import _num, _pair

    assert _num(float("inf")) == "Infinity" and _pair((0.0, float("inf"))) == [0.0, "Infinity"] and _num(None) is None
    a, b, _ = _three(tmp_path)
    out = runner.invoke(app, ["compare", str(a), str(b), "--json"]).stdout
    x = json.loads(out, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))["engines"][0]
    assert set(x["before"]) == {"output_tps", "interval", "open", "never_met", "lowest_fails"} and x["after"]["never_met"] is False


def test_history_lists_the_runs_oldest_first_with_their_moves(tmp_path: Path) -> None:
    _three(tmp_path)
    res = runner.invoke(app, ["results", "history", "x", "--output-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    rows = [line for line in res.output.splitlines() if line.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows] == ["a", "b", "c"]
    assert "equivalent" in rows[1] and "moved down" in rows[2] and "1.1" in rows[2]
    assert "vs the run before: as bench compare RUN_BEFORE RUN reads it (--margin 0.05)" in " ".join(res.output.split())


def _one_line(res) -> str:  # type: ignore[no-untyped-def]
    assert res.exit_code == 2 and res.stdout == "", res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    a, b, _ = _three(tmp_path)
    assert "same run" in _one_line(runner.invoke(app, ["compare", str(a), str(a)]))
    assert "--fail-below" in _one_line(runner.invoke(app, ["compare", str(a), str(b), "--fail-below", "0"]))
    assert "--margin is a fraction in (0, 1)" in _one_line(runner.invoke(app, ["compare", str(a), str(b), "--margin", "1.5"]))
    assert "choose engines a run measured" in _one_line(runner.invoke(app, ["compare", str(a), str(b), "--engine", "nope"]))
    assert "names no engine" in _one_line(runner.invoke(app, ["compare", str(a), str(b), "--engine", ","]))
    twice = json.loads(runner.invoke(app, ["compare", str(a), str(b), "--engine", "x,x", "--json"]).stdout)
    assert [e["engine"] for e in twice["engines"]] == ["x"]  # one row per engine
    other = sim_ladder_run(tmp_path, "chat", {"x": X}, workload="chat")
    assert "not comparable" in _one_line(runner.invoke(app, ["compare", str(a), str(other)]))
    assert "no stored run" in _one_line(runner.invoke(app, ["results", "history", "nope", "--output-dir", str(tmp_path)]))
    assert "SLO" in _one_line(runner.invoke(app, ["compare", str(a), str(b), "--slo", "ttft=abc"]))


def test_the_positional_arguments_read_as_names_and_text_in_help() -> None:
    """``bench compare --help`` and ``bench report --help`` showed ``run_a  <str>`` and
    ``run...  <list[str]>``: Python's types, not what to type."""
    compare = runner.invoke(app, ["compare", "--help"], env={"COLUMNS": "200", "TERM": "dumb"}).output
    report = runner.invoke(app, ["report", "--help"], env={"COLUMNS": "200", "TERM": "dumb"}).output
    assert "<str>" not in compare and "<list[str]>" not in report
    assert " RUN_A      TEXT " in compare and " RUN_B      TEXT " in compare
    assert " RUN      TEXT... " in report


def test_runs_on_other_traces_are_other_workloads(tmp_path: Path) -> None:
    """Two runs of `agentic` replaying other traces measured other workloads: compare refuses them
    in one line, and the history lists the newest run's trace only, saying how many it left out
    (the review saw them read as one workload)."""
    def traced(run_dir: Path, trace: str | None) -> Path:
        path = run_dir / "manifest.json"
        m = json.loads(path.read_text())
        m["workload"] = {**(m.get("workload") or {}), "kind": "agentic", "trace": trace}
        path.write_text(json.dumps(m))
        return run_dir

    a, b, c = _three(tmp_path)
    traced(a, "/data/mine.jsonl"), traced(b, "/data/other.jsonl"), traced(c, "/data/other.jsonl")
    line = _one_line(runner.invoke(app, ["compare", str(a), str(b)]))
    assert "trace /data/mine.jsonl" in line and "trace /data/other.jsonl" in line and "not comparable" in line
    res = runner.invoke(app, ["results", "history", "x", "--output-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    rows = [line for line in res.output.splitlines() if line.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows] == ["b", "c"]
    text = " ".join(res.output.split())
    assert "1 other run of x replayed another workload or trace, not listed" in text and "trace /data/other.jsonl" in text
