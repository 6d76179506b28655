"""Hardware profiles and detection (nvidia-smi scripted, never required)."""

from __future__ import annotations

import subprocess

import psutil
import pytest

from adapters.telemetry import hardware as hw
from adapters.telemetry.hardware import get_profile
from results.hardware import GiB, named_profile, profile_from_manifest


def test_named_profiles_and_device_count() -> None:
    h100 = get_profile("h100-80gb", num_devices=8)
    assert (h100.name, h100.kind, h100.num_devices) == ("H100-80GB", "nvidia", 8)
    assert h100.memory_bytes == 80 * GiB and h100.total_memory_bytes == 8 * 80 * GiB
    assert h100.compute_capability == (9, 0) and h100.supports_fp8
    assert not get_profile("A100-80GB").supports_fp8  # cc 8.0 < 8.9
    assert get_profile("L4-24GB").supports_fp8  # Ada, cc 8.9
    assert get_profile("MI300X").kind == "amd"
    cpu = get_profile("CPU")
    assert cpu.kind == "cpu" and cpu.memory_bytes == psutil.virtual_memory().total


def test_unknown_profile_lists_valid_names() -> None:
    with pytest.raises(ValueError, match=r"^unknown hardware profile 'B200': use one of H100-80GB, H200-141GB, "
                                         r"A100-80GB, L4-24GB, MI300X, CPU, detected$"):
        get_profile("B200")
    with pytest.raises(ValueError, match="at least 1"):
        get_profile("H100-80GB", num_devices=0)


def test_named_profiles_need_no_detection() -> None:
    # results.hardware resolves every named profile (what the scorer and the reports see);
    # only "detected" needs adapters.telemetry.hardware, which runs nvidia-smi / rocm-smi
    for name in ("H100-80GB", "mi300x", "CPU"):
        assert named_profile(name, num_devices=2) == get_profile(name, num_devices=2)
    with pytest.raises(ValueError, match="^unknown hardware profile 'B200': use one of .*, detected$"):
        named_profile("B200")
    with pytest.raises(ValueError, match="describes this machine: adapters.telemetry.hardware.get_profile detects it"):
        named_profile("detected")


def test_detect_parses_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    out = "NVIDIA H200, 143771, 9.0\nNVIDIA H200, 143771, 9.0\n"
    monkeypatch.setattr(hw.shutil, "which", lambda name: "/usr/bin/nvidia-smi" if name == "nvidia-smi" else None)
    monkeypatch.setattr(hw.subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, stdout=out, stderr=""))
    prof = hw.detect_hardware()
    assert (prof.kind, prof.num_devices, prof.compute_capability) == ("nvidia", 2, (9, 0))
    assert prof.memory_bytes == 143771 * 1024**2 and prof.supports_fp8
    assert get_profile("detected", num_devices=1).num_devices == 1


def test_detect_falls_back_to_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hw.shutil, "which", lambda name: None)
    prof = hw.detect_hardware()
    assert prof.kind == "cpu" and prof.memory_bytes == psutil.virtual_memory().total


def test_profile_from_manifest() -> None:
    assert profile_from_manifest({}) is None
    cpu = profile_from_manifest({"cpu_model": "Xeon", "memory_bytes": 8 * GiB, "gpus": []})
    assert cpu is not None and (cpu.kind, cpu.memory_bytes) == ("cpu", 8 * GiB)
    gpu = profile_from_manifest({"gpus": [{"name": "NVIDIA L4", "memory_bytes": 24 * GiB, "compute_capability": "8.9"}]})
    assert gpu is not None and gpu.kind == "nvidia" and gpu.supports_fp8


def test_a_profile_recorded_as_facts_reads_back_as_its_dict_does() -> None:
    """``manifest.hardware`` is a :class:`HardwareFacts` with ``to_dict()``'s keys, in its order;
    it reads back as the same target as the dict, and an empty one as nothing recorded."""
    import json

    from results.schema import HardwareFacts

    profile = get_profile("H100-80GB", num_devices=2).with_price(1.5)
    facts = profile.to_facts()
    assert json.loads(facts.model_dump_json()) == json.loads(json.dumps(profile.to_dict()))
    assert list(facts.model_dump()) == list(profile.to_dict())
    assert profile_from_manifest(facts) == profile_from_manifest(profile.to_dict()) is not None
    assert facts.compute_capability == [9, 0] and facts.total_memory_bytes == 160 * GiB
    assert profile_from_manifest(HardwareFacts()) is None and profile_from_manifest(None) is None


def test_profile_from_a_stored_hardware_profile() -> None:
    """``bench run`` records ``HardwareProfile.__dict__``; it must come back as the same target."""
    import dataclasses
    import json

    stored = json.loads(json.dumps(dataclasses.asdict(get_profile("H100-80GB", num_devices=2))))
    prof = profile_from_manifest(stored)
    assert prof is not None
    assert (prof.name, prof.kind, prof.num_devices, prof.compute_capability, prof.supports_fp8) == (
        "recorded: H100-80GB", "nvidia", 2, (9, 0), True)
    assert prof.memory_bytes == 80 * GiB
