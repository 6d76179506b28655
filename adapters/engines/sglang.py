"""SGLang: ``python -m sglang.launch_server`` from ``.engines/sglang/venv``.

On NVIDIA: stock SGLang. On CPU, ``sglang==0.5.23`` does not run as shipped (issue 5): every
``sgl-kernel`` wheel is CUDA-only and its CPU engine (``SGLANG_USE_CPU_ENGINE=1 --device cpu
--attention-backend torch_native --disable-overlap-schedule``) hard-imports a few ``*_cpu`` ops
from ``sgl_kernel``. A small pure-PyTorch ``sgl_kernel`` compatibility module placed first on
``PYTHONPATH`` (``.engines/sglang/compat/sgl_kernel``) makes it serve; such runs are reported as
"sglang (CPU, torch_native, compatibility shim)", never as stock SGLang.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from adapters.base import Knob, Capabilities, LaunchConfig, ProbeResult
from adapters.runtime.envs import engine_python
from adapters.registry import register
from adapters.runtime.envs import dist_version
from adapters.runtime.gpu_recipes import CUDA_13_0, CudaRecipe, Pin, build_label, probe_build
from adapters.telemetry.hardware import detect_kind
from adapters.runtime.recipes import PROJECT_ROOT, EngineRecipe, InstallStep, engine_env_dir
from adapters.runtime.server import (
    LaunchPlan,
    ServerAdapter,
    cpu_kv_tokens,
    render_flags,
    split_engine_args,
    thread_env,
)
from adapters.runtime.venv_engine import installed_version, probe_installed
from adapters.telemetry import effective, prom

if TYPE_CHECKING:
    from adapters.parity import ParityTarget

SHIM_DISPLAY = "sglang (CPU, torch_native, compatibility shim)"
RESERVED = ("host", "port", "model_path")


def compat_dir() -> Path:
    """Where the ``sgl_kernel`` compatibility module lives (``.engines/sglang/compat``)."""
    return engine_env_dir("sglang") / "compat"


# Reads sglang's declared requirements and prints those that are not CUDA-only (the trimmed
# install of issue 5); torch/torchvision stay at the pins of the same step.
_SGLANG_DEPS_CODE = r"""
import importlib.metadata as md, json, re
skip = re.compile(r"^(sgl[-_]kernel|sglang[-_]kernel|flashinfer.*|nvidia-.*|cuda-.*|cupy.*|triton|torch|torchvision|"
                  r"torchaudio|torchcodec|deep[-_]gemm|flash[-_]attn.*|xformers|apache-tvm-ffi|nixl|mooncake.*|"
                  r"torch[-_]memory[-_]saver|quack.*|tilelang|fast[-_]hadamard.*|kt[-_]kernel|sgl[-_].*)$", re.I)
reqs = []
for r in md.requires("sglang") or []:
    if "extra ==" in r:
        continue
    name = re.split(r"[\s<>=!~;\[]", r, 1)[0]
    if not skip.match(name):
        reqs.append(r.split(";")[0].strip())
