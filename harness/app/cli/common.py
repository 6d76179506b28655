"""What every ``bench`` command shares: the one-line error exit and option parsing helpers."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn, Optional, TypeVar

import typer
from typer.core import TyperGroup
from rich.console import Console
from rich.markup import escape

from harness.app.core.signals import exit_code, interrupt_cause

try:  # typer >= 0.2x parses with its own copy of click, whose exceptions are not click's
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older typer: click itself
    from click import exceptions as click_errors  # type: ignore[no-redef]

T = TypeVar("T")

NON_TTY_WIDTH = 160  # tables stay readable in pipes, logs and CI (rich would use 80 columns)


def make_console(stderr: bool = False) -> Console:
    """A rich Console; when the stream is not a terminal and ``COLUMNS`` is unset, 160 columns
    wide instead of rich's 80 so result tables are not truncated in logs."""
    stream = sys.stderr if stderr else sys.stdout
    wide = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=stderr, width=NON_TTY_WIDTH if wide else None)


err_console = make_console(stderr=True)


def _print_error(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {escape(' '.join(message.splitlines()))}", highlight=False, soft_wrap=True)


def note(line: str) -> None:
    """A note for the user on stderr (a stored run rebuilt, an import's caveat), markup-escaped."""
    err_console.print(escape(line), highlight=False)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: message`` (one line, markup-escaped) on stderr and exit with ``code``
    (2 = bad input, 1 = the command ran but found nothing usable). The CLI's one error path:
    every command, the generated options' validation and the usage errors end here."""
    _print_error(message)
    raise typer.Exit(code)


def usage_error_line(exc: click_errors.ClickException) -> str:
    """The message of a click/typer usage error on one line (every newline folded; typer's box
    and click's three-line form carry the same text). A value typer's own pydantic coercion
    refused (``-n abc``) says what the option takes, not pydantic's "Input should be ..."
    (:func:`harness.app.settings.fields.plain_error`)."""
    from pydantic import ValidationError

    param = getattr(exc, "param", None)
    if isinstance(exc.__cause__, ValidationError) and exc.__cause__.errors() and param is not None and param.opts:
        from harness.app.settings.fields import plain_error

        flag = max(param.opts, key=len)  # the long name: --num-requests, not -n
        return plain_error(exc.__cause__.errors()[0], flag)
    return " ".join(exc.format_message().split())


class OneLineErrors(TyperGroup):
    """The ``bench`` root group: every option-parsing error of every command (unknown option,
    bad int, missing argument, bad choice) is printed as one line ``error: ... (see bench run
    --help)`` on stderr, exit code 2, instead of typer's
    rich box. Errors of subcommands are raised while the root parses or invokes them, so
    wrapping the root's ``make_context`` and ``invoke`` covers them all. ``bench`` alone still
    prints its help (click's NoArgsIsHelpError). Every command's ``--help`` shows its flags as
    flags (no ``<bool>``), ``--help`` itself in the command's last panel (:func:`_flags_as_flags`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _flags_as_flags(self)

    def make_context(self, info_name: Optional[str], args: list[str], parent: Optional[typer.Context] = None,
                     **extra: Any) -> typer.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click_errors.ClickException as exc:
            _usage_exit(exc)

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click_errors.ClickException as exc:
            _usage_exit(exc)


def _flags_as_flags(command: Any) -> None:
    """``command`` and its subcommands: every on/off flag (``--json``, ``--help``) with no value
    shown in ``--help`` (typer shows ``<bool>`` as if it took one), every positional argument as
    ``RUN  TEXT...`` (typer shows ``run...  <list[str]>``); ``--help`` in the command's
    last options panel, so a command whose options are in panels ends with it."""
    for sub in getattr(command, "commands", {}).values():
        _flags_as_flags(sub)
    params = list(getattr(command, "params", []))
    help_option = command.get_help_option(typer.Context(command))
    for param in [*params, *([help_option] if help_option is not None else [])]:
        if getattr(param, "is_flag", False) and not getattr(param, "count", False):
            param.metavar = ""
        if isinstance(param, typer.core.TyperArgument):  # its name upper-case and TEXT, not typer's <list[str]>
            param.metavar = param.metavar or (param.name or "").upper()
            bare = param.bare_type().removeprefix("list[").removesuffix("]")  # "str", "list[str]", "Path"
            kind = {"int": "INT", "float": "NUM", "Path": "PATH"}.get(bare, "TEXT")
            param.display_type_rich = lambda ctx, shown=kind + ("..." if param.nargs != 1 else ""): shown
    panels = [p.rich_help_panel for p in params if getattr(p, "rich_help_panel", None)]
    if help_option is not None and panels:
        help_option.rich_help_panel = panels[-1]


def _usage_exit(exc: click_errors.ClickException) -> NoReturn:
    if isinstance(exc, click_errors.NoArgsIsHelpError):
        raise exc  # `bench` / `bench results` alone: the help text, as before
    ctx = getattr(exc, "ctx", None)
    see = f" (see {ctx.command_path} --help)" if isinstance(exc, click_errors.UsageError) and ctx is not None else ""
    _print_error(usage_error_line(exc) + see)
    raise typer.Exit(exc.exit_code if exc.exit_code else 2)


def reuse_run_folder(output_dir: Path, run_id: Optional[str]) -> None:
    """Remove an existing ``--run-id`` folder a killed run left holding nothing (the settings'
    validation refused one that holds a measurement: :func:`harness.app.settings.checks.check_output`)
    and say so on stderr; nothing for a new folder."""
    import shutil

    from results.store import blocked_run_id

    if run_id is None or not (output_dir / run_id).exists():
        return
    why = blocked_run_id(output_dir / run_id)  # checked again: a measurement is never thrown away
    if why:
        fail(why)
    shutil.rmtree(output_dir / run_id)
    err_console.print(f"[yellow]note:[/] reusing {escape(str(output_dir / run_id))}: an interrupted run left it with "
                      "no measurement", highlight=False)


def print_outputs(console: Console, run_dir: Path, files: list[tuple[str, str]]) -> None:
    """``Results: DIR`` then each of ``files`` ((label, file name)) that the job wrote (nothing
    when the folder is not there: a job that measured nothing removes it)."""
    if not run_dir.is_dir():
        return
    console.print(f"\nResults: {run_dir}", markup=False)
    for label, name in files:
        if (run_dir / name).exists():
            console.print(f"{label}:  {run_dir / name}", markup=False)


def exit_if_interrupted(cause: str, kept: str) -> None:
    """After a job: one line and the signal's exit status when ``cause`` interrupted it (``kept``:
    what was measured and is kept)."""
    if cause:
        err_console.print(f"[yellow]interrupted by {cause}: engines stopped; {kept} measured so far are kept[/]")
        raise typer.Exit(exit_code(cause))


def guarded(fn: Callable[[], T]) -> T:
    """Run ``fn`` turning the harness's known errors into one-line messages."""
    from adapters.base import EngineError
    from results.store import ResultsError

    from harness.app.core.model import ModelError

    known: tuple[type[BaseException], ...] = (ModelError, ResultsError, EngineError)
    try:
        from workloads.registry import WorkloadError

        known += (WorkloadError,)
    except ImportError:  # pragma: no cover
        pass
    try:
        return fn()
    except known as exc:
        fail(str(exc))
    except KeyboardInterrupt as exc:
        cause = interrupt_cause(exc)
        err_console.print(f"[yellow]interrupted by {cause}[/]")
        raise typer.Exit(exit_code(cause))
    except OSError as exc:
        fail(f"{exc.strerror or type(exc).__name__}: {exc.filename or exc} - check the path and its permissions")
    except Exception as exc:  # the last line of defence: one line for the user, details in a file
        import tempfile
        import traceback

        path = Path(tempfile.gettempdir()) / "bench-error.log"
        path.write_text(traceback.format_exc())
        fail(f"internal error: {type(exc).__name__}: {exc} (traceback in {path}; please report it)", code=1)
