"""Token recounts: our tokenizer's count of each request's prompt and reply, stored beside the
records instead of rewriting them.

``requests.jsonl`` is appended once per request, as it ends, and never rewritten. The recount
(one tokenizer pass over the prompt and the reply text, ``input_tokens_retok`` /
``output_tokens_retok`` of :class:`~results.schema.RequestRecord`) is derived work done after
the measured phase, off the timing path; it is appended to ``token_recounts.jsonl``, one line
per request, keyed like the record (engine, request_id, phase, repeat, probe).
:func:`merge_recounts` puts them back into the records when a run is read, so every reader sees
whole records. A missing or truncated recount file only leaves the recount fields empty (the
metrics then report the server's counts without a drift check), never loses a record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

from pydantic import BaseModel

from .schema import RequestRecord

RECOUNTS_FILE = "token_recounts.jsonl"

RecordKey = tuple[str, str, str, int, "int | None"]


class TokenRecount(BaseModel):
    """One request's recount (tokens, by the run's tokenizer; None = could not be counted)."""

    engine: str
    request_id: str
    phase: str
    repeat: int = 0
    probe: int | None = None
    input_tokens_retok: int | None = None
    output_tokens_retok: int | None = None

    @property
    def key(self) -> RecordKey:
        return (self.engine, self.request_id, self.phase, self.repeat, self.probe)


def record_key(record: RequestRecord) -> RecordKey:
    """The key a record and its recount share."""
    return (record.engine, record.request_id, record.phase, record.repeat, record.probe)


def recount_of(record: RequestRecord) -> TokenRecount:
    """The recount a record carries (its ``*_retok`` fields)."""
    return TokenRecount(engine=record.engine, request_id=record.request_id, phase=record.phase, repeat=record.repeat,
                        probe=record.probe, input_tokens_retok=record.input_tokens_retok,
                        output_tokens_retok=record.output_tokens_retok)


def recount_lines(recounts: Iterable[TokenRecount]) -> str:
    """JSON lines for ``token_recounts.jsonl``."""
    return "".join(r.model_dump_json() + "\n" for r in recounts)


def read_recounts(path: Path) -> dict[RecordKey, TokenRecount]:
    """The recounts stored at ``path`` by key ({} when the file is missing); a line that does
    not parse (a write cut short by a kill) is skipped: a recount is derived, never a measurement."""
    out: dict[RecordKey, TokenRecount] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return out
    for line in lines:
        try:
            recount = TokenRecount.model_validate_json(line)
        except ValueError:
            continue
        out[recount.key] = recount
    return out


def merge_recounts(records: Sequence[RequestRecord], recounts: dict[RecordKey, TokenRecount]) -> list[RequestRecord]:
    """``records`` with the recount fields of their stored recount filled in (in place; a
    record's own non-empty recount, from a run written before recounts had their own file, wins)."""
    if not recounts:
        return list(records)
    for record in records:
        found = recounts.get(record_key(record))
        if found is None:
            continue
        if record.input_tokens_retok is None:
            record.input_tokens_retok = found.input_tokens_retok
        if record.output_tokens_retok is None:
            record.output_tokens_retok = found.output_tokens_retok
    return list(records)
