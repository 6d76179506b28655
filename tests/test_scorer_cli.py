"""``recommend_cmd`` / ``report_cmd`` through typer's CliRunner on a small app built here."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from harness.app.cli_report import recommend_cmd, report_cmd

try:
    from tests.test_scorer_helpers import CPU_ONLY, OWN_CAPS, make_records, ok_entry, skipped, write_run
except ImportError:
    from test_scorer_helpers import CPU_ONLY, OWN_CAPS, make_records, ok_entry, skipped, write_run

app = typer.Typer()
app.command("recommend")(recommend_cmd)
app.command("report")(report_cmd)
runner = CliRunner()


def _run(tmp_path: Path, run_id: str = "20261129-193500-chat"):
    r_sgl = make_records("sglang", 8, ttft_ms=100.0, tpot_ms=20.0)
    r_tf = make_records("transformers", 8, ttft_ms=130.0, tpot_ms=20.0)
    engines = {"sglang": ok_entry(r_sgl, OWN_CAPS), "transformers": ok_entry(r_tf, CPU_ONLY),
               "tensorrt_llm": skipped("tensorrt_llm: needs an NVIDIA GPU, none found")}
    return write_run(tmp_path, run_id, engines, r_sgl + r_tf)


def test_recommend_prints_the_deciding_constraint(tmp_path: Path) -> None:
    _run(tmp_path)
    res = runner.invoke(app, ["recommend", "latest", "--output-dir", str(tmp_path), "--hardware", "CPU",
                              "--slo", "ttft_p99=120"])
    assert res.exit_code == 0, res.output
    assert "Deciding constraint: sglang: the only engine meeting p99 TTFT ≤ 120 ms" in " ".join(res.output.split())
    assert "Sensitivity:" in res.output


def test_recommend_json(tmp_path: Path) -> None:
    run = _run(tmp_path)
    res = runner.invoke(app, ["recommend", str(run.run_dir), "--hardware", "recorded", "--json",
                              "--preset", "latency", "--weights", "features=0"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["winner"] == "sglang" and data["weights"]["features"] == 0.0 and data["weights"]["latency"] == 4.0
    assert data["eliminated"]["tensorrt_llm"].startswith("not measured (skipped)")
    assert data["hardware"]["name"] == "recorded: Test CPU"
    assert data["exit_code"] == 0


def test_no_surviving_engine_exits_1(tmp_path: Path) -> None:
    run = _run(tmp_path)
    res = runner.invoke(app, ["recommend", str(run.run_dir), "--hardware", "CPU", "--slo", "ttft_p99=50"])
    assert res.exit_code == 1
    text = " ".join(res.output.split())
    assert "no engine survives the hard constraints" in text
    assert "loosen an SLO (--slo)" in text


def test_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    run = _run(tmp_path)
    cases = [
        (["recommend", "nope", "--output-dir", str(tmp_path)], "no run 'nope'"),
        (["recommend", str(run.run_dir), "--hardware", "B200"], "unknown hardware profile 'B200'"),
        (["recommend", str(run.run_dir), "--slo", "ttft=fast"], "SLO ttft needs a number of milliseconds"),
        (["recommend", str(run.run_dir), "--weights", "speed=3"], "unknown weight 'speed'"),
        (["recommend", str(run.run_dir), "--preset", "cheap"], "unknown preset 'cheap'"),
        (["recommend", str(run.run_dir), "--gpus", "0"], "--gpus must be at least 1"),
        (["report", str(tmp_path / "missing")], "no run '"),
    ]
    for argv, message in cases:
        res = runner.invoke(app, argv)
        assert res.exit_code == 2, (argv, res.output)
        assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
        err = " ".join(res.stderr.split())
        assert err.startswith("error: ") and message in err, (argv, err)
        assert "Traceback" not in res.output


def test_report_cmd_single_and_compare(tmp_path: Path) -> None:
    a = _run(tmp_path, "a")
    b = _run(tmp_path, "b")
    res = runner.invoke(app, ["report", str(a.run_dir)])
    assert res.exit_code == 0, res.output
    assert (a.run_dir / "report.md").is_file() and (a.run_dir / "report.html").is_file()
    res = runner.invoke(app, ["report", "a", "b", "--output-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    html = (a.run_dir / "report-compare.html").read_text()
    assert "Comparison of a, b" in html and "b/sglang" in html
    assert "report-compare.html" in res.output
    assert not (b.run_dir / "report-compare.html").exists()
