"""Typer commands generated from a settings model: each field's :class:`Cli` metadata
(:mod:`harness.app.settings.fields`) becomes one ``typer.Option``, so an option is declared once,
on the model, and appears in every command built from it with the same text.

:func:`command_from` builds the command function: typer reads its ``__signature__`` (one
keyword parameter per option, in the model's ``cli_order``, without its ``cli_exclude``); the
function gathers the parsed values by field (the workload's options into one dict), builds
the settings with one call (:meth:`RunSettings.from_cli`) and hands them to the command's
body. A bad value is the validator's own message on one line, exit 2 (:func:`fail`).
"""

from __future__ import annotations

import dataclasses
import inspect
import keyword
from dataclasses import MISSING, dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Union, get_args, get_origin

import annotated_types
import typer
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from harness.app.cli.common import fail
from harness.app.settings.fields import Cli, CliGroup, cli_of, error_line, group_of


@dataclass(frozen=True)
class CliParam:
    """One generated option: the Python parameter typer passes it as, the settings field it
    fills (``("threads",)``, or ``("workload", "seed")`` inside a group), its :class:`Cli`, the
    type typer parses and the option's default."""

    name: str
    path: tuple[str, ...]
    cli: Cli
    annotation: Any
    default: Any
    bounds: dict[str, Any]
    panel: Optional[str] = None
    alias_of: Optional[str] = None  # a former spelling: the parameter it stands for (hidden from --help)

    def option(self) -> Any:
        """The ``typer.Option`` of this parameter, under its ``--help`` panel; a flag shows no
        value (no ``<bool>``: :func:`metavar`); a former spelling hidden."""
        if self.cli.argument:
            return typer.Argument(self.default, help=self.cli.help_text(), show_default=False)
        if self.alias_of is not None:
            return typer.Option(None, *self.cli.aliases, hidden=True, **self.bounds)
        extra = {"envvar": self.cli.envvar, "show_envvar": True} if self.cli.envvar else {}
        return typer.Option(self.default, *self.cli.flags, help=self.cli.help_text(), rich_help_panel=self.panel,
                            metavar=metavar(self.annotation), **self.bounds, **extra)


def alias_params(params: list[CliParam]) -> list[CliParam]:
    """A hidden parameter for each option with former spellings (:attr:`Cli.aliases`), standing
    for it: given, its value is the option's."""
    return [dataclasses.replace(p, name=f"{p.name}__alias", annotation=Optional[p.annotation], default=None,
                                alias_of=p.name)
            for p in params if p.cli.aliases]


METAVARS = {bool: "", int: "INT", float: "NUM", str: "TEXT", Path: "PATH"}


def metavar(annotation: Any) -> str:
    """What ``--help`` shows an option takes: nothing for a flag, ``INT``, ``NUM``, ``TEXT``,
    ``PATH``, a choice's values (``report|strict``); a repeatable option its item's."""
    annotation = _bare(annotation)
    if get_origin(annotation) is list:
        annotation = get_args(annotation)[0]
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "|".join(str(m.value) for m in annotation)
    return METAVARS.get(annotation, "TEXT")


def _bare(annotation: Any) -> Any:
    """``Optional[int]`` → ``int``; a ``Literal`` → ``str`` (the model gives the one-line error)."""
    if get_origin(annotation) is Union:
        args = [a for a in get_args(annotation) if a is not type(None)]
        annotation = args[0] if len(args) == 1 else annotation
    return str if get_origin(annotation) is Literal else annotation


def _param(path: tuple[str, ...], cli: Cli, field: FieldInfo) -> CliParam:
    if cli.default is not MISSING:
        default = cli.default
    elif field.default is PydanticUndefined and field.default_factory is None:  # required
        default = ...
    elif field.default is PydanticUndefined:  # a factory (an empty list or dict): nothing given
        default = None
    else:
        default = (not field.default) if cli.invert else field.default
    annotation = cli.type if cli.type is not None else _bare(field.annotation)
    if default is None:
        annotation = Optional[annotation]
    bounds: dict[str, Any] = {}
    if cli.range:
        for m in field.metadata:
            if isinstance(m, annotated_types.Ge):
                bounds["min"] = m.ge
            elif isinstance(m, annotated_types.Le):
                bounds["max"] = m.le
    name = cli.flag.lstrip("-").replace("-", "_")
    name += "_" if keyword.iskeyword(name) else ""  # --from: the parameter from_
    if cli.argument:  # positional: no panel of options
        return CliParam(name, path, cli, annotation, default, bounds, panel=None)
    return CliParam(name, path, cli, annotation, default, bounds)


