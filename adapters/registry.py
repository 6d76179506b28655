"""The engine registry: engine name → its adapter class, and ``--engine-arg NAME:key=value`` parsing.

An engine is one class in :mod:`adapters.engines`, registered by name with :func:`register`;
everything the harness knows about it (install recipes, launch, search space, capabilities,
effective-settings reader, Prometheus parsers, numerics, whether ``make bench`` sets it up, see
:class:`adapters.base.EngineTraits`) is declared on that class. :data:`_REGISTERED` is the one
table of engine names in the project (``tests/test_architecture.py`` fails on any other): the
lists below (:data:`ENGINE_NAMES`, :data:`NOT_IN_ALL`, the setup lists and recipes) are read off
the registered classes, so adding an engine touches its own module (and its test) only.

The engine modules register themselves when imported; the registry imports the package
:mod:`adapters.engines` (every module in it) at the first look-up, by name, so that the engine
modules may import this one without an import cycle.
"""

from __future__ import annotations

import importlib
import inspect
import re
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

from adapters.base import EngineAdapter
from results.pairs import parse_pairs

_REGISTERED: dict[str, tuple[int, type]] = {}
"""The registration table, the project's one name-keyed engine table: name → (order, adapter
class). Written only by :func:`register` (at import of an engine module) and :func:`registered`
(a test's throwaway engine, removed again on exit)."""

ENGINES_PACKAGE = "adapters.engines"
_NAME_RE = re.compile(r"(?P<engine>[A-Za-z_][A-Za-z0-9_]*):(?P<key>[A-Za-z0-9_.\-]+)")  # ENGINE:key, before the first "="
C = TypeVar("C", bound=type)


def register(name: str, *, order: int) -> Callable[[C], C]:
    """Class decorator: ``@register("vllm", order=40)`` registers the adapter class under ``name``.

    ``order``: where the engine stands in :data:`ENGINE_NAMES` (``bench engines list``, ``--engine
    all``), ascending. The class's ``name`` attribute, when set, must be ``name``. Raises ValueError
    when ``name`` is registered already (to another class) or the class names another engine."""
    def add(cls: C) -> C:
        _add(name, cls, order)
        return cls

    return add


def _add(name: str, cls: type, order: int) -> None:
    if getattr(cls, "name", name) != name:
        raise ValueError(f"engine {name!r}: its class {cls.__name__} names itself {cls.name!r}")
    known = _REGISTERED.get(name)
    if known is not None and known[1] is not cls:
        raise ValueError(f"engine {name!r} is registered already, by {known[1].__module__}.{known[1].__name__}")
    _REGISTERED[name] = (order, cls)


@contextmanager
def registered(name: str, cls: type, *, order: int = 10_000) -> Iterator[type]:
    """Register ``cls`` under ``name`` for the ``with`` block only (a test's throwaway engine);
    the registry is as before on exit, whatever happens. ``order`` default: after every engine.
    Raises ValueError like :func:`register`."""
    _load()
    before = _REGISTERED.get(name)
    _add(name, cls, order)
    try:
        yield cls
    finally:
        if before is None:
            _REGISTERED.pop(name, None)
        else:
            _REGISTERED[name] = before


def _load() -> None:
    """Import every engine module (they register themselves); a no-op after the first call."""
    importlib.import_module(ENGINES_PACKAGE)


def engine_names() -> tuple[str, ...]:
    """Every registered engine's name, by its registration ``order``: what ``--engine`` accepts."""
    _load()
    return tuple(name for name, _ in sorted(_REGISTERED.items(), key=lambda item: item[1][0]))


def engine_classes() -> dict[str, type]:
    """Name → adapter class for every registered engine, in :func:`engine_names` order."""
    return {name: _REGISTERED[name][1] for name in engine_names()}


def find_class(name: str) -> type | None:
    """The adapter class registered as ``name``; None for any other name (an endpoint's, say)."""
    _load()
    found = _REGISTERED.get(name)
    return found[1] if found else None


def engine_class(name: str) -> type:
    """The adapter class registered as ``name``. Raises ValueError naming the valid choices."""
    cls = find_class(name)
    if cls is None:
        raise ValueError(f"unknown engine {name!r}: choose from {', '.join(engine_names())}")
    return cls


def declared(name: str, trait: str, default: Any = None) -> Any:
    """What engine ``name``'s class declares as ``trait`` (an :class:`adapters.base.EngineTraits`
    attribute); ``default`` for a name not registered or a class that does not declare it."""
    cls = find_class(name)
    return getattr(cls, trait, default) if cls is not None else default


def __getattr__(attr: str) -> tuple[str, ...]:
    """``ENGINE_NAMES`` (every engine, in order) and ``NOT_IN_ALL`` (those ``--engine all``
    leaves out: ``in_all = False`` on the class), read off the registry when asked."""
    if attr == "ENGINE_NAMES":
        return engine_names()
    if attr == "NOT_IN_ALL":
        return tuple(n for n, cls in engine_classes().items() if not getattr(cls, "in_all", True))
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


# ------------------------------------------------------------------------------------------
# what `bench engines setup` installs, read off the classes


