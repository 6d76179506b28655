"""A fixture for tests of ``bench run``/``bench search`` whose assertions read the stored run
(ladder.json, summary.json, report.md's text) but no chart and no winner map: matplotlib's
rendering of a run's charts (about 10 PNGs) and the winner map's bootstrap (its cells each judge
the ladder again) cost seconds per run on the 2-core CI machine, and no assertion of these tests
reads them. The charts are still drawn as figures and named in the reports (report.md still
links ``report-plots/frontier.png``); only their pixels are a fixed stub. tests/reports and
tests/harness/scoring/verdict/test_winner_map.py cover both for real."""

from __future__ import annotations

import pytest

STUB_PNG = b"\x89PNG\r\n\x1a\n"  # a PNG's signature: what the reports embed and write, undrawn


def quick_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stub the charts' pixels and the winner map for the rest of the test (module docstring)."""
    import harness.app.run.reporting as reporting
    from reports import frontier, jobs, plots, series, timeline, winner_map

    def stub(fig) -> bytes:  # type: ignore[no-untyped-def]
        return STUB_PNG

    for module in (plots, frontier, jobs, series, timeline, winner_map):
        monkeypatch.setattr(module, "_png", stub)
    monkeypatch.setattr(reporting, "store_winner_map", lambda run, *a, **kw: None)