print(json.dumps(reqs))
"""


@register("sglang", order=50)
class SglangAdapter(ServerAdapter):
    """SGLang's OpenAI server (NVIDIA: stock; CPU: torch_native with our ``sgl_kernel`` shim)."""

    name = "sglang"
    display_name = "sglang"
    recipe = EngineRecipe(
        name="sglang",
        version_dist="sglang",
        approx="~7 GB",
        steps=(
            InstallStep("install sglang==0.5.23 (no deps: its CUDA-only deps do not install here)",
                        ("sglang==0.5.23",), no_deps=True),
            InstallStep("install torch 2.14.1 + torchvision 0.29.1 and SGLang's requirements minus the CUDA-only ones",
                        ("torch==2.14.1", "torchvision==0.29.1"), requirements_code=_SGLANG_DEPS_CODE),
        ),
    )
    cuda_recipe = CudaRecipe(
        name="sglang", display="SGLang 0.5.23", version_dist="sglang", approx="~10 GB",
        pins=(Pin("sglang==0.5.23", CUDA_13_0, "sglang-doc, sglang-meta"),
              Pin("sglang-kernel==0.4.10", CUDA_13_0, "sglang-meta"),
              Pin("torch==2.14.1", CUDA_13_0, "sglang-meta, torch-meta"),
              Pin("flashinfer-python[cu13]==0.7.2", CUDA_13_0, "sglang-meta")),
        min_cc=(7, 5), cc_source="sglang-doc",
        older="pin sglang==0.5.19 (its last CUDA 12 release)")
    # SGLang's CPU venv may hold a CUDA torch (PyPI's torch 2.14.1 is the CUDA 13.0 build), so its
    # CUDA mark is sglang-kernel, which the CPU recipe leaves out (our sgl_kernel shim stands in)
    build_marks = ("sglang", "sglang-kernel")
    setup_rank, gpu_setup_rank, in_setup_cpu, auto_setup_cpu = 5, 2, False, True
    counters = staticmethod(prom.sglang_counters)
    gauge_only_hit_rate = ("sglang:cached_tokens_total", "sglang:prompt_tokens_total")
    series_parser = "sglang"  # its /metrics read into the time series by read_series
    read_series = staticmethod(prom.series_reader(
        ("sglang:token_usage",), "sglang:num_running_reqs", "sglang:num_queue_reqs",
        ("sglang:num_retracted_requests_total", "sglang:num_retracted_reqs"), "sglang:cached_tokens_total",
        "sglang:prompt_tokens_total"))
    effective_reader = staticmethod(effective.read_sglang)

    @staticmethod
    def after_setup(recipe: EngineRecipe, *, console: object = None, force: bool = False) -> str | None:
        """On the CPU build, our pure-PyTorch ``sgl_kernel`` stand-in goes to ``.engines/sglang/compat``
        (first on PYTHONPATH at launch); returns the installed SGLang version."""
        if recipe.build == "cpu":
            compat = engine_env_dir("sglang") / "compat"
            shutil.rmtree(compat, ignore_errors=True)
            shutil.copytree(PROJECT_ROOT / "adapters" / "shims" / "sgl_kernel_compat", compat,
                            ignore=shutil.ignore_patterns("__pycache__"))
        return dist_version(engine_python("sglang"), recipe.version_dist)
    capabilities = Capabilities(
        hardware=("nvidia", "amd", "cpu"),
        features=("paged_kv", "prefix_caching", "chunked_prefill", "continuous_batching", "speculative_decoding",
                  "structured_output", "lora", "tensor_parallel"),
        quantization=("fp8", "awq", "gptq"),
        api="server",
        complexity=2,
    )
    stop_grace_s = 20.0
    search_space = {  # bench run --tune (adapters.base.Knob); precision only with --tune-lower-precision
        "cpu": (Knob("max_running_requests", ("32", "8", "128"), "sequences batched at once (its max_num_seqs)"),
                Knob("chunked_prefill_size", ("2048", "512", "8192"), "the prefill chunk (tokens)")),
        "gpu": (Knob("max_running_requests", ("64", "256", "512"), "sequences batched at once (its max_num_seqs)"),
                Knob("chunked_prefill_size", ("2048", "8192"), "the prefill chunk (tokens)"),
                Knob("disable_cuda_graph", ("true",), "CUDA graphs off"),
                Knob("schedule_conservativeness", ("0.5", "2.0"), "how much KV it reserves for running sequences"),
                Knob("kv_cache_dtype", ("fp8_e5m2",), "an fp8 KV cache (half the bytes per token)", precision=True,
                     lowered=("fp8_e4m3",))),
    }

    def __init__(self, hardware: str | None = None) -> None:
        self._hardware = hardware

    def hardware(self) -> str:
        return self._hardware or detect_kind()

    def help_argvs(self) -> tuple[tuple[str, ...], ...]:
        """Its launch server's help (run as it is launched; on a CPU it may need the stand-in on
        PYTHONPATH to import, and then it lists nothing: the start checks)."""
        if probe_installed("sglang") is not None:
            return ()
        return ((str(engine_python("sglang")), "-m", "sglang.launch_server", "--help"),)

    def probe(self) -> ProbeResult:
        """Installed venv required, holding the build this machine needs (CPU torch + our shim, or
        the CUDA build with sglang-kernel: :func:`adapters.runtime.gpu_recipes.probe_build`); on CPU also the
        ``sgl_kernel`` compatibility module."""
        hw = self.hardware()
        missing = probe_installed("sglang")
        if missing is not None:
            if hw == "cpu":
                return ProbeResult(False, cause="not_installed", reason="sglang: not installed - on CPU every sgl-kernel wheel is CUDA-only, so it "
                                          "runs only with our sgl_kernel compatibility shim: `bench engines setup sglang` "
                                          "(~7 GB, ~5 min)")
            return missing
        wrong = probe_build("sglang", "SGLang", hw)
        if wrong is not None:
            return wrong
        if hw == "cpu" and not (compat_dir() / "sgl_kernel" / "__init__.py").is_file():
            return ProbeResult(False, "sglang: the sgl_kernel compatibility shim is missing from .engines/sglang/compat: "
                                      "rerun `bench engines setup sglang`")
        return ProbeResult(True, "sglang: " + (SHIM_DISPLAY if hw == "cpu" else f"stock SGLang {build_label('sglang')}".rstrip()),
                           version=installed_version("sglang"))

    def build_command(self, config: LaunchConfig, port: int) -> LaunchPlan:
        """``[python, -m, sglang.launch_server, --model-path DIR, --host, --port, ...]`` with the
        CPU flags and ``PYTHONPATH=<compat>`` on CPU. Raises ValueError for reserved args."""
        flags, env_extra, _ = split_engine_args(config.engine_args)
        for key in RESERVED:
            if key in flags:
                raise ValueError(f"engine arg sglang:{key} is set by the harness: remove it")
        hw = self.hardware()
        model_name = self.served_name(config)
        env = thread_env(config.threads)
        if hw == "cpu":
            defaults = {"device": "cpu", "attention_backend": "torch_native", "disable_overlap_schedule": "true",
                        "dtype": "float32", "mem_fraction_static": "0.3",
                        "max_total_tokens": str(cpu_kv_tokens(config.model_dir))}
            env.update({"SGLANG_USE_CPU_ENGINE": "1", "PYTHONPATH": str(compat_dir()),
                        "SGLANG_CPU_OMP_THREADS_BIND": ",".join(str(c) for c in sorted(_affinity())[-config.threads:])})
            display = SHIM_DISPLAY
        else:
            defaults = {}
            display = "sglang"
        # The harness stops SGLang by signalling its whole process group; SGLang then treats
        # the scheduler's exit as a crash and sleeps 5 s for py-spy / CUDA core-dump
        # diagnostics before it exits. Those dumps are for debugging SGLang, not for a benchmark.
        env.update({"SGLANG_PYSPY_DUMP_BEFORE_CRASH": "0", "SGLANG_CUDA_COREDUMP_BEFORE_CRASH": "0"})
        env.update(env_extra)
        opts = {"served_model_name": model_name, "enable_metrics": "true", **defaults, **flags}
        cmd = [str(engine_python("sglang")), "-m", "sglang.launch_server", "--model-path", str(Path(config.model_dir)),
               "--host", "127.0.0.1", "--port", str(port), *render_flags(opts)]
        return LaunchPlan(cmd=cmd, env=env, model_name=model_name, display_name=display,
                          health_paths=("/health", "/v1/models"), metrics_path="/metrics",
                          extra_config={"hardware": hw, "compatibility_shim": hw == "cpu"})

    def parity_args(self, target: "ParityTarget") -> tuple[dict[str, str], list[str]]:
        """``--parity strict``: ``--max-running-requests`` (its max_num_seqs), the per-step budget as
        ``--chunked-prefill-size`` and ``--max-prefill-tokens``; on a GPU ``--max-total-tokens`` from
        the KV budget (on a CPU it is already set from it). Its radix cache (prefix caching) is on
        unless ``--disable-radix-cache``, so nothing is added for it; asked to turn it off, that flag."""
        budget = str(target.max_num_batched_tokens)
        args = {"max_running_requests": str(target.max_num_seqs), "chunked_prefill_size": budget,
                "max_prefill_tokens": budget}
        if not target.prefix_caching:
            args["disable_radix_cache"] = "true"
        if self.hardware() != "cpu":
            args["max_total_tokens"] = str(target.kv_tokens())
        return args, []


def _affinity() -> set[int]:
    import os

    return os.sched_getaffinity(0)
