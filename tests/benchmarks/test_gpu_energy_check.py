"""``benchmarks/gpu_energy_check.py``: its weight count (the bandwidth bound's denominator) against
the random checkpoint's own count, and the table it writes from a stored result, figures and
missing ones ("–", never 0) alike."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from own_engine.config import ModelConfig
from own_engine.random_model import SMOLLM2_135M

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpu_energy_check", ROOT / "benchmarks" / "gpu_energy_check.py")
gec = importlib.util.module_from_spec(_spec)
sys.modules["gpu_energy_check"] = gec
_spec.loader.exec_module(gec)


def _config(spec) -> ModelConfig:
    return ModelConfig(num_layers=spec.num_layers, hidden_size=spec.hidden_size, num_heads=spec.num_heads,
                       num_kv_heads=spec.num_kv_heads, head_dim=spec.head_dim, intermediate_size=spec.intermediate_size,
                       vocab_size=spec.vocab_size, rms_norm_eps=1e-5, max_position_embeddings=8192,
                       tie_word_embeddings=spec.tie_word_embeddings)


def test_the_weight_count_is_smollm2_135m_s() -> None:
    assert gec.weight_count(_config(SMOLLM2_135M)) == SMOLLM2_135M.num_params == 134_515_008
    # fp32 weights over an H200's 4.8 TB/s: the ~8,900 tok/s bound the issue quotes
    assert round(4.8e12 / (SMOLLM2_135M.num_params * 4), -2) == 8900


def test_the_table_shows_figures_and_dashes_for_what_was_not_read() -> None:
    doc = {"device_name": "NVIDIA H200", "sections": {
        "ladder": {"capacity_tps": 2345.6, "capacity_interval": [2300.1, 2400.9], "capacity_load": 64.0,
                   "binding": "tpot_p90", "tokens_per_j": 5.123, "tokens_per_j_interval": [4.9, 5.31],
                   "energy_source": "nvml"},
        "nvml": {"counter_j": 4100.0, "sampled_j": 4060.5, "counter_over_sampled": 1.00973, "pass": True},
        "decode": {"decode_tok_s": 86.2, "bound_tok_s": 8921.0, "bandwidth_gb_s": 4800.0, "weight_bytes": 538060032,
                   "fraction_of_bound": 0.00966}}}
    text = gec.table(doc)
    assert "| own capacity, output tok/s | 2,346 [2,300–2,401] at 64 in flight (tpot_p90) |" in text
    assert "| output tokens per joule at capacity | 5.12 [4.9–5.31], nvml |" in text
    assert "4,100 J vs 4,060 J: 1.01 (within 5 %: True)" in text
    assert "86.2 vs 8,921 tok/s" in text and "0.00966 of it" in text
    empty = gec.table({"device_name": "cpu (dry run)", "sections": {"nvml": {"skipped": "no NVML"}}})
    assert "– J vs – J" in empty and " 0 " not in empty
