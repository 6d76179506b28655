"""The winner map in the report (issue 41): right after the frontier chart, in the frontier's
colours, with the nearest boundary in words; ``bench recommend --slo`` stores its own map beside
its re-decision and prints the boundary."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image
from typer.testing import CliRunner

from harness.app.cli import app
from harness.app.run.reporting import write_run_reports
from results.schema import WINNER_MAP_FILE, WinnerMap

from tests.harness.scoring.verdict.test_winner_map import crossover_run

BLUE, ORANGE = (31, 119, 180), (255, 127, 14)  # tab10's first two: nimble's and wide's on the frontier too


def _share(img: np.ndarray, rgb: tuple[int, int, int], alpha: float) -> int:
    """Pixels of ``rgb`` painted at ``alpha`` over white."""
    want = np.array(rgb) * alpha + 255 * (1 - alpha)
    return int((np.abs(img - want).sum(axis=2) < 30).sum())


def test_the_report_shows_the_map_right_after_the_frontier(tmp_path: Path) -> None:
    run_dir = crossover_run(tmp_path)
    md_path, html_path = write_run_reports(run_dir)
    found = WinnerMap.model_validate_json((run_dir / WINNER_MAP_FILE).read_text())
    md = md_path.read_text()
    frontier, chart, table = (md.index("report-plots/frontier.png"), md.index("report-plots/winner_map.png"),
                              md.index("| engine | capacity"))
    assert frontier < chart < table
    assert f"Nearest boundary: {found.boundary}." in md and "tighten p90 TPOT to" in found.boundary
    assert 'alt="Who wins under which SLOs' in html_path.read_text()
    img = np.asarray(Image.open(io.BytesIO((run_dir / "report-plots" / "winner_map.png").read_bytes())).convert("RGB"))
    img = img.astype(int)
    nimble, wide = _share(img, BLUE, 0.8), _share(img, ORANGE, 0.8)
    assert nimble > 2_000 and wide > 2 * nimble  # 2 of 7 columns are nimble's, 5 wide's


def test_a_re_decision_stores_its_own_map_and_prints_the_boundary(tmp_path: Path) -> None:
    run_dir = crossover_run(tmp_path)
    res = CliRunner().invoke(app, ["recommend", str(run_dir), "--hardware", "CPU", "--slo", "ttft_p90=1000,tpot_p90=25"])
    assert res.exit_code == 0, res.output
    folder = run_dir / "decisions" / "slo-tpot_p90=25,ttft_p90=1000_hardware-CPU"
    found = WinnerMap.model_validate_json((folder / WINNER_MAP_FILE).read_text())
    assert found.slos == {"ttft_p90": 1000.0, "tpot_p90": 25.0} and found.cell(3, 3).winner == "nimble"
    assert found.boundary.startswith("loosen p90 TPOT to ")
    assert f"Winner map: {found.boundary}" in " ".join(res.output.split())
    assert not (run_dir / WINNER_MAP_FILE).exists()  # the run's own map is made by its report, not by a question


def test_the_user_chooses_the_map_s_grid_and_percentile_on_the_command_line(tmp_path: Path) -> None:
    run_dir = crossover_run(tmp_path)
    asked = ["recommend", str(run_dir), "--hardware", "CPU", "--slo", "ttft_p90=1000,tpot_p90=60"]
    res = CliRunner().invoke(app, [*asked, "--map-tpot", "90,21,30", "--map-ttft", "1000,4000"])
    assert res.exit_code == 0, res.output
    folder = run_dir / "decisions" / "slo-tpot_p90=60,ttft_p90=1000_hardware-CPU_map_tpot-21,30,90_map_ttft-1000,4000"
    found = WinnerMap.model_validate_json((folder / WINNER_MAP_FILE).read_text())
    assert found.x_ms == [21, 30, 60, 90] and found.y_ms == [1000, 4000]  # the run's own 60 ms added
    assert [found.cell(0, j).winner for j in range(4)] == ["nimble", "nimble", "wide", "wide"]
    assert f"Winner map: {found.boundary}" in " ".join(res.output.split())
    p99 = CliRunner().invoke(app, [*asked, "--map-percentile", "99"])
    assert p99.exit_code == 0, p99.output
    folder = run_dir / "decisions" / "slo-tpot_p90=60,ttft_p90=1000_hardware-CPU_map_p-99"
    found = WinnerMap.model_validate_json((folder / WINNER_MAP_FILE).read_text())
    assert (found.x_key, found.asked) == ("tpot_p99", None) and "not on this map" in found.boundary
    for bad, word in ((["--map-tpot", "0,50"], "--map-tpot"), (["--map-percentile", "150"], "--map-percentile"),
                      (["--map-percentile", "91"], "--map-percentile")):
        res = CliRunner().invoke(app, ["recommend", str(run_dir), *bad])
        assert res.exit_code == 2 and word in res.output and len(res.output.strip().splitlines()) == 1, res.output
