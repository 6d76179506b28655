"""A user's task-accuracy set (``bench run --accuracy FILE``): JSONL, one question a line.

Each line is an :class:`~results.schema.AccuracyItem`: ``{"prompt": "...", "expected": "Paris",
"match": "regex", "max_tokens": 16}`` (or ``"messages"`` instead of ``"prompt"`` for the chat
API). :data:`SAMPLE_SET` is a small set shipped for tests and examples.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import ValidationError

from results.schema import AccuracyItem

from .errors import WorkloadError

SAMPLE_SET = Path(__file__).parent / "data" / "accuracy_sample" / "sample.jsonl"


def _item(path: Path, number: int, line: str) -> AccuracyItem:
    """One line, validated; raises :class:`WorkloadError` with the file, line and fix."""
    where = f"{path}:{number}"
    try:
        item = AccuracyItem.model_validate(json.loads(line))
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{where}: not JSON ({exc.msg}); each line is one object like "
                            '{"prompt": "...", "expected": "..."}') from None
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "line"
        raise WorkloadError(f"{where}: {field}: {first['msg']}") from None
    if (item.prompt is None) == (item.messages is None):
        raise WorkloadError(f"{where}: give exactly one of \"prompt\" or \"messages\"")
    if item.match == "regex":
        try:
            re.compile(item.expected)
        except re.error as exc:
            raise WorkloadError(f"{where}: expected is not a valid regular expression ({exc})") from None
    return item


def load_accuracy_set(path: str | Path) -> list[AccuracyItem]:
    """The items of ``path``; blank lines skipped. Raises :class:`WorkloadError` (one line: which
    file and line, what is wrong) for a missing or empty file or a bad line."""
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(f"--accuracy {path}: no such file (a JSONL file, one question a line; "
                            f"example: {SAMPLE_SET})")
    items = [_item(path, n, line) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if line.strip()]
    if not items:
        raise WorkloadError(f"--accuracy {path}: the file has no question")
    return items
