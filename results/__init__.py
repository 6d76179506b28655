"""Versioned result schema and the run store (results/<run-id>/).

The Python API (documented in README.md, "Results as data")::

    from results import load_run
    run = load_run("results/20261201-120000-chat")
    run.requests          # pandas DataFrame, one row per request record (results.export dtypes)
    run.summary           # results.schema.RunSummary (summary.json)
    run.manifest          # results.schema.Manifest (manifest.json)
    run.recommendation    # results.recommendation.Recommendation or None

``load_run`` and ``Run`` are imported lazily so that ``import results.schema`` stays light.
"""

from typing import Any

__all__ = ["load_run", "Run", "export_run"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import store

        return getattr(store, name)
    raise AttributeError(f"module 'results' has no attribute {name!r}")
