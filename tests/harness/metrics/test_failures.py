"""Failure shares as text (harness.metrics.failures)."""

from __future__ import annotations

from harness.metrics.failures import _percent


def test_a_share_just_above_its_bound_never_reads_as_equal() -> None:
    assert (_percent(0.25, 0.2499), _percent(0.2499, 0.25)) == ("25.00%", "24.99%")
    assert (_percent(0.9, 0.05), _percent(0.1, None)) == ("90%", "10%")
