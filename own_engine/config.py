"""Engine configuration (:class:`EngineConfig`) and the derived, validated settings.

Sizing convention (vLLM's): the KV cache is a pool of ``num_kv_blocks`` blocks of ``block_size``
token slots each; one block holds K and V for every layer, so its size in bytes is
``2 * num_layers * block_size * num_kv_heads * head_dim * dtype_bytes``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

BATCHING_MODES = ("continuous", "static")
KV_ALLOCATIONS = ("paged", "naive")
SPECULATIVE_MODES = ("none", "ngram", "draft")
DEVICES = ("auto", "cpu", "cuda")
ATTENTION_BACKENDS = ("auto", "triton", "native", "torch")
LINEAR_BACKENDS = ("auto", "dense")
DTYPES = ("auto", "float32", "bfloat16", "float16")
HALF_DTYPES = ("bfloat16", "float16")
#: decode batch sizes captured as CUDA graphs by default (capped at the engine's max_num_seqs)
CUDA_GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: KV tokens per sequence the default ``max_num_seqs`` provisions (see :meth:`EngineConfig.resolve_max_num_seqs`)
KV_TOKENS_PER_SEQ = 256
MAX_NUM_SEQS_CAP = 256  # vLLM's default max_num_seqs


@dataclass(frozen=True)
class Flag:
    """How a setting appears on a command line generated from its dataclass (``python -m own_engine``,
    :mod:`own_engine.server.options`): ``--<name>`` (default: the field's name with ``-`` for ``_``;
    a ``bool`` gets ``--<name>/--no-<name>``), its help, the allowed ``choices``, the bounds ``min``
    and ``max``; ``folder``: an existing folder; ``unset``: the flag's default is "not given", which
    leaves the field's own default (an alternative to another flag, e.g. ``--kv-cache-bytes``)."""

    help: str
    name: str | None = None
    choices: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None
    folder: bool = False
    unset: bool = False


def flag(help: str, **how: object) -> dict[str, Flag]:
    """A dataclass field's ``metadata`` declaring its command-line flag (:class:`Flag`): one
    declaration gives the field, its flag, help and bounds."""
    return {"flag": Flag(help, **how)}  # type: ignore[arg-type]


class ConfigError(ValueError):
    """An invalid engine setting; the message names the setting and the fix."""


def _required(value: object, key: str, model_dir: Path) -> int:
    """``value`` as an int; :class:`ConfigError` naming ``key`` when config.json lacks it."""
    if value is None:
        raise ConfigError(f"{model_dir}/config.json has no {key!r}: pass a complete Hugging Face model folder")
    return int(value)  # type: ignore[call-overload]


