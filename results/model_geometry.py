"""Model geometry: the sizes of a transformer that decide how much memory serving it takes.

The one place the KV-cache formula lives (:func:`kv_bytes_per_token`) and the one table of
bytes per element by dtype name (:data:`DTYPE_BYTES`), and the one reader of a model folder's
attention sizes (:func:`read_model_summary`). Imports nothing of the harness.
"""

from __future__ import annotations

import json
from pathlib import Path

from .schema import ModelSummary

DTYPE_BYTES: dict[str, int] = {
    "float32": 4, "fp32": 4, "float": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    "float8": 1, "fp8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1,
}
"""Bytes per weight / KV-cache element for a dtype name as ``config.json``, torch or a CLI
spells it (lower case, without a ``torch.`` prefix)."""


def dtype_bytes_for(dtype: object) -> int | None:
    """Bytes per element of ``dtype`` (``"bfloat16"``, ``"torch.float16"``, ``"FP8"`` ...);
    None when it is empty or not in :data:`DTYPE_BYTES`."""
    name = str(dtype or "").lower().replace("torch.", "")
    return DTYPE_BYTES.get(name)


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """KV-cache bytes one token occupies, in bytes:
    ``2 (K and V) × num_layers × num_kv_heads × head_dim × dtype_bytes``.

    ``num_kv_heads`` is the number of key/value heads (``num_key_value_heads`` in
    ``config.json``; fewer than the attention heads under grouped-query attention),
    ``head_dim`` the size of one head, ``dtype_bytes`` the bytes of one cached element.
    Source: vLLM's KV-cache sizing convention (a full-attention layer's page holds
    ``2 × block_size × num_kv_heads × head_size × dtype size`` bytes), per token and summed
    over layers.
    """
    return 2 * int(num_layers) * int(num_kv_heads) * int(head_dim) * int(dtype_bytes)


def read_model_summary(folder: Path, num_params: int | None = None) -> ModelSummary:
    """Architecture facts from ``folder/config.json`` (Hugging Face names): layers, hidden size,
    attention and KV heads (``num_key_value_heads``, default = attention heads), head dim
    (``head_dim``, default hidden / heads), vocabulary, context, dtype (default float32).

    Raises OSError when the file cannot be read, ValueError when it is not JSON.
    """
    cfg = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    heads = cfg.get("num_attention_heads")
    hidden = cfg.get("hidden_size")
    return ModelSummary(
        name=Path(folder).name,
        path=str(folder),
        architecture=(cfg.get("architectures") or ["?"])[0],
        num_layers=cfg.get("num_hidden_layers"),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=cfg.get("head_dim") or (hidden // heads if hidden and heads else None),
        vocab_size=cfg.get("vocab_size"),
        max_position_embeddings=cfg.get("max_position_embeddings"),
        dtype=str(cfg.get("torch_dtype") or cfg.get("dtype") or "float32"),
        num_params=num_params,
    )
