"""Every figure of an engine reads the same wherever it is printed: a scripted ladder run rendered
through the console (``bench run``'s capacity and summary tables, ``bench recommend``'s weighted
table, ``bench compare``'s capacity cell), report.md and the verdict sentence, and each engine's
headline figures (capacity with its interval; TTFT and TPOT percentiles with theirs) compared as
strings. Rendered without plots (the text is under test), so it stays a few seconds."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from harness.loadgen.simulated import SimEngine
from results.schema import Interval
from results.schema.metric_registry import metric_figure
from results.store import load_run, write_model_atomic

from tests.helpers import sim_ladder_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two engines and the yardstick on short ladders, each summary entry its capacity point's
    metrics (as ``bench run`` stores them) with stored 95 % intervals on two latencies."""
    engines = {"fast": SimEngine("fast", slots=8, prefill_ms=60, tpot_ms=18, jitter=0.05),
               "slow": SimEngine("slow", slots=4, prefill_ms=90, tpot_ms=30, jitter=0.05),
               "own": SimEngine("own", slots=8, prefill_ms=70, tpot_ms=22, jitter=0.05)}
    folder = sim_ladder_run(tmp_path_factory.mktemp("fig"), "fig", engines, loads=(1, 2, 4, 8, 16), requests=8,
                            with_metrics=True)
    run = load_run(folder)
    for e in run.summary.engines.values():  # intervals a measured point stores (harness.metrics.repeats)
        m = e.metrics
        e.intervals = {"tpot_ms.p99": Interval(n=32, point=m.tpot_ms.p99, low=m.tpot_ms.p99 * 0.93, high=m.tpot_ms.p99 * 1.07),
                       "ttft_ms.p90": Interval(n=32, point=m.ttft_ms.p90, low=m.ttft_ms.p90 * 0.9, high=m.ttft_ms.p90 * 1.1)}
    write_model_atomic(folder / "summary.json", run.summary)
    return folder


def _text(render) -> str:  # type: ignore[no-untyped-def]
    console = Console(file=io.StringIO(), width=400, color_system=None)
    render(console)
    return console.file.getvalue()  # type: ignore[attr-defined]


def _report_md(folder: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    import reports.writer as writer
    from harness.app.run.reporting import completed, default_recommendation

    for name in ("frontier_png", "job_frontier_png", "series_png"):
        monkeypatch.setattr(writer, name, lambda *a, **k: None)
    monkeypatch.setattr(writer, "render_plots", lambda data: {})
    monkeypatch.setattr(writer, "timeline_plots", lambda *a, **k: {})
    run = completed(load_run(folder))
    md, _ = writer.write_reports([run], default_recommendation([run]), folder)
    return md.read_text()


def _md_cells(md: str, first_header: str) -> dict[str, dict[str, str]]:
    """A Markdown table's rows (the one whose header starts ``| first_header``): engine → header → cell."""
    lines = md.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header}"))
    header = [h.strip() for h in lines[at].strip("|").split("|")]
    rows = {}
    for line in lines[at + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0].split(" ")[0]] = dict(zip(header, cells))
    return rows


def _console_cells(text: str, title: str) -> dict[str, dict[str, str]]:
    """A rich table's rows (the one under ``title``): engine → header → cell."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if title in line) + 2
    header = [h.strip() for h in lines[at].strip("┃").split("┃")]
    rows = {}
    for line in lines[at + 2:]:
        if not line.startswith("│"):
            break
        row = dict(zip(header, [c.strip() for c in line.strip().strip("│").split("│")]))
        rows[row["engine"].split(" ")[0]] = row
    return rows


def test_each_engine_s_headline_figures_read_the_same_everywhere(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.app.cli.compare import _capacity
    from harness.app.cli.report import print_recommendation
    from harness.app.cli.summary import print_summary
    from harness.app.cli.verdict import print_verdict
    from harness.app.run.reporting import default_recommendation

    run = load_run(run_dir)
    ladder, summary = run.ladder, run.summary
    console = _text(lambda c: (print_verdict(ladder, c), print_summary(summary, c)))
    rec = default_recommendation([run])
    weighted = _console_cells(_text(lambda c: print_recommendation(rec, c)), "Ranking")
    md = _report_md(run_dir, monkeypatch)
    capacity_md, capacity_console = _md_cells(md, "engine | capacity"), _console_cells(console, "Capacity at the SLO")
    summary_md, summary_console = _md_cells(md, "engine | ok / failed"), _console_cells(console, "Run fig")
    sentence = ladder.decision.sentence
    assert ladder.decision.winner == "fast"
    assert f"({capacity_console['fast']['output tok/s per device']} output tok/s per device" in sentence
    for name, engine in ladder.engines.items():
        shown = capacity_md[name]["capacity: output tok/s per device"], capacity_md[name]["95 % interval"]
        assert shown == (capacity_console[name]["output tok/s per device"], capacity_console[name]["95% interval"])
        assert _capacity(engine.capacity) == " ".join(shown).replace(" (1 run)", "")  # bench compare's cell
        for stat in ("TTFT p90", "TTFT p99", "TPOT p90", "TPOT p99", "E2E p99"):
            assert summary_md[name][f"{stat} ms"] == summary_console[name][stat], (name, stat)
        for stat in ("TTFT p99", "TPOT p99"):  # the weighted table reads the same point, printed the same way
            assert weighted[name][f"{stat} ms"] == summary_console[name][stat].split(" [")[0], (name, stat)
        assert summary_md[name]["output tok/s"] == summary_console[name]["out tok/s"]
        m, ci = summary.engines[name].metrics, summary.engines[name].intervals["tpot_ms.p99"]
        assert summary_console[name]["TPOT p99"] == metric_figure("tpot_ms.p99", m.tpot_ms.p99, ci.low, ci.high)
        assert f"[{_capacity(engine.capacity).split(' [')[1]}" == engine.capacity.interval_text
