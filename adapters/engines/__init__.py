"""The engines: one module per engine family, each adapter class registered by name
(``@register("vllm", order=40)``, :mod:`adapters.registry`) and declaring everything about its
engine (:class:`adapters.base.EngineTraits`).

Importing this package imports every module in it, so each engine registers itself: adding an
engine is adding its module here (and its test); no list of engines names it anywhere else.
"""

from __future__ import annotations

import importlib
import pkgutil

import sys

UNLOADED: dict[str, str] = {}
"""Engine modules that could not be imported (module → the reason, one line), filled once at
import: such a module's engine is unavailable, said once on stderr, and every other engine and
command works (an adapter importing its engine's library at the top, a name registered twice)."""

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    try:
        importlib.import_module(f"{__name__}.{_module}")
    except Exception as exc:  # noqa: BLE001 - any failure of one engine's module leaves the others usable
        UNLOADED[_module] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        print(f"warning: engine module adapters/engines/{_module}.py could not be loaded ({UNLOADED[_module]}): "
              "its engine is unavailable", file=sys.stderr)
