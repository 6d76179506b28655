"""Engines without a streaming server of their own, served by our shims from their own venvs.

- ``deepspeed``: ``deepspeed.init_inference(model, replace_with_kernel_inject=False)`` on CPU
  (Hugging Face ``generate`` underneath, static batches) behind ``adapters/shims/ds_server.py``.
  DeepSpeed-MII/FastGen (its real serving path) hard-codes NCCL and CUDA kernels: it gets its own
  probe (:meth:`DeepSpeedAdapter.probe_mii`).
- ``onnxruntime``: ONNX Runtime GenAI's ``Generator`` behind ``adapters/shims/ort_server.py``;
  the ONNX model is built once from the same Hugging Face folder by its model builder
  (``python -m onnxruntime_genai.models.builder -i DIR -o OUT -p fp32 -e cpu``) and cached in
  ``.engines/onnxruntime/models/<name>-<digest>/``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from adapters.base import Capabilities, LaunchConfig, ProbeResult
from adapters.registry import register
from adapters.runtime.envs import engine_python
from adapters.runtime.gpu_recipes import CUDA_13_0, CudaRecipe, Pin, build_label, installed_build, probe_build
from adapters.telemetry.hardware import detect_kind
from adapters.parity import ParityTarget, static_shim_args
from adapters.runtime.recipes import SHIM_PACKAGES, EngineRecipe, InstallStep, engine_env_dir
from adapters.runtime.server import (
    PROJECT_ROOT, LaunchPlan, ServerAdapter, project_pythonpath, render_flags, split_engine_args, thread_env,
)
from adapters.runtime.venv_engine import installed_version, probe_installed
from adapters.telemetry import effective


@register("deepspeed", order=70)
class DeepSpeedAdapter(ServerAdapter):
    """DeepSpeed's CPU inference path (``init_inference``) behind our streaming shim."""

    name = "deepspeed"
    display_name = "deepspeed (CPU init_inference, HF generate underneath)"
    flag_source = PROJECT_ROOT / "adapters" / "shims" / "ds_server.py"
    shim = "adapters.shims.ds_server"
    recipe = EngineRecipe(
        name="deepspeed",
        version_dist="deepspeed",
        approx="~1 GB",
        steps=(
            InstallStep("install deepspeed==0.19.8 (DS_BUILD_OPS=0), torch, transformers and the shim server",
                        ("deepspeed==0.19.8", "torch==2.13.0", "transformers>=5.20,<6", "accelerate>=1.0", *SHIM_PACKAGES),
                        env={"DS_BUILD_OPS": "0"}),
        ),
    )
    cuda_recipe = CudaRecipe(
        name="deepspeed", display="DeepSpeed 0.19.8 + DeepSpeed-MII 0.3.3", version_dist="deepspeed", approx="~6 GB",
        pins=(Pin("deepspeed==0.19.8", None, "mii-meta"),
              Pin("deepspeed-mii==0.3.3", None, "mii-meta"),
              Pin("torch==2.13.0", CUDA_13_0, "torch-meta")),
        min_cc=(8, 0), cc_source="dsk-doc",
        older="install a torch built for CUDA 12 in .engines/deepspeed yourself",
        # DS_BUILD_OPS=0: ops are JIT-built on first use (pre-building needs nvcc and minutes per op)
        extra=("transformers>=5.20,<6", "accelerate>=1.0", *SHIM_PACKAGES), env={"DS_BUILD_OPS": "0"})
    venv_dists = ("deepspeed", "deepspeed-mii")
    # not set up by `make bench` (--setup-engines) on a CPU: there its inference path is Hugging Face
    # `generate` underneath (no kernel injection), what the transformers baseline already measures, at
    # ~40 s of a default run; `bench engines setup deepspeed` adds it and `--engine all` then measures it
    setup_rank, gpu_setup_rank, in_setup_cpu = 2, 4, True
    setup_note = "on a CPU it is Hugging Face generate underneath"
    effective_reader = staticmethod(effective.read_shim)
    production_server = "DeepSpeed-MII (DeepSpeed's own serving front end)"
    capabilities = Capabilities(hardware=("cpu", "nvidia"), features=(), api="shim", complexity=2)
    stop_grace_s = 5.0

    def __init__(self, hardware: str | None = None) -> None:
        self._hardware = hardware

    def probe(self) -> ProbeResult:
        """Available when ``bench engines setup deepspeed`` has built ``.engines/deepspeed``."""
        missing = probe_installed("deepspeed")
        if missing is not None:
            if (self._hardware or detect_kind()) == "cpu":
                return ProbeResult(False, cause="not_installed", reason="deepspeed: not installed - run `bench engines setup deepspeed` "
                                   f"({self.recipe.approx}) to add it; `make bench` leaves it out on a CPU, "
                                   "where it is Hugging Face generate underneath (the transformers baseline)")
            return missing
        hw = self._hardware or detect_kind()
        wrong = probe_build("deepspeed", "DeepSpeed", hw)
        if wrong is not None:
            return wrong
        build = f" ({build_label('deepspeed')} installed; this row runs on the CPU)" if hw == "nvidia" else ""
        return ProbeResult(True, f"deepspeed: CPU init_inference (HF generate underneath) behind our shim{build}",
                           version=installed_version("deepspeed"))

    def notes(self) -> str:
        """DeepSpeed-MII/FastGen's state, said in this row: ``--engine`` cannot run it (no row of its own)."""
        return self.probe_mii().reason

    def probe_mii(self) -> ProbeResult:
        """DeepSpeed-MII/FastGen: needs an NVIDIA GPU with CUDA (NCCL + CUDA kernels are hard-coded)
        of compute capability >= 8.0 (DeepSpeed-Kernels' PyPI build); the GPU recipe installs it
        into ``.engines/deepspeed``. Never available: ``--engine`` does not run it yet."""
        if (self._hardware or detect_kind()) != "nvidia":
            return ProbeResult(False, cause="hardware", reason="deepspeed-mii (FastGen): needs an NVIDIA GPU with CUDA (it hard-codes NCCL and "
                                      "CUDA kernels), none found; the CPU path is the `deepspeed` row")
        b = installed_build("deepspeed")
        if "deepspeed-mii" not in b.detail:
            return ProbeResult(False, "deepspeed-mii (FastGen): not installed - `bench engines setup deepspeed` installs "
                                      "deepspeed-mii 0.3.3 with the CUDA build on this machine", cause="not_installed")
        python = engine_python("deepspeed")
        return ProbeResult(False, f"deepspeed-mii (FastGen): installed in .engines/deepspeed ({b.detail}) but not wired "
                                  f"into --engine yet: serve it with `{python} -m mii.entrypoints.openai_api_server "
                                  "--model DIR` and use --engine openai --base-url URL")

    def build_command(self, config: LaunchConfig, port: int) -> LaunchPlan:
        """``[<deepspeed venv python>, -m, adapters.shims.ds_server, --model DIR, --host, --port,
        --threads N, --served-model-name M, <engine args>]``."""
        flags, env_extra, _ = split_engine_args(config.engine_args)
        model_name = self.served_name(config)
        opts = {"served_model_name": model_name, "threads": str(config.threads), "max_batch_size": "8",
                "batch_window_ms": "10", **flags}
        cmd = [str(engine_python("deepspeed")), "-m", "adapters.shims.ds_server", "--model", str(Path(config.model_dir)),
               "--host", "127.0.0.1", "--port", str(port), *render_flags(opts)]
        env = {**thread_env(config.threads), "PYTHONPATH": project_pythonpath(""), "DS_BUILD_OPS": "0",
               "DS_ACCELERATOR": "cpu", **env_extra}
        return LaunchPlan(cmd=cmd, env=env, model_name=model_name, display_name=self.display_name,
                          health_paths=("/health",), cwd=PROJECT_ROOT,
                          extra_config={"batching": "static", "max_batch_size": int(opts["max_batch_size"])})

    def parity_args(self, target: ParityTarget) -> tuple[dict[str, str], list[str]]:
        """``--parity strict``: the static batch size only (:func:`adapters.parity.static_shim_args`)."""
        return static_shim_args(self.name, target)


