"""The output-fidelity gate in the main job: two paced endpoints (tests/fake_servers/paced_server.py)
answer the fidelity check from a known reference (tests/fake_servers/fidelity_server.py). 'fastwrong'
has twice the slots (about twice the capacity) but a token wrong every fourth position; 'neartie'
flips only at near-ties (float noise). One `bench run`: fastwrong is excluded with its figures, the
near-ties do not trip the gate, the verdict names the gate that decided, and the report has the
fidelity table."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from harness.app.cli import app
from reports.frontier import capacity_rows
from results.schema import FIDELITY_FILE, FidelityCheck
from results.store import load_run
from tests.fake_servers.fidelity_server import synthetic_reference
from tests.harness.app.run.test_ladder_endpoints import ARGS, _servers

pytestmark = pytest.mark.serial  # winners read from paced servers' wall-clock capacities (as test_ladder_endpoints'): run alone (make test)


def test_a_fast_engine_with_wrong_outputs_never_wins(tmp_path, monkeypatch):
    from harness.app.run import context

    ref = synthetic_reference(prompts=8, tokens=32, near_tie_every=7, eos_prompts=(2,))
    (tmp_path / "ref.json").write_text(ref.model_dump_json())

    def reference(model_dir, workload, tokenizer, prompts, max_tokens, console):
        assert prompts == 8 and max_tokens == 32  # the run's --fidelity-prompts / --fidelity-tokens
        return ref

    monkeypatch.setattr(context, "run_reference", reference)
    script = ["--fidelity", str(tmp_path / "ref.json")]
    for urls in _servers({"fastwrong": ["--slots", "4", *script, "--flip-every", "4"],
                          "neartie": ["--slots", "2", "--itl-ms", "14", *script, "--flip-near-ties"]}):
        res = CliRunner().invoke(app, ["run", "--endpoint", f"fastwrong={urls['fastwrong']}", "--endpoint",
                                       f"neartie={urls['neartie']}", *ARGS, "--fidelity-prompts", "8",
                                       "--fidelity-tokens", "32", "--ladder-budget", "8", "-o", str(tmp_path),
                                       "--run-id", "fid"])
    assert res.exit_code == 0, res.output
    run = load_run(tmp_path / "fid")
    wrong, tie = run.ladder.engines["fastwrong"], run.ladder.engines["neartie"]
    # fastwrong has twice the slots and streams faster (it leads from its low end on, so it is checked first), but
    # its outputs leave the reference at every 4th position
    assert wrong.fidelity.passed is False and wrong.fidelity.divergences == 8 * 7  # p = 3, 7, ..., 31 but not 27
    assert wrong.excluded.startswith("fidelity 0.") and "< floor 0.99" in wrong.excluded
    assert tie.fidelity.passed is True and tie.fidelity.near_tie_divergences == tie.fidelity.divergences == 8 * 4
    assert tie.excluded == ""
    d = run.ladder.decision
    assert d.winner == "neartie" and d.excluded["fastwrong"] == wrong.excluded
    assert "the fidelity gate decided: fastwrong measured" in d.sentence
    stored = FidelityCheck.model_validate_json((tmp_path / "fid" / FIDELITY_FILE).read_text())
    assert set(stored.engines) == {"fastwrong", "neartie"} and stored.prompts == 8 and stored.max_tokens == 32
    said = " ".join(res.output.split())  # the console wraps long lines
    assert "fastwrong: fidelity 0.750 [0.689, 0.802]" in said and "0/8 exact — below the floor 0.99" in said
    assert "Decisive points" not in res.output  # no budget is spent on an engine the gate excludes
    report = (tmp_path / "fid" / "report.md").read_text()
    assert "## Output fidelity" in report and "| fastwrong |" in report.split("## Output fidelity")[1]


def test_an_endpoint_that_cannot_answer_the_check_is_excluded_unless_allowed(tmp_path, monkeypatch):
    """'streamonly' answers every completion with a stream (a paced server without a fidelity
    script), so the check's non-streaming requests get no JSON back: its check cannot run. It has
    twice the slots of 'faithful' (which answers the reference exactly) and streams faster, so it
    leads from its low end on and is checked first, but a
    check that could not run does not pass: it is excluded with one line, in the verdict and the
    capacity table's gates column. With --allow-unchecked it competes, and wins, and every place
    still says its fidelity was not checked (faithful's is then not needed: the verdict does not
    rest on a runner-up separated from the winner)."""
    from harness.app.run import context

    ref = synthetic_reference(prompts=8, tokens=16, near_tie_every=7, eos_prompts=())
    (tmp_path / "ref.json").write_text(ref.model_dump_json())
    monkeypatch.setattr(context, "run_reference", lambda *args, **kwargs: ref)
    outcomes = {}
    for urls in _servers({"streamonly": ["--slots", "4"],
                          "faithful": ["--slots", "2", "--itl-ms", "14", "--fidelity", str(tmp_path / "ref.json")]}):
        for run_id, flags in (("strict", []), ("allowed", ["--allow-unchecked"])):
            res = CliRunner().invoke(app, ["run", "--endpoint", f"streamonly={urls['streamonly']}", "--endpoint",
                                           f"faithful={urls['faithful']}", *ARGS, "--fidelity-prompts", "8",
                                           "--fidelity-tokens", "16", "--ladder-budget", "6", "-o", str(tmp_path),
                                           "--run-id", run_id, *flags])
            outcomes[run_id] = res
    for run_id, res in outcomes.items():
        assert res.exit_code == 0, res.output
        said = " ".join(res.output.split())
        assert "streamonly: fidelity not checked — ContentTypeError" in said
    # the check goes to the engines the verdict rests on: strict, streamonly is excluded and faithful leads (checked);
    # allowed, streamonly leads separated from faithful, whose check the verdict does not need (said so)
    strict_said = " ".join(outcomes["strict"].output.split())
    assert "faithful: fidelity 1.000" in strict_said and "8/8 exact" in strict_said
    allowed_said = " ".join(outcomes["allowed"].output.split())
    assert "faithful: fidelity 1.000" not in allowed_said
    assert ("faithful at most " in allowed_said and "below streamonly's floor of" in allowed_said
            or "Output fidelity not checked for faithful: the verdict does not rest on it" in allowed_said)
    strict = load_run(tmp_path / "strict")
    stream = strict.ladder.engines["streamonly"]
    assert stream.fidelity.error.startswith("ContentTypeError") and stream.fidelity.prompts_answered == 0
    assert stream.excluded.startswith("fidelity not checked (ContentTypeError") and \
        stream.excluded.endswith("; --allow-unchecked lets it compete")
    d = strict.ladder.decision
    assert d.winner == "faithful" and d.excluded == {"streamonly": stream.excluded}
    assert "the fidelity gate decided: streamonly measured" in d.sentence
    said = " ".join(outcomes["strict"].output.split())
    row = next(r for r in capacity_rows(strict.ladder) if r["engine"].startswith("streamonly"))
    assert row["gates"].startswith("fidelity not checked (ContentTypeError")  # the capacity table's gates column
    assert "│ fidelity not checked" in said.replace("║", "│")  # as the console prints it (the cell may wrap)
    report = (tmp_path / "strict" / "report.md").read_text()
    assert "excluded: fidelity not checked (ContentTypeError" in report.split("## Output fidelity")[1]
    assert FidelityCheck.model_validate_json((tmp_path / "strict" / FIDELITY_FILE).read_text()).allow_unchecked is False

    allowed = load_run(tmp_path / "allowed")
    stream = allowed.ladder.engines["streamonly"]
    assert allowed.ladder.allow_unchecked and stream.excluded == "" and stream.fidelity.passed is None
    d = allowed.ladder.decision
    assert d.winner == "streamonly" and d.excluded == {}
    assert "; streamonly's fidelity not checked (ContentTypeError" in d.sentence and "(--allow-unchecked)" in d.sentence
    said = " ".join(outcomes["allowed"].output.split())
    # the gates cell the console's capacity table prints (read from its rows: a narrow terminal wraps the cell)
    row = next(r for r in capacity_rows(allowed.ladder) if r["engine"].startswith("streamonly"))
    assert row["gates"].startswith("passed (--allow-unchecked): fidelity not checked")
    assert "passed (--allow-unchecked)" in said.replace("│ ", "")
    report = (tmp_path / "allowed" / "report.md").read_text()
    assert "competes (--allow-unchecked): fidelity not checked (ContentTypeError" in report


def test_task_accuracy_through_the_same_client(tmp_path):
    """--accuracy: each endpoint answers the user's set through the one client; the scores, their
    intervals and the report's table come out of one run (one load point here)."""
    qs = tmp_path / "qs.jsonl"
    qs.write_text("\n".join(
        '{"prompt": "capital of France %d?", "expected": "Paris", "match": "regex", "max_tokens": 3}' % i
        for i in range(6)) + '\n{"messages": [{"role": "user", "content": "hi"}], "expected": "Parisxx", "max_tokens": 3}\n')
    for urls in _servers({"right": ["--reply", "Paris"], "wrong": ["--reply", "London"]}):
        res = CliRunner().invoke(app, ["run", "--endpoint", f"right={urls['right']}", "--endpoint",
                                       f"wrong={urls['wrong']}", *ARGS, "--max-concurrency", "2", "--num-requests", "8",
                                       "--accuracy", str(qs), "-o", str(tmp_path), "--run-id", "acc"])
    assert res.exit_code == 0, res.output
    run = load_run(tmp_path / "acc")
    right, wrong = run.accuracy.engines["right"], run.accuracy.engines["wrong"]
    assert (right.correct, right.total, wrong.correct, wrong.failed) == (7, 7, 0, 0)  # exact: "Paris" + "x" + "x"
    assert right.interval.low > 0.6 and wrong.interval.high < 0.4
    assert run.accuracy.items == 7 and "right: accuracy 7/7" in res.output and "wrong: accuracy 0/7" in res.output
    report = (tmp_path / "acc" / "report.md").read_text()
    assert "## Task accuracy" in report and "| wrong | 0.0% |" in report


def test_a_bad_accuracy_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x", "expected": "("}\n{"prompt": "y", "expected": "(", "match": "regex"}\n')
    res = CliRunner().invoke(app, ["run", "--engine", "own", "--accuracy", str(bad), "-o", str(tmp_path)])
    assert res.exit_code == 2 and "bad.jsonl:2: expected is not a valid regular expression" in res.output
    assert "Traceback" not in res.output
