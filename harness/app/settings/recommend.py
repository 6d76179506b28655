"""What the commands that read stored runs are asked for: ``bench recommend``
(:class:`RecommendSettings`), ``bench report`` (:class:`ReportSettings`), ``bench compare``
(:class:`CompareSettings`) and ``bench results history`` (:class:`HistorySettings`), generated
into their commands like ``bench run``'s
(:func:`harness.app.cli.options.command_from`). The options they share with ``bench run``
(``--slo``, ``--hardware``, ``--preset``, ``--max-failure-rate``, ``--price-per-hour``,
``--output-dir``) are its declarations (:mod:`harness.app.settings.shared`): same flags, same
parsing, same checks; only a help text narrows to what the option means here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Callable, ClassVar, Optional

from harness.app.settings.fields import Cli, CliModel
from harness.app.settings.shared import (HARDWARE, PRICE_PER_HOUR, RUNS_DIR, SLOS, Hardware, MaxFailureRate,
                                         OutputDir, Preset, PricePerHour, Slos)
from harness.metrics import SLO, parse_slos


def _thresholds(flag: str) -> Callable[[Optional[str]], Optional[list[float]]]:
    """The parser of ``flag`` (``--map-tpot 25,50,100``): thresholds in ms, each > 0, sorted (None:
    not given). It raises ValueError (one line, naming ``flag``)."""
    def parse(text: Optional[str]) -> Optional[list[float]]:
        if text is None:
            return None
        try:
            values = [float(v) for v in text.split(",") if v.strip()]
        except ValueError:
            values = []
        if not values or any(not (0 < v < float("inf")) for v in values):
            raise ValueError(f"{flag} is the winner map's thresholds in ms > 0, comma-separated (e.g. 25,50,100,200), "
                             f"got {text!r}")
        return sorted(set(values))
    return parse


def _percentile(text: Optional[str]) -> Optional[float]:
    """``--map-percentile 99``: one of the percentiles an SLO may judge at (None: not given). Raises ValueError (one line)."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    from results.schema.metric_registry import LATENCY_PERCENTILES

    if value not in LATENCY_PERCENTILES:  # the percentiles an SLO may judge at: the map's cells are SLOs
        raise ValueError(f"--map-percentile is one of the percentiles an SLO judges, "
                         f"{', '.join(f'{p:g}' for p in LATENCY_PERCENTILES)}; got {text!r}")
    return value


def _slos_or_run(text: Optional[str]) -> Optional[list[SLO]]:
    """``bench recommend --slo``: None (left out) = the run's SLOs; else parsed."""
    return None if text is None else parse_slos(text)


class ReportSettings(CliModel):
    """``bench report RUN...``: the runs (folders, ids under ``output_dir``, 'latest'; several =
    a comparison report)."""

    run: Annotated[list[str], Cli("run", argument=True, help="Run folder(s) or id(s); several = a comparison report.")]
    output_dir: Annotated[OutputDir, RUNS_DIR] = Path("results")


