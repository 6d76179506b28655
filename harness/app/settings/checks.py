"""The checks behind the settings' validation (:mod:`harness.app.settings.run`) that need
more than the value itself: the endpoint and its tokenizer, the workload's spec and trace,
the machine (cores, hardware profile) and the output folder.

Each raises ``ValueError`` with the one line the CLI prints (exit 2); none prints or exits,
so the settings model can call them inside pydantic validation.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from workloads.options import WorkloadOptions
    from workloads.spec import WorkloadSpec

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")


def redact_url(url: str) -> str:
    """``http://user:key@host`` → ``http://user:***@host`` (see results.redact.redact_credentials)."""
    from results.redact import redact_credentials

    return redact_credentials(url)


def parse_rate(text: Optional[str], option: str = "--request-rate") -> Optional[float]:
    """A request rate in requests/s: a positive number or ``inf``; None stays None (the
    workload's default)."""
    if text is None:
        return None
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"{option} must be a number of requests/s or 'inf', got {text!r}") from None
    if not v > 0 or math.isnan(v):
        raise ValueError(f"{option} must be > 0 (or 'inf'), got {text!r}")
    return v


def parse_duration(text: str | float, option: str = "--time-budget", zero: bool = False) -> float:
    """A duration in seconds from ``900``, ``900s``, ``15m``, ``1.5h`` or ``1h30m`` (the one
    vocabulary of every budget: ``bench run --time-budget``, ``--ladder-budget``, ``--tune`` and
    ``bench search --budget``); raises ValueError naming ``option`` for anything else or a value
    not above 0 (``zero``: 0 allowed, meaning none; ``inf``: no bound)."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        import re

        raw = text.strip().lower()
        sign = -1.0 if raw.startswith("-") else 1.0  # -1m is a duration, refused below as not above 0
        raw = raw.removeprefix("-")
        parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", raw)
        if raw == "inf":
            value = sign * math.inf
        elif not raw or parts is None or not any(parts.groups()):
            raise ValueError(f"{option} {text!r} is not a duration: give seconds (900) or with a unit (900s, 15m, 1h)")
        else:
            h, m, sec = (float(g) if g else 0.0 for g in parts.groups())
            value = sign * (3600 * h + 60 * m + sec)
    if not (value > 0 or (zero and value == 0)):
        raise ValueError(f"{option} must be {'0 or more' if zero else 'above 0 s'}, got {text!r}")
    return value


def duration_of(option: str, zero: bool = False, unbounded: str = "; --time-budget inf is what leaves the job unbounded"
                ) -> Callable[[str | float], float]:
    """The parser of ``option``'s finite duration (:func:`parse_duration`; ``inf`` refused in one
    line ending in ``unbounded``: within ``bench run`` only ``--time-budget`` may be unbounded), for a
    settings field."""
    def parse(text: str | float) -> float:
        value = parse_duration(text, option, zero=zero)
        if math.isinf(value):
            raise ValueError(f"{option} needs a finite duration (e.g. 3m){unbounded}")
        return value
    return parse


def spec_values(path: Path | None) -> dict[str, Any]:
    """A ``--workload-spec`` file's raw values ({} without one, or one that does not read: its
    error is the workload check's to say)."""
    if path is None:
        return {}
    from workloads.spec import WorkloadError, load_spec_file

    try:
        return load_spec_file(path)
    except WorkloadError:
        return {}


def check_positive(name: str, v: Optional[int | float]) -> None:
    """None, or a number > 0 that is not infinite (NaN fails too)."""
    if v is not None and (not v > 0 or math.isinf(v)):
        raise ValueError(f"{name} must be > 0, got {v}")