def cli_params(settings: type[BaseModel]) -> list[CliParam]:
    """The options of a command built from ``settings``: every field with a :class:`Cli` (a
    :class:`CliGroup`: each of its options), less ``cli_exclude``, by ``cli_panels`` (heading →
    flags: the ``--help`` panels and the order in them). An option listed in none needs no list:
    it shows under its :class:`Cli`'s ``panel``, else its group's (``cli_panel``, a
    :class:`CliGroup`'s ``panel``: a new field of ``MeasureSettings`` under "Measuring"), else
    the last panel, after that panel's listed options, in field order; unless the settings set
    ``cli_only_listed`` (``bench search``: a command built on ``bench run``'s settings that shows
    only the options it reads, so a new ``bench run`` setting is not offered where it does nothing)."""
    params: list[CliParam] = []
    for name, field in settings.model_fields.items():
        cli = cli_of(field)
        if isinstance(cli, CliGroup):
            sub_fields = field.annotation.model_fields  # type: ignore[union-attr]
            params += [_param((name, sub), sub_cli.replace(panel=sub_cli.panel or cli.panel), sub_fields[sub])
                       for sub, sub_cli in cli.options.items()]
        elif isinstance(cli, Cli):
            params.append(_param((name,), cli, field))
        elif (group := group_of(field)) is not None:  # a group of settings: its options, under its panel
            params += [_param((name, sub), sub_cli.replace(panel=sub_cli.panel or group.cli_panel), sub_field)
                       for sub, sub_field in group.model_fields.items()
                       if isinstance(sub_cli := cli_of(sub_field), Cli)]
    excluded = set(getattr(settings, "cli_exclude", ()))
    panels: dict[str, tuple[str, ...]] = getattr(settings, "cli_panels", {})
    order = {flag: i for i, flag in enumerate(flag for flags in panels.values() for flag in flags)}
    if getattr(settings, "cli_only_listed", False):  # a command that shows only what it reads (bench search)
        excluded |= {p.cli.flag for p in params if not p.cli.argument and p.cli.flag not in order}
    panel_of = {flag: title for title, flags in panels.items() for flag in flags}
    last = list(panels)[-1] if panels else None
    kept = [p if p.cli.argument else dataclasses.replace(p, panel=panel_of.get(p.cli.flag, p.cli.panel or last))
            for p in params if p.cli.flag not in excluded]
    titles = {title: i for i, title in enumerate(panels)}
    return sorted(kept, key=lambda p: (titles.get(p.panel, len(titles)) if p.panel else len(titles) + 1,
                                       order.get(p.cli.flag, len(order))))


def settings_from(settings: type[BaseModel], params: list[CliParam], values: dict[str, Any],
                  given: Optional[set[str]] = None) -> Any:
    """The settings from typer's parsed values (by parameter name; ``given``: the fields the
    user typed, :func:`typed`); a bad value exits with its one line (code 2)."""
    data: dict[str, Any] = {}
    for p in params:
        value = values[p.name]
        if isinstance(value, Enum):
            value = value.value
        elif isinstance(value, tuple):
            value = list(value)
        if p.cli.invert:
            value = not value
        target = data
        for key in p.path[:-1]:
            target = target.setdefault(key, {})
        target[p.path[-1]] = value
    try:
        return settings.from_cli(data, given=given)  # type: ignore[attr-defined]
    except ValidationError as exc:
        fail(error_line(exc, settings))


def typed(ctx: typer.Context, params: list[CliParam]) -> set[str]:
    """The fields whose options the user gave, on the command line or through their environment
    variable, whatever the value (click's parameter source: a default is not given): a group's
    field both as the group's name and as ``group.field``."""
    def given(name: str) -> bool:
        source = ctx.get_parameter_source(name)
        return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")

    return {key for p in params if given(p.name) for key in (p.path[0], ".".join(p.path))}


def command_from(settings: type[BaseModel], body: Callable[[Any], Any]) -> Callable[..., Any]:
    """A typer command whose options are ``settings``' fields: it builds the settings from the
    command line and calls ``body(settings)``. Register it as usual:
    ``app.command("run")(command_from(RunSettings, run))``."""
    params = cli_params(settings)
    aliases = alias_params(params)

    def command(ctx: typer.Context, **values: Any) -> Any:
        for alias in aliases:  # a former spelling, given, stands for its option
            value = values.pop(alias.name)
            if value is not None:
                values[str(alias.alias_of)] = value
        return body(settings_from(settings, params, values, typed(ctx, params + aliases)))

    command.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context),
        *(inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=p.option(), annotation=p.annotation)
          for p in params + aliases)])
    command.__annotations__ = {"ctx": typer.Context, **{p.name: p.annotation for p in params + aliases}}
    command.__name__, command.__qualname__, command.__doc__ = body.__name__, body.__qualname__, body.__doc__
    return command

