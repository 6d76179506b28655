"""The engines: one module per engine family, each adapter class registered by name
(``@register("vllm", order=40)``, :mod:`adapters.registry`) and declaring everything about its
engine (:class:`adapters.base.EngineTraits`).

Importing this package imports every module in it, so each engine registers itself: adding an
engine is adding its module here (and its test); no list of engines names it anywhere else.
"""

from __future__ import annotations

import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")
