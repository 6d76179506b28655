"""What differed between two runs (``bench compare``), read from their manifests."""

from __future__ import annotations

from results.differences import run_differences, unrecorded
from results.schema import Manifest


def _manifest(**over: object) -> Manifest:
    base = {"harness_version": "0.1.0", "git_sha": "a" * 40,
            "model": {"name": "SmolLM2", "architecture": "Llama", "dtype": "float32", "digest": "d" * 64},
            "hardware": {"name": "CPU", "kind": "cpu", "cpu_model": "EPYC", "num_devices": 1},
            "workload": {"kind": "agentic", "scale": 0.1, "tokenizer": "/here/model"},
            "engines": {"vllm": {"version": "0.32.0", "engine_args": {}, "threads": 1,
                                 "command": "vllm serve m --port 41234 --max-num-seqs 8"}}}
    for key, value in over.items():
        base[key] = value
    return Manifest.model_validate(base)


def test_each_difference_is_one_line_and_ports_and_paths_are_not_differences() -> None:
    a = _manifest()
    same = _manifest(workload={"kind": "agentic", "scale": 0.1, "tokenizer": "/elsewhere/model"},
                     engines={"vllm": {"version": "0.32.0", "engine_args": {}, "threads": 1,
                                       "command": "vllm serve m --port 50001 --max-num-seqs 8"}})
    assert run_differences(a, same, ["vllm"]) == []
    b = _manifest(git_sha="b" * 40, model={"name": "SmolLM2", "architecture": "Llama", "dtype": "float32",
                                           "digest": "e" * 64},
                  workload={"kind": "agentic", "scale": 0.2},
                  engines={"vllm": {"version": "0.33.0", "engine_args": {}, "threads": 1,
                                    "command": "vllm serve m --port 50001 --max-num-seqs 16"}})
    assert run_differences(a, b, ["vllm"]) == [
        "vllm version: 0.32.0 → 0.33.0",
        "vllm command: vllm serve m --port PORT --max-num-seqs 8 → vllm serve m --port PORT --max-num-seqs 16",
        "harness commit: aaaaaaaaaa → bbbbbbbbbb", "model digest: dddddddddddddddd → eeeeeeeeeeeeeeee",
        "workload scale: 0.1 → 0.2"]


def test_a_fact_one_run_did_not_record_is_said_not_compared() -> None:
    old = _manifest(model={"name": "SmolLM2", "architecture": "Llama", "dtype": "float32"}, git_sha=None)
    assert unrecorded(old, _manifest()) == ["model digest", "harness commit"]
    assert run_differences(old, _manifest(), []) == []
