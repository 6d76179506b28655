"""The one small interface every engine implements.

Every engine is measured over the same streaming HTTP client. Engines without a streaming
server of their own (transformers static ``generate``, ONNX Runtime GenAI, DeepSpeed
``init_inference``) are wrapped in a small OpenAI-compatible shim server that runs in the
engine's own virtual environment and streams each token as soon as the engine emits it, so
their numbers sit on the same client clock as everyone else's. (DESIGN.md allowed an
in-process path; it cannot work when the engine lives in a different venv than the harness,
so the shim-server form is used for all of them.)
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable


@dataclass(frozen=True)
class Capabilities:
    """What an engine declares about itself (used by the scorer's hard constraints).

    ``hardware``: subset of :data:`results.hardware.HARDWARE_KINDS`; ``features``: subset of
    :data:`results.features.FEATURES` (the vocabulary the scorer reads back from the summary);
    ``quantization``: formats it can serve (e.g. ``"fp8"``, ``"awq"``); ``api``: ``"server"``
    (native OpenAI server) or ``"shim"`` (our streaming wrapper around an in-process API);
    ``complexity``: operational complexity 1 (pip install, one process) .. 5 (containers,
    model compilation), used as a soft-score criterion.
    """

    hardware: tuple[str, ...]
    features: tuple[str, ...] = ()
    quantization: tuple[str, ...] = ()
    api: str = "server"
    complexity: int = 2


@dataclass(frozen=True)
class Knob:
    """One setting of an engine's search space (``bench run --tune``): ``key`` is its engine arg
    (``--engine-arg ENGINE:key=value``, turned into the engine's flag by its adapter), ``values``
    the ones tried (as on the command line; the engine's default is tried anyway, as "defaults"),
    ``what`` one line on what it moves. ``precision``: the values lower the precision of the
    weights or the KV cache below the baseline's (a bf16 dtype, an fp8 KV cache, q8_0 weights):
    the search tries them only when the user allows it (``--tune-lower-precision``), and a
    configuration holding one must pass the output-fidelity gate, at the floor for other numerics
    (``--fidelity-floor``), before it is measured (:mod:`harness.app.run.tune`). ``lowered``: other
    values of a precision knob that lower precision too (aliases, variants: ``float16``,
    ``fp8_e4m3``), not tried, but known as lower precision when the user sets them by hand."""

    key: str
    values: tuple[str, ...]
    what: str = ""
    precision: bool = False
    lowered: tuple[str, ...] = ()


def search_space_of(adapter: Any, hardware_kind: str, lower_precision: bool = False) -> tuple[Knob, ...]:
    """The knobs ``adapter`` declares for ``hardware_kind`` (``adapter.search_space``: a dict of
    hardware kind → knobs; ``"gpu"`` stands for every GPU kind); () when it declares none. The
    knobs that lower precision (``Knob.precision``) only with ``lower_precision``."""
    spaces = getattr(adapter, "search_space", None) or {}
    gpu = hardware_kind in ("nvidia", "amd")
    knobs = spaces.get(hardware_kind) or (spaces.get("gpu") if gpu else None) or ()
    return tuple(k for k in knobs if lower_precision or not k.precision)


def lowered_precision(adapter: Any, engine_args: dict[str, str]) -> str:
    """The engine args among ``engine_args`` that lower precision below the baseline's: each a
    value a precision knob of ``adapter``'s search space declares (tried or ``lowered``; any hardware), as
    ``"key=value, ..."``; "" when none does (a baseline value such as ``dtype=float32`` is not one).
    What the harness knows of a configuration's numerics without asking the engine."""
    spaces = getattr(adapter, "search_space", None) or {}
    lowered = {(k.key, v) for knobs in spaces.values() for k in knobs if k.precision for v in (*k.values, *k.lowered)}
    return ", ".join(f"{k}={v}" for k, v in engine_args.items() if (k, str(v)) in lowered)


PROBE_CAUSES = ("hardware", "not_installed", "unavailable")

# engine-arg keys that multiply the devices one deployment uses (vLLM, SGLang, TensorRT-LLM spellings)
PARALLEL_KEYS = (("tensor_parallel_size", "tensor-parallel-size", "tp", "tp_size", "tp-size"),
                 ("pipeline_parallel_size", "pipeline-parallel-size", "pp", "pp_size", "pp-size"),
                 ("data_parallel_size", "data-parallel-size", "dp", "dp_size", "dp-size"))


def devices_of(engine_args: dict[str, str]) -> int:
    """The devices one deployment of an engine launched with ``engine_args`` uses: tensor ×
    pipeline × data parallel sizes (1 each when not set). Raises ValueError (one line) for a size
    that is not a whole number ≥ 1."""
    total = 1
    for keys in PARALLEL_KEYS:
        key = next((k for k in keys if k in engine_args), None)
        if key is None:
            continue
        try:
            size = int(str(engine_args[key]).strip())
        except ValueError:
            size = 0
        if size < 1:
            raise ValueError(f"engine arg {key}={engine_args[key]!r} must be a whole number of devices >= 1")
        total *= size
    return total


@dataclass(frozen=True)
class ProbeResult:
    """Whether an engine can run here. ``reason`` is one human line with the fix; ``cause``
    (one of :data:`PROBE_CAUSES`) says why not as data: ``"hardware"`` (needs a device this
    machine lacks), ``"not_installed"``, or ``"unavailable"`` (anything else)."""

    available: bool
    reason: str
    version: str | None = None
    cause: str = "unavailable"


@dataclass
class LaunchConfig:
    """Everything an adapter needs to start its engine for one run.

    ``model_dir``: a Hugging Face folder (config.json, safetensors, tokenizer);
    ``run_dir``: the run folder (server logs go to ``run_dir/logs/<engine>.log``);
    ``threads``: intra-op CPU threads the engine may use; ``engine_args``: pass-through
    options from ``--engine-arg NAME:key=value``; ``startup_timeout_s``: health wait limit;
    ``probe``: the probe already taken for this launch (the run's engine plan), so
    ``launch`` does not probe again; None = ``launch`` probes first.
    """

    model_dir: Path
    run_dir: Path
    threads: int = 1
    engine_args: dict[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 300.0
    base_url: str | None = None  # for the generic ``openai`` adapter
    model_name: str | None = None  # served model name override
    cancel: threading.Event | None = None  # set = abandon a start-up in progress (parallel start)
    probe: ProbeResult | None = None
    log_name: str | None = None  # the server log's name (default: the engine's); a tuning configuration's own
    devices: int | None = None  # devices one deployment uses, as told (--devices NAME=N); None: from engine_args
    port: int | None = None  # serve on this port (bench serve); None: a free one the harness picks
    host: str | None = None  # bind this interface (bench serve); None: 127.0.0.1, loopback only

    @property
    def deployment_devices(self) -> int:
        """The devices one deployment uses: ``devices`` when told, else :func:`devices_of` the engine args."""
        return self.devices if self.devices else devices_of(self.engine_args)


@dataclass
class Endpoint:
    """What the runner sends requests to.

    ``base_url`` ends without ``/v1``; ``effective_config`` is recorded in the manifest
    (the exact command line, env vars that matter, engine options); ``extra_fields`` are
    request-body fields this engine accepts beyond the standard ones (e.g. ``ignore_eos``);
    ``display_name`` is how reports name the engine (e.g. "sglang (CPU, torch_native,
    compatibility shim)").
    """

    base_url: str
    model_name: str
    display_name: str
    effective_config: dict[str, Any] = field(default_factory=dict)
    api_key: str | None = None
    supports_ignore_eos: bool = True
    metrics_url: str | None = None  # Prometheus /metrics, scraped after the run when set
    log_path: Path | None = None
    # Freeze / thaw the server's processes (SIGSTOP / SIGCONT; resume waits for health).
    # None for engines the harness did not start (an external endpoint is never paused).
    pause: Callable[[], None] | None = None
    resume: Callable[[], None] | None = None
    # The server's process group (``os.getpgid`` of the server; every worker it forks shares it),
    # sampled for memory/CPU during the measured phase (adapters.runtime.resources). None for an
    # endpoint the harness did not start.
    pgid: int | None = None
    # The name of the engine whose parser reads this server's /metrics into the time series (its
    # ``read_series``, EngineTraits; None: no series, e.g. an external endpoint or an engine without
    # Prometheus metrics).
    series_parser: str | None = None


class EngineError(RuntimeError):
    """An engine failed to install, start or stay up. ``log_tail`` holds its last log lines."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


class EngineTraits:
    """What an engine declares about itself on its adapter class, read off the class (by
    :mod:`adapters.registry` and the modules that ask it) without starting or probing anything.
    The defaults declare nothing; an adapter class overrides what applies to its engine.

    Install (``bench engines setup``): ``recipe``, the CPU install recipe
    (:class:`adapters.runtime.recipes.EngineRecipe`); ``cuda_recipe``, the CUDA one
    (:class:`adapters.runtime.gpu_recipes.CudaRecipe`); ``build_marks``, (the engine's distribution,
    the distribution only its CUDA build has) telling the builds of an installed venv apart;
    ``venv_dists``, the distributions a probe names in its venv (default: ``build_marks``);
    ``setup_by``, the engine whose setup installs this one too (same build, other weights);
    ``setup_rank`` / ``gpu_setup_rank``, the order setup lists and installs the CPU / CUDA recipes;
    ``in_setup_cpu``, installed by ``setup all-cpu``; ``auto_setup_cpu``, installed by ``bench run``
    when missing on a CPU (``make bench``); ``after_setup(recipe, *, console, force) -> version``,
    what setup does after the packages (a build, a stand-in module) and the version it records
    (None: the version of ``recipe.version_dist``); ``setup_note``, why ``--setup-engines`` (``make
    bench``) leaves a CPU recipe out (said in that option's help); ``harness_dist``, the
    distribution an engine with no recipe runs from in the harness's own environment (a deployment
    recipe's ``pip install`` line). ``in_all``: measured by ``--engine all``. ``reference``: the
    yardstick engine, measured and ranked like every engine but never recommended.

    Telemetry: ``counters``, the mapper of a parsed ``/metrics`` page (name → value) to the common
    counters (:data:`adapters.telemetry.prom.COMMON_KEYS`); ``gauge_only_hit_rate``, the
    (hits, queries) counters without which its hit rate comes from a gauge; ``series_parser``, the
    name (an engine's) of the parser of its ``/metrics`` into the time series and ``read_series``
    that parser (:func:`adapters.telemetry.prom.series_reader`); ``effective_reader``, the reader
    of the settings it actually runs with, ``(Endpoint, settings, timeout_s) -> None``
    (:mod:`adapters.telemetry.effective`; None: from its command line only).

    ``notes()``: one more sentence for its ``bench engines`` row (a related engine it cannot run).
    """

    recipe: Any = None
    cuda_recipe: Any = None
    build_marks: tuple[str, str] | None = None
    venv_dists: tuple[str, ...] = ()
    setup_by: str | None = None
    setup_rank: int = 0
    gpu_setup_rank: int = 0
    in_setup_cpu: bool = False
    auto_setup_cpu: bool = False
    after_setup: Callable[..., str | None] | None = None
    in_all: bool = True
    setup_note: str = ""
    harness_dist: str | None = None
    reference: bool = False
    counters: Callable[[dict[str, float]], dict[str, float | None]] | None = None
    gauge_only_hit_rate: tuple[str, str] | None = None
    series_parser: str | None = None
    read_series: Callable[[dict[str, float]], dict[str, float | None]] | None = None
    effective_reader: Callable[..., None] | None = None

    def notes(self) -> str:
        """One more sentence for this engine's ``bench engines`` row; "" when there is none."""
        return ""


@runtime_checkable
class EngineAdapter(Protocol):
    """One engine behind one interface.

    ``launch`` is a context manager: it starts the engine (child process in its own process
    group), waits for health, yields an :class:`Endpoint`, and on exit - success, error,
    timeout or KeyboardInterrupt - stops the process group and frees the port.
    Raises :class:`EngineError` when the engine cannot start.
    """

    name: str
    capabilities: Capabilities

    def probe(self) -> ProbeResult: ...

    def launch(self, config: LaunchConfig) -> AbstractContextManager[Endpoint]: ...
