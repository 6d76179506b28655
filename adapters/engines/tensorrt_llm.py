"""TensorRT-LLM: ``trtllm-serve MODEL --backend pytorch`` from an installation the user provides.

It cannot be installed here: every PyPI release is a stub that downloads the real wheel from
NVIDIA's own index at install time, and it needs CUDA, an NVIDIA GPU and Python 3.10/3.12. Users
run it from NVIDIA's container or their own environment and point the adapter at it, in this
order: engine arg ``tensorrt_llm:trtllm_serve=/path/to/trtllm-serve``; ``$BENCH_TRTLLM_SERVE``
(the command); engine arg ``tensorrt_llm:python=/path/to/python`` or ``$BENCH_TRTLLM_PYTHON`` (an
interpreter with ``tensorrt_llm``; its ``trtllm-serve`` sits next to it); ``$BENCH_TRTLLM_ENV`` (an
environment folder holding ``bin/trtllm-serve``); ``trtllm-serve`` on ``PATH``; the known container
path :data:`KNOWN_SERVE_PATHS` (NVIDIA's release container ``nvcr.io/nvidia/tensorrt-llm/release``
installs it into the system Python, whose console scripts go to ``/usr/local/bin``).

The probe then runs NVIDIA's own sanity check, ``python3 -c "import tensorrt_llm"`` (TensorRT-LLM
installation guide), with the interpreter named in ``trtllm-serve``'s ``#!`` line (or the given
one), and reports the version it imports; a wrapper script that is not a Python console script
is taken as is.

The PyTorch backend loads the Hugging Face folder directly (no engine build step). Options use
trtllm-serve's underscore spelling (``tensorrt_llm:max_batch_size=64`` → ``--max_batch_size 64``).
Its ``/metrics`` is JSON iteration statistics, not Prometheus text, so no ``metrics_url``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from adapters.base import Capabilities, LaunchConfig, ProbeResult
from adapters.telemetry.hardware import detect_kind
from adapters.registry import register
from adapters.runtime.server import LaunchPlan, ServerAdapter, split_engine_args, thread_env

RESERVED = ("host", "port")
FIX = ("point BENCH_TRTLLM_SERVE at trtllm-serve (NVIDIA's TensorRT-LLM container or your own environment; "
       "PyPI releases cannot be installed here)")
KNOWN_SERVE_PATHS = ("/usr/local/bin/trtllm-serve",)  # NGC release container (pip console scripts of the system Python)
IMPORT_CHECK = "import tensorrt_llm; print(tensorrt_llm.__version__)"
IMPORT_TIMEOUT_S = 300.0  # importing tensorrt_llm loads the CUDA/TensorRT libraries: tens of seconds cold


def python_of(serve: Path) -> Path | None:
    """The interpreter in ``serve``'s ``#!`` line (pip console scripts start with ``#!<python>``;
    ``#!/usr/bin/env python3`` is resolved on PATH); None for a wrapper that is not Python."""
    try:
        with serve.open("rb") as f:
            first = f.readline(512).decode(errors="replace")
    except OSError:
        return None
    parts = first[2:].split() if first.startswith("#!") else []
    if len(parts) > 1 and Path(parts[0]).name == "env":
        parts = [shutil.which(parts[1]) or parts[1]]
    return Path(parts[0]) if parts and Path(parts[0]).name.startswith("python") else None