def check_price(value: float | None) -> None:
    """``--price-per-hour`` (``bench run`` and ``bench recommend``): None, or a finite number > 0
    of USD per device-hour."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ValueError(f"--price-per-hour is USD per device-hour, a number > 0 (e.g. 2.5), got {value:g}")


def check_base_url(url: Optional[str], option: str = "--base-url") -> Optional[str]:
    """An endpoint URL: ``http://`` or ``https://``, a host, a numeric port when one is given
    (a URL without a scheme used to pass and fail later as an engine). Returns it unchanged."""
    if url is None:
        return None
    text = url.strip()
    shown = redact_url(text)
    try:
        parts = urlsplit(text)
        parts.port  # raises ValueError for a non-numeric or out-of-range port
    except ValueError as exc:
        raise ValueError(f"{option} {shown!r} is not a URL ({exc}): give e.g. http://host:8000") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{option} {shown!r} needs a scheme: give http://{shown} or https://{shown}" if "://" not in text
                         else f"{option} {shown!r}: the scheme must be http or https, got {parts.scheme!r}")
    if not parts.hostname:
        raise ValueError(f"{option} {shown!r} has no host: give e.g. http://host:8000")
    return text


def check_endpoint(engines: list[str], base_url: Optional[str], tokenizer: Optional[str], endpoints: bool = False) -> None:
    """``--base-url`` and ``--tokenizer`` against the engines: ``--base-url`` without ``openai``
    or without a scheme/host, ``openai`` without ``--base-url``, ``--tokenizer`` without
    ``openai`` or ``--endpoint`` alone. (The tokenizer folder itself: :func:`check_tokenizer_dir`.)"""
    if not engines and not endpoints:
        raise ValueError("--engine is empty: name engines (e.g. own,transformers) or use 'all'")
    if "openai" not in engines:
        if base_url is not None:
            raise ValueError("--base-url is the endpoint of --engine openai: add --engine openai, or drop --base-url")
        if tokenizer is not None and endpoints and engines:
            raise ValueError("--tokenizer is for a run of endpoints alone: the local engines serve --model's folder and "
                             "the workload is built with its tokenizer; measure the endpoints in their own run")
        if tokenizer is not None and not endpoints:
            raise ValueError("--tokenizer names the endpoint's tokenizer for --engine openai; local engines tokenize "
                             "with --model DIR")
        return
    if not base_url:
        raise ValueError("--engine openai needs --base-url URL (and --model NAME, the served model name)")
    check_base_url(base_url)
    if tokenizer is not None and engines != ["openai"]:
        raise ValueError("--tokenizer is for an --engine openai run alone: the local engines serve --model's folder and "
                         "the workload is built with its tokenizer; measure the endpoint in its own run")


def check_tokenizer_dir(folder: str, option: str = "--tokenizer") -> Path:
    """A local Hugging Face model folder whose ``config.json`` and tokenizer (``tokenizer.json``,
    ``tokenizer.model`` or ``tokenizer_config.json``) load; weights are not needed. Returns the
    resolved path."""
    path = Path(folder).expanduser()
    if not path.exists():
        raise ValueError(f"{option} {folder}: no such folder: pass the local folder of the model the endpoint serves "
                         "(config.json and tokenizer files; e.g. `hf download ORG/MODEL --exclude '*.safetensors' "
                         "--local-dir DIR`)")
    if not path.is_dir():
        raise ValueError(f"{option} {folder} is a file: pass the model folder that holds it")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(f"{option} {folder} has no tokenizer ({', '.join(TOKENIZER_FILES)}): pass a Hugging Face "
                         "model folder")
    if not (path / "config.json").is_file():
        raise ValueError(f"{option} {folder} has no config.json: pass the model's Hugging Face folder (config.json and "
                         "tokenizer files; the weights are not needed)")
    try:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(path))
    except Exception as exc:  # transformers raises many types for a damaged folder
        raise ValueError(f"{option} {folder}: the tokenizer does not load ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:160]})") from None
    return path.resolve()


def check_workload(options: WorkloadOptions) -> WorkloadSpec:
    """Resolve a run's :class:`workloads.options.WorkloadOptions` into its spec the way the
    builder will (``workloads.registry.resolve_spec``: options that do not apply, spec files,
    upper bounds) and check the trace a trace workload names exists, so none of these is found
    only after engines started. Returns the spec; raises ``WorkloadError`` (one line)."""
    from workloads.errors import WorkloadError
    from workloads.registry import resolve_spec
    from workloads.trace import resolve_trace

    spec = resolve_spec(options)
    if getattr(spec, "kind", None) == "trace":
        _, path, _ = resolve_trace(spec.trace)
        if not path.is_file():
            raise WorkloadError(f"--trace {spec.trace}: no such file {path}: pass a trace name or an existing file")
    if getattr(spec, "kind", None) == "agentic" and spec.trace is not None:
        from workloads.trace_import import import_trace

        import_trace(spec.trace, spec.trace_format)  # a bad line fails here (file:line), before a run folder exists
    return spec


def check_machine(threads: Optional[int], hardware: str) -> None:
    """``--threads`` within this machine's cores; ``--hardware`` a known profile (or ``detected``)."""
    from adapters.telemetry.hardware import get_profile

    try:
        get_profile(hardware)
    except ValueError as exc:
        raise ValueError(f"--hardware: {exc}") from None
    cores = os.cpu_count() or 1
    if threads is not None and threads > cores:
        raise ValueError(f"--threads {threads} exceeds the {cores} CPU cores here: use at most {cores} "
                         "(default: cores - 1)")


