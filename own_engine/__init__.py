"""The reference engine: paged KV cache, prefix caching with CoW, continuous batching, chunked prefill, speculative decoding."""
