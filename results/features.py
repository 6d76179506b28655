"""The serving-feature vocabulary: :data:`FEATURES`.

The names an adapter may declare in ``adapters.base.Capabilities.features`` (recorded with each
engine in ``summary.json``) and the scorer reads back (``harness.scoring``: declared features,
``--feature``). In ``results`` because both sides use it and it is part of what a run stores;
the probe-verified features are ``results.schema.FEATURE_PROBES``.
"""

from __future__ import annotations

FEATURES = (
    "paged_kv",
    "prefix_caching",
    "chunked_prefill",
    "continuous_batching",
    "speculative_decoding",
    "structured_output",
    "lora",
    "tensor_parallel",
)