def import_version(python: Path) -> tuple[str | None, str]:
    """Run ``python -c "import tensorrt_llm"`` (up to :data:`IMPORT_TIMEOUT_S` s): ``(version, "")``
    on success, ``(None, last error line)`` on failure."""
    try:
        out = subprocess.run([str(python), "-c", IMPORT_CHECK], capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    if out.returncode == 0:
        return (out.stdout.strip().splitlines() or ["?"])[-1], ""
    return None, ((out.stderr.strip() or out.stdout.strip()).splitlines() or [f"exit {out.returncode}"])[-1]


def render_underscore_flags(options: dict[str, str]) -> list[str]:
    """trtllm-serve spelling: ``{"max_batch_size": "64", "trust_remote_code": "true"}`` →
    ``["--max_batch_size", "64", "--trust_remote_code"]`` (``false`` drops the flag)."""
    out: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("-", "_")
        low = str(value).strip().lower()
        if low == "true":
            out.append(flag)
        elif low == "false":
            continue
        else:
            out.extend([flag, str(value)])
    return out


@register("tensorrt_llm", order=110)
class TensorRTLLMAdapter(ServerAdapter):
    """``trtllm-serve`` (PyTorch backend) from a user-provided TensorRT-LLM installation."""

    name = "tensorrt_llm"
    display_name = "tensorrt_llm (trtllm-serve, pytorch backend)"
    adapter_keys = ("trtllm_serve", "python")
    capabilities = Capabilities(
        hardware=("nvidia",),
        features=("paged_kv", "prefix_caching", "chunked_prefill", "continuous_batching", "speculative_decoding",
                  "structured_output", "lora", "tensor_parallel"),
        quantization=("fp8", "fp4", "awq", "int8", "int4"),
        api="server",
        complexity=4,
    )
    stop_grace_s = 30.0

    def __init__(self, hardware: str | None = None, environ: dict[str, str] | None = None) -> None:
        self._hardware = hardware
        self._environ = environ

    def _env(self) -> dict[str, str]:
        return dict(os.environ) if self._environ is None else self._environ

    def find_serve(self, engine_args: dict[str, str] | None = None) -> Path | None:
        """The ``trtllm-serve`` executable to use (see module docstring for the order), or None."""
        env = self._env()
        explicit = (engine_args or {}).get("trtllm_serve") or env.get("BENCH_TRTLLM_SERVE")
        if explicit:
            p = Path(explicit).expanduser()
            if p.is_file() and os.access(p, os.X_OK):
                return p
            found = shutil.which(explicit)
            return Path(found) if found else None
        python = self.given_python(engine_args)
        if python is not None:
            p = python.parent / "trtllm-serve"
            return p if p.is_file() else None
        venv = env.get("BENCH_TRTLLM_ENV")
        if venv:
            p = Path(venv).expanduser() / "bin" / "trtllm-serve"
            return p if p.is_file() else None
        found = shutil.which("trtllm-serve", path=env.get("PATH"))
        if found:
            return Path(found)
        return next((Path(k) for k in KNOWN_SERVE_PATHS if os.access(k, os.X_OK)), None)

    def given_python(self, engine_args: dict[str, str] | None = None) -> Path | None:
        """``tensorrt_llm:python=PATH`` or ``$BENCH_TRTLLM_PYTHON``, else None."""
        given = (engine_args or {}).get("python") or self._env().get("BENCH_TRTLLM_PYTHON")
        return Path(given).expanduser() if given else None

    def probe(self, engine_args: dict[str, str] | None = None) -> ProbeResult:
        """Unavailable without an NVIDIA GPU, without a ``trtllm-serve`` to run, or when its Python
        cannot ``import tensorrt_llm`` (see module docstring)."""
        if (self._hardware or detect_kind()) != "nvidia":
            return ProbeResult(False, "tensorrt_llm: needs an NVIDIA GPU, none found", cause="hardware")
        env = self._env()
        serve = self.find_serve(engine_args)
        python = self.given_python(engine_args) if not ((engine_args or {}).get("trtllm_serve")
                                                        or env.get("BENCH_TRTLLM_SERVE")) else None
        if python is None and serve is not None:
            python = python_of(serve)
        version = None
        if python is not None:
            version, error = import_version(python)
            if version is None:
                return ProbeResult(False, f"tensorrt_llm: `{python} -c 'import tensorrt_llm'` fails ({error}): fix that "
                                          f"environment or {FIX}")
        if serve is None:
            if python is not None:
                return ProbeResult(False, f"tensorrt_llm: {version} imports in {python} but no trtllm-serve is next to "
                                          f"it: {FIX}")
            given = env.get("BENCH_TRTLLM_SERVE") or env.get("BENCH_TRTLLM_ENV")
            if given:
                return ProbeResult(False, f"tensorrt_llm: {given} does not provide an executable trtllm-serve: {FIX}")
            return ProbeResult(False, f"tensorrt_llm: not installed: {FIX}", cause="not_installed")
        found_in = f" (tensorrt_llm {version} in {python})" if version else ""
        return ProbeResult(True, f"tensorrt_llm: {serve}{found_in}", version=version)

    def probe_for_launch(self, config: LaunchConfig) -> ProbeResult:
        """Like :meth:`probe`, but honours ``tensorrt_llm:trtllm_serve=PATH`` from the engine args."""
        _, _, own = split_engine_args(config.engine_args, self.adapter_keys)
        return self.probe(own)

    def build_command(self, config: LaunchConfig, port: int) -> LaunchPlan:
        """``[trtllm-serve, MODEL_DIR, --host 127.0.0.1, --port P, --backend pytorch,
        --served_model_name M, --max_batch_size ..., <engine args>]``.

        Raises ValueError when no trtllm-serve is found or for a reserved engine arg.
        """
        flags, env_extra, own = split_engine_args(config.engine_args, self.adapter_keys)
        for key in RESERVED:
            if key in flags:
                raise ValueError(f"engine arg tensorrt_llm:{key} is set by the harness: remove it")
        serve = self.find_serve(own)
        if serve is None:
            raise ValueError(f"trtllm-serve not found: {FIX}")
        model_name = self.served_name(config)
        opts = {"backend": "pytorch", "served_model_name": model_name, **flags}
        cmd = [str(serve), str(Path(config.model_dir)), "--host", "127.0.0.1", "--port", str(port),
               *render_underscore_flags(opts)]
        env = {**thread_env(config.threads), **env_extra}
        return LaunchPlan(cmd=cmd, env=env, model_name=model_name, display_name=self.display_name,
                          health_paths=("/health",), metrics_path=None,
                          extra_config={"metrics": "trtllm-serve /metrics is JSON iteration stats, not scraped"})
