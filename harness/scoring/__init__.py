"""The scorer/recommender: measured runs + a deployment target → a ranking that names its
deciding constraint.

Pipeline (issue 6), per engine found in the runs' ``summary.json``:

1. **Not measured**: engines whose status is ``skipped``/``failed`` in every run (or that have no
   successful request) are listed with their reason and never get a number.
2. **Validity** (:mod:`.checks.validity`): a condition is left out of the decision when a repeat of it
   missed its offered arrival rate beyond ±5 % (``Metrics.rate_valid`` False) or ran the client
   near its own limit per the run's ``client_calibration`` (client request rate above half the
   calibrated ``max_rate_rps``, or the calibrated ITL timing error p99 above 10 % of the
   condition's ITL p50); an engine with no valid condition is eliminated at the ``validity``
   stage with the reason, one with some is judged on those only and a note lists the others.
   Without a calibration the client limit is not checked, and a note says so.
3. **Hard constraints**, first failure wins, each with a one-line reason:
   hardware (the engine's *declared* ``capabilities.hardware`` must include the target's kind; an FP8
   requirement needs ``HardwareProfile.supports_fp8``, i.e. compute capability ≥ 8.9),
   required features (a verified feature probe where the engine was probed, else the declared
   ``features``/``quantization``; :mod:`.checks.features`), memory fit (weights + KV cache for
   the workload's concurrency × context must fit, see :class:`MemoryFit`), and the SLOs
   (``harness.metrics.slo_percentile_value`` at the offered load; repeats are combined by their
   median).
4. **Soft score** over the survivors: every criterion is normalized to [0, 1] relative to the
   best survivor with its direction explicit — higher-better ``x / max(x)`` (throughput, goodput),
   lower-better ``min(x) / x`` (latencies; complexity from the recorded time to healthy and
   process count, :mod:`.measured.operational`); ``hardware_fit`` is the memory headroom
   ``1 − required / usable``; ``features`` counts the verified feature probes (:mod:`.checks.features`;
   weight 0 in every preset). No criterion
   rests on what an adapter declares about itself. Score = Σ wᵢ·sᵢ / Σ wᵢ (weights shown in the
   result). The reference engine (``own``) is ranked as a yardstick but never recommended: the
   winner is the best non-reference engine, and a note says where the reference stands.
5. **Deciding constraint** (one sentence) and **sensitivity**: the smallest change of one weight
   (closed form: the score difference is linear in each weight) or of one SLO threshold (re-run
   of steps 3-4 at each measured value) that changes the winner; and, when repeats exist,
   whether their spread could flip the ranking (winner at its worst repeat vs each rival at its
   best).

Tie-break (stated in every result): equal scores (|Δ| < 1e-9) are ordered by higher output
throughput, then lower p99 TTFT, then engine name.

Repeats: runs with the same workload and offered rate are repeats of one *condition*, and so
is each repeat of a ``bench run --repeats N`` folder (``EngineResult.repeats``, records by
``RequestRecord.repeat``); several offered rates form a load sweep. **Ties** (:mod:`.weighted.ties`):
each survivor's score gets a 95 % interval over repeats (repeat k of every engine scored
together, then the bootstrap median of the per-repeat scores); overlapping intervals are ties,
and the deciding line says whether noise could flip the winner — or, with one repeat, that
noise was not measured and no tie check was possible. Each engine is scored at its highest-load condition
that meets every SLO (without SLOs: its highest-load condition).

The subpackages, each importing one way (``tests/test_architecture.py``): this weighted lens is
:mod:`.measured` → :mod:`.checks` → :mod:`.weighted`; the main job's decision (capacity at the SLO,
``bench run``'s ladder and ``bench search``) is :mod:`.capacity` → :mod:`.verdict`. Both share
:mod:`.errors`, :mod:`.gates` (the one ordered gates list) and :mod:`.formatting`.

Modules, in pipeline order: :mod:`.measured.gather` (runs → the scorer's own measurements; the
only reader of ``summary.json``/``manifest.json``), :mod:`.weighted.weights` (criteria, presets,
``--weights``), :mod:`.checks.memory_fit`, :mod:`.measured.repeats` (combining repeats),
:mod:`.measured.operational` (complexity and features), :mod:`.checks.validity` (step 2),
:mod:`.checks.constraints` (steps 1 and 3), :mod:`.weighted.ranking` (step 4),
:mod:`.weighted.ties`, :mod:`.weighted.explanation` and :mod:`.weighted.sensitivity` (step 5),
:mod:`.weighted.recommender` (:func:`recommend`). The result models live in ``results.recommendation``.
"""

from __future__ import annotations

from results.model_geometry import DTYPE_BYTES
from results.recommendation import (
    DEFAULT_MEMORY_UTILIZATION,
    TIE_BREAK,
    MemoryFit,
    RankedEngine,
    Recommendation,
    WeightFlip,
)

from .checks.constraints import QUANTIZATION_FORMATS
from .checks.memory_fit import max_in_flight, memory_fit
from .errors import ScorerError
from .formatting import METRIC_LABELS, condition_label
from .gates import REFERENCE_ENGINES
from .weighted.recommender import recommend
from .weighted.weights import CRITERIA, PRESETS, parse_weights, resolve_weights

__all__ = [
    "CRITERIA",
    "DEFAULT_MEMORY_UTILIZATION",
    "DTYPE_BYTES",
    "METRIC_LABELS",
    "PRESETS",
    "QUANTIZATION_FORMATS",
    "REFERENCE_ENGINES",
    "TIE_BREAK",
    "MemoryFit",
    "RankedEngine",
    "Recommendation",
    "ScorerError",
    "WeightFlip",
    "condition_label",
    "max_in_flight",
    "memory_fit",
    "parse_weights",
    "recommend",
    "resolve_weights",
]