@dataclass
class ModelConfig:
    """Architecture facts read from a Hugging Face ``config.json`` (Llama family).

    Raises :class:`ConfigError` when the folder is not a Llama-architecture model.
    """

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    eos_token_ids: list[int] = field(default_factory=list)
    bos_token_id: int | None = None

    @classmethod
    def from_dir(cls, model_dir: Path) -> "ModelConfig":
        path = Path(model_dir) / "config.json"
        if not path.is_file():
            raise ConfigError(f"{model_dir} has no config.json: pass a Hugging Face model folder")
        cfg = json.loads(path.read_text())
        arch = (cfg.get("architectures") or ["?"])[0]
        if cfg.get("model_type") not in ("llama", "mistral", "qwen2") and "Llama" not in arch:
            raise ConfigError(f"{model_dir} is a {arch} model; own_engine supports Llama-architecture models only")
        if cfg.get("attention_bias") or cfg.get("mlp_bias"):
            raise ConfigError(f"{model_dir} uses attention/MLP biases, which own_engine does not implement")
        heads, hidden = cfg.get("num_attention_heads"), cfg.get("hidden_size")
        eos = cfg.get("eos_token_id")
        gen = Path(model_dir) / "generation_config.json"
        if gen.is_file():
            eos = json.loads(gen.read_text()).get("eos_token_id", eos)
        eos_ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        return cls(
            num_layers=_required(cfg.get("num_hidden_layers"), "num_hidden_layers", model_dir),
            hidden_size=_required(hidden, "hidden_size", model_dir),
            num_heads=_required(heads, "num_attention_heads", model_dir),
            num_kv_heads=_required(cfg.get("num_key_value_heads") or heads, "num_key_value_heads", model_dir),
            head_dim=_required(cfg.get("head_dim") or (hidden // heads if hidden and heads else None), "head_dim",
                               model_dir),
            intermediate_size=_required(cfg.get("intermediate_size"), "intermediate_size", model_dir),
            vocab_size=_required(cfg.get("vocab_size"), "vocab_size", model_dir),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            eos_token_ids=eos_ids,
            bos_token_id=cfg.get("bos_token_id"),
        )

    def kv_bytes_per_block(self, block_size: int, num_layers: int | None = None, dtype_bytes: int = 4) -> int:
        """Bytes of one KV block over ``num_layers`` layers (default: all): 2 (K and V) × layers ×
        ``block_size`` × num_kv_heads × head_dim × ``dtype_bytes`` (the module docstring's sizing;
        the harness's :func:`results.model_geometry.kv_bytes_per_token` is the same formula per
        token, which a test checks)."""
        layers = self.num_layers if num_layers is None else num_layers
        return 2 * layers * block_size * self.num_kv_heads * self.head_dim * dtype_bytes


@dataclass
class EngineConfig:
    """Settings of one :class:`~own_engine.engine.LLMEngine`.

    ``block_size``: tokens per KV block. ``num_kv_blocks``: KV pool size; ``None`` derives it from
    ``kv_cache_bytes`` (bytes, K+V of all layers, plus the draft model's layers for
    ``speculative="draft"``). ``max_num_seqs``: most sequences in one step (``None`` → sized from the
    KV budget, :meth:`resolve_max_num_seqs`). ``max_num_batched_tokens``:
    per-step token budget (prefill chunks + decodes + speculative tokens). ``max_model_len``: prompt +
    output limit in tokens (``None`` → min(config max_position_embeddings, 4096)).
    ``batching``: ``"continuous"`` (iteration-level, Orca/vLLM) or ``"static"`` (ablation: a batch runs
    until all members finish). ``kv_allocation``: ``"paged"`` or ``"naive"`` (ablation: one contiguous
    ``max_model_len`` reservation per sequence; disables prefix caching). ``speculative``: ``"none"``,
    ``"ngram"`` (prompt lookup) or ``"draft"`` (the layer-truncated self-draft of ``draft_num_layers``
    layers, or the Llama model in the folder ``speculative_model`` when set: same ``vocab_size`` as
    the target, its own KV cache in the same block pool), proposing up to ``num_speculative_tokens``
    tokens per step. ``adaptive_speculation``: pick each step's number of draft tokens in
    ``[0, num_speculative_tokens]`` from the sequence's running acceptance rate
    (:class:`~own_engine.spec_decode.AdaptiveK`); False always proposes ``num_speculative_tokens``.
    ``spec_cost_per_token``: cost of one more draft token (proposing + verifying it) relative to a
    plain decode step, used by that choice; ``None`` → 0.1 for ``"ngram"``, 0.1 + the draft/target
    per-token weight ratio for ``"draft"`` (:func:`~own_engine.spec_decode.default_cost_per_token`).
    ``threads``: torch intra-op threads. ``device``: ``"auto"`` picks CUDA when available. ``seed``: seeds requests without their own.
    ``attention_backend``: ``"auto"`` (the Triton kernel on CUDA, the native C kernel on CPU, each when
    it works, else PyTorch), ``"triton"`` / ``"native"`` (error if unusable) or ``"torch"`` (the
    PyTorch path: the ablation). ``linear_backend``: ``"auto"`` (on CPU fp32 the native panel GEMM at
    1 thread with AVX-512, else oneDNN-prepacked weights for multi-row inputs; :mod:`own_engine.linear`)
    or ``"dense"`` (always ``F.linear``: the ablation).
    ``dtype``: weights and KV cache: ``"auto"`` = ``"float32"`` (greedy output equals transformers'
    fp32), ``"bfloat16"`` / ``"float16"`` (CUDA only; RMSNorm, RoPE and the attention softmax still
    accumulate in fp32, logits are returned as fp32; :meth:`resolve_dtype`). ``cuda_graphs``: on CUDA
    with the Triton attention kernel, replay pure-decode steps from CUDA graphs captured at engine start
    for the batch sizes ``cuda_graph_batch_sizes`` (capped at ``max_num_seqs``,
    :func:`own_engine.cuda_graphs.capture_sizes`); inert on CPU.
    """

    model_dir: Path = field(metadata=flag("Hugging Face model folder (Llama arch).", name="model", folder=True))
    block_size: int = field(default=16, metadata=flag("Tokens per KV block.", min=1))
    num_kv_blocks: int | None = field(default=None, metadata=flag("KV pool size in blocks.", min=1))
    kv_cache_bytes: int = field(default=256 * 2**20, metadata=flag(
        "KV pool size in bytes (default 256 MiB).", min=1, unset=True))
    max_num_seqs: int | None = field(default=None, metadata=flag(
        "Most sequences per step (default: the KV pool's tokens / 256, at most 256).", min=1))
    max_num_batched_tokens: int = field(default=512, metadata=flag("Per-step token budget.", min=1))
    max_model_len: int | None = field(default=None, metadata=flag("Prompt + output limit in tokens.", min=1))
    enable_prefix_caching: bool = field(default=True, metadata=flag("Prefix caching.", name="prefix-caching"))
    enable_chunked_prefill: bool = field(default=True, metadata=flag("Chunked prefill.", name="chunked-prefill"))
    batching: str = field(default="continuous", metadata=flag(
        "continuous (iteration-level) or static.", choices=BATCHING_MODES))
    kv_allocation: str = field(default="paged", metadata=flag(
        "paged or naive (one max_len slab/seq).", choices=KV_ALLOCATIONS))
    speculative: str = field(default="none", metadata=flag("Speculative decoding proposer.", choices=SPECULATIVE_MODES))
    num_speculative_tokens: int = field(default=4, metadata=flag("Tokens proposed per speculative step.", min=1))
    draft_num_layers: int = field(default=8, metadata=flag("Layers of the self-draft model (--speculative draft).", min=1))
    speculative_model: Path | None = field(default=None, metadata=flag(
        "Draft model folder (Llama, same vocabulary) for --speculative draft instead of the layer-truncated "
        "self-draft."))
    adaptive_speculation: bool = field(default=True, metadata=flag(
        "Choose each step's draft tokens (0..--num-speculative-tokens) from the acceptance rate."))
    spec_cost_per_token: float | None = field(default=None, metadata=flag(
        "Cost of one more draft token relative to a decode step, for adaptive speculation (default: 0.1 for "
        "ngram, 0.1 + draft/target weight ratio for draft).", min=0.0))
    threads: int = field(default=1, metadata=flag("torch intra-op threads.", min=1))
    device: str = field(default="auto", metadata=flag("auto picks CUDA when available.", choices=DEVICES))
    seed: int = field(default=0, metadata=flag("Seed for requests without their own."))
    attention_backend: str = field(default="auto", metadata=flag(
        "auto: the Triton kernel on CUDA, the native C kernels on CPU (each when it works), else PyTorch; torch: "
        "PyTorch attention (add --linear-backend dense for the all-PyTorch baseline).", choices=ATTENTION_BACKENDS))
    linear_backend: str = field(default="auto", metadata=flag(
        "auto, on CPU: the native panel GEMM (AVX-512, 1 thread), else oneDNN-prepacked weights; dense: F.linear "
        "(ablation).", choices=LINEAR_BACKENDS))
    dtype: str = field(default="auto", metadata=flag(
        "Weights and KV cache: auto = float32; bfloat16/float16 on CUDA only.", choices=DTYPES))
    cuda_graphs: bool = field(default=True, metadata=flag(
        "On CUDA with the Triton kernel, replay decode steps from CUDA graphs captured at start (ignored on CPU)."))
    cuda_graph_batch_sizes: tuple[int, ...] = CUDA_GRAPH_BATCH_SIZES  # no flag: a code-level setting

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first invalid setting and its fix."""
        def pos(name: str) -> None:
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"{name} must be a positive integer, got {v!r}")

        for name in ("block_size", "max_num_batched_tokens", "threads", "num_speculative_tokens"):
            pos(name)
        if self.max_num_seqs is not None:
            pos("max_num_seqs")
        if self.linear_backend not in LINEAR_BACKENDS:
            raise ConfigError(f"linear_backend must be one of {LINEAR_BACKENDS}, got {self.linear_backend!r}")
        if self.num_kv_blocks is not None:
            pos("num_kv_blocks")
        if self.max_model_len is not None:
            pos("max_model_len")
        if self.num_kv_blocks is None and (not isinstance(self.kv_cache_bytes, int) or self.kv_cache_bytes <= 0):
            raise ConfigError(f"kv_cache_bytes must be a positive integer, got {self.kv_cache_bytes!r}")
        if self.batching not in BATCHING_MODES:
            raise ConfigError(f"batching must be one of {BATCHING_MODES}, got {self.batching!r}")
        if self.kv_allocation not in KV_ALLOCATIONS:
            raise ConfigError(f"kv_allocation must be one of {KV_ALLOCATIONS}, got {self.kv_allocation!r}")
        if self.speculative not in SPECULATIVE_MODES:
            raise ConfigError(f"speculative must be one of {SPECULATIVE_MODES}, got {self.speculative!r}")
        if self.device not in DEVICES:
            raise ConfigError(f"device must be one of {DEVICES}, got {self.device!r}")
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise ConfigError(f"attention_backend must be one of {ATTENTION_BACKENDS}, got {self.attention_backend!r}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.device == "cpu":
            self.resolve_dtype("cpu")
        if not isinstance(self.cuda_graphs, bool):
            raise ConfigError(f"cuda_graphs must be True or False, got {self.cuda_graphs!r}")
        sizes = self.cuda_graph_batch_sizes
        if (not isinstance(sizes, (tuple, list)) or not sizes
                or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in sizes)):
            raise ConfigError(f"cuda_graph_batch_sizes must be a non-empty list of positive integers, got {sizes!r}")
        if self.speculative == "draft":
            pos("draft_num_layers")
        if self.speculative_model is not None:
            if self.speculative != "draft":
                raise ConfigError(f"speculative_model is set but speculative={self.speculative!r}: "
                                  "pass speculative='draft' (--speculative draft) or drop speculative_model")
            if not Path(self.speculative_model).is_dir():
                raise ConfigError(f"speculative_model={self.speculative_model} is not a folder: "
                                  "pass the Hugging Face folder of a Llama draft model")
        if not isinstance(self.adaptive_speculation, bool):
            raise ConfigError(f"adaptive_speculation must be True or False, got {self.adaptive_speculation!r}")
        c = self.spec_cost_per_token
        if c is not None and (isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c < 0):
            raise ConfigError(f"spec_cost_per_token must be a finite number >= 0 (or None for the default), got {c!r}")

    def resolve_dtype(self, device_type: str) -> str:
        """The dtype name (``"float32"``, ``"bfloat16"``, ``"float16"``) weights and KV cache use on
        ``device_type`` (``"cpu"`` or ``"cuda"``). Raises :class:`ConfigError` for a half dtype on the
        CPU (its fast paths are fp32 only)."""
        name = "float32" if self.dtype == "auto" else self.dtype
        if device_type != "cuda" and name in HALF_DTYPES:
            raise ConfigError(f"dtype={name!r} is for CUDA; the CPU path runs float32 "
                              "(oneDNN-prepacked weights and the native attention kernel are fp32)")
        return name

    @property
    def dtype_bytes(self) -> int:
        """Bytes per KV-cache element under ``dtype`` (4 for float32, 2 for the half dtypes)."""
        return 2 if self.dtype in HALF_DTYPES else 4

    def resolve_draft_model(self, target: ModelConfig) -> ModelConfig | None:
        """The draft's :class:`ModelConfig` when ``speculative_model`` is set (``None`` otherwise).

        Raises :class:`ConfigError` when the folder is not a Llama model or its ``vocab_size``
        differs from the target's (verification compares token ids of one vocabulary).
        """
        if self.speculative_model is None:
            return None
        try:
            draft = ModelConfig.from_dir(Path(self.speculative_model))
        except ConfigError as exc:
            raise ConfigError(f"speculative_model: {exc}") from None
        if draft.vocab_size != target.vocab_size:
            raise ConfigError(
                f"speculative_model {self.speculative_model} has vocab_size={draft.vocab_size} but the target "
                f"model has vocab_size={target.vocab_size}: use a draft model with the target's tokenizer")
        return draft

    def resolve_max_model_len(self, model: ModelConfig) -> int:
        """``max_model_len`` or min(max_position_embeddings, 4096); error if above the model's limit."""
        if self.max_model_len is None:
            return min(model.max_position_embeddings, 4096)
        if self.max_model_len > model.max_position_embeddings:
            raise ConfigError(
                f"max_model_len={self.max_model_len} exceeds the model's max_position_embeddings="
                f"{model.max_position_embeddings}: lower it"
            )
        return self.max_model_len

    def resolve_max_num_seqs(self, num_kv_blocks: int) -> int:
        """``max_num_seqs`` or, when None, the sequences the KV pool holds at
        :data:`KV_TOKENS_PER_SEQ` tokens each, in ``[1, 256]``: ``num_kv_blocks * block_size // 256``.

        Why from the KV budget: a fixed cap either leaves KV idle (requests queue while memory is
        free, and the TTFT tail is queueing: 16 of 48 simultaneous chat requests waited behind the old
        fixed 32) or admits more sequences than fit, which the scheduler then preempts and recomputes.
        256 tokens is a short chat turn; longer sequences are handled by preemption. The cap 256 is
        vLLM's default. (Default 256 MiB pool, default model: 5,688 tokens → 22; the harness's 1 GiB
        → 91.)
        """
        if self.max_num_seqs is not None:
            return self.max_num_seqs
        return max(1, min(MAX_NUM_SEQS_CAP, num_kv_blocks * self.block_size // KV_TOKENS_PER_SEQ))

    def resolve_num_kv_blocks(self, model: ModelConfig, max_model_len: int, draft: ModelConfig | None = None) -> int:
        """``num_kv_blocks`` or ``kv_cache_bytes // bytes_per_block`` (draft layers included).

        ``bytes_per_block`` = the target's block bytes + the draft's: for ``speculative_model`` the
        draft model's own layers and KV geometry (``draft``, read from the folder when not given),
        for the self-draft ``draft_num_layers`` layers of the target's geometry; elements of
        :attr:`dtype_bytes` bytes. (With CUDA graphs the runner allocates one more, never-handed-out
        scratch block beyond these.)
        Raises :class:`ConfigError` when the pool cannot hold one ``max_model_len`` sequence.
        """
        if self.num_kv_blocks is not None:
            n = self.num_kv_blocks
        else:
            nbytes = self.dtype_bytes
            per_block = model.kv_bytes_per_block(self.block_size, dtype_bytes=nbytes)
            if self.speculative == "draft" and self.speculative_model is not None:
                draft = draft if draft is not None else self.resolve_draft_model(model)
                per_block += draft.kv_bytes_per_block(self.block_size, dtype_bytes=nbytes)  # type: ignore[union-attr]
            elif self.speculative == "draft":
                per_block += model.kv_bytes_per_block(self.block_size, self.draft_num_layers, dtype_bytes=nbytes)
            n = self.kv_cache_bytes // per_block
        lookahead = self.num_speculative_tokens if self.speculative != "none" else 0
        need = -(-(max_model_len + lookahead) // self.block_size)
        if n < need:
            raise ConfigError(
                f"the KV cache holds {n} blocks of {self.block_size} tokens, fewer than one sequence of "
                f"max_model_len={max_model_len} needs ({need}): raise kv_cache_bytes/num_kv_blocks or lower max_model_len"
            )
        return n