def onnx_model_dir(model_dir: Path, precision: str = "fp32", provider: str = "cpu") -> Path:
    """Cache folder of the ONNX build of ``model_dir`` (name + digest of path, size, mtime of its weights)."""
    model_dir = Path(model_dir).resolve()
    h = hashlib.sha256(str(model_dir).encode())
    for f in sorted(model_dir.glob("*.safetensors")):
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return engine_env_dir("onnxruntime") / "models" / f"{model_dir.name}-{precision}-{provider}-{h.hexdigest()[:12]}"


@register("onnxruntime", order=60)
class OnnxRuntimeGenAIAdapter(ServerAdapter):
    """ONNX Runtime GenAI's Generator API behind our streaming shim (the model is built once, cached)."""

    name = "onnxruntime"
    display_name = "onnxruntime-genai (Generator, static batches)"
    flag_source = PROJECT_ROOT / "adapters" / "shims" / "ort_server.py"
    shim = "adapters.shims.ort_server"
    recipe = EngineRecipe(
        name="onnxruntime",
        version_dist="onnxruntime-genai",
        approx="~1 GB",
        steps=(
            # The model builder reads the HF folder with torch + transformers and needs onnx-ir.
            InstallStep("install onnxruntime-genai==0.18.0, onnx-ir and the model builder deps",
                        ("onnxruntime-genai==0.18.0", "onnx-ir", "onnx", "torch==2.13.0", "transformers>=5.20,<6",
                         *SHIM_PACKAGES)),
        ),
    )
    cuda_recipe = CudaRecipe(
        name="onnxruntime", display="ONNX Runtime GenAI 0.18.0 (CUDA)", version_dist="onnxruntime-genai-cuda",
        approx="~4 GB",
        pins=(Pin("onnxruntime-genai-cuda==0.18.0", CUDA_13_0, "ort-meta"),
              Pin("onnxruntime-gpu[cuda,cudnn]==1.31.0", CUDA_13_0, "ort-meta"),
              Pin("torch==2.13.0", CUDA_13_0, "torch-meta")),  # the model builder reads the HF folder with it
        min_cc=(7, 5), cc_source="torch-meta",
        older="pin an onnxruntime-gpu release built for CUDA 12",
        extra=("onnx-ir", "onnx", "transformers>=5.20,<6", *SHIM_PACKAGES))
    build_marks = ("onnxruntime-genai", "onnxruntime-genai-cuda")
    setup_rank, gpu_setup_rank, in_setup_cpu, auto_setup_cpu = 3, 3, True, True
    effective_reader = staticmethod(effective.read_shim)
    production_server = "Foundry Local (Microsoft's OpenAI-compatible server over ONNX Runtime GenAI)"
    capabilities = Capabilities(hardware=("cpu", "nvidia"), features=(), quantization=("int4",), api="shim", complexity=3)
    stop_grace_s = 5.0

    def __init__(self, hardware: str | None = None) -> None:
        self._hardware = hardware

    def probe(self) -> ProbeResult:
        """Available when ``bench engines setup onnxruntime`` has built ``.engines/onnxruntime`` with
        this machine's build (``onnxruntime-genai`` on CPU, ``onnxruntime-genai-cuda`` on NVIDIA)."""
        missing = probe_installed("onnxruntime")
        if missing is not None:
            return missing
        hw = self._hardware or detect_kind()
        wrong = probe_build("onnxruntime", "ONNX Runtime GenAI", hw)
        if wrong is not None:
            return wrong
        dist = "onnxruntime-genai-cuda (CUDA provider)" if hw == "nvidia" else "onnxruntime-genai"
        return ProbeResult(True, f"onnxruntime: {dist} Generator behind our shim",
                           version=installed_version("onnxruntime"))

    def build_command(self, config: LaunchConfig, port: int) -> LaunchPlan:
        """``[<ort venv python>, -m, adapters.shims.ort_server, --model DIR, --onnx-dir CACHE, ...]``;
        the shim builds the ONNX model into CACHE on first use (inside the start-up timeout)."""
        flags, env_extra, _ = split_engine_args(config.engine_args)
        hw = self._hardware or detect_kind()
        provider = "cuda" if hw == "nvidia" else "cpu"
        precision = flags.pop("precision", "fp32")
        model_name = self.served_name(config)
        onnx_dir = onnx_model_dir(Path(config.model_dir), precision, provider)
        opts = {"served_model_name": model_name, "threads": str(config.threads), "max_batch_size": "8",
                "batch_window_ms": "10", "precision": precision, "provider": provider, **flags}
        cmd = [str(engine_python("onnxruntime")), "-m", "adapters.shims.ort_server", "--model", str(Path(config.model_dir)),
               "--onnx-dir", str(onnx_dir), "--host", "127.0.0.1", "--port", str(port), *render_flags(opts)]
        env = {**thread_env(config.threads), "PYTHONPATH": project_pythonpath(""), **env_extra}
        return LaunchPlan(cmd=cmd, env=env, model_name=model_name, display_name=self.display_name,
                          health_paths=("/health",), cwd=PROJECT_ROOT,
                          extra_config={"batching": "static", "onnx_model_dir": str(onnx_dir)})

    def parity_args(self, target: ParityTarget) -> tuple[dict[str, str], list[str]]:
        """``--parity strict``: the static batch size only (:func:`adapters.parity.static_shim_args`)."""
        return static_shim_args(self.name, target)
