"""The scorer's one exception type."""

from __future__ import annotations


class ScorerError(ValueError):
    """Bad scorer input (unknown preset/weight/feature, no runs); the message names the fix."""
