"""Versioned result schema: the typed artefacts of a run folder.

One :class:`RequestRecord` per request (``requests.jsonl``), the :class:`RunSummary`
(``summary.json``: one :class:`EngineResult` per engine, each with its :class:`Metrics`) and the
:class:`Manifest` (``manifest.json``). The recommendation's models live in
``results.recommendation``. Stages hand these models to each other; nobody digs through dicts.

One module per artefact family, every name re-exported here (``from results.schema import X``):

- ``base``: :class:`Artefact` (the base of every stored model), :data:`SCHEMA_VERSION`
- ``records``: :class:`RequestRecord`, :data:`INCOMPLETE`, :data:`WINDOW_PHASES`
- ``metrics``: :class:`Metrics` and its parts (:class:`Distribution`, :class:`Goodput`, ...),
  :class:`Interval`; :func:`metric_value` / :func:`metric_number` read a metric by its dotted path
- ``parity``: :class:`EffectiveSettings`, :class:`ParityAudit` and its rows and flags
- ``engine``: :class:`EngineResult`, :class:`EngineStatus`, :class:`SkipCause`,
  :class:`FeatureProbe`, :class:`ResourceUse`, :class:`Cost`
- ``summary``: :class:`RunSummary`, :class:`Equivalence`
- ``manifest``: :class:`Manifest`, :class:`ModelSummary`, :class:`Validity`,
  :class:`ClientWorkers`, :class:`ImportProvenance`, :class:`MeasuredCondition`
- ``facts``: the manifest's recorded sections, each a :class:`Facts` (written with the keys it
  was given): :class:`HardwareFacts`, :class:`CalibrationFacts`, :class:`WorkloadStats` (with
  :class:`Spread`), :class:`EngineFacts` (with :class:`RayTrial`), :class:`SearchFacts`
- ``search``: :class:`SearchSummary` (``search.json``), :class:`LoadProbe`, :class:`SearchProbe`,
  :class:`EngineSearch`, :class:`CapacityRecommendation`
- ``ladder``: :class:`LadderSummary` (``ladder.json``: each engine's load ladder and capacity
  at the SLO, and the :class:`Decision`)
- ``recipe``: :class:`Recipe` (``recipe.json``: the winner's configuration as the command line
  that starts it; ``bench run --engine-config FILE`` runs it again)
- ``fidelity``: :class:`FidelityCheck` (``fidelity.json``: each engine's outputs against the
  ground-truth reference, :class:`FidelityReference`), :class:`FidelityResult`; the user's task
  accuracy set (:class:`AccuracyItem`) and :class:`AccuracyCheck` (``accuracy.json``)
- ``timeline``: :class:`Timeline`
- ``energy``: :class:`EnergySource` (the manifest's: NVML, RAPL or none with its reason),
  :class:`PhaseEnergy` (one measured phase's), :class:`EnergyFigures` (a load point's J per
  output token with its interval, measured or provisioned)
- ``replay``: :class:`ReplayCertificate` (``replay.json``: an agentic run's replay-fidelity
  certificate, sent against the trace per statistic)
- ``jobs``: :class:`JobFigures` (an agentic ladder point's jobs: per hour per device and per
  user, job latency, per-turn interactivity with tool time excluded), :class:`CacheFigures` (its
  prefix cache: measured hit rate against the theoretical, throughput with and without reused tokens)

All timestamps are integers from ``time.perf_counter_ns()`` in the process that measured
them (nanoseconds, monotonic, arbitrary epoch): only differences are meaningful. The
metric module (``harness.metrics``) is the single place that turns records into
milliseconds and rates; nothing here computes a metric.

Bump :data:`SCHEMA_VERSION` whenever a field changes meaning or is removed; adding an
optional field keeps the version (old runs still load, the field reads as its default).
"""

