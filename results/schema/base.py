"""The base of every stored artefact and the schema's version.

Bump :data:`SCHEMA_VERSION` whenever a field changes meaning or is removed; adding an
optional field keeps the version (old runs still load, the field reads as its default).
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, PlainSerializer

SCHEMA_VERSION = "2.0"
"""2.0: typed summary/manifest/recommendation; engine status ``not_measured`` instead of a
"not measured:" prose prefix on ``skipped``; metrics carry ``samples_ms`` for the report's CDFs.
Version-1 run folders still load (``results.store.load_run`` upgrades them in memory)."""
READABLE_MAJOR_VERSIONS = ("1", "2")


class Artefact(BaseModel):
    """Base of the stored models: attribute access in code; ``model["field"]`` reads a field by
    its JSON name too (the way the artefact reads on disk), raising KeyError for an unknown one."""

    def __getitem__(self, key: str) -> Any:
        if key not in type(self).model_fields:
            raise KeyError(key)
        return getattr(self, key)


def _bound_json(value: float) -> float | str:
    """A finite number as is; ±inf and NaN as the strings pydantic reads back (``"Infinity"``):
    JSON has no such numbers, and pydantic would write them as null, which a float field refuses."""
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


Bound = Annotated[float, PlainSerializer(_bound_json, when_used="json")]
"""An interval's end that may be infinite (a ratio whose denominator's bootstrap drew 0):
stored as ``"Infinity"``, read back as ``inf``."""
