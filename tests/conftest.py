"""Shared test setup: no test ever reads or writes the user's real bench state; module-scoped weight
sharing for reference-engine tests."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """The console's width is the one a run piped to a file gets (160 columns: harness/app/cli/common.py),
    whoever runs the tests: pytest-xdist's workers start with COLUMNS=80 and LINES=24, which the consoles
    made at import (cli/__init__.py, engines.py, search.py, model.py, common.py's err_console) would keep
    for the whole session. COLUMNS in a test's invoke env reaches only what is made at invoke time:
    --help and the consoles commands make with make_console()."""
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


@pytest.fixture(autouse=True)
def _bench_state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point BENCH_STATE_DIR (the registry of live engine groups, adapters/runtime/leftovers.py) at a
    fresh folder per test, inherited by every child process a test starts; the fidelity check off."""
    monkeypatch.setenv("BENCH_STATE_DIR", str(tmp_path_factory.mktemp("bench-state")))
    # `bench run`'s output-fidelity check builds a transformers reference per workload (seconds
    # each): off unless a test asks for it (tests of the check pass --fidelity-prompts)
    monkeypatch.setenv("BENCH_FIDELITY_PROMPTS", "0")


@pytest.fixture(scope="module")
def monkeypatch_module():
    """A MonkeyPatch that lives for one test module."""
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def share_model_weights(monkeypatch_module):
    """Within a test module, every reference engine built reuses one loaded ``LlamaModel`` per
    (folder, device, attention function, linear backend): the engines only read the weights, and
    loading the default model costs seconds. The cached model covers at least 1,024 positions."""
    from own_engine import engine as engine_mod

    real = engine_mod.LlamaModel.from_dir
    cache: dict = {}

    def cached(model_dir, cfg, max_len, device, attention_fn=None, linear_backend="auto", dtype=None):
        key = (str(model_dir), str(device), attention_fn, linear_backend, dtype)  # on a GPU machine: CUDA
        if key not in cache or cache[key].cos.shape[0] < max_len:
            kw = {} if dtype is None else {"dtype": dtype}
            cache[key] = real(model_dir, cfg, max(max_len, 1024), device, attention_fn, linear_backend, **kw)
        return cache[key]

    monkeypatch_module.setattr(engine_mod.LlamaModel, "from_dir", staticmethod(cached))
    yield
    cache.clear()
