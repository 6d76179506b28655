"""The replay-fidelity certificate where a user reads the answer: a flagged statistic is said under
the verdict (console and report), and the report has the certificate's table, with the same cells
as the console's (issue 40: "within ±5 % or flagged in the verdict")."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from harness.app.run.replay_check import print_certificate
from harness.app.run.reporting import write_run_reports
from harness.loadgen.simulated import SimEngine
from reports.frontier import caveats
from reports.replay import replay_caveats, replay_context
from results.schema import REPLAY_FILE, CertificateRow, EngineReplay, ReplayCertificate
from results.store import load_run, write_model_atomic

from tests.helpers import sim_ladder_run


def certificate() -> ReplayCertificate:
    """``fast`` replayed faithfully; ``slow``'s outputs halved (its output p90 and p99 flagged)."""
    def rows(out: float) -> list[CertificateRow]:
        return [CertificateRow(statistic="input p90", unit="tokens", trace=600.0, built=520.0, sent=521.0,
                               deviation=521 / 520 - 1, within=True, coverage=520 / 600 - 1),
                CertificateRow(statistic="output p90", unit="tokens", trace=32.0, built=32.0, sent=32 * out,
                               deviation=out - 1, within=abs(out - 1) <= 0.05, coverage=0.0),
                CertificateRow(statistic="output p99", unit="tokens", trace=32.0, built=32.0, sent=32 * out,
                               deviation=out - 1, within=abs(out - 1) <= 0.05, coverage=0.0),
                CertificateRow(statistic="hit rate (infinite cache)", unit="share", trace=0.6, built=0.55,
                               coverage=-0.05)]
    return ReplayCertificate(run_id="lad", trace="shipped SWE-agent trajectories", trace_sessions=22, trace_requests=73,
                             cache_blocks=4096, engines={
                                 "fast": EngineReplay(requests=90, sessions=30, measurements=5, rows=rows(1.0)),
                                 "slow": EngineReplay(requests=90, sessions=30, measurements=5, rows=rows(0.5),
                                                      flagged=["output p90", "output p99"])})


def test_a_flagged_engine_is_said_under_the_verdict_in_one_line_with_its_deviations() -> None:
    lines = replay_caveats(certificate())
    assert lines == ["Caveat (replay fidelity): slow was sent 2 statistics outside ±5% of the sessions built for its "
                     "measurements (output p90 -50.0%, output p99 -50.0%): its figures rest on load that did not "
                     "follow the workload as built"]
    assert replay_caveats(None) == [] and caveats(None, None) == []
    assert caveats(None, certificate()) == lines


def test_the_report_shows_the_certificate_and_the_caveat_under_the_verdict(tmp_path: Path) -> None:
    engines = {"fast": SimEngine("fast", slots=16, prefill_ms=60, tpot_ms=18, jitter=0.05),
               "slow": SimEngine("slow", slots=8, prefill_ms=90, tpot_ms=30, jitter=0.05)}
    run_dir = sim_ladder_run(tmp_path, "lad", engines, loads=(1, 2, 4, 8), requests=8)
    write_model_atomic(run_dir / REPLAY_FILE, certificate())
    assert load_run(run_dir).replay == certificate()
    md_path, html_path = write_run_reports(run_dir)
    md = md_path.read_text()
    verdict, section = md.index("## Verdict"), md.index("## Replay fidelity")
    caveat = md.index("Caveat (replay fidelity): slow was sent 2 statistics")
    assert verdict < caveat < section
    assert "**slow: 90 requests, 30 sessions sent over 5 measurements**: flagged output p90 -50.0%, output p99 -50.0%" in md
    assert "| output p90 | 32.0 | 32.0 | 16.0 | -50.0% | flagged | +0.0% |" in md
    assert "| input p90 | 600.0 | 520.0 | 521.0 | +0.2% | ok | -13.3% |" in md
    assert "| hit rate (infinite cache) | 60.0% | 55.0% | — | — |  | -5.0 pt |" in md
    html = html_path.read_text()
    assert html.index('id="verdict"') < html.index("Caveat (replay fidelity)") < html.index('id="replay"')


def test_the_console_prints_the_cells_the_report_prints() -> None:
    console = Console(record=True, width=200)
    print_certificate(console, certificate())
    text = console.export_text()
    ctx = replay_context(certificate())
    slow = ctx["engines"][1]
    row = slow["rows"][1]
    cells = [" │ ".join(c.strip() for c in line.strip("│ ").split("│")) for line in text.splitlines()]
    assert f"output p90 │ 32.0 │ 32.0 │ {row['sent']} │ {row['deviation']} │ flagged │ {row['coverage']}" in cells
    assert "slow: 2 statistic(s) sent outside ±5% of the sessions as built: output p90 -50.0%, output p99 -50.0%" in text


def test_sessions_the_engine_failed_are_named_in_the_engines_title() -> None:
    from reports.replay import engine_title

    cert = certificate()
    cert.engines["slow"].failed_sessions = 3
    assert engine_title(cert, "slow") == ("slow: 90 requests, 30 sessions sent over 5 measurements; 3 sessions with a "
                                          "request the engine failed left out (the engine's failures, judged by the "
                                          "reliability gate)")


def test_counts_and_deviations_read_as_written_english() -> None:
    """One session is "1 session", thousands are separated, and a deviation that rounds to nothing
    has no minus sign (the review read "1 sessions cut in flight" and "-0.0%")."""
    from reports.replay import deviation, engine_title, number

    cert = certificate()
    e = cert.engines["slow"]
    e.requests, e.sessions, e.measurements, e.left_out_sessions, e.failed_sessions = 1_234, 1, 1, 1, 1
    assert engine_title(cert, "slow") == ("slow: 1,234 requests, 1 session sent over 1 measurement; 1 session cut in "
                                          "flight by an early stop left out; 1 session with a request the engine "
                                          "failed left out (the engine's failures, judged by the reliability gate)")
    assert [deviation(v, "tokens") for v in (-0.0004, 0.0004, -0.004, None)] == ["+0.0%", "+0.0%", "-0.4%", "—"]
    assert deviation(-0.0001, "share") == "+0.0 pt" and deviation(-0.02, "share") == "-2.0 pt"
    assert (number(1370.4, "tokens"), number(0.064, "s"), number(0.661, "share")) == ("1,370.4", "0.06", "66.1%")
