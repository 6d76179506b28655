"""Data-file readers: the shipped files load with the documented row counts; malformed files are
rejected with one line naming the file, the line number and the fix. Also YAML spec files."""

from __future__ import annotations

from pathlib import Path

import pytest

from workloads.errors import WorkloadError
from workloads.loaders import (
    data_path,
    list_trajectory_files,
    load_azure_trace,
    load_length_pairs,
    load_mooncake_trace,
    load_servegen_pmf,
    load_servegen_windows,
    load_sharegpt_prompts,
    load_trajectory,
)
from workloads.registry import resolve_spec
from workloads.spec import SPEC_TYPES

AZ_OK = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:04.0319600,3180,8\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def assert_one_line(exc: pytest.ExceptionInfo, path: Path, line: int) -> None:
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}:{line}: "), msg


def test_shipped_data_loads_with_documented_sizes():
    code = load_azure_trace(data_path("azure_llm_2023", "AzureLLMInferenceTrace_code.csv"))
    assert len(code) == 8819 and code[0].timestamp_s == 0.0
    assert (code[0].input_tokens, code[0].output_tokens) == (4808, 10)
    assert code[1].timestamp_s == pytest.approx(0.052)
    conv = load_azure_trace(data_path("azure_llm_2023", "AzureLLMInferenceTrace_conv.csv"))
    assert len(conv) == 6000
    moon = load_mooncake_trace(data_path("mooncake_fast25", "conversation_trace.jsonl"))
    assert len(moon) == 2000 and moon[0].hash_ids[:3] == (0, 1, 2)
    assert len(load_length_pairs(data_path("sharegpt_lengths_sarathi", "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"))) == 5000
    assert len(load_sharegpt_prompts(data_path("sharegpt_prompts_1000", "ShareGPT_V3_filtered_1000.json"))) == 1000
    assert len(load_servegen_windows(data_path("servegen_subset", "language", "m-large", "chunk-61-trace.csv"))) == 2016
    values, probs = load_servegen_pmf(data_path("servegen_subset", "language", "m-large", "chunk-61-dataset.json"), "input_tokens")
    assert probs.sum() == pytest.approx(1.0) and values.min() >= 1
    files = list_trajectory_files()
    assert len(files) == 22
    pydicom = load_trajectory(next(f for f in files if "pydicom" in f.name))
    assert sum(m.role == "assistant" for m in pydicom.messages) == 12  # api_calls in its model_stats
    for folder in data_path().iterdir():
        assert (folder / "SOURCE.md").is_file(), folder


@pytest.mark.parametrize(
    "text,line,fragment",
    [
        ("TIME,ContextTokens,GeneratedTokens\n", 1, "expected the header"),
        (AZ_OK + "2023-11-16 18:17:05.0,12\n", 4, "expected 3 comma-separated columns"),
        (AZ_OK + "2023-11-16 18:17:05.0,12,x\n", 4, "GeneratedTokens must be an integer"),
        (AZ_OK + "2023-11-16 18:17:05.0,-3,1\n", 4, "ContextTokens must be an integer >= 1"),
        (AZ_OK + "yesterday,12,1\n", 4, "TIMESTAMP 'yesterday'"),
        (AZ_OK + "2023-11-16 18:17:01.0,12,1\n", 4, "sort the trace by time"),
    ],
)
def test_azure_loader_rejects_malformed_lines(tmp_path, text, line, fragment):
    p = write(tmp_path, "t.csv", text)
    with pytest.raises(WorkloadError, match=fragment) as exc:
        load_azure_trace(p)
    assert_one_line(exc, p, line)


MOON_OK = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n'


@pytest.mark.parametrize(
    "bad,fragment",
    [
        ('{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]\n', "not valid JSON"),
        ('[1, 2]\n', "expected a JSON object"),
        ('{"timestamp": 5, "input_length": 600, "output_length": 5}\n', r"missing field\(s\) hash_ids"),
        ('{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [0]}\n', r"hash_ids has 1 entries but input_length 600 needs ceil\(600/512\) = 2"),
        ('{"timestamp": 5, "input_length": "600", "output_length": 5, "hash_ids": [0, 1]}\n', "input_length must be an integer"),
        ('{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [0, "a"]}\n', "hash_ids must be a list of integers"),
        ('{"timestamp": -1, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n', "timestamp must be a number"),
    ],
)
def test_mooncake_loader_rejects_malformed_lines(tmp_path, bad, fragment):
    p = write(tmp_path, "t.jsonl", MOON_OK + "\n" + bad)  # blank line 2 is skipped: the bad one is line 3
    with pytest.raises(WorkloadError, match=fragment) as exc:
        load_mooncake_trace(p)
    assert_one_line(exc, p, 3)


