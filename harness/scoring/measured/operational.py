"""A measured criterion that is not about serving speed: operational complexity.

No criterion rests on a number an adapter declares about itself (issue 12, "measured criteria
only"; DESIGN.md "How a recommendation is made").

**Complexity** is scored from facts the runs recorded (:class:`OperationalRecord`, which :mod:`.gather` fills):

- *time to healthy* (s): launch → first healthy answer (``EngineResult.startup_s``), per engine
  the median over its runs, taken from the runs where it started alone when there are any
  (``startup_parallel`` False), else from the runs where it started alongside others;
- *processes*: live processes in the server's process group once healthy (the manifest's
  effective configuration, ``processes``), per engine the median over its runs.

Formula: each fact is normalised lower-better against the best survivor, ``min(x) / x``, and
the complexity score is the mean over the facts that are *comparable*: recorded for every
survivor, and for the time to healthy also started the same way (all alone or all alongside
others: a start that shared the CPU with other start-ups is slower for that reason alone). A
fact that is not comparable is left out for every survivor, with a note saying why; with no
comparable fact the criterion scores 0 for every survivor (it cannot separate them). Engines the
harness did not start (an ``openai`` endpoint) have no time to healthy.

Shown, not scored: install time (``install_s``, how long ``bench engines setup`` took; it
depends on the package cache and the network, and engines in the harness's own environment have
no install step, so it is not like for like) and install size (``install_bytes``, the size on disk
of the virtual environment the engine runs from, ``adapters.runtime.resources.install_facts``; the own
engine's is the harness's own, shared one). Not recorded anywhere: steps outside pip (an engine
build); named as not recorded.

**Features**, the other such criterion, come from the feature probes' verified results
(:mod:`harness.scoring.checks.features`).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Sequence


@dataclass(frozen=True)
class OperationalRecord:
    """Operational facts one run recorded about one engine it measured (None = not recorded).

    ``startup_s``: time from launch to the first healthy answer, s (``EngineResult.startup_s``
    in ``summary.json``); ``startup_parallel``: True when it started alongside other engines
    (its time then includes their contention for the CPU); ``processes``: live processes in the
    server's process group once healthy (the manifest's effective configuration,
    ``adapters.runtime.process.ServerProcess.processes``); ``install_s``: how long ``bench engines
    setup`` took, s (the manifest's effective configuration ``install_s``; ``bench engines setup``
    writes it to ``.engines/<name>/installed.json`` as ``seconds``, but no adapter copies it into
    a run yet, so it reads "not recorded");
    ``external``: the harness did not start it (the ``openai`` adapter's endpoint, recorded with
    its ``base_url``), so ``startup_s`` times nothing.
    """

    run_id: str
    startup_s: float | None = None
    startup_parallel: bool | None = None
    processes: int | None = None
    install_s: float | None = None
    external: bool = False
    install_bytes: int | None = None  # size of its venv on disk, bytes (the manifest's install_bytes)


NOT_RECORDED = ("steps outside pip (e.g. an engine build)",)
"""Operational facts no run records yet (named in the notes, never guessed)."""


@dataclass(frozen=True)
class OperationalFacts:
    """One engine's recorded operational facts over its runs (None = not recorded).

    ``time_to_healthy_s`` in s; ``started_in_parallel``: whether that time comes from starts
    alongside other engines; ``processes``: a count; ``install_s`` in s (shown, not scored).
    """

    time_to_healthy_s: float | None
    started_in_parallel: bool | None
    processes: float | None
    install_s: float | None
    install_bytes: int | None = None  # bytes, the last run's (shown, not scored)

    def text(self) -> str:
        """``"time to healthy 12.3 s (started alone), 4 processes"``; missing facts read "not recorded"."""
        if self.time_to_healthy_s is None:
            healthy = "time to healthy not recorded"
        else:
            how = {True: " (started alongside others)", False: " (started alone)"}.get(self.started_in_parallel, "")
            healthy = f"time to healthy {self.time_to_healthy_s:,.1f} s{how}"
        processes = "processes not recorded" if self.processes is None else f"{self.processes:g} processes"
        return f"{healthy}, {processes}"


def operational_facts(operations: Sequence[OperationalRecord]) -> OperationalFacts:
    """The median facts over one engine's runs, one :class:`OperationalRecord` each
    (``gather.EngineRuns.operations``; see the module docstring for the start-up rule)."""
    starts = [(op.startup_s, bool(op.startup_parallel)) for op in operations
              if op.startup_s is not None and not op.external]
    alone = [seconds for seconds, parallel in starts if not parallel]
    together = [seconds for seconds, parallel in starts if parallel]
    if alone:
        healthy, parallel = float(median(alone)), False
    elif together:
        healthy, parallel = float(median(together)), True
    else:
        healthy, parallel = None, None
    processes = [op.processes for op in operations if op.processes is not None]
    installs = [op.install_s for op in operations if op.install_s is not None]
    return OperationalFacts(
        time_to_healthy_s=healthy,
        started_in_parallel=parallel,
        processes=float(median(processes)) if processes else None,
        install_s=installs[-1] if installs else None,
        install_bytes=next((op.install_bytes for op in reversed(operations) if op.install_bytes is not None), None),
    )


def _lower_better(values: dict[str, float]) -> dict[str, float]:
    """``min(x) / x`` per engine (1.0 for a value ≤ 0)."""
    best = min(values.values())
    return {name: 1.0 if value <= 0 else max(0.0, best) / value for name, value in values.items()}


def complexity_scores(facts: dict[str, OperationalFacts]) -> tuple[dict[str, float], list[str]]:
    """Each survivor's complexity score in [0, 1] and, per fact, how it was (or why it was not)
    compared ("time to healthy not compared: not recorded for own")."""
    how: list[str] = []
    per_fact: list[dict[str, float]] = []
    missing_healthy = [name for name, fact in facts.items() if fact.time_to_healthy_s is None]
    modes = {fact.started_in_parallel for fact in facts.values() if fact.time_to_healthy_s is not None}
    if missing_healthy:
        how.append(f"time to healthy not compared: not recorded for {', '.join(missing_healthy)}")
    elif len(modes) > 1:
        alone = [name for name, fact in facts.items() if not fact.started_in_parallel]
        how.append(f"time to healthy not compared: {', '.join(alone)} started alone, the others alongside other "
                   "engines (their times include that contention; --sequential-start measures each alone)")
    else:
        per_fact.append(_lower_better({name: float(fact.time_to_healthy_s or 0.0) for name, fact in facts.items()}))
        if modes == {True} and len(facts) > 1:
            how.append("time to healthy compared between engines that all started alongside others: every time "
                       "includes that contention (--sequential-start measures each alone)")
    missing_processes = [name for name, fact in facts.items() if fact.processes is None]
    if missing_processes:
        how.append(f"process count not compared: not recorded for {', '.join(missing_processes)}")
    else:
        per_fact.append(_lower_better({name: float(fact.processes or 0.0) for name, fact in facts.items()}))
    if not per_fact:
        how.append("so complexity scores 0 for every engine")
        return {name: 0.0 for name in facts}, how
    return {name: sum(scores[name] for scores in per_fact) / len(per_fact) for name in facts}, how


def complexity_note(facts: dict[str, OperationalFacts], how: list[str]) -> str:
    """One note: the formula, each engine's facts, what was not compared and why, install time
    where recorded, and what no run records."""
    shown = "; ".join(f"{name}: {fact.text()}" for name, fact in facts.items())
    installs = [f"{name} {fact.install_s:,.0f} s" for name, fact in facts.items() if fact.install_s is not None]
    install = (f"install time (shown, not scored) {', '.join(installs)}" if installs
               else "install time not recorded in these runs")
    sizes = [f"{name} {fact.install_bytes / 1024**3:,.2f} GiB" for name, fact in facts.items()
             if fact.install_bytes is not None]
    install += f"; install size (shown, not scored) {', '.join(sizes)}" if sizes else "; install size not recorded"
    caveats = "".join(f"; {line}" for line in how)
    return ("complexity is measured, lower better: mean of min(x)/x over the comparable recorded facts "
            f"(time to healthy, processes) — {shown}{caveats}; {install}; not recorded: {', '.join(NOT_RECORDED)}")
