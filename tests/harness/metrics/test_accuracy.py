"""Task-accuracy scoring (harness/metrics/accuracy.py): exact and regex matches, failed requests
count as wrong, the Wilson interval over the items."""

from __future__ import annotations

import pytest

from harness.metrics.accuracy import is_correct, score
from results.schema import AccuracyItem


def test_exact_and_regex_matching() -> None:
    exact = AccuracyItem(prompt="q", expected=" Paris ")
    regex = AccuracyItem(prompt="q", expected=r"(?i)\bparis\b", match="regex")
    assert is_correct(exact, "Paris\n") and not is_correct(exact, "Paris.") and not is_correct(exact, None)
    assert is_correct(regex, "It is PARIS.") and not is_correct(regex, "Parisian") and not is_correct(regex, None)


def test_score_counts_failures_as_wrong_with_an_interval() -> None:
    items = [AccuracyItem(prompt=str(i), expected="yes") for i in range(10)]
    res = score(items, ["yes"] * 7 + ["no", None, None])
    assert (res.correct, res.total, res.failed) == (7, 10, 2) and res.accuracy == 0.7
    assert res.per_item == [True] * 7 + [False] * 3
    assert res.interval.low == pytest.approx(0.3968, abs=1e-3) and res.interval.high == pytest.approx(0.8922, abs=1e-3)
    with pytest.raises(ValueError, match="9 replies for 10"):
        score(items, ["yes"] * 9)
