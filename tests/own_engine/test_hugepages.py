"""The KV cache's huge-page allocation: zeroed, 2 MiB-aligned, advised exactly over its whole pages,
and a plain zeroed tensor wherever the advice is unavailable."""

import pytest
import torch

from own_engine import hugepages

CPU = torch.device("cpu")


def test_large_tensor_is_zeroed_aligned_and_advised_over_whole_pages(monkeypatch):
    calls = []
    monkeypatch.setattr(hugepages, "_madvise_huge", lambda addr, length: calls.append((addr, length)) or True)
    shape = (1300, 16, 3, 64)  # 15.97 MB: 7 whole huge pages and a tail
    t, advised = hugepages.zeros(shape, torch.float32, CPU)
    assert advised is True and t.shape == shape and t.dtype == torch.float32 and t.is_contiguous()
    assert t.data_ptr() % hugepages.HUGE_PAGE == 0 and not t.any()
    assert calls == [(t.data_ptr(), 7 * hugepages.HUGE_PAGE)]
    t[-1, -1, -1, -1] = 1.0  # the whole extent is writable (the tail past the last whole page too)
    assert t.sum() == 1.0


def test_refused_advice_still_gives_zeros(monkeypatch):
    monkeypatch.setattr(hugepages, "_madvise_huge", lambda addr, length: False)
    t, advised = hugepages.zeros((600, 1024), torch.float32, CPU)
    assert advised is False and t.shape == (600, 1024) and not t.any()


def test_small_tensor_is_not_advised(monkeypatch):
    monkeypatch.setattr(hugepages, "_madvise_huge", lambda addr, length: pytest.fail("advised a small tensor"))
    t, advised = hugepages.zeros((4, 16, 2, 8), torch.float32, CPU)
    assert advised is False and t.shape == (4, 16, 2, 8) and not t.any()


def test_real_madvise_on_this_linux():
    """The real call on an aligned 4 MiB region of fresh memory succeeds on Linux (THP built in)."""
    import sys

    t, advised = hugepages.zeros((2, 1 << 20), torch.float32, CPU)
    assert not t.any() and t.data_ptr() % hugepages.HUGE_PAGE == 0
    assert advised is sys.platform.startswith("linux")


def test_runner_kv_cache_reports_huge_pages(monkeypatch):
    from pathlib import Path
    import tempfile

    from own_engine.config import ModelConfig
    from own_engine.model import LlamaModel
    from own_engine.model_runner import ModelRunner
    from own_engine.random_model import RandomLlamaSpec, write_random_llama

    with tempfile.TemporaryDirectory() as d:
        folder = write_random_llama(Path(d), RandomLlamaSpec())
        model = LlamaModel.from_dir(folder, ModelConfig.from_dir(folder), 64, CPU)
    monkeypatch.setattr(hugepages, "_madvise_huge", lambda addr, length: True)
    big = ModelRunner(model, 4096, 16, CPU)  # 4096 blocks x 16 x nkv x D floats per cache: several MiB
    assert big.kv_huge_pages and all(k.data_ptr() % hugepages.HUGE_PAGE == 0 for k, _ in big.kv_caches)
    assert all(not k.any() and not v.any() for k, v in big.kv_caches)
    small = ModelRunner(model, 4, 16, CPU)
    assert not small.kv_huge_pages
