"""How a settings field appears on the command line: :class:`Cli` metadata in the field's
``Annotated`` type, the way GuideLLM and AIPerf declare their CLIs on pydantic models.

A field of :class:`harness.app.settings.run.RunSettings` (or a subclass) that carries a
:class:`Cli` is an option of every command built from the model
(:func:`harness.app.cli.options.command_from`); a field whose type is itself a model of
options (the workload's) carries a :class:`CliGroup`, one :class:`Cli` per field of that
model, flat on the command line. A subclass changes an option for its command by
redeclaring the field with another :class:`Cli` (``Cli.replace``). Nothing here imports
typer: the metadata is data, the CLI turns it into options.
"""

from __future__ import annotations

import copy
from dataclasses import MISSING, dataclass
from typing import Any, Callable, ClassVar, Mapping, Optional

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator
from pydantic.fields import FieldInfo

from results.messages import plain_error

__all__ = ["Cli", "CliGroup", "CliModel", "cli_of", "error_line", "given_paths", "group_of", "option_flag", "plain_error"]


@dataclass(frozen=True, init=False)
class Cli:
    """One command-line option of a settings field.

    ``flags``: the option's names (``"--engine", "-e"``); ``help``: its ``--help`` text, or a
    function giving it when the command is built (text read off a registry: the engines, the
    metrics), which :meth:`help_text` calls.
    ``type``: what typer parses when it is not the field's own type - the raw text a parser
    reads (``--slo`` is a ``str``, the field a ``list[SLO]``). ``parse``: raw value (None
    included) → field value, raising ``ValueError`` with the one-line message; applied by
    the model's validation, so code that builds the settings from typed values skips it.
    ``default``: the option's default when it is not the field's. ``invert``: a ``--no-X``
    flag (``--sequential-start``) whose field is the opposite (``parallel_start``).
    ``range``: hand the field's ``ge``/``le`` bounds to typer, which shows them in ``--help``
    and refuses a value outside them with click's own message. ``envvar``: an environment
    variable typer reads the option from when it is not given (shown in ``--help``).
    ``argument``: a positional argument, not an option (``flags``: its one name, ``"run"``).
    ``panel``: the ``--help`` panel it shows under when the model's ``cli_panels`` lists it in none
    (a new option declared once, on its field: ``Cli("--x", panel="Tuning", help=...)``); a field
    of a group of settings needs none: it shows under its group's ``cli_panel``, no list to edit.
    ``aliases``: former spellings still read, hidden from ``--help`` (``bench engines check
    --engines`` before it became ``--engine``, the name every command uses).
    """

    flags: tuple[str, ...]
    help: str | Callable[[], str]
    type: Any
    parse: Callable[[Any], Any] | None
    default: Any
    invert: bool
    range: bool
    envvar: str | None
    argument: bool
    panel: str | None
    aliases: tuple[str, ...]

    def __init__(self, *flags: str, help: str | Callable[[], str], type: Any = None, parse: Callable[[Any], Any] | None = None,
                 default: Any = MISSING, invert: bool = False, range: bool = False, envvar: str | None = None,
                 argument: bool = False, panel: str | None = None, aliases: tuple[str, ...] = ()) -> None:
        values = dict(flags=flags, help=help, type=type, parse=parse, default=default, invert=invert, range=range,
                      envvar=envvar, argument=argument, panel=panel, aliases=aliases)
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def help_text(self) -> str:
        """The ``--help`` text (``help`` called when it is a function)."""
        return self.help() if callable(self.help) else self.help

    @property
    def flag(self) -> str:
        """The long name, as error messages spell the option (``--engine``)."""
        return self.flags[0]

    def replace(self, **changes: Any) -> Cli:
        """This option with ``changes`` (a command's own help text or default)."""
        new = copy.copy(self)
        for name, value in changes.items():
            object.__setattr__(new, name, value)
        return new


@dataclass(frozen=True)
class CliGroup:
    """A field whose type is a model of options (:class:`workloads.options.WorkloadOptions`):
    ``options`` maps each of that model's fields to its :class:`Cli`. The command line gives
    them flat (``--seed``, ``-n``); the settings receive them as one dict for that field.
    ``panel``: the ``--help`` heading an option of it shows under when no command lists it
    (a new workload option under "Workload", not the last panel)."""

    options: Mapping[str, Cli]
    panel: str | None = None

    def replace(self, **changes: Cli) -> CliGroup:
        """This group with some options replaced (a command's own help text or default)."""
        return CliGroup({**self.options, **changes}, self.panel)