def check_output(output_dir: Path, run_id: Optional[str]) -> None:
    """The output folder is a folder and writable (created if missing); an existing
    ``--run-id`` folder holds no measurement (:func:`results.store.blocked_run_id`; one a killed
    run left empty is removed by the command before it runs:
    :func:`harness.app.cli.common.reuse_run_folder`)."""
    from results.store import blocked_run_id

    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"--output-dir {output_dir} is a file: pass a directory")
    if run_id is not None and (output_dir / run_id).exists():
        why = blocked_run_id(output_dir / run_id)
        if why:
            raise ValueError(why)
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe = output_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ValueError(f"cannot write to --output-dir {output_dir} ({exc.strerror or exc}): pass a writable "
                         "directory") from None


def check_run_id(run_id: Optional[str]) -> Optional[str]:
    """A plain folder name (no ``/``, not empty, not ``.``/``..``)."""
    if run_id is not None and (not run_id.strip() or run_id in (".", "..") or "/" in run_id or "\\" in run_id):
        raise ValueError(f"--run-id {run_id!r} must be a plain folder name (no '/', not empty)")
    return run_id


def parse_devices(items: list[str]) -> dict[str, int]:
    """``--devices NAME=N`` items → {name: devices} (N a whole number ≥ 1, each name once);
    ValueError (one line) otherwise."""
    out: dict[str, int] = {}
    for item in items:
        name, sep, count = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"--devices {item!r} is not NAME=N, e.g. --devices prod=8")
        try:
            n = int(count.strip())
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"--devices {name}: {count.strip()!r} is not a whole number of devices >= 1, e.g. --devices {name}=8")
        if name in out:
            raise ValueError(f"--devices {name!r} is given twice: name each engine once")
        out[name] = n
    return out


def check_devices(devices: dict[str, int], endpoints: dict[str, str], engine_args: dict[str, dict[str, str]]) -> None:
    """``--devices`` names an engine or an ``--endpoint`` of the run, and every engine's parallel
    sizes in ``--engine-arg`` read as device counts; ValueError (one line) otherwise."""
    from adapters.base import devices_of
    from adapters.registry import ENGINE_NAMES

    for name in devices:
        if name not in endpoints and name not in ENGINE_NAMES:
            raise ValueError(f"--devices {name}: no engine or --endpoint of that name in this run")
    for name, args in engine_args.items():
        try:
            devices_of(args)
        except ValueError as exc:
            raise ValueError(f"--engine-arg {name}: {exc}") from None


def check_engine_args(engines: list[str], engine_args: dict[str, dict[str, str]], option: str = "--engine") -> None:
    """Every ``--engine-arg`` (and a recipe's engine args) is for an engine the run starts
    (``engines``: the names ``option`` gave, or ``["all"]``), and,
    for a server of this repository (the reference engine, the shims) or an installed engine whose
    help lists its flags, names one of them (:meth:`adapters.runtime.server.ServerAdapter.unknown_args`),
    so nothing starts to fail on it. Raises ValueError (one line)."""
    from adapters.registry import ENGINE_NAMES, NOT_IN_ALL, get_adapter

    started = [n for n in ENGINE_NAMES if n not in NOT_IN_ALL] if engines == ["all"] else list(engines)
    for name, args in engine_args.items():
        first = next(iter(args.items()), ("", ""))
        if name not in started:
            raise ValueError(f"--engine-arg {name}:{first[0]}={first[1]} is for {name}, which this run does not start "
                             f"({option} {','.join(engines) or 'none'}): add {name} to {option} or drop the argument")
        adapter = get_adapter(name)
        refused = getattr(adapter, "refused_args", lambda _: None)(args)
        if refused:
            raise ValueError(f"--engine-arg {refused}")
        unknown = getattr(adapter, "unknown_args", lambda _: [])(args)
        if unknown:
            raise ValueError(f"--engine-arg {name}:{unknown[0]} names no flag of {name}'s server: see "
                             f"{getattr(adapter, 'flags_hint', lambda: 'its --help')()} for its flags")
