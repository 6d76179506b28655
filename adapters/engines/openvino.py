"""OpenVINO GenAI's ``ContinuousBatchingPipeline`` behind our streaming shim (``openvino``).

``bench engines setup openvino`` builds ``.engines/openvino/venv`` (openvino-genai, openvino and
openvino-tokenizers of one release; optimum-intel, torch 2.13.0 CPU and transformers for the
export; the shim server's packages). On first use the model folder is exported to OpenVINO IR
(:func:`ensure_ir`: ``python -m adapters.shims.ov_export`` in that venv, ``optimum-cli export
openvino --weight-format fp32``, the weights' element types checked after) into a folder named by
the model folder's content hash beside the model (``<model>-openvino/<model>-fp32-<hash 16>/``;
in ``.engines/openvino/models`` when that folder cannot be written), once, before the server's
start-up is timed, in its own process group guarded by a watchdog, its output in the engine's log.

The server (:mod:`adapters.shims.ov_server`): ``[<venv python>, -m, adapters.shims.ov_server,
--model DIR, --ir-dir IR, --host, --port, --served-model-name M, --threads N, --kv-cache-bytes B,
--enable-prefix-caching, --dynamic-split-fuse]`` plus engine args (``adapters.runtime.server``
conventions: ``openvino:max_num_seqs=64`` → ``--max-num-seqs 64``,
``openvino:max_num_batched_tokens=512``, ``openvino:enable_prefix_caching=false``,
``openvino:precision=bf16``, ``openvino:kv_cache_precision=u8``). The KV budget is the harness's
CPU budget (:data:`adapters.runtime.server.CPU_KV_CACHE_BYTES`, 1 GiB of f32 KV, the same as every CPU
engine); ``max_num_seqs`` and the per-step token budget are the engine's defaults unless set
(engine args, ``--parity strict``). ``openvino:weight_format=int8`` (an adapter key) serves an
int8-weight export instead: other numerics, reported as such.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from results.model_digest import model_digest
from adapters.base import Knob, Capabilities, Endpoint, EngineError, LaunchConfig, ProbeResult
from adapters.runtime.envs import engine_python
from adapters.telemetry.hardware import detect_kind
from adapters.runtime.process import run_guarded, tail_file
from adapters.runtime.recipes import engine_env_dir
from adapters.runtime.server import (
    CPU_KV_CACHE_BYTES, PROJECT_ROOT, LaunchPlan, ServerAdapter, project_pythonpath, render_flags, split_engine_args,
    thread_env,
)
from adapters.registry import register
from adapters.runtime.recipes import SHIM_PACKAGES, EngineRecipe, InstallStep
from adapters.runtime.venv_engine import installed_version, probe_installed
from adapters.telemetry import effective

if TYPE_CHECKING:
    from adapters.parity import ParityTarget

ENGINE = "openvino"
WEIGHT_FORMATS = ("fp32", "fp16", "int8", "int4")
RESERVED = ("host", "port", "model", "ir_dir")
SETUP_HINT = f"run `bench engines setup {ENGINE}` (~1.5 GB: openvino-genai, optimum-intel, torch CPU)"
EXPORT_TIMEOUT_S = 1800.0
_MARKER = "bench_export.json"  # written last by adapters.shims.ov_export: a folder with it is complete


# ------------------------------------------------------------------------------------------
# the IR export, cached by content hash
def ir_root(model_dir: Path) -> Path:
    """Where the model's IR exports go: ``<model>-openvino`` beside the folder when that can be
    written, else ``.engines/openvino/models/<model>-openvino``."""
    model_dir = Path(model_dir).resolve()
    beside = model_dir.parent / f"{model_dir.name}-openvino"
    if beside.is_dir() or os.access(model_dir.parent, os.W_OK):
        return beside
    return engine_env_dir(ENGINE) / "models" / beside.name


def ir_dir(model_dir: Path, weight_format: str = "fp32") -> Path:
    """The IR export of ``model_dir`` at ``weight_format``, named by the folder's content hash:
    ``<model>-openvino/<model>-<format>-<hash 16>/``. Raises ValueError for an unknown format."""
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"openvino weight_format {weight_format!r}: choose from {', '.join(WEIGHT_FORMATS)}")
    root = ir_root(model_dir)
    digest = model_digest(model_dir, root / "digests.json")
    return root / f"{Path(model_dir).resolve().name}-{weight_format}-{digest[:16]}"


def export_command(python: Path, model_dir: Path, out: Path, weight_format: str = "fp32") -> list[str]:
    """``python -m adapters.shims.ov_export --model DIR --out OUT --weight-format F`` (in the engine venv)."""
    return [str(python), "-m", "adapters.shims.ov_export", "--model", str(Path(model_dir).resolve()), "--out", str(out),
            "--weight-format", weight_format]


_ERROR_LINE = re.compile(r"^(ov_export: error: .*|\w*(Error|Exception): .*)$")


def error_line(log_text: str) -> str | None:
    """The last line of an export's output that says what went wrong (``ov_export: error: ...``,
    else the last ``SomethingError: ...``), or None."""
    found = None
    for line in log_text.splitlines():
        if _ERROR_LINE.match(line.strip()):
            found = line.strip()
    return found.removeprefix("ov_export: error: ") if found else None


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def ensure_ir(python: Path, model_dir: Path, log_path: Path, *, weight_format: str = "fp32",
              env: dict[str, str] | None = None, cancel: threading.Event | None = None,
              timeout_s: float = EXPORT_TIMEOUT_S, say=_say) -> tuple[Path, float]:
    """The IR export of ``model_dir``, exported first when it is not cached; returns ``(folder,
    seconds spent exporting)`` (0 when cached). The exporter runs in its own process group with a
    watchdog, output appended to ``log_path``; one export at a time per folder (a lock); it writes
    into a temporary folder renamed when complete. ``say`` gets one line when the export starts
    and one when it ends (progress; default: stderr). Raises :class:`EngineError` with one line
    naming the cause (and the log tail) when it fails, times out or ``cancel`` is set."""
    out = ir_dir(model_dir, weight_format)
    if (out / _MARKER).is_file():
        return out, 0.0
    with _lock(out.with_name(out.name + ".lock")):
        if (out / _MARKER).is_file():
            return out, 0.0
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        started = time.monotonic()
        say(f"{ENGINE}: exporting {Path(model_dir).name} to OpenVINO IR ({weight_format}, first use only) into {out} "
            f"- log: {log_path}")
        full_env = {**os.environ, **(env or {}), "PYTHONPATH": project_pythonpath("")}
        full_env.pop("VIRTUAL_ENV", None)
        try:
            code = run_guarded(export_command(python, model_dir, tmp, weight_format), full_env, log_path, cancel,
                               timeout_s, what=f"{ENGINE}: the IR export", cwd=PROJECT_ROOT)
            if code != 0:
                tail = tail_file(log_path, 200)
                why = error_line(tail) or f"exit {code}"
                raise EngineError(f"{ENGINE}: exporting the model to OpenVINO IR failed: {why} (log: {log_path})", tail)
            if not (tmp / _MARKER).is_file():
                raise EngineError(f"{ENGINE}: the IR export wrote no {_MARKER} (log: {log_path})", tail_file(log_path))
            shutil.rmtree(out, ignore_errors=True)
            os.replace(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        seconds = time.monotonic() - started
        say(f"{ENGINE}: IR export done in {seconds:.0f} s ({_size_mb(out):.0f} MB)")
        return out, seconds


def _size_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6


# ------------------------------------------------------------------------------------------
# the adapter
def numerics(weight_format: str, precision: str, kv_precision: str) -> str:
    """``"reference"`` for fp32 weights computed in f32 with an f32 KV cache (the reference's
    precision), else what differs (``"int8 weights"``, ``"bf16 compute"``, ``"u8 KV cache"``)."""
    other = []
    if weight_format != "fp32":
        other.append(f"{weight_format} weights")
    if precision != "f32":
        other.append(f"{precision} compute")
    if kv_precision != "f32":
        other.append(f"{kv_precision} KV cache")
    return ", ".join(other) or "reference"


OPENVINO_RELEASE = "2026.4.1"  # openvino-genai / openvino / openvino-tokenizers move together


@register(ENGINE, order=100)
class OpenVinoAdapter(ServerAdapter):
    """OpenVINO GenAI's continuous-batching pipeline (CPU plugin) behind our streaming shim."""

    name = ENGINE
    display_name = "OpenVINO GenAI (ContinuousBatchingPipeline, fp32 IR)"
    flag_source = PROJECT_ROOT / "adapters" / "shims" / "ov_server.py"
    shim = "adapters.shims.ov_server"
    recipe = EngineRecipe(
        name=ENGINE,
        version_dist="openvino-genai",
        approx="~1.5 GB",
        steps=(
            InstallStep(f"install openvino-genai {OPENVINO_RELEASE} (+ openvino, openvino-tokenizers of the same release), "
                        "optimum-intel for the IR export, torch==2.13.0 (CPU), transformers and the shim server",
                        (f"openvino-genai=={OPENVINO_RELEASE}.0", f"openvino=={OPENVINO_RELEASE}",
                         f"openvino-tokenizers=={OPENVINO_RELEASE}.0", "optimum-intel==2.2.0", "torch==2.13.0",
                         "transformers", *SHIM_PACKAGES)),
            # optimum-intel's requirements pull PyPI's torchvision, which fails to import beside the local
            # CPU torch ("operator torchvision::nms does not exist") and with it every transformers import
            InstallStep("remove torchvision (pulled in by the export tools; breaks imports beside torch 2.13.0 CPU)",
                        ("torchvision",), uninstall=True),
        ),
    )
    setup_rank, in_setup_cpu, auto_setup_cpu = 7, True, True
    effective_reader = staticmethod(effective.read_shim)
    production_server = ("OpenVINO Model Server (OVMS), whose LLM serving runs the same ContinuousBatchingPipeline "
                         "behind an OpenAI-compatible API")
    capabilities = Capabilities(hardware=("cpu",), features=("paged_kv", "prefix_caching", "chunked_prefill",
                                                               "continuous_batching"),
                                quantization=("int8", "int4"), api="shim", complexity=3)
    adapter_keys = ("weight_format",)
    stop_grace_s = 10.0
    search_space = {  # bench run --tune (adapters.base.Knob); the weight format only with --tune-lower-precision
        "cpu": (Knob("max_num_seqs", ("32", "8", "128"), "sequences batched at once"),
                Knob("max_num_batched_tokens", ("1024", "256", "4096"), "tokens per step (the split-fuse chunk)"),
                Knob("weight_format", ("int8",), "int8 weights (the baseline is fp32)", precision=True),
                Knob("kv_cache_precision", ("u8",), "a u8 KV cache (the baseline is f32)", precision=True)),
    }

    def __init__(self, hardware: str | None = None) -> None:
        self._hardware = hardware

    def probe(self) -> ProbeResult:
        """Available on a CPU machine once ``bench engines setup openvino`` has built its venv."""
        hw = self._hardware or detect_kind()
        if hw != "cpu":
            return ProbeResult(False, cause="hardware", reason=f"{self.name}: this adapter runs OpenVINO's CPU plugin "
                               "only (no Intel GPU/NPU support here); on this machine the GPU engines run")
        if probe_installed(ENGINE) is not None:
            return ProbeResult(False, f"{self.name}: not installed - {SETUP_HINT}", cause="not_installed")
        version = installed_version(ENGINE)
        return ProbeResult(True, f"{self.name}: openvino-genai {version or ''} ContinuousBatchingPipeline behind our "
                                 "shim, fp32 IR exported by optimum-intel".replace("  ", " "), version=version)

    def _weight_format(self, config: LaunchConfig) -> str:
        _, _, own = split_engine_args(config.engine_args, self.adapter_keys)
        fmt = own.get("weight_format", "fp32")
        if fmt not in WEIGHT_FORMATS:
            raise ValueError(f"engine arg {self.name}:weight_format={fmt!r}: choose from {', '.join(WEIGHT_FORMATS)}")
        return fmt

    @contextmanager
    def launch(self, config: LaunchConfig) -> Iterator[Endpoint]:
        """Export the model to IR when it is not cached (before the server's start-up is timed),
        then start the shim like every server engine (:meth:`ServerAdapter.launch`)."""
        probe = config.probe or self.probe_for_launch(config)
        if not probe.available:
            raise EngineError(f"{self.name}: {probe.reason}")
        try:
            fmt = self._weight_format(config)
        except ValueError as exc:
            raise EngineError(f"{self.name}: {exc}") from exc
        _, seconds = ensure_ir(engine_python(ENGINE), Path(config.model_dir), self.log_path(config), weight_format=fmt,
                               env=thread_env(config.threads), cancel=config.cancel)
        with super().launch(replace(config, probe=probe)) as endpoint:
            endpoint.effective_config["ir_export_s"] = round(seconds, 1)
            yield endpoint

    def build_command(self, config: LaunchConfig, port: int) -> LaunchPlan:
        """The shim's command (module docstring). Raises ValueError for an engine arg the harness
        sets itself (host, port, model, ir_dir) or an unknown weight format."""
        flags, env_extra, _ = split_engine_args(config.engine_args, self.adapter_keys)
        for key in RESERVED:
            if key in flags:
                raise ValueError(f"engine arg {self.name}:{key} is set by the harness: remove it")
        fmt = self._weight_format(config)
        model_name = self.served_name(config)
        ir = ir_dir(Path(config.model_dir), fmt)
        opts = {"served_model_name": model_name, "threads": str(config.threads),
                "kv_cache_bytes": str(CPU_KV_CACHE_BYTES), "enable_prefix_caching": "true",
                "dynamic_split_fuse": "true", **flags}
        cmd = [str(engine_python(ENGINE)), "-m", "adapters.shims.ov_server", "--model", str(Path(config.model_dir)),
               "--ir-dir", str(ir), "--host", "127.0.0.1", "--port", str(port), *render_flags(opts)]
        env = {**thread_env(config.threads), "PYTHONPATH": project_pythonpath(""), **env_extra}
        kind = numerics(fmt, opts.get("precision", "f32"), opts.get("kv_cache_precision", "f32"))
        display = self.display_name if kind == "reference" else f"OpenVINO GenAI (ContinuousBatchingPipeline, {kind})"
        return LaunchPlan(cmd=cmd, env=env, model_name=model_name, display_name=display, health_paths=("/health",),
                          cwd=PROJECT_ROOT,
                          extra_config={"hardware": "cpu", "batching": "continuous", "ir_dir": str(ir),
                                        "weight_format": fmt, "numerics": kind})

    def parity_args(self, target: "ParityTarget") -> tuple[dict[str, str], list[str]]:
        """``--parity strict``: the KV budget in bytes, ``max_num_seqs``, the per-step token budget
        (with dynamic split-fuse it is also the prefill chunk) and prefix caching, all flags of the
        shim's ``SchedulerConfig``."""
        return ({"kv_cache_bytes": str(target.kv_cache_bytes), "max_num_seqs": str(target.max_num_seqs),
                 "max_num_batched_tokens": str(target.max_num_batched_tokens), "dynamic_split_fuse": "true",
                 "enable_prefix_caching": "true" if target.prefix_caching else "false"}, [])


__all__ = ["OpenVinoAdapter", "ensure_ir", "error_line", "export_command", "ir_dir", "model_digest", "numerics"]
