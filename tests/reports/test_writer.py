"""Reports: content, self-containment, and rendering in headless Chromium."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from harness.app.run.reporting import write_run_reports as write_reports
from reports.plots import pareto_frontier

from tests.helpers import CPU_ONLY, OWN_CAPS, make_records, ok_entry, skipped, write_run

# matplotlib's default colour cycle: C0 blue, C1 orange
C0, C1 = (31, 119, 180), (255, 127, 14)


def agentic_run(root: Path, run_id: str = "20261129-193500-agentic", ttft_scale: float = 1.0):
    r_own = make_records("own", 12, ttft_ms=100.0, tpot_ms=20.0, turns=3,
                         ttft_by_turn_ms=[120.0 * ttft_scale, 60.0 * ttft_scale, 40.0 * ttft_scale])
    r_tf = make_records("transformers", 12, ttft_ms=130.0, tpot_ms=25.0, turns=3,
                        ttft_by_turn_ms=[150.0, 140.0, 150.0])
    engines = {
        "own": ok_entry(r_own, OWN_CAPS, display_name="own (reference engine)",
                        engine_metrics={"prefix_cache_hit_rate": 0.62, "spec_acceptance_rate": 0.75}),
        # prefix caching on, no counter of it reported: still a row in the prefix-caching table (review item 24)
        "transformers": {**ok_entry(r_tf, CPU_ONLY), "effective": {"prefix_caching": True}},
        "tensorrt_llm": skipped("tensorrt_llm: needs an NVIDIA GPU, none found"),
        "vllm": skipped("server exited with code 1 during startup", "failed",
                        log_tail="Traceback (most recent call last):\nImportError: libcuda.so.1 <b>bold</b>"),
    }
    return write_run(root, run_id, engines, r_own + r_tf, workload="agentic", slos={"ttft_p99": 500.0})


def test_report_content(tmp_path: Path) -> None:
    run = agentic_run(tmp_path)
    md_path, html_path = write_reports(run.run_dir)
    assert (md_path, html_path) == (run.run_dir / "report.md", run.run_dir / "report.html")
    md = md_path.read_text()
    for heading in ("## Recommendation", "## Summary per engine", "## Engines not measured", "## Latency distributions",
                    "## Throughput vs latency", "## Per-turn TTFT (agentic sessions)",
                    "## Over time", "## Prefix caching and speculative decoding", "## Metric definitions", "## Manifest"):
        assert heading in md
    # the plots the Markdown points at exist
    for rel in re.findall(r"\]\((report-plots/[a-z_]+\.png)\)", md):
        assert (run.run_dir / rel).stat().st_size > 1000
    assert len(re.findall(r"\]\((report-plots/[a-z_]+\.png)\)", md)) == 5  # + the timelines
    # per-turn table: own's median TTFT by turn
    assert "| own | 0 | 4 | 120 | 120 |" in md and "| own | 2 | 4 | 40.0 | 40.0 |" in md  # metric_registry.figure
    assert "| own | 62.0% | 0.0% | 75.0% | — | — | — |" in md
    assert "| transformers | — | 0.0% | — | — | — | — | prefix caching on; the engine reports no counter of it |" in md
    # skipped/failed engines are listed with reasons, never with numbers
    assert "| 20261129-193500-agentic | tensorrt_llm | skipped | tensorrt_llm: needs an NVIDIA GPU, none found |" in md
    summary = md.split("## Summary per engine")[1].split("##")[0]
    assert "tensorrt_llm" not in summary and "vllm" not in summary
    assert "ImportError: libcuda.so.1" in md
    assert "Recommended: transformers" in md  # own is the reference engine: a yardstick, never recommended
    assert "own (reference engine, a yardstick, never the recommendation) ranks 1 of 2" in md
    assert "TTFT** = first token-bearing chunk − send" in md  # definitions from harness/metrics.py
    assert "- seed: 7" in md and "- git_sha: abc1234" in md and "- client_calibration: not recorded" in md
    assert "- gpus: none" in md

    html = html_path.read_text()
    assert "&lt;b&gt;bold&lt;/b&gt;" in html and "<b>bold</b>" not in html  # log tails are escaped
    assert "<script" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html)  # nothing external
    srcs = re.findall(r'<img class="plot" alt="[^"]*" src="([^"]+)"', html)
    assert len(srcs) == 5 and all(s.startswith("data:image/png;base64,") for s in srcs)  # + the timelines
    for s in srcs:
        img = np.asarray(Image.open(io.BytesIO(base64.b64decode(s.split(",", 1)[1]))).convert("RGB"))
        assert img.shape[0] > 200 and img.std() > 10  # a drawn plot, not a blank canvas


def test_report_without_records_or_manifest(tmp_path: Path) -> None:
    run = write_run(tmp_path, "old", {"vllm": skipped("not installed")}, [], manifest={})
    md_path, html_path = write_reports(run.run_dir)
    md = md_path.read_text()
    assert "No engine recommended." in md and "No engine was measured." in md
    assert "- hardware: not recorded" in md and "- model: not recorded" in md
    assert "<img" not in html_path.read_text()


def test_comparison_report(tmp_path: Path) -> None:
    a = agentic_run(tmp_path, "a")
    b = agentic_run(tmp_path, "b", ttft_scale=2.0)
    md_path, html_path = write_reports(a.run_dir, compare_runs=[a, b])
    assert md_path == a.run_dir / "report-compare.md" and html_path.name == "report-compare.html"
    md = md_path.read_text()
    assert md.startswith("# Comparison of a, b")
    assert "| a/own |" in md and "| b/own |" in md
    assert "with the Pareto frontier" in md
    assert not (a.run_dir / "report.md").exists()


def test_pareto_frontier() -> None:
    # (throughput, latency): higher x and lower y are better
    pts = [(10.0, 100.0), (20.0, 150.0), (15.0, 200.0), (5.0, 90.0), (20.0, 160.0)]
    assert pareto_frontier(pts) == [3, 0, 1]
    assert pareto_frontier([(1.0, 1.0), (1.0, 1.0)]) == [0, 1]  # equal points do not dominate each other


# ----------------------------------------------------------------------------------------------
# headless Chromium

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--enable-logging=stderr", "--v=0"]


@pytest.fixture(scope="module")
def chromium() -> str:
    """The Chromium binary; installed from Debian packages when missing and possible."""
    for name in ("chromium", "chromium-browser"):
        if path := shutil.which(name):
            return path
    apt = shutil.which("apt-get")
    if apt is None:
        pytest.skip("chromium is not installed and cannot be: no apt-get on this machine")
    try:
        subprocess.run([apt, "update"], check=True, capture_output=True, timeout=300)
        subprocess.run([apt, "install", "-y", "chromium"], check=True, capture_output=True, timeout=600)
    except (subprocess.SubprocessError, OSError) as exc:
        pytest.skip(f"chromium is not installed and `apt-get install -y chromium` failed: {exc}")
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("chromium is not installed and the Debian package did not provide it")
    return path


def _chromium(binary: str, url: str, tmp_path: Path, *extra: str) -> str:
    """Run Chromium on ``url``; return its log (stderr), where console messages appear as CONSOLE lines."""
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    proc = subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, url],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stderr


def _console_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def test_html_renders_in_headless_chromium(tmp_path: Path, chromium: str) -> None:
    run = agentic_run(tmp_path)
    _, html_path = write_reports(run.run_dir)
    shot = tmp_path / "shot.png"
    log = _chromium(chromium, html_path.as_uri(), tmp_path, "--window-size=1280,4200", f"--screenshot={shot}")
    # the page has no scripts and loads nothing: any console message is a failure
    assert _console_lines(log) == []
    img = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert img.shape[:2] == (4200, 1280)

    def count(color: tuple[int, int, int]) -> int:
        return int((np.abs(img - np.array(color)).sum(axis=2) < 30).sum())

    # both engines' CDF lines and markers were painted (matplotlib's C0 and C1 colours)
    assert count(C0) > 500 and count(C1) > 500
    plot_rows = np.where((np.abs(img - np.array(C0)).sum(axis=2) < 30).any(axis=1))[0]
    band = img[plot_rows.min(): plot_rows.max() + 1]
    assert band.std() > 20  # the plot region is not uniform


def test_console_detector_catches_errors(tmp_path: Path, chromium: str) -> None:
    """Negative control: the same detector flags a page that logs, throws and loads externally."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><meta http-equiv="Content-Security-Policy" content="default-src \'none\'">'
                   '<img src="http://127.0.0.1:9/x.png"><body>x</body>')
    bad2 = tmp_path / "bad2.html"
    bad2.write_text("<!DOCTYPE html><body><script>undefinedFunction();</script></body>")
    assert _console_lines(_chromium(chromium, bad.as_uri(), tmp_path, "--dump-dom"))
    assert any("Uncaught" in line for line in _console_lines(_chromium(chromium, bad2.as_uri(), tmp_path, "--dump-dom")))
