"""Every per-request metric, one module each: its formula over a request record and its
:class:`results.schema.metric_registry.Metric` declaration (unit, label, direction, SLO
percentiles, failure rule, where it shows).

Importing this package imports every module in it (``pkgutil`` over the package) and registers
each module's ``METRIC``, ordered by the module's ``ORDER`` (an int; ascending, ties and a module
without one — it goes last — by module name): that is the order every table shows them in, the
same on every machine. A module without ``METRIC`` (``units``) is a helper. Adding a metric: one
module here declaring ``METRIC = Metric(...)`` and ``ORDER = N``; no list to edit.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from results.schema.metric_registry import register

LAST = 1_000_000
"""The ``ORDER`` of a module that declares none: after every ordered one."""


def definition_modules() -> list[ModuleType]:
    """Every module of this package that declares a ``METRIC``, in registration order (module docstring)."""
    found = [importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)]
    declaring = [m for m in found if hasattr(m, "METRIC")]
    return sorted(declaring, key=lambda m: (getattr(m, "ORDER", LAST), m.__name__))


for _module in definition_modules():
    register(_module.METRIC)
