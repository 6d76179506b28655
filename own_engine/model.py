"""Llama-architecture decoder in plain PyTorch, reading ``*.safetensors`` directly.

Architecture (Touvron et al. 2023, "LLaMA", §2.2; GQA: Ainslie et al. 2023): pre-norm RMSNorm
(Zhang & Sennrich 2019), rotary position embeddings (Su et al. 2021, "RoFormer" §3.4, HF's
``rotate_half`` convention, incl. the config's ``rope_theta`` and ``rope_scaling``), grouped-query
attention, SwiGLU MLP (Shazeer 2020). q/k/v and gate/up projections are fused into one matmul each.
Weights are fp32 on CPU; tied embeddings reuse ``embed_tokens`` as the LM head.

The model computes one flattened varlen batch per call (see :mod:`own_engine.attention`); a
layer-truncated view (:meth:`LlamaModel.truncated`) serves as the self-draft model.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F

from own_engine.attention import AttentionMetadata, paged_attention, write_kv
from own_engine.config import ModelConfig


class WeightsError(RuntimeError):
    """The safetensors files are missing or lack a tensor; the message names it and the fix."""


def load_safetensors(model_dir: Path) -> dict[str, torch.Tensor]:
    """All tensors of ``model.safetensors`` (or the shards listed in ``model.safetensors.index.json``)."""
    from safetensors.torch import load_file

    model_dir = Path(model_dir)
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = [p.name for p in sorted(model_dir.glob("*.safetensors"))]
    if not files:
        raise WeightsError(f"{model_dir} has no *.safetensors weights: convert the model to safetensors first")
    out: dict[str, torch.Tensor] = {}
    for name in files:
        out.update(load_file(str(model_dir / name)))
    return out


def rope_cos_sin(model_dir: Path, head_dim: int, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [max_len, head_dim/2] for positions 0..max_len-1 (fp32).

    ``default`` RoPE: inv_freq = theta^(-2i/d) (RoFormer §3.4). Other ``rope_type`` values
    (linear, llama3, yarn, longrope, ...) use transformers' ``ROPE_INIT_FUNCTIONS`` (the anchor
    implementation), with their attention scaling factor folded into cos/sin; ``dynamic`` NTK is
    evaluated at ``max_len``.
    """
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(str(model_dir))
    params = getattr(cfg, "rope_parameters", None) or {}
    if not params:  # older transformers
        params = dict(getattr(cfg, "rope_scaling", None) or {})
        params.setdefault("rope_theta", getattr(cfg, "rope_theta", 10000.0))
    rope_type = params.get("rope_type", params.get("type", "default"))
    factor = 1.0
    if rope_type == "default":
        inv_freq = 1.0 / (params.get("rope_theta", 10000.0) ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
    else:
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        if rope_type not in ROPE_INIT_FUNCTIONS:
            raise WeightsError(f"unsupported rope_type {rope_type!r} in {model_dir}/config.json")
        inv_freq, factor = ROPE_INIT_FUNCTIONS[rope_type](cfg, torch.device("cpu"), seq_len=max_len)
    freqs = torch.outer(torch.arange(max_len, dtype=torch.float), inv_freq.float())
    return freqs.cos() * factor, freqs.sin() * factor


class LlamaModel:
    """A Llama decoder over a flat token batch with a paged KV cache.

    ``layers``: list of per-layer weight dicts (shared with truncated views). ``forward`` returns the
    final hidden states [T, hidden]; ``compute_logits`` maps selected rows to [N, vocab].
    """

    def __init__(self, cfg: ModelConfig, embed: torch.Tensor, layers: list[dict[str, torch.Tensor]],
                 norm: torch.Tensor, lm_head: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 attention_fn=paged_attention) -> None:
        self.cfg = cfg
        self.embed = embed
        self.layers = layers
        self.norm = norm
        self.lm_head = lm_head
        self.cos = cos
        self.sin = sin
        self.attention_fn = attention_fn
        self.scale = cfg.head_dim ** -0.5

    @classmethod
    def from_dir(cls, model_dir: Path, cfg: ModelConfig, max_len: int, device: torch.device,
                 attention_fn=paged_attention) -> "LlamaModel":
        """Load weights from ``model_dir``; raises :class:`WeightsError` naming a missing tensor."""
        w = load_safetensors(model_dir)

        def take(name: str) -> torch.Tensor:
            if name not in w:
                raise WeightsError(f"{model_dir} lacks tensor {name!r}: not a Llama checkpoint in HF format")
            return w.pop(name).to(device=device, dtype=torch.float32)

        embed = take("model.embed_tokens.weight")
        layers = []
        for i in range(cfg.num_layers):
            p = f"model.layers.{i}."
            qkv = torch.cat([take(p + "self_attn.q_proj.weight"), take(p + "self_attn.k_proj.weight"),
                             take(p + "self_attn.v_proj.weight")], 0).contiguous()
            gate_up = torch.cat([take(p + "mlp.gate_proj.weight"), take(p + "mlp.up_proj.weight")], 0).contiguous()
            layers.append({
                "in_norm": take(p + "input_layernorm.weight"),
                "qkv": qkv,
                "o": take(p + "self_attn.o_proj.weight"),
                "post_norm": take(p + "post_attention_layernorm.weight"),
                "gate_up": gate_up,
                "down": take(p + "mlp.down_proj.weight"),
            })
        norm = take("model.norm.weight")
        if "lm_head.weight" in w and not cfg.tie_word_embeddings:
            lm_head = take("lm_head.weight")
        elif cfg.tie_word_embeddings or "lm_head.weight" not in w:
            lm_head = embed
        cos, sin = rope_cos_sin(model_dir, cfg.head_dim, max_len)
        return cls(cfg, embed, layers, norm, lm_head, cos.to(device), sin.to(device), attention_fn)

    def truncated(self, num_layers: int) -> "LlamaModel":
        """The first ``num_layers`` layers + final norm + LM head, sharing this model's tensors
        (layer-truncated self-draft, as in LayerSkip/"self-speculative decoding", Zhang et al. 2023)."""
        if not 1 <= num_layers <= len(self.layers):
            raise ValueError(f"draft_num_layers must be in [1, {len(self.layers)}], got {num_layers}")
        return LlamaModel(self.cfg, self.embed, self.layers[:num_layers], self.norm, self.lm_head,
                          self.cos, self.sin, self.attention_fn)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def _rms_norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        return w * (x * torch.rsqrt(var + self.cfg.rms_norm_eps))

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                kv_caches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """``input_ids``, ``positions`` [T] int64 → final-normed hidden states [T, hidden].

        ``kv_caches``: one (K, V) pair per layer, each [num_blocks, block_size, num_kv_heads, head_dim];
        this step's K/V are written at ``meta.slot_mapping``.
        """
        c = self.cfg
        T = input_ids.shape[0]
        H, nkv, D = c.num_heads, c.num_kv_heads, c.head_dim
        cos = self.cos.index_select(0, positions).unsqueeze(1)  # [T, 1, D/2]
        sin = self.sin.index_select(0, positions).unsqueeze(1)
        h = F.embedding(input_ids, self.embed)
        inter = c.intermediate_size
        for layer, (k_cache, v_cache) in zip(self.layers, kv_caches):
            x = self._rms_norm(h, layer["in_norm"])
            qkv = F.linear(x, layer["qkv"])
            qk = self._rope(qkv[:, :(H + nkv) * D].view(T, H + nkv, D), cos, sin)
            q, k = qk[:, :H], qk[:, H:]
            v = qkv[:, (H + nkv) * D:].view(T, nkv, D)
            write_kv(k, v, k_cache, v_cache, meta.slot_mapping)
            attn = self.attention_fn(q, k, v, k_cache, v_cache, meta, self.scale)
            h = h + F.linear(attn.reshape(T, H * D), layer["o"])
            x = self._rms_norm(h, layer["post_norm"])
            gu = F.linear(x, layer["gate_up"])
            h = h + F.linear(F.silu(gu[:, :inter]) * gu[:, inter:], layer["down"])
        return self._rms_norm(h, self.norm)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[N, hidden] → logits [N, vocab] (fp32)."""
        return F.linear(hidden, self.lm_head)