def test_mooncake_loader_makes_timestamps_relative_seconds(tmp_path):
    p = write(tmp_path, "t.jsonl", MOON_OK.replace('"timestamp": 0', '"timestamp": 1000') + MOON_OK.replace('"timestamp": 0', '"timestamp": 3500'))
    rows = load_mooncake_trace(p)
    assert [r.timestamp_s for r in rows] == [0.0, 2.5]


def test_other_loaders_reject_malformed_files(tmp_path):
    p = write(tmp_path, "w.csv", "0,1.0,1.0,Gamma,1,1\n600,2.0,1.0\n")
    with pytest.raises(WorkloadError, match="expected 6 columns") as exc:
        load_servegen_windows(p)
    assert_one_line(exc, p, 2)
    p = write(tmp_path, "w2.csv", "0,1.0,1.0,Gamma,1,1\n600,-2.0,1.0,Gamma,1,1\n")
    with pytest.raises(WorkloadError, match="finite and >= 0") as exc:
        load_servegen_windows(p)
    assert_one_line(exc, p, 2)
    p = write(tmp_path, "l.csv", "num_prefill_tokens,num_decode_tokens\n10,5\n10,five\n")
    with pytest.raises(WorkloadError, match="num_decode_tokens must be an integer") as exc:
        load_length_pairs(p)
    assert_one_line(exc, p, 3)
    p = write(tmp_path, "l2.csv", "prefill,decode\n10,5\n")
    with pytest.raises(WorkloadError, match="missing column 'num_prefill_tokens'") as exc:
        load_length_pairs(p)
    assert_one_line(exc, p, 1)
    p = write(tmp_path, "s.json", '[\n{"conversations": [{"from": "human", "value": "hi"}]},\n{"conversations": [}\n]')
    with pytest.raises(WorkloadError, match="not valid JSON") as exc:
        load_sharegpt_prompts(p)
    assert_one_line(exc, p, 3)
    p = write(tmp_path, "x.traj", '{"history": []}')
    with pytest.raises(WorkloadError, match="no 'history' list"):
        load_trajectory(p)
    with pytest.raises(WorkloadError, match="does not exist"):
        load_azure_trace(tmp_path / "missing.csv")


def test_yaml_spec_files(tmp_path):
    p = write(tmp_path, "a.yaml", "kind: agentic\nseed: 3\nnum_sessions: 2\nscale: 0.1\n")
    spec = resolve_spec("agentic", p, seed=5)
    assert (spec.seed, spec.num_sessions, spec.scale) == (5, 2, 0.1)  # flags beat the file
    with pytest.raises(WorkloadError, match="describes a 'agentic' workload, not 'random'"):
        resolve_spec("random", p)
    p = write(tmp_path, "b.yaml", "kind: random\ninput_len: [1\n")
    with pytest.raises(WorkloadError) as exc:
        resolve_spec("random", p)
    assert str(exc.value).startswith(f"{p}:3: ") or str(exc.value).startswith(f"{p}:2: ")
    p = write(tmp_path, "c.yaml", "kind: random\ninput_lenn: 5\n")
    with pytest.raises(WorkloadError, match="input_lenn is not a setting here: drop it"):
        resolve_spec("random", p)
    with pytest.raises(WorkloadError, match="unknown workload 'nope'"):
        resolve_spec("nope")
    with pytest.raises(WorkloadError, match="--time-scale does not apply to the chat workload"):
        resolve_spec("chat", time_scale=2.0)
    # the neutral defaults of the original signature are accepted everywhere
    assert resolve_spec("trace", request_rate=float("inf"), range_ratio=0.0).kind == "trace"


@pytest.mark.parametrize("kind", sorted(SPEC_TYPES))
def test_shipped_example_specs_load_to_the_defaults(kind):
    path = Path(__file__).resolve().parents[2] / "workloads" / "specs" / f"{kind}.yaml"
    assert resolve_spec(kind, path) == SPEC_TYPES[kind]()
