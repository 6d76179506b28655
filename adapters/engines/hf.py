"""Two Hugging Face transformers rows: the naive static-batching baseline and ``transformers serve``.

- ``transformers``: our shim ``adapters/shims/hf_static_server.py`` - static batching with
  ``model.generate`` (a batch waits for its longest member; requests arriving meanwhile wait
  for the next batch), streaming each row's tokens as ``generate`` produces them. This is the
  "no serving engine" row every comparison needs.
- ``transformers_serve``: ``transformers serve --continuous-batching`` (transformers' own paged
  continuous batching). It answers HTTP 422 for non-standard request fields such as
  ``ignore_eos``, so its endpoint says ``supports_ignore_eos=False``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from pathlib import Path

from adapters.base import Capabilities, LaunchConfig, ProbeResult
from adapters.runtime.envs import engine_python, is_installed
from adapters.telemetry.hardware import detect_kind
from adapters.parity import ParityTarget, static_shim_args
from adapters.registry import register
from adapters.runtime.recipes import EngineRecipe, InstallStep
from adapters.runtime.venv_engine import installed_version
from adapters.telemetry import effective
from adapters.runtime.server import (
    cpu_kv_tokens,
    PROJECT_ROOT, LaunchPlan, ServerAdapter, project_pythonpath, python_for_harness, render_flags,
    split_engine_args, thread_env,
)


def _transformers_version() -> str | None:
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None


@register("transformers", order=20)
class TransformersStaticAdapter(ServerAdapter):
    """Static batching with ``model.generate`` behind our streaming shim (harness Python).

    Engine args: ``max_batch_size`` (rows per ``generate``, default 8), ``batch_window_ms``
    (how long an idle server collects arrivals into one batch, default 10 ms), ``dtype``
    (default float32), ``device`` (default cpu; cuda on NVIDIA).
    """

    name = "transformers"
    display_name = "transformers (static batching, generate)"
    harness_dist = "transformers"  # runs from the harness's own environment (no recipe)
    flag_source = PROJECT_ROOT / "adapters" / "shims" / "hf_static_server.py"
    shim = "adapters.shims.hf_static_server"
    effective_reader = staticmethod(effective.read_shim)
    production_server = ("transformers serve (continuous batching; measured here as transformers_serve) or Hugging Face "
                         "Text Generation Inference")
    capabilities = Capabilities(hardware=("cpu", "nvidia", "amd"), features=(), api="shim", complexity=1)
    stop_grace_s = 5.0

    def __init__(self, hardware: str | None = None) -> None:
        self._hardware = hardware

    def probe(self) -> ProbeResult:
        """Available when transformers is importable by the harness."""
        version = _transformers_version()
        if version is None:
            return ProbeResult(False, cause="not_installed", reason=f"{self.name}: transformers is not installed in the harness environment: pip install 'transformers>=5.20,<6'")
        return ProbeResult(True, f"{self.name}: static batching shim with the harness's Python", version=version)

    def build_command(self, config: LaunchConfig, port: int) -> LaunchPlan:
        """``[python, -m, adapters.shims.hf_static_server, --model DIR, --host, --port, --threads N,
        --served-model-name M, --device D, <engine args>]``."""
        flags, env_extra, _ = split_engine_args(config.engine_args)
        hw = self._hardware or detect_kind()
        model_name = self.served_name(config)
        opts = {"served_model_name": model_name, "threads": str(config.threads),
                "device": "cuda" if hw == "nvidia" else "cpu", "dtype": "float32",
                "max_batch_size": "8", "batch_window_ms": "10", **flags}
        cmd = [python_for_harness(), "-m", "adapters.shims.hf_static_server", "--model", str(Path(config.model_dir)),
               "--host", "127.0.0.1", "--port", str(port), *render_flags(opts)]
        env = {**thread_env(config.threads), "PYTHONPATH": project_pythonpath(), **env_extra}
        return LaunchPlan(cmd=cmd, env=env, model_name=model_name, display_name=self.display_name,
                          health_paths=("/health",), cwd=PROJECT_ROOT,
                          extra_config={"batching": "static", "max_batch_size": int(opts["max_batch_size"])})

    def parity_args(self, target: ParityTarget) -> tuple[dict[str, str], list[str]]:
        """``--parity strict``: the static batch size only (:func:`adapters.parity.static_shim_args`)."""
        return static_shim_args(self.name, target)


@register("transformers_serve", order=30)
class TransformersServeAdapter(ServerAdapter):
    """``transformers serve --continuous-batching`` (transformers' own OpenAI server).

    The model is passed as ``FORCE_MODEL`` (preloaded; requests must name it by its path).
    Threads: only through ``OMP_NUM_THREADS`` (it has no thread flag). Engine args become
    its flags (``transformers_serve:cb_num_blocks=256`` → ``--cb-num-blocks 256``).
    """

    name = "transformers_serve"
    recipe = EngineRecipe(
        name="transformers_serve",
        version_dist="transformers",
        approx="~1 GB",
        steps=(
            # the [serving] extra (openai, fastapi, uvicorn...) is not in the harness's own venv
            InstallStep("install torch and transformers[serving]", ("torch==2.13.0", "transformers[serving]>=5.20,<6")),
        ),
    )
    setup_rank, in_setup_cpu, auto_setup_cpu = 4, True, True
    effective_reader = staticmethod(effective.read_transformers_serve)
    display_name = "transformers serve (continuous batching)"
    capabilities = Capabilities(hardware=("cpu", "nvidia"), features=("paged_kv", "continuous_batching"),
                                api="server", complexity=1)
    stop_grace_s = 5.0

    def __init__(self, hardware: str | None = None) -> None:
        self._hardware = hardware

    @staticmethod
    def cli_path() -> Path:
        """The ``transformers`` console script: from ``.engines/transformers_serve`` when set up,
        else the one next to the harness's interpreter."""
        own_env = engine_python("transformers_serve").parent / "transformers"
        if is_installed("transformers_serve") and own_env.exists():
            return own_env
        return Path(sys.executable).parent / "transformers"

    def help_argvs(self) -> tuple[tuple[str, ...], ...]:
        """``transformers serve --help`` of its own environment (none before it is set up)."""
        cli = self.cli_path()
        return ((str(cli), "serve", "--help"),) if is_installed(self.name) and cli.exists() else ()

    def probe(self) -> ProbeResult:
        """Available when a ``transformers`` CLI with its ``[serving]`` extras (openai, fastapi,
        uvicorn) exists: in ``.engines/transformers_serve`` or in the harness venv."""
        if is_installed("transformers_serve"):
            return ProbeResult(True, "transformers_serve: `transformers serve --continuous-batching` "
                                     "(.engines/transformers_serve)", version=installed_version("transformers_serve"))
        version = _transformers_version()
        missing = [m for m in ("openai", "fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
        if version is None or missing or not self.cli_path().exists():
            what = f"transformers[serving] extras missing ({', '.join(missing)})" if missing else "transformers CLI missing"
            return ProbeResult(False, cause="not_installed", reason=f"transformers_serve: not installed - {what}: run `bench engines setup "
                                      "transformers_serve` (~1 GB, 1-2 minutes)")
        return ProbeResult(True, "transformers_serve: `transformers serve --continuous-batching` (harness venv)",
                           version=version)

    def build_command(self, config: LaunchConfig, port: int) -> LaunchPlan:
        """``[transformers, serve, --continuous-batching, --device D, --dtype float32, --host 127.0.0.1,
        --port P, <engine args>, MODEL_DIR]``; the served model name is the folder path."""
        flags, env_extra, _ = split_engine_args(config.engine_args)
        hw = self._hardware or detect_kind()
        opts = {"continuous_batching": "true", "device": "cuda" if hw == "nvidia" else "cpu",
                "dtype": "float32" if hw != "nvidia" else "auto", "log_level": "info"}
        if hw != "nvidia":  # without a bound it sizes its paged cache from free RAM (14 GB RSS seen here)
            opts.update({"cb_block_size": "16", "cb_num_blocks": str(cpu_kv_tokens(config.model_dir) // 16)})
        opts.update(flags)
        model = str(Path(config.model_dir))
        cmd = [str(self.cli_path()), "serve", *render_flags(opts), "--host", "127.0.0.1", "--port", str(port), model]
        env = {**thread_env(config.threads), **env_extra}
        return LaunchPlan(cmd=cmd, env=env, model_name=model, display_name=self.display_name,
                          health_paths=("/health", "/v1/models"), supports_ignore_eos=False, cwd=PROJECT_ROOT)

    def parity_args(self, target: ParityTarget) -> tuple[dict[str, str], list[str]]:
        """``--parity strict``: the per-step budget as ``--cb-max-batch-tokens``; on a GPU the KV
        budget as ``--cb-num-blocks`` of 16 tokens (on a CPU it is already set from it).
        ``transformers serve`` has no flag for prefix sharing, chunked prefill or a request cap."""
        args = {"cb_max_batch_tokens": str(target.max_num_batched_tokens)}
        if (self._hardware or detect_kind()) == "nvidia":
            args.update({"cb_block_size": "16", "cb_num_blocks": str(target.kv_tokens() // 16)})
        return args, [f"{self.name}: prefix caching, chunked prefill and max_num_seqs cannot be set: `transformers "
                      "serve` has no flag for them (its continuous batching decides them itself)"]
