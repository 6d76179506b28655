"""The server's command-line options, generated from the dataclasses that declare them.

Every field of :class:`own_engine.config.EngineConfig` and of :class:`ServerOptions` whose
``metadata`` holds a :class:`own_engine.config.Flag` becomes one ``typer.Option``: its flag name,
help, choices and bounds are written once, beside the field. Adding an engine setting is one
field in ``EngineConfig``; the command line, ``--help`` and the harness's check of an
``--engine-arg own:KEY=VALUE`` (:func:`declared_flags`) follow from it.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import types
import typing
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Optional

import typer

from own_engine.config import EngineConfig, Flag, flag

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


@dataclass
class ServerOptions:
    """The HTTP server's own options (not the engine's): where it binds, the model name clients
    send, its log level and the largest request body (bytes) it accepts."""

    host: str = field(default="127.0.0.1", metadata=flag("Interface to bind (default: loopback only)."))
    port: int = field(default=8000, metadata=flag("TCP port; 0 picks a free one.", min=0, max=65535))
    served_model_name: Optional[str] = field(default=None, metadata=flag(
        "Model name clients send (default: folder name)."))
    log_level: str = field(default="info", metadata=flag("Server log level.", choices=LOG_LEVELS))
    max_body_bytes: Optional[int] = field(default=None, metadata=flag(
        "Largest request body in bytes, HTTP 413 beyond it (default: 12 x the longest token's characters x "
        "max_model_len + 1 MiB).", min=1))


@dataclass(frozen=True)
class Param:
    """One generated option: the dataclass it fills, the field's name, its :class:`Flag`, the
    type typer parses and the option's default (``...``: required)."""

    owner: type
    name: str
    flag: Flag
    annotation: Any
    default: Any

    @property
    def flags(self) -> tuple[str, ...]:
        """The option's flag declarations: ``("--model",)`` or ``("--prefix-caching/--no-prefix-caching",)``."""
        name = self.flag.name or self.name.replace("_", "-")
        return (f"--{name}/--no-{name}",) if self.annotation is bool else (f"--{name}",)

    def option(self) -> Any:
        """The ``typer.Option`` of this parameter."""
        extra: dict[str, Any] = {k: v for k, v in (("min", self.flag.min), ("max", self.flag.max)) if v is not None}
        if self.flag.folder:
            extra.update(exists=True, file_okay=False, dir_okay=True)
        return typer.Option(self.default, *self.flags, help=self.flag.help, **extra)


def _bare(annotation: Any) -> Any:
    """``Optional[int]`` → ``int``."""
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if len(args) == 1 else annotation


def _params(owner: type) -> list[Param]:
    hints = typing.get_type_hints(owner)
    out = []
    for f in dataclasses.fields(owner):
        how = f.metadata.get("flag")
        if not isinstance(how, Flag):
            continue
        annotation = _bare(hints[f.name])
        if how.choices:  # shown as <a|b|c>; the value handed on is the plain string
            annotation = enum.Enum(f"{f.name}_choice", {c: c for c in how.choices}, type=str)  # type: ignore[misc]
        if f.default is not dataclasses.MISSING:
            default = None if how.unset else f.default
            default = annotation(default) if how.choices and default is not None else default
        else:
            default = ...
        if default is None:
            annotation = Optional[annotation]
        out.append(Param(owner, f.name, how, annotation, default))
    return out


@lru_cache(maxsize=None)
def params() -> tuple[Param, ...]:
    """Every option of ``python -m own_engine``: the server's first, then the engine's, in field order."""
    engine = _params(EngineConfig)
    return (*engine[:1], *_params(ServerOptions), *engine[1:])


def signature() -> inspect.Signature:
    """The keyword-only signature typer reads to build the command (one parameter per option)."""
    return inspect.Signature([inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=p.option(),
                                                annotation=p.annotation) for p in params()])


def split(values: dict[str, Any]) -> tuple[dict[str, Any], ServerOptions]:
    """typer's parsed values (by field name) → (the :class:`EngineConfig` keyword arguments, the
    :class:`ServerOptions`). An option left unset (``unset`` flags given no value) is left out, so
    the field keeps its own default."""
    engine: dict[str, Any] = {}
    server: dict[str, Any] = {}
    for p in params():
        value = values[p.name]
        value = value.value if isinstance(value, enum.Enum) else value
        if p.flag.unset and value is None:
            continue
        (engine if p.owner is EngineConfig else server)[p.name] = value
    return engine, ServerOptions(**server)


@lru_cache(maxsize=None)
def declared_flags() -> frozenset[str]:
    """Every ``--flag`` the server accepts, ``--no-x`` included (what an ``--engine-arg own:KEY``
    is checked against before the harness starts anything)."""
    return frozenset(part for p in params() for decl in p.flags for part in decl.split("/"))


__all__ = ["LOG_LEVELS", "Param", "ServerOptions", "declared_flags", "params", "signature", "split"]
