"""The command-line flags of the servers this repository ships (the reference engine and the
shims), read from their source without running or importing them, so an ``--engine-arg`` (or a
recipe's engine arg) that names no flag is refused before anything starts (issue 41).

Two shapes are read (AST): argparse's ``parser.add_argument("--flag", …)`` (the shims, and
``add_common_args`` of :mod:`adapters.shims.openai_shim` where a shim calls it), and typer's
``name: T = typer.Option(…)`` parameters of a command function (``own_engine/server/cli.py``:
the declared ``"--a/--no-a"`` names, else ``--name`` with ``_`` as ``-``, and ``--no-name`` for a
``bool``). An engine whose server is not in this repository (vLLM, SGLang, llama.cpp, TensorRT-LLM)
has no source here: its flags are checked by the engine when it starts.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
COMMON = PROJECT_ROOT / "adapters" / "shims" / "openai_shim.py"


def _argparse_flags(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            out |= {a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")}
    return out


def _typer_flags(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        args = fn.args.args[len(fn.args.args) - len(fn.args.defaults):]
        for arg, default in zip(args, fn.args.defaults):
            if not (isinstance(default, ast.Call) and getattr(default.func, "attr", "") == "Option"):
                continue
            names = [str(a.value) for a in default.args[1:] if isinstance(a, ast.Constant) and str(a.value).startswith("-")]
            if names:
                out |= {part for name in names for part in name.split("/") if part.startswith("--")}
                continue
            flag = "--" + arg.arg.replace("_", "-")
            out.add(flag)
            if isinstance(arg.annotation, ast.Name) and arg.annotation.id == "bool":
                out.add("--no-" + flag[2:])
    return out


@lru_cache(maxsize=None)
def declared_flags(source: Path) -> frozenset[str]:
    """Every ``--flag`` the server in ``source`` (a .py file) accepts. Raises OSError when it
    cannot be read, SyntaxError when it is not Python."""
    tree = ast.parse(Path(source).read_text(encoding="utf-8"))
    flags = _argparse_flags(tree) | _typer_flags(tree)
    calls_common = any(isinstance(n, ast.Call) and getattr(n.func, "id", "") == "add_common_args" for n in ast.walk(tree))
    if calls_common and Path(source) != COMMON:
        flags |= declared_flags(COMMON)
    return frozenset(flags)


def unknown_flag(key: str, value: str, flags: frozenset[str]) -> str | None:
    """The flag ``key=value`` renders to (:func:`adapters.runtime.server.render_flags`) when the server
    does not declare it, else None."""
    flag = "--" + key.replace("_", "-")
    if str(value).strip().lower() == "false":
        flag = "--no-" + key.replace("_", "-")
    return None if flag in flags else flag


__all__ = ["declared_flags", "unknown_flag"]
