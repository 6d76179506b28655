"""Markdown and self-contained HTML reports, with plots, for one run or a comparison of runs.

Public API: :func:`write_reports` (see :mod:`reports.writer`).
"""

from .writer import write_reports

__all__ = ["write_reports"]
