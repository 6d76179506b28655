"""Llama-architecture decoder in plain PyTorch, reading ``*.safetensors`` directly.

Architecture (Touvron et al. 2023, "LLaMA", §2.2; GQA: Ainslie et al. 2023): pre-norm RMSNorm
(Zhang & Sennrich 2019), rotary position embeddings (Su et al. 2021, "RoFormer" §3.4, HF's
``rotate_half`` convention, incl. the config's ``rope_theta`` and ``rope_scaling``), grouped-query
attention, SwiGLU MLP (Shazeer 2020). q/k/v and gate/up projections are fused into one matmul each
(:class:`~own_engine.linear.Linear`: the native panel GEMM or oneDNN-prepacked on CPU). Weights are
fp32 on CPU, fp32 or bf16/fp16 on CUDA (``from_dir(dtype=...)``; in half precision RoPE is applied
in fp32 and rounded back, RMSNorm upcasts internally, attention accumulates in fp32); tied embeddings reuse
``embed_tokens`` as the LM head.

RoPE as one complex multiply: at load time the rows of each q/k head are permuted from HF's
half-split order ``(x_0..x_{D/2-1}, x_{D/2}..x_{D-1})`` to interleaved pairs ``(x_i, x_{i+D/2})``,
so rotating a pair by ``theta_i`` is ``(x_i + j x_{i+D/2}) * (cos + j sin)`` — the same products as
``rotate_half``, in one op instead of seven. Attention only sees q·k dot products, and q and k get
the same permutation, so outputs are unchanged; the K cache holds the permuted layout.

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
from own_engine.linear import Linear


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

    def __init__(self, cfg: ModelConfig, embed: torch.Tensor, layers: list[dict],
                 norm: torch.Tensor, lm_head: Linear, cos: torch.Tensor, sin: torch.Tensor,
                 attention_fn=paged_attention) -> None:
        self.cfg = cfg
        self.embed = embed
        self.layers = layers
        self.norm = norm
        self.lm_head = lm_head
        self.cos = cos
        self.sin = sin
        self.freqs = torch.complex(cos, sin)  # [max_len, D/2] e^{j pos theta_i}
        self.attention_fn = attention_fn
        self.write_kv = getattr(attention_fn, "write_kv", write_kv)  # a kernel may bring its own KV write
        # the native CPU kernels also fuse the layer's elementwise work (fp32 CPU only)
        self.layer_ops = (getattr(attention_fn, "layer_ops", None)
                          if embed.device.type == "cpu" and embed.dtype == torch.float32 else None)
        self.scale = cfg.head_dim ** -0.5
        # decode-only steps run all layers in one native call when every projection has panels
        # (own_engine/cpu_kernels.py NativeLayerOps.decode_forward); False = the per-op loop below
        self.fused_decode = self.layer_ops is not None and all(
            layer[k].panels is not None for layer in layers for k in ("qkv", "o", "gate_up", "down"))
        self._layer_ptrs: tuple[tuple[int, ...], torch.Tensor] | None = None  # (KV cache addresses, table)

    @classmethod
    def from_dir(cls, model_dir: Path, cfg: ModelConfig, max_len: int, device: torch.device,
                 attention_fn=paged_attention, linear_backend: str = "auto",
                 dtype: torch.dtype = torch.float32) -> "LlamaModel":
        """Load weights from ``model_dir`` as ``dtype`` (every weight; the RoPE tables stay fp32);
        raises :class:`WeightsError` naming a missing tensor.

        ``linear_backend``: ``"auto"`` (native panel GEMM or oneDNN-prepacked on CPU, fp32 only) or
        ``"dense"`` (see :class:`~own_engine.linear.Linear`)."""
        w = load_safetensors(model_dir)

        def take(name: str) -> torch.Tensor:
            if name not in w:
                raise WeightsError(f"{model_dir} lacks tensor {name!r}: not a Llama checkpoint in HF format")
            return w.pop(name).to(device=device, dtype=dtype)

        panel_ops = None
        ops = getattr(attention_fn, "layer_ops", None)
        if ops is None and linear_backend == "auto" and device.type == "cpu" and dtype == torch.float32:
            from own_engine.cpu_kernels import native_attention  # the native kernels, even with torch attention

            native, _ = native_attention()
            ops = None if native is None else native.layer_ops
        # single-threaded: with more threads MKL/oneDNN split the matmul and win (own_engine/linear.py);
        # the plain-C fallback (no AVX-512) would lose to BLAS
        if ops is not None and ops.panel_vectorized and torch.get_num_threads() == 1:
            panel_ops = ops

        def lin(t: torch.Tensor) -> Linear:
            return Linear(t.contiguous(), linear_backend, panel_ops)

        D = cfg.head_dim
        # per head, row 2i <- row i and row 2i+1 <- row i + D/2 (interleaved RoPE pairs, module docstring)
        perm = torch.stack([torch.arange(D // 2), torch.arange(D // 2) + D // 2], 1).reshape(-1)

        def rope_rows(t: torch.Tensor, heads: int) -> torch.Tensor:
            return t.view(heads, D, -1)[:, perm.to(t.device)].reshape(heads * D, -1)

        embed = take("model.embed_tokens.weight")
        layers = []
        for i in range(cfg.num_layers):
            p = f"model.layers.{i}."
            qkv = torch.cat([rope_rows(take(p + "self_attn.q_proj.weight"), cfg.num_heads),
                             rope_rows(take(p + "self_attn.k_proj.weight"), cfg.num_kv_heads),
                             take(p + "self_attn.v_proj.weight")], 0)
            gate_up = torch.cat([take(p + "mlp.gate_proj.weight"), take(p + "mlp.up_proj.weight")], 0)
            layers.append({
                "in_norm": take(p + "input_layernorm.weight"),
                "qkv": lin(qkv),
                "o": lin(take(p + "self_attn.o_proj.weight")),
                "post_norm": take(p + "post_attention_layernorm.weight"),
                "gate_up": lin(gate_up),
                "down": lin(take(p + "mlp.down_proj.weight")),
            })
        norm = take("model.norm.weight")
        if "lm_head.weight" in w and not cfg.tie_word_embeddings:
            lm_head = lin(take("lm_head.weight"))
        else:
            lm_head = lin(embed)
        cos, sin = rope_cos_sin(model_dir, cfg.head_dim, max_len)
        return cls(cfg, embed, layers, norm, lm_head, cos.to(device), sin.to(device), attention_fn)

    @property
    def linear_kernels(self) -> str:
        """Which matmul paths the projections take (see :mod:`own_engine.linear`): e.g.
        ``"native panel GEMM"``, ``"oneDNN (M > 1) + MKL (M = 1)"``, ``"F.linear"``."""
        lin = self.lm_head
        if lin.panels is not None:
            return "native panel GEMM"
        return "oneDNN (M > 1) + MKL (M = 1)" if lin.packed is not None else "F.linear"

    def weight_bytes_per_token(self) -> int:
        """Bytes of weights one batch-1 decode step reads: every layer's projections and norms, the
        final norm and the whole LM head (the embedding contributes one row; not counted)."""
        total = self.norm.numel() * self.norm.element_size() + self.lm_head.nbytes
        for layer in self.layers:
            for t in layer.values():
                total += t.nbytes if isinstance(t, Linear) else t.numel() * t.element_size()
        return total

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

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                kv_caches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """``input_ids``, ``positions`` [T] int64 → final-normed hidden states [T, hidden].

        ``kv_caches``: one (K, V) pair per layer, each [num_blocks, block_size, num_kv_heads, head_dim];
        this step's K/V are written at ``meta.slot_mapping``. RMSNorm (Zhang & Sennrich 2019) is
        ``F.rms_norm`` (bit-identical to HF's ``w * x * rsqrt(mean(x^2) + eps)`` in fp32, one op).
        """
        if self.layer_ops is not None:
            return self._forward_native(input_ids, positions, meta, kv_caches)
        c = self.cfg
        T = input_ids.shape[0]
        H, nkv, D = c.num_heads, c.num_kv_heads, c.head_dim
        hidden, eps, inter = (c.hidden_size,), c.rms_norm_eps, c.intermediate_size
        freqs = self.freqs.index_select(0, positions).unsqueeze(1)  # [T, 1, D/2] complex64
        h = F.embedding(input_ids, self.embed)
        wdt = h.dtype  # the weights' dtype; RoPE runs in fp32 (no bf16 complex) and rounds back
        for layer, (k_cache, v_cache) in zip(self.layers, kv_caches):
            x = F.rms_norm(h, hidden, layer["in_norm"], eps)
            qkv = layer["qkv"](x)  # [T, (H + 2 nkv) D]
            qk = qkv[:, :(H + nkv) * D]
            if wdt != torch.float32:
                qk = qk.float()
            qk = torch.view_as_complex(qk.view(T, H + nkv, D // 2, 2))
            qk = torch.view_as_real(qk * freqs).view(T, H + nkv, D)
            if wdt != torch.float32:
                qk = qk.to(wdt)
            q, k = qk[:, :H], qk[:, H:]
            v = qkv[:, (H + nkv) * D:].view(T, nkv, D)
            self.write_kv(k, v, k_cache, v_cache, meta.slot_mapping)
            attn = self.attention_fn(q, k, v, k_cache, v_cache, meta, self.scale)
            h.add_(layer["o"](attn.reshape(T, H * D)))
            x = F.rms_norm(h, hidden, layer["post_norm"], eps)
            gu = layer["gate_up"](x)
            act = F.silu(gu[:, :inter])
            h.add_(layer["down"](act.mul_(gu[:, inter:])))
        return F.rms_norm(h, hidden, self.norm, eps)

    def _forward_native(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                        kv_caches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """:meth:`forward` with the elementwise work in the native CPU kernels
        (:class:`~own_engine.cpu_kernels.NativeLayerOps`): per layer one call for RoPE + the KV
        write, one for each residual add fused with the next RMSNorm, one for SiLU x up; the
        matmuls and attention as in :meth:`forward`. A decode-only step (no prefill chunk) with
        every projection in panels (``fused_decode``) runs this same sequence of kernels for all
        layers in one native call (``NativeLayerOps.decode_forward``): bit-identical, without
        ~9 Python-level calls per layer."""
        c, ops = self.cfg, self.layer_ops
        T = input_ids.shape[0]
        H, nkv, D = c.num_heads, c.num_kv_heads, c.head_dim
        eps, inter = c.rms_norm_eps, c.intermediate_size
        h = F.embedding(input_ids, self.embed)
        x = torch.empty_like(h)
        if self.fused_decode and not meta.prefills and meta.dec_rows is not None:
            ops.decode_forward(self._decode_layer_ptrs(kv_caches), h, x, (c.hidden_size, inter, H, nkv, D), eps,
                               self.scale, self.cos, self.sin, positions, meta, kv_caches[0][0].shape[1], self.norm)
            return x
        act = torch.empty(T, inter)
        ops.add_rms_norm(h, None, self.layers[0]["in_norm"], eps, x)
        last = len(self.layers) - 1
        for i, (layer, (k_cache, v_cache)) in enumerate(zip(self.layers, kv_caches)):
            qkv = layer["qkv"](x)  # [T, (H + 2 nkv) D]
            ops.rope_kv_write(qkv, H, nkv, D, self.cos, self.sin, positions, k_cache, v_cache, meta.slot_mapping)
            q = qkv[:, :H * D].view(T, H, D)
            k = qkv[:, H * D:(H + nkv) * D].view(T, nkv, D)
            v = qkv[:, (H + nkv) * D:].view(T, nkv, D)
            attn = self.attention_fn(q, k, v, k_cache, v_cache, meta, self.scale)
            ops.add_rms_norm(h, layer["o"](attn.view(T, H * D)), layer["post_norm"], eps, x)
            ops.silu_mul(layer["gate_up"](x), act)
            ops.add_rms_norm(h, layer["down"](act), self.norm if i == last else self.layers[i + 1]["in_norm"], eps, x)
        return x

    def _decode_layer_ptrs(self, kv_caches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """[L, 8] int64 addresses per layer for ``decode_forward`` (in_norm, qkv, o, post_norm, gate_up
        and down panels, K cache, V cache); rebuilt when the caches move."""
        key = tuple(t.data_ptr() for kv in kv_caches for t in kv)
        if self._layer_ptrs is None or self._layer_ptrs[0] != key:
            rows = [[layer["in_norm"].data_ptr(), layer["qkv"].panels.data_ptr(), layer["o"].panels.data_ptr(),
                     layer["post_norm"].data_ptr(), layer["gate_up"].panels.data_ptr(),
                     layer["down"].panels.data_ptr(), k.data_ptr(), v.data_ptr()]
                    for layer, (k, v) in zip(self.layers, kv_caches)]
            self._layer_ptrs = (key, torch.tensor(rows, dtype=torch.int64))
        return self._layer_ptrs[1]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[N, hidden] → logits [N, vocab] in the weights' dtype (:class:`ModelRunner` returns them as fp32)."""
        return self.lm_head(hidden)
