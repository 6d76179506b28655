"""What ``bench search`` was asked for, and the defaults it fills in (SLOs, probe sizes)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from workloads.options import WorkloadOptions

from harness.app.core.settings import RunConfig
from harness.metrics import SLO

SEARCH_VARS = ("rate", "concurrency")
# Default SLOs by hardware kind. CPU (the 2-core reference machine, SmolLM2-135M): p99 TTFT
# 2 s, about the wait a chat user tolerates before the first word, and p99 TPOT 200 ms = 5
# tokens/s, about reading speed. GPU: the tighter pair production serving is judged by.
DEFAULT_SLOS = {"cpu": "ttft_p99=2000,tpot_p99=200", "gpu": "ttft_p99=500,tpot_p99=50"}
DEFAULT_PROBE_REQUESTS = 24  # requests per probe of a single-turn workload without --num-requests


@dataclass
class SearchConfig:
    """What ``bench search`` was asked for (validated by the CLI). ``slos`` empty = the
    defaults for the detected hardware (:data:`DEFAULT_SLOS`); ``low``/``high`` in the search
    variable's unit (``high`` None = unbounded for a rate, the probe's request count for a
    concurrency); ``budget_s``: seconds for the whole search, split evenly over the engines;
    ``repeats``: measurements per probe, back to back (1 .. :data:`harness.app.search.probe.MAX_REPEATS`)."""

    engines: list[str]
    workload: WorkloadOptions
    slos: list[SLO] = field(default_factory=list)
    search_var: str = "rate"
    low: float = 1.0
    high: float | None = None
    tolerance: float = 0.05
    budget_s: float = 600.0
    max_probes: int = 12
    repeats: int = 1
    run: RunConfig | None = None  # the bench run settings the search shares (model, threads, timeouts …)

    def __post_init__(self) -> None:
        if self.run is None:
            self.run = RunConfig(engines=self.engines, workload=self.workload)

    def run_config(self, workload: WorkloadOptions, slos: list[SLO]) -> RunConfig:
        """The run settings of a search whose first probe offers ``workload``, judged by ``slos`` (no
        equivalence check, calibration or run report: the search has its own)."""
        assert self.run is not None
        return replace(self.run, engines=self.engines, workload=workload, slos=slos,
                       check_equivalence=False, calibrate=False, report=False)




def search_unit(search_var: str, workload: str) -> str:
    """The load's unit: ``concurrent requests``, ``sessions/s`` (agentic rate) or ``req/s``."""
    if search_var == "concurrency":
        return "concurrent requests"
    return "sessions/s" if workload == "agentic" else "req/s"


def default_slos(hardware_kind: str) -> list[SLO]:
    """The default SLO pair for ``hardware_kind`` (``cpu``; anything else counts as a GPU)."""
    from harness.metrics import parse_slos

    return parse_slos(DEFAULT_SLOS["cpu" if hardware_kind == "cpu" else "gpu"])
