"""Helpers for engines that live in their own virtual environment (``.engines/<name>/venv``)."""

from __future__ import annotations

from adapters.base import ProbeResult
from adapters import registry
from adapters.runtime.envs import engine_python, installed_info


def probe_installed(name: str, label: str | None = None) -> ProbeResult | None:
    """None when engine ``name``'s venv is set up; else the "not installed" ProbeResult with the fix."""
    info = installed_info(name)
    if info is None:
        recipe = registry.cpu_recipes().get(name)
        approx = recipe.approx if recipe is not None else ""
        size = f" ({approx})" if approx else ""
        return ProbeResult(False, f"{label or name}: not installed - run `bench engines setup {name}`{size}",
                           cause="not_installed")
    if not engine_python(name).exists():  # pragma: no cover - marker without venv
        return ProbeResult(False, f"{name}: its venv is broken - rerun `bench engines setup {name}`")
    return None


def installed_version(name: str) -> str | None:
    """The version recorded by ``bench engines setup name`` (None when not installed)."""
    info = installed_info(name)
    return info.get("version") if info else None
