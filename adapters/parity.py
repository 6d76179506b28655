"""``bench run --parity strict``: one value per setting, set through each engine's own flags.

:class:`ParityTarget` holds the values; every adapter's ``parity_args(target)`` returns
``(engine_args, could_not)``: the ``--engine-arg`` style options (``adapters.runtime.server`` conventions)
that put its engine on the target, and one line per setting it cannot be set to, with why.
:func:`strict_engine_args` merges them under the user's ``--engine-arg`` (the user's value
wins, and the record says so) and returns what was done as a
:class:`results.schema.ParityStrict` for the run's parity audit.

The target (documented in the README):

- KV budget: ``CPU_KV_CACHE_BYTES`` (1 GiB). On a CPU every engine already gets it (vLLM
  ``VLLM_CPU_KVCACHE_SPACE``, SGLang ``--max-total-tokens``, the own engine ``--kv-cache-bytes``,
  transformers serve ``--cb-num-blocks``), so strict adds nothing there; on a GPU it sets vLLM's
  ``--kv-cache-memory-bytes``, SGLang's ``--max-total-tokens`` and transformers serve's blocks.
- prefix caching on for every engine that has it.
- ``max_num_seqs`` 32: the smallest default among the engines here (the own engine's 32; vLLM-CPU
  128, SGLang 2048 on this CPU, vLLM 256+ on GPUs), so no engine is pushed past its default.
- chunked prefill on, with one per-step token budget of 2048 (``max_num_batched_tokens``; vLLM's
  default for its OpenAI server on CPUs and most GPUs; SGLang ``--chunked-prefill-size`` and
  ``--max-prefill-tokens``, transformers serve ``--cb-max-batch-tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from adapters.runtime.server import CPU_KV_CACHE_BYTES, kv_bytes_per_token
from results.model_geometry import dtype_bytes_for, read_model_summary
from results.schema import ParityStrict

PARITY_MODES = ("report", "strict")


@dataclass(frozen=True)
class ParityTarget:
    """The values ``--parity strict`` aims for (see the module docstring). ``model_dir``: the
    served model folder (for KV tokens from bytes); ``hardware``: "cpu" / "nvidia" / "amd";
    ``kv_cache_bytes`` in bytes; ``max_num_batched_tokens`` (tokens per step) is also the
    chunked-prefill budget."""

    model_dir: Path
    hardware: str = "cpu"
    kv_cache_bytes: int = CPU_KV_CACHE_BYTES
    prefix_caching: bool = True
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 2048

    def kv_tokens(self) -> int:
        """Tokens of KV cache in ``kv_cache_bytes`` for this model: fp32 on a CPU (every CPU
        engine runs float32), else the model's own dtype. Raises ValueError when config.json
        lacks the attention sizes."""
        dtype_bytes = 4 if self.hardware == "cpu" else (dtype_bytes_for(read_model_summary(self.model_dir).dtype) or 2)
        return max(1, self.kv_cache_bytes // kv_bytes_per_token(self.model_dir, dtype_bytes))

    def as_dict(self) -> dict[str, Any]:
        """The target as stored in the audit (``ParityStrict.target``)."""
        return {"kv_cache_bytes": self.kv_cache_bytes, "prefix_caching": self.prefix_caching,
                "max_num_seqs": self.max_num_seqs, "chunked_prefill": True,
                "max_num_batched_tokens": self.max_num_batched_tokens}


def static_shim_args(name: str, target: ParityTarget) -> tuple[dict[str, str], list[str]]:
    """A static-batching shim (transformers, onnxruntime, deepspeed): its batch size is its
    ``max_num_seqs``; it has no paged KV cache, prefix caching or chunked prefill to set."""
    return ({"max_batch_size": str(target.max_num_seqs)},
            [f"{name}: no paged KV cache, no prefix caching, no chunked prefill (static batches, each row its own "
             "cache for one call): only its batch size is set, to max_num_seqs"])


def _normalised(args: dict[str, str]) -> dict[str, str]:
    return {k.replace("-", "_"): v for k, v in args.items()}


def strict_engine_args(adapters: Iterable[Any], user_args: dict[str, dict[str, str]],
                       target: ParityTarget) -> tuple[dict[str, dict[str, str]], ParityStrict]:
    """Each adapter's engine args under ``--parity strict``: its ``parity_args(target)`` with the
    user's ``--engine-arg`` values (``user_args``, engine → key → value) on top, and the record
    of what was applied, what could not be and which user values were kept over the target.
    An adapter without ``parity_args`` adds nothing and is listed as not equalised."""
    merged: dict[str, dict[str, str]] = {}
    record = ParityStrict(target=target.as_dict())
    for adapter in adapters:
        name = adapter.name
        method = getattr(adapter, "parity_args", None)
        if method is None:
            args, could_not = {}, [f"{name}: no parity arguments are known for it: set its options with --engine-arg"]
        else:
            args, could_not = method(target)
        user = user_args.get(name, {})
        mine = _normalised(user)
        for key, value in args.items():
            if key in mine and mine[key] != value:
                record.user_kept.append(f"{name}: --engine-arg {name}:{key}={mine[key]} kept over strict's {value}")
        added = {k: v for k, v in args.items() if k not in mine}
        merged[name] = {**added, **user}
        if added:
            record.applied[name] = added
        record.could_not += could_not
    return merged, record


__all__ = ["PARITY_MODES", "ParityTarget", "static_shim_args", "strict_engine_args"]
