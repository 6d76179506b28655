"""Shared test setup: no test ever reads or writes the user's real bench state."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _bench_state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point BENCH_STATE_DIR (the registry of live engine groups, adapters/leftovers.py) at a
    fresh folder per test, inherited by every child process a test starts."""
    monkeypatch.setenv("BENCH_STATE_DIR", str(tmp_path_factory.mktemp("bench-state")))
