"""The accuracy-set loader (workloads/accuracy.py): the shipped sample loads; each kind of bad line
is one error naming the file, the line and the fix."""

from __future__ import annotations

import pytest

from workloads.accuracy import SAMPLE_SET, load_accuracy_set
from workloads.errors import WorkloadError


def test_the_shipped_sample_loads() -> None:
    items = load_accuracy_set(SAMPLE_SET)
    assert len(items) == 10 and items[0].prompt == "The capital of France is" and items[0].match == "regex"
    assert sum(i.messages is not None for i in items) == 1 and all(i.max_tokens <= 16 for i in items)


@pytest.mark.parametrize("line, message", [
    ('{"prompt": "x"', ":1: not JSON"),
    ('{"prompt": "x"}', ":1: expected: Field required"),
    ('{"expected": "x"}', ':1: give exactly one of "prompt" or "messages"'),
    ('{"prompt": "x", "messages": [], "expected": "x"}', ':1: give exactly one of "prompt" or "messages"'),
    ('{"prompt": "x", "expected": "x", "match": "fuzzy"}', ":1: match: Input should be 'exact' or 'regex'"),
    ('{"prompt": "x", "expected": "[", "match": "regex"}', ":1: expected is not a valid regular expression"),
    ('{"prompt": "x", "expected": "x", "max_tokens": 0}', ":1: max_tokens: Input should be greater than or equal to 1"),
])
def test_a_bad_line_is_one_error(tmp_path, line, message) -> None:
    path = tmp_path / "set.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(WorkloadError) as err:
        load_accuracy_set(path)
    assert str(err.value) == f"{path}{message}" or str(err.value).startswith(f"{path}{message}")


def test_a_missing_or_empty_file(tmp_path) -> None:
    with pytest.raises(WorkloadError, match="no such file"):
        load_accuracy_set(tmp_path / "none.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(WorkloadError, match="has no question"):
        load_accuracy_set(tmp_path / "empty.jsonl")