def setup_classes() -> dict[str, type]:
    """Engines with an environment of their own to set up (a CPU or a CUDA recipe, not ``setup_by``
    another engine), by their ``setup_rank``: the order ``bench engines setup`` lists them."""
    own = {n: cls for n, cls in engine_classes().items() if not getattr(cls, "setup_by", None)
           and (getattr(cls, "recipe", None) or getattr(cls, "cuda_recipe", None))}
    return dict(sorted(own.items(), key=lambda item: getattr(item[1], "setup_rank", 0)))


def cpu_recipes() -> dict[str, Any]:
    """Engine name → its CPU install recipe (:class:`adapters.runtime.recipes.EngineRecipe`), by ``setup_rank``."""
    return {n: cls.recipe for n, cls in setup_classes().items() if getattr(cls, "recipe", None)}


def cuda_recipes() -> dict[str, Any]:
    """Engine name → its CUDA recipe (:class:`adapters.runtime.gpu_recipes.CudaRecipe`), by
    ``gpu_setup_rank``: what ``bench engines setup all-gpu`` installs, in that order."""
    have = {n: cls for n, cls in setup_classes().items() if getattr(cls, "cuda_recipe", None)}
    return {n: cls.cuda_recipe for n, cls in sorted(have.items(), key=lambda item: getattr(item[1], "gpu_setup_rank", 0))}


def setup_cpu() -> tuple[str, ...]:
    """What ``bench engines setup all-cpu`` installs, in order (``in_setup_cpu`` on the class)."""
    return tuple(n for n, cls in setup_classes().items() if getattr(cls, "recipe", None)
                 and getattr(cls, "in_setup_cpu", False))


def auto_setup_cpu() -> tuple[str, ...]:
    """What ``--setup-engines`` (``make bench``) installs on a CPU when missing (``auto_setup_cpu``), by ``setup_rank``."""
    return tuple(n for n, cls in setup_classes().items() if getattr(cls, "recipe", None) and getattr(cls, "auto_setup_cpu", False))


def manual_setup_cpu() -> dict[str, str]:
    """Engine → why ``--setup-engines`` leaves its CPU recipe out (``setup_note``; "" when it says
    nothing): what only ``bench engines setup NAME`` installs, by ``setup_rank``."""
    return {n: getattr(cls, "setup_note", "") for n, cls in setup_classes().items()
            if getattr(cls, "recipe", None) and not getattr(cls, "auto_setup_cpu", False)}


def reference_engines() -> tuple[str, ...]:
    """The yardstick engines (``reference = True`` on the class): measured and ranked, never recommended."""
    return tuple(n for n, cls in engine_classes().items() if getattr(cls, "reference", False))


def setup_shared() -> dict[str, str]:
    """Engine → the engine whose setup sets it up too (``setup_by``: the same build, other weights)."""
    return {n: cls.setup_by for n, cls in engine_classes().items() if getattr(cls, "setup_by", None)}


# ------------------------------------------------------------------------------------------
# adapters


def get_adapter(name: str, hardware: str | None = None) -> EngineAdapter:
    """A fresh adapter for engine ``name``; ``hardware`` (``"nvidia"|"amd"|"cpu"``, detected
    once by the caller) is given to the adapters whose probe or command depends on it, so they
    do not detect it again. Raises ValueError naming the valid choices."""
    factory = engine_class(name)
    if hardware is not None and "hardware" in inspect.signature(factory).parameters:
        return factory(hardware=hardware)
    return factory()


def all_adapters(hardware: str | None = None) -> list[EngineAdapter]:
    """Every engine but those of :data:`NOT_IN_ALL`: what ``--engine all`` probes."""
    return [get_adapter(n, hardware) for n, cls in engine_classes().items() if getattr(cls, "in_all", True)]


def endpoint_adapters(endpoints: dict[str, str]) -> list[EngineAdapter]:
    """One adapter per ``--endpoint NAME=URL``: an OpenAI-compatible deployment the harness does
    not start, compared under ``NAME`` (the class registered as ``openai``)."""
    factory = engine_class("openai")
    return [factory(url, name=name) for name, url in endpoints.items()]


def parse_engine_args(items: list[str]) -> dict[str, dict[str, str]]:
    """``["vllm:max_num_seqs=64", "own:block_size=16"]`` → ``{"vllm": {"max_num_seqs": "64"}, "own": {...}}``.

    Later items override earlier ones for the same key. Raises ValueError (one line) for an
    item not shaped ``ENGINE:key=value`` or an unknown engine.
    """
    def shape(item: str) -> ValueError:
        return ValueError(f"--engine-arg {item!r} is not ENGINE:key=value (e.g. vllm:max_num_seqs=64)")

    out: dict[str, dict[str, str]] = {}
    for item, (name, value) in zip(items, parse_pairs(items, shape)):
        m = _NAME_RE.fullmatch(name)
        if m is None or "\n" in value:  # one line: a value with a newline was never taken
            raise shape(item)
        engine = m["engine"]
        if find_class(engine) is None:
            raise ValueError(f"--engine-arg {item!r}: unknown engine {engine!r}: choose from {', '.join(engine_names())}")
        out.setdefault(engine, {})[m["key"]] = value
    return out
