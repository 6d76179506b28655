"""One probe point of ``bench search``, measured ``--repeats N`` times back to back.

A probe at load ``L`` (the ``i``-th of its engine's search) is ``N`` measurements on the same,
running engine, one after the other:

- **repeat ``k`` of probe ``i`` draws its workload with seed ``base + i * N + k``**: no prompt
  is reused by any measurement of the search (another repeat, another probe), so none is
  flattered by a prefix an earlier one left in the engine's cache (with ``N = 1`` this is the
  plain ``base + i``);
- each repeat is one measurement step (:func:`harness.app.trial.measure.measure`, the one
  ``bench run`` uses: client workers, resource sampling, engine counters), its records stamped
  with ``repeat = k`` and ``probe = i`` and written to ``requests.jsonl`` as each request ends
  (a Ctrl-C keeps the requests that finished), their token recounts beside them;
- **the verdict is judged on the pooled requests** of the N repeats by the decision core's judge
  of a point (:func:`harness.app.search.capacity.judge_probe`, which calls
  :func:`harness.scoring.capacity.frontier.point_stats`, the one ``bench run``'s ladder uses: each
  repeat's steady state, the error bound with its Wilson interval, percentiles over every judged
  request of every repeat, so a p99 rests on N times the requests); the achieved arrival rate
  (the repeats' median) and the stored metrics come from the one summary
  (:func:`harness.metrics.summarise.summarise`); each repeat's own
  verdict is stored too (``repeat_passed``), with its metrics (``repeats``, empty for N = 1)
  and the headline numbers' 95 % intervals (over repeats for N >= 2, else over the requests
  of the one repeat).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import TYPE_CHECKING, Any

from adapters.runtime.resources import combine_repeats, with_output_tokens
from results.schema import RequestRecord, ResourceUse, SearchProbe
from workloads.options import WorkloadOptions

from harness.app.trial.measure import MeasureOptions, MeasurementSink, measure
from harness.app.search.capacity import LoadProbe, judge_probe
from harness.metrics import SLO, completion_rate
from harness.metrics.summarise import Condition, summarise
from harness.scoring.formatting import METRIC_LABELS
from harness.scoring.capacity.samples import Requests, measured_span_s
from harness.app.settings.run import RunSettings
from rich.console import Console
from adapters.base import Endpoint

if TYPE_CHECKING:  # transformers is slow to import: only where a tokenizer is loaded
    from transformers import PreTrainedTokenizerBase


def probe_seed(base: int, index: int, repeats: int = 1, repeat: int = 0) -> int:
    """The workload seed of repeat ``repeat`` of probe ``index``: ``base + index * repeats + repeat``."""
    return base + index * repeats + repeat


MIN_PROBE_S = 8.0  # a rate probe offers its rate for at least this long (s)
MIN_ROUNDS = 4  # a concurrency probe sends at least this many requests per in-flight slot


def probe_requests(asked: int | None, search_var: str, load: float, workload: str) -> int | None:
    """Requests of one probe: the ``--num-requests`` asked, raised so the probe reaches a steady
    state: a rate probe offers its rate for at least :data:`MIN_PROBE_S` seconds (1 + 8 s × rate
    requests: 8 requests at 14 req/s last 0.5 s, too short for a queue to build, and such a
    probe passes whatever the engine's capacity), a concurrency probe sends :data:`MIN_ROUNDS`
    requests per slot. Agentic (sessions with think times) and an unset count are left alone."""
    if asked is None or workload == "agentic":
        return asked
    floor = MIN_ROUNDS * int(load) if search_var == "concurrency" else 1 + math.ceil(MIN_PROBE_S * load)
    return max(asked, floor)


def probe_options(base: WorkloadOptions, search_var: str, load: float, index: int, repeats: int = 1,
                  repeat: int = 0) -> WorkloadOptions:
    """The workload options of repeat ``repeat`` of probe ``index`` at ``load``: the seed of
    :func:`probe_seed`; the request rate (rate search) or the in-flight cap with an unlimited
    rate (concurrency); the request count of :func:`probe_requests`."""
    update: dict[str, Any] = {"seed": probe_seed(base.seed or 0, index, repeats, repeat),
                              "num_requests": probe_requests(base.num_requests, search_var, load, base.name)}
    if search_var == "concurrency":
        update.update(max_concurrency=int(load), request_rate=math.inf)
    else:
        update["request_rate"] = float(load)
    return base.model_copy(update=update)


def load_text(load: float, search_var: str) -> str:
    """A probe's load for the console: ``4`` (concurrency), ``2.00``, ``1.125`` (rates, 4 digits at most)."""
    if search_var == "concurrency":
        return f"{load:g}"
    return f"{load:.2f}" if round(load, 2) == load else f"{load:.4g}"


class ProbeMeasurer:
    """Measures, judges, stores and prints the probes of a search (see the module docstring).

    ``cfg``: the :class:`harness.app.search.config.SearchSettings` (``workload``, ``search_var``,
    ``measure``, ``decision.max_failure_rate``); ``slos``: the SLOs judged; ``unit``: the load's unit."""

    def __init__(self, cfg: RunSettings, slos: list[SLO], unit: str, console: Console) -> None:
        self.cfg, self.slos, self.unit, self.console = cfg, slos, unit, console
        self.repeats = cfg.measure.repeats
        self.max_failure_rate = cfg.decision.max_failure_rate
        self.options = MeasureOptions(slos=tuple(slos), request_timeout_s=cfg.measure.request_timeout_s,
                                      client_workers=cfg.measure.client_workers, ignore_eos=cfg.measure.ignore_eos)
        self.kit: Any = None

    def measure(self, name: str, endpoint: Endpoint, tokenizer: PreTrainedTokenizerBase, sink: MeasurementSink, load: float,
                probes: list[SearchProbe]) -> LoadProbe:
        """Probe ``len(probes)`` at ``load``: N repeats, judged pooled; appends its SearchProbe."""
        c, n, index = self.cfg, self.repeats, len(probes)
        records: list[RequestRecord] = []
        by_repeat: list[list[RequestRecord]] = []
        used: list[ResourceUse] = []
        counters: dict[str, Any] = {}
        completed: list[float | None] = []  # each repeat's completion rate (req/s)
        offered: list[float] = []
        requested: float | None = None
        seeds: list[int] = []
        t0 = time.monotonic()
        for k in range(n):
            opts = probe_options(c.workload, c.search_var, load, index, n, k)
            seeds.append(opts.seed or 0)
            workload = self._build(opts, tokenizer)
            measured = measure(name, endpoint, workload, k, sink, tokenizer=tokenizer, options=self.options, probe=index)
            if workload.offered_rate is not None:
                offered.append(workload.offered_rate)
            requested = workload.requested_rate
            records.extend(measured.records)
            by_repeat.append(list(measured.records))
            completed.append(completion_rate(measured.records))
            if measured.resources is not None:
                used.append(with_output_tokens(measured.resources, measured.metrics.total_output_tokens))
            counters = measured.engine_metrics
        duration = time.monotonic() - t0
        offered_rate = statistics.median(offered) if offered else None
        summary = summarise(records, Condition(tuple(self.slos), offered_rate, requested, seed=seeds[0]))
        samples = [Requests.of(g, measured_span_s(g)) for g in by_repeat]
        judged = self._judged_rate(offered_rate)
        verdicts = [judge_probe(load, [r], self.slos, m, offered=judged, completed=done,
                                max_failure_rate=self.max_failure_rate)
                    for r, m, done in zip(samples, summary.repeats or [summary.pooled], completed)]
        rates = [rate for rate in completed if rate is not None]
        pr = judge_probe(load, samples, self.slos, summary.pooled, offered=judged,
                         completed=statistics.median(rates) if rates else None, max_failure_rate=self.max_failure_rate)
        probes.append(SearchProbe(
            index=index, seed=seeds[0], seeds=seeds if n > 1 else [], metrics=summary.pooled,
            repeats=summary.repeats if n > 1 else [], repeat_passed=[v.passed for v in verdicts],
            intervals=summary.intervals, resources=combine_repeats(used), engine_metrics=counters,
            **{**pr.model_dump(), "duration_s": round(duration, 3)}))
        self.print_probe(name, index, pr, sum(v.passed for v in verdicts))
        return pr

    def _judged_rate(self, offered: float | None) -> float | None:
        """The offered rate the saturation check compares against: None for a concurrency search."""
        return offered if self.cfg.search_var == "rate" else None

    def _build(self, opts: WorkloadOptions, tokenizer: PreTrainedTokenizerBase) -> Any:
        """The workload of one measurement, from one :class:`TokenKit` for every probe: it caches
        the word ids a build draws from (a fresh one per probe would spend ~1 s of the budget
        re-tokenizing the vocabulary)."""
        from workloads.registry import build_workload
        from workloads.tokens import as_kit

        if self.kit is None:
            self.kit = as_kit(tokenizer)
        return build_workload(opts, self.kit, with_stats=False)

    def print_probe(self, name: str, index: int, pr: LoadProbe, passing: int) -> None:
        """``own probe 2: 4.00 req/s (achieved 3.98) → TTFT p99 812 ms, TPOT p99 45 ms ✓``,
        with ``(2 of 3 repeats pass)`` when the probe has repeats (``passing``: how many do)."""
        parts = []
        for s in self.slos:
            v = pr.values.get(s.key)
            parts.append(f"{METRIC_LABELS[s.metric]} p{s.percentile:g} " + ("∞" if v is None else f"{v:,.0f} ms"))
        rate = self.cfg.search_var == "rate"
        achieved = f" (achieved {pr.achieved:.2f})" if rate and pr.achieved is not None else ""
        mark = "✓" if pr.passed else ("✗ saturated" if pr.saturated else "✗")
        reps = f" ({passing} of {self.repeats} repeats pass)" if self.repeats > 1 else ""
        pooled = f", pooled over {self.repeats} repeats" if self.repeats > 1 else ""
        self.console.print(f"  {name} probe {index}: {load_text(pr.load, self.cfg.search_var)} {self.unit}{achieved} "
                           f"→ {', '.join(parts) or 'no SLO'}{pooled} {mark}{reps}", markup=False, highlight=False)