from .base import READABLE_MAJOR_VERSIONS, SCHEMA_VERSION, Artefact
from .energy import EnergyFigures, EnergySource, PhaseEnergy
from .engine import (
    FEATURE_PROBES,
    Cost,
    EngineResult,
    EngineStatus,
    FeatureProbe,
    FeatureStatus,
    ResourceUse,
    SkipCause,
)
from .facts import CalibrationFacts, EngineFacts, Facts, HardwareFacts, RayTrial, SearchFacts, Spread, WorkloadStats
from .manifest import ClientWorker, ClientWorkers, ImportProvenance, Manifest, MeasuredCondition, ModelSummary, Validity
from .metrics import (
    MAX_SAMPLES,
    Distribution,
    ErrorAdjusted,
    Goodput,
    Interval,
    Metrics,
    OutputShortfall,
    RunWindow,
    Samples,
    SessionMetrics,
    TokenDrift,
    TurnMetrics,
    metric_number,
    metric_value,
)
from .fidelity import (
    ACCURACY_FILE,
    AccuracyCheck,
    AccuracyItem,
    AccuracyResult,
    COVERAGE_FLOOR,
    DEFAULT_OTHER_FLOOR,
    FIDELITY_FILE,
    NEAR_TIE_EPSILON,
    STRICT_FLOOR,
    AnswerSegment,
    EngineAnswer,
    EngineAnswers,
    FidelityCheck,
    FidelityReference,
    FidelityResult,
    ReferencePrompt,
)
from .jobs import CacheFigures, JobFigures
from .ladder import LADDER_FILE, CapacityAtSLO, Decision, EngineLadder, EngineTuning, LadderPoint, LadderSummary, SpreadPrior, TunedConfig
from .recipe import RECIPE_FILE, Recipe
from .replay import REPLAY_FILE, REPLAY_TOLERANCE, CertificateRow, EngineReplay, ReplayCertificate
from .parity import EFFECTIVE_FIELDS, FLAG_SOURCE, EffectiveSettings, ParityAudit, ParityFlag, ParityRow, ParityStrict
from .records import INCOMPLETE, WINDOW_PHASES, RequestRecord
from .search import (
    SEARCH_FILE,
    CapacityRank,
    CapacityRecommendation,
    EngineSearch,
    LoadProbe,
    SearchProbe,
    SearchSummary,
)
from .summary import Equivalence, EquivalenceResult, RunSummary
from .timeline import Timeline
from .winner_map import WINNER_MAP_FILE, MapCell, WinnerMap

__all__ = [
    "Artefact", "SCHEMA_VERSION", "READABLE_MAJOR_VERSIONS",
    "RequestRecord", "INCOMPLETE", "WINDOW_PHASES",
    "Distribution", "ErrorAdjusted", "TokenDrift", "SessionMetrics", "TurnMetrics", "Goodput", "Samples",
    "MAX_SAMPLES", "OutputShortfall", "RunWindow", "Metrics", "Interval", "metric_value", "metric_number",
    "EFFECTIVE_FIELDS", "FLAG_SOURCE", "EffectiveSettings", "ParityFlag", "ParityRow", "ParityStrict", "ParityAudit",
    "EngineStatus", "SkipCause", "FEATURE_PROBES", "FeatureStatus", "FeatureProbe", "ResourceUse", "Cost",
    "EngineResult",
    "EquivalenceResult", "Equivalence", "RunSummary",
    "ModelSummary", "Validity", "ImportProvenance", "ClientWorker", "ClientWorkers", "Manifest", "MeasuredCondition",
    "Facts", "HardwareFacts", "CalibrationFacts", "Spread", "WorkloadStats", "RayTrial", "EngineFacts", "SearchFacts",
    "SEARCH_FILE", "LoadProbe", "SearchProbe", "EngineSearch", "CapacityRank", "CapacityRecommendation",
    "SearchSummary",
    "LADDER_FILE", "LadderPoint", "CapacityAtSLO", "EngineLadder", "Decision", "LadderSummary", "SpreadPrior", "TunedConfig",
    "EngineTuning", "RECIPE_FILE", "Recipe", "JobFigures", "CacheFigures",
    "Timeline", "WINNER_MAP_FILE", "MapCell", "WinnerMap", "EnergySource", "PhaseEnergy", "EnergyFigures",
    "REPLAY_FILE", "REPLAY_TOLERANCE", "CertificateRow", "EngineReplay", "ReplayCertificate",
    "FIDELITY_FILE", "COVERAGE_FLOOR", "NEAR_TIE_EPSILON", "STRICT_FLOOR", "DEFAULT_OTHER_FLOOR", "ReferencePrompt", "FidelityReference",
    "AnswerSegment", "EngineAnswer", "EngineAnswers", "FidelityResult", "FidelityCheck",
    "ACCURACY_FILE", "AccuracyItem", "AccuracyResult", "AccuracyCheck",
]
