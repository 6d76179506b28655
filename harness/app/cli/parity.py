"""The console side of the parity audit: the lines printed under the summary (``--parity``
itself is a field of :class:`harness.app.settings.run.RunSettings`).

:func:`parity_lines` renders a stored ``summary.parity`` (``harness.scoring.checks.parity``) as plain
text - a side-by-side table of the settings each engine reported, then every unfair flag with
its reason, the settings not reported and the audit's notes - printed after the summary table
(``bench run``, ``bench results show``).
"""

from __future__ import annotations

from adapters.parity import PARITY_MODES
from results.schema import RunSummary

from harness.app.settings.run import ParityMode

assert tuple(m.value for m in ParityMode) == PARITY_MODES  # --parity's choices (RunSettings.parity) are the adapters'

CELL_CHARS = 30  # a cell longer than this is cut (the report has the full text and each value's source)


def _cut(text: str) -> str:
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"


def parity_lines(summary: RunSummary) -> list[str]:
    """The audit as lines (no markup); [] when the run has none (an older run, or no engine
    measured). A row whose reported values differ is marked ``≠``, an unfair one ``✗``."""
    audit = summary.parity
    if audit is None or not audit.rows:
        return []
    head = ["setting", *audit.engines]
    rows = [[("✗ " if r.unfair else "≠ " if r.differs else "  ") + r.label,
             *[_cut(r.values.get(e) or "not reported") for e in audit.engines]] for r in audit.rows]
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    out = [f"Configuration parity ({audit.mode}): what each engine reported it runs with"]
    out += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [head, *rows]]
    if audit.flags:
        out += [f"unfair: {flag.reason}" for flag in audit.flags]
    elif len(audit.engines) > 1:
        out.append("no unfair difference among the reported settings")
    out += [f"{engine}: not reported: {', '.join(names)}" for engine, names in audit.not_reported.items()]
    return out + audit.notes
