"""The results package's one error: :class:`ResultsError`.

Its own module because both the store (:mod:`results.store`) and the recommendation artefact
(:mod:`results.recommendation`) raise it, and the store reads recommendations: defined in either
one, the two would import each other. ``results.store`` re-exports it for its callers.
"""

from __future__ import annotations


class ResultsError(RuntimeError):
    """A run folder is missing, unreadable or from an incompatible schema (message = the fix)."""