class RecommendSettings(CliModel):
    """``bench recommend RUN...``: the runs and the question. ``slos`` None = the run's;
    ``gpus`` None = the profile's device count (>= 1); ``weights``/``feature`` as typed (parsed and
    checked by the scorer, :func:`harness.scoring.parse_weights`)."""

    cli_panels: ClassVar[dict[str, tuple[str, ...]]] = {
        "Target": ("--hardware", "--gpus", "--price-per-hour"),
        "Question": ("--slo", "--preset", "--weights", "--feature", "--max-failure-rate"),
        "Winner map": ("--map-tpot", "--map-ttft", "--map-percentile"),
        "Output": ("--output-dir", "--json"),
    }

    run: Annotated[list[str], Cli("run", argument=True, help="Run folder(s), run id(s) under --output-dir, or 'latest'.")]
    hardware: Annotated[Hardware, HARDWARE.replace(help="Target: 'detected' (this machine), 'recorded' (the run's), or H100-80GB, H200-141GB, A100-80GB, L4-24GB, MI300X, CPU.")] = "detected"
    gpus: Annotated[Optional[int], Cli("--gpus", help="Number of devices of the target (default: the profile's).")] = None
    slos: Annotated[Optional[Slos], SLOS.replace(parse=_slos_or_run, help="SLOs in ms, e.g. ttft_p99=500,tpot_p99=50 (default: the run's).")] = None
    preset: Preset = "balanced"
    weights: Annotated[Optional[str], Cli("--weights", help="Override preset weights, e.g. throughput=2,latency=1 (throughput, latency, hardware_fit, features, complexity, cost).")] = None
    feature: Annotated[Optional[list[str]], Cli("--feature", help="A feature every engine must have (repeatable), e.g. prefix_caching or fp8.")] = None
    output_dir: Annotated[OutputDir, RUNS_DIR] = Path("results")
    json_out: Annotated[bool, Cli("--json", help="Print the recommendation as JSON.")] = False
    max_failure_rate: MaxFailureRate = 0.05
    price_per_hour: Annotated[PricePerHour, PRICE_PER_HOUR.replace(help="USD per device-hour of the target, for the cost criterion and $/1M output tokens (default: the profile's on-demand list price).")] = None
    map_tpot: Annotated[Optional[list[float]], Cli("--map-tpot", type=str, parse=_thresholds("--map-tpot"), help="The winner map's TPOT thresholds in ms, e.g. 25,50,100,200 (default: 0.35x to 2.8x the SLO's; the SLO's own is added).")] = None
    map_ttft: Annotated[Optional[list[float]], Cli("--map-ttft", type=str, parse=_thresholds("--map-ttft"), help="The winner map's TTFT thresholds in ms, e.g. 1000,2000,4000 (default: around the SLO's, as --map-tpot).")] = None
    map_percentile: Annotated[Optional[float], Cli("--map-percentile", type=str, parse=_percentile, help="The winner map's percentile on both axes, e.g. 99 (default: the SLOs'); at another percentile than the SLOs' the map replaces them and names no boundary.")] = None


_DECIDED_AT = "SLOs in ms {} decided at, e.g. ttft_p90=4000,tpot_p90=200 (default: {})."


class CompareSettings(CliModel):
    """``bench compare RUN_A RUN_B``: ``engines`` comma-separated (None = every engine either run
    climbed a ladder for); ``slos`` None or empty = run A's; ``fail_below`` a ratio B/A > 0 (None = no gate);
    ``margin`` the equivalence margin, a fraction in (0, 1)."""

    run_a: Annotated[str, Cli("run_a", argument=True, help="The run before (a folder, a run id under --output-dir, or 'latest').")]
    run_b: Annotated[str, Cli("run_b", argument=True, help="The run after (a folder, a run id under --output-dir, or 'latest').")]
    engine: Annotated[Optional[str], Cli("--engine", help="Engines to compare, comma-separated (default: every engine either run climbed a ladder for; one measured in one run only is listed as failed there or not compared).")] = None
    slos: Annotated[Optional[Slos], SLOS.replace(parse=_slos_or_run, help=_DECIDED_AT.format("both runs are", "run A's"))] = None
    fail_below: Annotated[Optional[float], Cli("--fail-below", help="Exit 1 when an engine's capacity ratio B/A lies below this beyond the noise (its 95 % interval wholly under it), e.g. 0.95 for a CI gate.")] = None
    margin: Annotated[float, Cli("--margin", help="The change that counts (0.05 = 5 %): moved when the 95 % interval of B/A lies wholly beyond it, equivalent when the 90 % interval lies inside it (within the noise: neither, and the 95 % interval holds 1). Set it to what matters to you and to what the runs can show: two runs whose capacities each spread ±10 % between runs cannot show ±5 %.")] = 0.05
    output_dir: Annotated[OutputDir, RUNS_DIR] = Path("results")
    json_out: Annotated[bool, Cli("--json", help="Print the comparison as JSON.")] = False


class HistorySettings(CliModel):
    """``bench results history ENGINE``: ``workload`` None = the newest run's that holds the
    engine; ``slos`` None or empty = the newest run's."""

    engine: Annotated[str, Cli("engine", argument=True, help="The engine whose capacity to list (as --engine names it).")]
    workload: Annotated[Optional[str], Cli("--workload", help="Only runs of this workload (default: the newest run's that holds the engine).")] = None
    slos: Annotated[Optional[Slos], SLOS.replace(parse=_slos_or_run, help=_DECIDED_AT.format("every run is", "the newest run's"))] = None
    output_dir: Annotated[OutputDir, RUNS_DIR.replace(help="Where the runs are stored.")] = Path("results")