def cli_of(field: FieldInfo) -> Cli | CliGroup | None:
    """The :class:`Cli` or :class:`CliGroup` in a field's metadata (the last: a command's own
    help over a shared declaration's, ``Annotated[Slos, SLOS.replace(...)]``); None = not an option."""
    return next((m for m in reversed(field.metadata) if isinstance(m, (Cli, CliGroup))), None)


class CliModel(BaseModel):
    """Base of the settings a command is generated from
    (:func:`harness.app.cli.options.command_from`): a field given as the command line's raw text
    goes through its :class:`Cli`'s ``parse``; :meth:`from_cli` validates the command line's values.

    A field whose type is a :class:`CliModel` with a ``cli_panel`` is a group of settings (one
    concern: ``RunSettings.tune``): its fields' options are flat on the command line, under that
    ``--help`` panel, and the code reads them as ``settings.tune.configs``."""

    model_config = ConfigDict(extra="forbid")
    cli_panel: ClassVar[str | None] = None

    @classmethod
    def from_cli(cls, values: dict[str, Any], given: Optional[set[str]] = None) -> Any:
        """The settings from the command line's values (by field; a group's options as one dict),
        validated with ``context={"cli": True, "given": given}`` (``given``: the fields the user
        typed). Raises ``pydantic.ValidationError`` (:func:`error_line` gives its one line)."""
        return cls.model_validate(values, context={"cli": True, "given": given})

    @field_validator("*", mode="before")
    @classmethod
    def _parse_cli_text(cls, value: Any, info: ValidationInfo) -> Any:
        """A field given as the command line's raw text (or None) goes through its ``parse``."""
        cli = cli_of(cls.model_fields[str(info.field_name)])
        if isinstance(cli, Cli) and cli.parse is not None and (value is None or _is_raw(value, cli.type)):
            return cli.parse(value)
        return value


def group_of(field: FieldInfo) -> type[CliModel] | None:
    """The group of settings a field holds (a :class:`CliModel` with a ``cli_panel``), else None."""
    kind = field.annotation
    return kind if isinstance(kind, type) and issubclass(kind, CliModel) and kind.cli_panel else None


def given_paths(settings: BaseModel) -> set[str]:
    """The fields set on ``settings`` built in code, a group's both as its name and ``group.field``
    (the form :func:`harness.app.cli.options.typed` gives for the command line)."""
    out = set(settings.model_fields_set)
    for name in settings.model_fields_set:
        value = getattr(settings, name)
        if isinstance(value, CliModel) and value.cli_panel:
            out |= {f"{name}.{sub}" for sub in value.model_fields_set}
    return out


def _is_raw(value: Any, cli_type: Any) -> bool:
    """Whether ``value`` is the command line's form of a field (``str`` text, a ``list`` of a
    repeatable option), not already the field's own type."""
    raw = getattr(cli_type, "__origin__", cli_type)
    return isinstance(raw, type) and isinstance(value, raw)


def option_flag(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """The option a validation error's location names (``("threads",)`` → ``--threads``,
    ``("workload", "seed")`` → ``--seed``, ``("tune", "configs")`` → ``--tune-configs``); the
    field name when it is no option."""
    field = model.model_fields.get(str(loc[0])) if loc else None
    cli = cli_of(field) if field is not None else None
    if isinstance(cli, CliGroup) and len(loc) > 1 and str(loc[1]) in cli.options:
        return cli.options[str(loc[1])].flag
    group = group_of(field) if field is not None else None
    if group is not None and len(loc) > 1:
        return option_flag(group, loc[1:])
    return cli.flag if isinstance(cli, Cli) else ".".join(map(str, loc)) or "settings"


def error_line(exc: ValidationError, model: type[BaseModel]) -> str:
    """The one line a bad value gives: the message a validator raised, as it raised it (the
    first error, in field order), or for a value of the wrong type or out of bounds the option,
    what it takes and an example (:func:`plain_error`). No pydantic wording, no URL."""
    err = exc.errors()[0]
    flag = option_flag(model, tuple(err.get("loc", ())))
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, Exception):
        said = str(cause)  # a parser's line that does not name its option is told which one (--slo: SLO ttft_p90 …)
        return said if not flag.startswith("-") or flag in said else f"{flag}: {said}"
    return plain_error(err, flag)
