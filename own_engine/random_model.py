"""A random-weight Llama model folder with a synthetic word-level tokenizer, written locally.

For tests and device checks that must not depend on a downloaded model: the folder has the same
layout as a real Hugging Face Llama checkpoint (``config.json``, ``model.safetensors``,
``tokenizer.json``, ``tokenizer_config.json``, ``generation_config.json``), so
:class:`own_engine.engine.LLMEngine` loads it through its ordinary path.

Weights are drawn from a seeded generator (deterministic). The q/k projections are scaled up
(``qk_std``) so attention is peaked rather than near-uniform: an attention bug (wrong block, wrong
mask, wrong KV head) then changes the output visibly instead of averaging away. The tokenizer has
one word per token id (``<unk>`` = 0, ``<s>`` = 1, ``</s>`` = 2, ``t3`` ... ``t{vocab-1}``), so
every id of the model's vocabulary decodes.

``SMOLLM2_135M`` is the shape of the embedded default model (SmolLM2-135M-Instruct).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch


@dataclass(frozen=True)
class RandomLlamaSpec:
    num_layers: int = 2
    hidden_size: int = 128
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 256
    vocab_size: int = 512
    max_position_embeddings: int = 2048
    rope_theta: float = 100000.0
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = True
    seed: int = 0
    embed_std: float = 0.05
    qk_std: float = 0.08
    std: float = 0.02

    def with_(self, **kw) -> "RandomLlamaSpec":
        return replace(self, **kw)

    @property
    def num_params(self) -> int:
        h, H, kv, d, i, v = (self.hidden_size, self.num_heads, self.num_kv_heads, self.head_dim,
                             self.intermediate_size, self.vocab_size)
        per_layer = h * (H + 2 * kv) * d + H * d * h + 3 * h * i + 2 * h
        return v * h * (1 if self.tie_word_embeddings else 2) + self.num_layers * per_layer + h


SMOLLM2_135M = RandomLlamaSpec(num_layers=30, hidden_size=576, num_heads=9, num_kv_heads=3, head_dim=64,
                               intermediate_size=1536, vocab_size=49152, max_position_embeddings=8192)

# tokenizer_config "tokenizer_class" values tried in order (transformers 4.x and 5.x both load the first)
_TOKENIZER_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")


def _write_tokenizer(folder: Path, vocab_size: int, tokenizer_class: str) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"t{i}": i for i in range(3, vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": tokenizer_class, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "model_max_length": 1 << 20,
    }, indent=1))


def _check_tokenizer(folder: Path, vocab_size: int) -> str | None:
    """None when AutoTokenizer loads the folder's tokenizer and round-trips ids; else why not."""
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(folder))
        ids = [3, 4, vocab_size - 1]
        got = tok(" ".join(f"t{i}" for i in ids))["input_ids"]
        if got != ids or tok.eos_token_id != 2:
            return f"round trip gave {got} (eos {tok.eos_token_id}), expected {ids} (eos 2)"
        return None
    except Exception as exc:  # noqa: BLE001 - reported to the caller
        return f"{type(exc).__name__}: {exc}"


def _weights(spec: RandomLlamaSpec) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(spec.seed)
    h, d, inter = spec.hidden_size, spec.head_dim, spec.intermediate_size

    def randn(*shape: int, std: float) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * std

    def norm() -> torch.Tensor:
        return 1.0 + randn(h, std=0.1)

    w = {"model.embed_tokens.weight": randn(spec.vocab_size, h, std=spec.embed_std)}
    out_std = spec.std / (2 * spec.num_layers) ** 0.5
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm()
        w[p + "self_attn.q_proj.weight"] = randn(spec.num_heads * d, h, std=spec.qk_std)
        w[p + "self_attn.k_proj.weight"] = randn(spec.num_kv_heads * d, h, std=spec.qk_std)
        w[p + "self_attn.v_proj.weight"] = randn(spec.num_kv_heads * d, h, std=spec.std * 4)
        w[p + "self_attn.o_proj.weight"] = randn(h, spec.num_heads * d, std=out_std * 4)
        w[p + "post_attention_layernorm.weight"] = norm()
        w[p + "mlp.gate_proj.weight"] = randn(inter, h, std=spec.std * 4)
        w[p + "mlp.up_proj.weight"] = randn(inter, h, std=spec.std * 4)
        w[p + "mlp.down_proj.weight"] = randn(h, inter, std=out_std * 4)
    w["model.norm.weight"] = norm()
    if not spec.tie_word_embeddings:
        w["lm_head.weight"] = randn(spec.vocab_size, h, std=spec.embed_std)
    return w


def write_random_llama(folder: Path, spec: RandomLlamaSpec = RandomLlamaSpec()) -> Path:
    """Write a random-weight Llama checkpoint of shape ``spec`` into ``folder`` (created); returns it.

    Raises ``ValueError`` for a geometry no Llama checkpoint can have (checked before anything is
    written), ``RuntimeError`` when transformers cannot load the written tokenizer under any of the
    class names tried (the message lists each reason).
    """
    from safetensors.torch import save_file

    sizes = {k: getattr(spec, k) for k in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                                           "intermediate_size", "vocab_size")}
    if any(type(v) is not int or v < 1 for v in sizes.values()):  # bool and float are not sizes
        raise ValueError(f"random Llama sizes must be integers >= 1, got {sizes}")
    if spec.hidden_size % spec.num_heads:  # transformers' LlamaConfig refuses it
        raise ValueError(f"hidden_size {spec.hidden_size} is not a multiple of num_heads {spec.num_heads}")
    if spec.num_heads % spec.num_kv_heads:
        raise ValueError(f"num_heads {spec.num_heads} is not a multiple of num_kv_heads {spec.num_kv_heads} (GQA groups)")
    if spec.head_dim % 2 or spec.vocab_size < 8:  # RoPE rotates pairs; ids 0-2 are special, 3+ words
        raise ValueError(f"head_dim must be even (RoPE pairs) and vocab_size >= 8, got {spec.head_dim}, {spec.vocab_size}")

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "rms_norm_eps": spec.rms_norm_eps,
        "rope_theta": spec.rope_theta,
        "rope_scaling": None,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    (folder / "random_spec.json").write_text(json.dumps(asdict(spec), indent=1))
    save_file({k: v.contiguous() for k, v in _weights(spec).items()}, str(folder / "model.safetensors"))
    reasons = []
    for cls in _TOKENIZER_CLASSES:
        _write_tokenizer(folder, spec.vocab_size, cls)
        why = _check_tokenizer(folder, spec.vocab_size)
        if why is None:
            return folder
        reasons.append(f"{cls}: {why}")
    raise RuntimeError("transformers could not load the synthetic tokenizer: " + "; ".join(reasons))
