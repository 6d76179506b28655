"""Markdown and self-contained HTML reports, with plots, for one run or a comparison of runs."""
