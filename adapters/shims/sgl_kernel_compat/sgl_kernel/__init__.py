"""A pure-PyTorch stand-in for ``sgl_kernel`` so SGLang 0.5.23's CPU engine can start here.

NOT part of SGLang: our compatibility shim, pinned to ``sglang==0.5.23``. Every
``sgl-kernel``/``sglang-kernel`` wheel on the registry is CUDA-only, yet SGLang's CPU engine
(``SGLANG_USE_CPU_ENGINE=1 --device cpu --attention-backend torch_native``) imports a few
``*_cpu`` ops from it. We implement :func:`assign_req_to_token_pool_cpu` (the one the plain
decode path calls) and make every other name a stub that raises ``NotImplementedError`` when
called; all other names are absent so SGLang's ImportError fallbacks apply (speculative
decoding and the fused CPU kernels are unavailable).
Runs using it are reported as "sglang (CPU, torch_native, compatibility shim)".
"""

from __future__ import annotations

import torch

__version__ = "0.0.0+llm-serve-bench-compat"
COMPAT_SHIM = True


def assign_req_to_token_pool_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor,
                                 out_cache_loc: torch.Tensor, pool_len: int) -> None:
    """Write each request's new KV slots into its row of the request→token table (in place).

    ``req_pool_indices`` ``[bs]``: row of ``req_to_token`` ``[num_reqs, pool_len]`` per request;
    ``start_offset``/``end_offset`` ``[bs]``: the token positions to fill; ``out_cache_loc``
    ``[sum(end - start)]``: the KV-cache slot of each new token, requests concatenated in order
    (the same contract as SGLang's Triton ``assign_req_to_token_pool`` kernel).
    """
    starts = start_offset.tolist()
    ends = end_offset.tolist()
    rows = req_pool_indices.tolist()
    pos = 0
    for row, s, e in zip(rows, starts, ends):
        n = e - s
        if n <= 0:
            continue
        req_to_token[row, s:e] = out_cache_loc[pos:pos + n].to(req_to_token.dtype)
        pos += n


def _stub(name: str):
    def missing(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name} is not implemented by the llm-serve-bench CPU compatibility "
                                  "shim (only assign_req_to_token_pool_cpu is)")
    missing.__name__ = name
    return missing


# Names SGLang's CPU path imports unconditionally but calls only for features we do not
# support here (speculative decoding, KV copy between layers): importable, fail when called.
STUBBED = ("copy_all_layer_kv_cache_cpu", "rotate_input_ids_cpu", "fill_accept_out_cache_loc_cpu",
           "fill_bonus_tokens_cpu", "assign_draft_cache_locs_contiguous_cpu", "assign_extend_cache_locs_cpu",
           "build_tree_kernel_efficient_cpu", "verify_tree_greedy_cpu", "build_draft_decode_metadata_cpu",
           "get_target_cache_loc_cpu", "align_evict_mask_to_page_size_cpu")
for _name in STUBBED:
    globals()[_name] = _stub(_name)

# Everything else is absent (AttributeError → ImportError), so SGLang's own ImportError
# fallbacks (e.g. its mock scalar types) take over, as on a machine without sgl_kernel.
