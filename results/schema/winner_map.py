"""``winner_map.json``: the verdict over a grid of SLOs (issue 41), decided from the run's records
by the same decision core as the run's own verdict (``harness.scoring.verdict.winner_map``).

One axis per latency SLO the map moves (``x_key``, a TPOT percentile, and ``y_key``, a TTFT
percentile, ms); a threshold of ``None`` on an axis means "no such SLO" (the user gave none for
it). Every other SLO of the question is held at its value (``held``). ``cells`` are row-major:
``cells[i * len(x_ms) + j]`` is the decision at ``y_ms[i]`` × ``x_ms[j]``.
"""

from __future__ import annotations

from pydantic import Field

from .base import SCHEMA_VERSION, Artefact

WINNER_MAP_FILE = "winner_map.json"


class MapCell(Artefact):
    """The decision under one pair of thresholds: ``outcome`` (the verdict's: separated,
    equivalent, not_separated, undecided, single, none), ``winner`` ("" = none), ``leader`` (the
    highest capacity among production engines, winner or not), ``runner_up``."""

    outcome: str
    winner: str = ""
    leader: str = ""
    runner_up: str = ""


class WinnerMap(Artefact):
    """The map (module docstring); ``slos``: the question's own SLOs (key → ms), marked on the
    chart; ``boundary``: one line naming the nearest threshold where the answer changes (or that
    it does not change anywhere on the map); ``boundary_key`` / ``boundary_ms``: that threshold
    (None when none changes); ``asked``: (row, column) of the question's own cell, framed on the
    chart (None when the map's percentile is not the question's: it is not on the map; a map
    stored before this field read it from ``slos``)."""

    schema_version: str = SCHEMA_VERSION
    x_key: str
    y_key: str
    x_ms: list[float | None]
    y_ms: list[float | None]
    held: dict[str, float] = Field(default_factory=dict)
    slos: dict[str, float] = Field(default_factory=dict)
    cells: list[MapCell] = Field(default_factory=list)
    boundary: str = ""
    boundary_key: str | None = None
    boundary_ms: float | None = None
    asked: tuple[int, int] | None = None

    def cell(self, i: int, j: int) -> MapCell:
        """The decision at ``y_ms[i]`` × ``x_ms[j]``."""
        return self.cells[i * len(self.x_ms) + j]
