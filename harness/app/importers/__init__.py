"""``bench import``: other benchmark tools' result files read into our run schema.

One module per tool (``vllm``, ``sglang``, ``aiperf``, ``guidellm``), each reading that tool's real
output format (its source or documentation is cited in the module); :func:`read_import` picks
the module, checks the file is that tool's, and returns a :class:`ParsedImport`;
:func:`write_import` stores it as a run folder with every metric's provenance (recomputed under
our definitions from the tool's per-request numbers, or copied from its summary under its own).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from . import aiperf, guidellm, sglang, vllm
from .common import ImportFormatError, ParsedImport, pick_entry, read_entries
from .write import PROVENANCE_KEYS, write_import

TOOLS: dict[str, ModuleType] = {"vllm": vllm, "sglang": sglang, "aiperf": aiperf, "guidellm": guidellm}
"""``--from`` name → its importer module."""

__all__ = ["TOOLS", "ImportFormatError", "ParsedImport", "PROVENANCE_KEYS", "read_import", "write_import"]


def _check_format(entries: list[object], tool: str, path: Path) -> None:
    """Every entry must be ``tool``'s; a file another importer recognises names that tool."""
    mod = TOOLS[tool]
    if all(mod.sniff(e) for e in entries):
        return
    others = [name for name, m in TOOLS.items() if name != tool and all(m.sniff(e) for e in entries)]
    if others:
        other = TOOLS[others[0]]
        raise ImportFormatError(f"{path} looks like {other.LABEL} output, not {mod.LABEL}'s: pass --from {others[0]}")
    raise ImportFormatError(f"{path} is not a {mod.LABEL} result file (none of the fields its importer reads, see "
                            f"harness/app/importers/{tool}.py): check the file and --from")


def read_import(path: Path, tool: str, entry: int | None = None) -> ParsedImport:
    """Read ``path`` as ``tool``'s output (``--entry``: which result of a file holding several,
    1-based; default the last). Raises :class:`ImportFormatError` (one line: the file and the
    fix) for an unknown tool, an unreadable, truncated or damaged file, or another tool's file."""
    if tool not in TOOLS:
        raise ImportFormatError(f"--from {tool!r} is not a tool bench can import: choose from {', '.join(TOOLS)}")
    mod = TOOLS[tool]
    parsed = ParsedImport(tool=tool, label=mod.LABEL, engine=mod.ENGINE, file=path)
    if tool == "aiperf":
        if not path.exists():
            raise ImportFormatError(f"{path}: no such file or folder; pass AIPerf's artifact folder or its "
                                    "profile_export.jsonl")
        if path.is_file():
            _check_format(read_entries(path), tool, path)
        aiperf.load(path, entry, parsed, "")
        return parsed
    entries = read_entries(path)
    _check_format(entries, tool, path)
    if tool == "guidellm":
        if len(entries) != 1:
            raise ImportFormatError(f"{path} holds {len(entries)} JSON documents; a GuideLLM report is one: pass "
                                    "the benchmarks.json it wrote")
        guidellm.load(entries[0], entry, parsed, "")  # type: ignore[arg-type]
        return parsed
    obj, parsed.entry = pick_entry(entries, entry, path, "result", parsed.notes)
    parsed.entries = len(entries)
    mod.parse(obj, parsed, "")
    return parsed
