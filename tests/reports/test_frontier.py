"""The report of a run that climbed load ladders opens with the answer: the verdict sentence, then
the frontier chart (report-plots/frontier.png), then the capacity table, then everything else;
checked in the Markdown, in the HTML's order, and on the first screen of a headless Chromium."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from harness.app.run.reporting import write_run_reports
from harness.loadgen.simulated import SimEngine
from harness.metrics import parse_slos
from harness.scoring.verdict.decision import judge
from results.schema import LADDER_FILE
from results.store import write_model_atomic

from tests.helpers import sim_ladder_run
from tests.reports.test_writer import _chromium, _console_lines, chromium  # noqa: F401  (the fixture)

SLOS = parse_slos("ttft_p90=1000,tpot_p90=60")
CRIMSON = (220, 20, 60)  # the TPOT SLO line on the frontier


def ladder_run(root: Path) -> Path:
    """A run folder whose three simulated engines climbed ladders: fast, slow, and the yardstick."""
    engines = {"fast": SimEngine("fast", slots=16, prefill_ms=60, tpot_ms=18, jitter=0.05),
               "slow": SimEngine("slow", slots=8, prefill_ms=90, tpot_ms=30, jitter=0.05),
               "own": SimEngine("own", slots=16, prefill_ms=70, tpot_ms=22, jitter=0.05)}
    return sim_ladder_run(root, "lad", engines, ",".join(f"{s.key}={s.threshold_ms:g}" for s in SLOS), requests=16)


def test_the_report_opens_with_the_verdict_and_the_frontier(tmp_path: Path) -> None:
    run_dir = ladder_run(tmp_path)
    md_path, html_path = write_run_reports(run_dir)
    md = md_path.read_text()
    assert (run_dir / "report-plots" / "frontier.png").stat().st_size > 10_000
    verdict, chart, table = md.index("## Verdict"), md.index("report-plots/frontier.png"), md.index("| engine | capacity")
    assert verdict < chart < table < md.index("## Weighted score")  # the answer first, the secondary view after
    assert md.index("fast sustains") < chart  # the sentence names the winner before the chart
    html = html_path.read_text()
    assert html.index('id="verdict"') < html.index("<img") < html.index('id="recommendation"')


def test_the_first_screen_shows_the_verdict_and_the_frontier(tmp_path: Path, chromium: str) -> None:  # noqa: F811
    run_dir = ladder_run(tmp_path)
    _, html_path = write_run_reports(run_dir)
    shot = tmp_path / "first-screen.png"
    log = _chromium(chromium, html_path.as_uri(), tmp_path, "--window-size=1280,1000", f"--screenshot={shot}")
    assert _console_lines(log) == []
    img = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert img.shape[:2] == (1000, 1280)
    crimson = (np.abs(img - np.array(CRIMSON)).sum(axis=2) < 40).sum()
    assert crimson > 60  # the frontier's (dotted) SLO line is painted on the first screen, not below it
    blue = (np.abs(img - np.array((31, 119, 180))).sum(axis=2) < 30).sum()
    assert blue > 500  # and the winner's curve (tab10's first colour) with its star
    green = (np.abs(img - np.array((238, 246, 238))).sum(axis=2) < 6).sum()
    assert green > 5_000  # the verdict box (its background) is on the first screen too


@pytest.mark.parametrize("name", ["fast"])
def test_the_verdict_names_the_winner_with_its_ratio(tmp_path: Path, name: str) -> None:
    run_dir = ladder_run(tmp_path)
    from results.store import load_run

    d = load_run(run_dir).ladder.decision
    assert d.winner == name and d.runner_up == "slow" and d.yardsticks == ["own"] and not d.tie
    assert d.sentence.startswith("fast sustains") and "× [" in d.sentence and "slow's" in d.sentence


def test_a_target_load_sizes_the_devices_and_their_cost(tmp_path: Path) -> None:
    from results.store import load_run, read_records

    run_dir = ladder_run(tmp_path)
    ladder = load_run(run_dir).ladder
    judge(ladder, read_records(run_dir / "requests.jsonl"), SLOS, price_per_hour=2.0, target_tps=1000.0)
    fast = ladder.engines["fast"].capacity
    assert fast.devices_needed == -(-1000 // fast.output_tps)  # ceil(target / capacity per device)
    assert fast.usd_per_hour == fast.devices_needed * 2.0
    assert fast.usd_per_1m_output_tokens == 2.0 / (fast.output_tps * 3600) * 1e6
    from reports.frontier import capacity_rows

    row = next(r for r in capacity_rows(ladder) if r["engine"].startswith("fast"))
    assert row["devices"] == f"{fast.devices_needed} (${fast.usd_per_hour:.3g}/h)"


def test_points_the_client_may_have_limited_are_marked_not_held_against_the_engine(tmp_path: Path) -> None:
    from reports.frontier import capacity_rows
    from results.store import load_run, read_records

    run_dir = ladder_run(tmp_path)
    ladder = load_run(run_dir).ladder
    before = {n: e.capacity.output_tps for n, e in ladder.engines.items()}
    judge(ladder, read_records(run_dir / "requests.jsonl"), SLOS, client_rps=5.0)  # a client that tops out at 5 req/s
    fast = ladder.engines["fast"]
    marked = [p.load for p in fast.points if p.client_limited]
    assert marked and all(p.request_rate > 5.0 for p in fast.points if p.client_limited)
    assert all(not p.client_limited for p in fast.points if p.request_rate <= 5.0)
    assert {n: e.capacity.output_tps for n, e in ladder.engines.items()} == before  # nothing excluded or changed
    assert ladder.decision.winner == "fast"
    row = next(r for r in capacity_rows(ladder) if r["engine"].startswith("fast"))
    assert f"client-limited at {', '.join(map(str, marked))} (more --client-workers)" in row["stopped"]


def test_every_figure_of_an_engine_is_the_same_wherever_it_is_printed(tmp_path: Path) -> None:
    """One run's outputs read back: each engine's capacity, interval and load in ladder.json, the
    report's capacity table, the console's verdict table and (the winner's) the verdict sentence,
    with the ratio and its interval, all one figure."""
    import io
    import json

    from rich.console import Console

    from harness.app.cli.verdict import print_verdict
    from results.store import load_run

    run_dir = ladder_run(tmp_path)
    md_path, _ = write_run_reports(run_dir)
    md = md_path.read_text()
    stored = json.loads((run_dir / LADDER_FILE).read_text())
    ladder = load_run(run_dir).ladder
    out = io.StringIO()
    print_verdict(ladder, Console(file=out, width=250, color_system=None))
    console = out.getvalue()
    for name, e in ladder.engines.items():
        cap = e.capacity
        assert cap is not None and stored["engines"][name]["capacity"]["output_tps"] == cap.output_tps
        lo, hi = cap.interval
        figures = [f"{cap.output_tps:,.1f}", f"[{lo:,.1f}–{hi:,.1f}]", f"{cap.load:.3g}"]
        md_row = next(line for line in md.splitlines() if line.startswith(f"| {name}"))
        console_row = next(line for line in console.splitlines() if "│" in line and line.strip("│ ").startswith(name))
        for fig in figures:
            assert fig in md_row, (name, fig, md_row)
            assert fig in console_row, (name, fig, console_row)
    d = ladder.decision
    win = ladder.engines[d.winner].capacity
    assert f"({win.output_tps:,.1f} output tok/s per device" in d.sentence and f"{win.load:.3g} " in d.sentence  # the table's figure
    lo, hi = d.ratio_interval
    assert f"{d.ratio:.2f}× [{lo:.2f}–{hi:.2f}] {d.runner_up}'s" in d.sentence
    assert d.sentence in md and d.sentence in " ".join(console.split())
    # the yardstick is explained where it appears, not 400 lines later
    assert "own (yardstick): the reference engine of this repository" in md
    assert "own (yardstick): the reference engine of this repository" in " ".join(console.split())


def test_the_parity_audits_unfair_flags_stand_under_the_verdict(tmp_path: Path) -> None:
    """A difference that changes what was measured (prefix caching on for one engine only) is said
    beside the answer, in the report and on the console, not only in the parity section."""
    import io

    from rich.console import Console

    from harness.app.cli.verdict import print_verdict
    from reports.frontier import caveats
    from results.schema import ParityAudit, ParityFlag, RunSummary
    from results.store import load_run

    run_dir = ladder_run(tmp_path)
    run = load_run(run_dir)
    flag = ParityFlag(setting="prefix_caching", engines=["fast", "slow"], reason="prefix caching on for fast, off for slow")
    run.summary.parity = ParityAudit(mode="report", engines=["fast", "slow"], flags=[flag])
    write_model_atomic(run_dir / "summary.json", run.summary)
    assert caveats(run.summary) == ["Caveat (configuration parity): prefix caching on for fast, off for slow"]
    assert caveats(RunSummary(run_id="x", workload="w")) == []
    md = write_run_reports(run_dir)[0].read_text()
    verdict_block = md[md.index("## Verdict"):md.index("report-plots/frontier.png")]
    assert "Caveat (configuration parity): prefix caching on for fast, off for slow" in verdict_block
    out = io.StringIO()
    print_verdict(run.ladder, Console(file=out, width=200, color_system=None), notes=caveats(run.summary))
    assert "Caveat (configuration parity): prefix caching on" in out.getvalue()


def test_the_timeline_skips_idle_gaps_and_names_each_bucket_width() -> None:
    """A ladder measured in two sittings (a climb, a climb-on minutes later) reads as a gap, not a stall."""
    from reports.timeline import IDLE_BUCKETS, _idle, timeline_plot
    from results.schema import Timeline

    busy, gap = [2.0] * 5, [0.0] * (IDLE_BUCKETS + 3)
    assert _idle(busy + gap + busy) == set(range(5, 5 + IDLE_BUCKETS + 3))
    assert _idle(busy + [0.0] * (IDLE_BUCKETS - 1) + busy) == set()  # a short lull is drawn
    line = Timeline(bucket_s=1.0, in_flight=busy + gap + busy, output_tps=[10.0] * 23,
                    ttft_p50_ms=[100.0] * 23, completed=[1] * 23, failed=[0] * 23)
    assert timeline_plot({"vllm": line})[:8] == b"\x89PNG\r\n\x1a\n"
