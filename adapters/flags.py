"""The command-line flags of the shim servers this repository ships, read from their source
without running or importing them (each runs in its engine's venv), so an ``--engine-arg`` (or a
recipe's engine arg) that names no flag is refused before anything starts (issue 41).

One shape is read (AST): argparse's ``parser.add_argument("--flag", …)`` (the shims, and
``add_common_args`` of :mod:`adapters.shims.openai_shim` where a shim calls it). The reference
engine's flags are generated from its settings (:func:`own_engine.server.options.declared_flags`).

An engine whose server is not in this repository (vLLM, SGLang, llama.cpp, transformers serve)
has no source here: its flags are read from its own ``--help`` in its installed environment
(:func:`help_flags`, cached beside the environment until it is set up again), only when it is
installed and only when that help lists the flags the harness itself passes (a condensed help,
or one that does not run, is no list: the engine then checks its flags when it starts, as before).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from functools import lru_cache
from pathlib import Path

from adapters.runtime.envs import installed_info
from adapters.runtime.recipes import engine_env_dir

PROJECT_ROOT = Path(__file__).resolve().parents[1]
COMMON = PROJECT_ROOT / "adapters" / "shims" / "openai_shim.py"
HELP_CACHE = "flags.json"  # in .engines/<name>/, beside the installed marker
HELP_TIMEOUT_S = 180.0
_FLAG = re.compile(r"(?<![\w-])--[A-Za-z0-9][A-Za-z0-9_.-]*")


def _argparse_flags(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            out |= {a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")}
    return out


@lru_cache(maxsize=None)
def declared_flags(source: Path) -> frozenset[str]:
    """Every ``--flag`` the server in ``source`` (a .py file) accepts. Raises OSError when it
    cannot be read, SyntaxError when it is not Python."""
    tree = ast.parse(Path(source).read_text(encoding="utf-8"))
    flags = _argparse_flags(tree)
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


def _run_help(argv: tuple[str, ...], needed: tuple[str, ...]) -> frozenset[str]:
    """The ``--flags`` ``argv``'s output lists, when it runs and lists every one of ``needed``;
    else an empty set (no list to check against)."""
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=HELP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    flags = frozenset(_FLAG.findall(out.stdout + out.stderr))
    return flags if out.returncode == 0 and all(f in flags for f in needed) else frozenset()


def help_flags(name: str, argvs: tuple[tuple[str, ...], ...], needed: tuple[str, ...] = ("--host", "--port")
               ) -> tuple[frozenset[str], str]:
    """``(flags, command)``: the ``--flags`` the installed engine ``name`` lists in its help, read
    by the first command of ``argvs`` whose output lists every flag of ``needed`` (those the
    harness passes itself), and that command as one line; ``(frozenset(), "")`` when none does or
    the engine is not installed. Cached in ``.engines/<name>/flags.json`` for the installation
    it was read from (its marker): an engine's help may take seconds to import its way to."""
    marker = installed_info(name)
    if marker is None or not argvs:
        return frozenset(), ""
    cache = engine_env_dir(name) / HELP_CACHE
    key = json.dumps(marker, sort_keys=True)
    try:
        stored = json.loads(cache.read_text())
        if stored.get("marker") == key and stored.get("argvs") == [list(a) for a in argvs]:
            return frozenset(stored["flags"]), stored["command"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    flags, command = frozenset(), ""
    for argv in argvs:
        if flags := _run_help(tuple(argv), needed):
            command = " ".join(argv)
            break
    try:
        cache.write_text(json.dumps({"marker": key, "argvs": [list(a) for a in argvs], "flags": sorted(flags),
                                     "command": command}, indent=1))
    except OSError:
        pass
    return flags, command


__all__ = ["declared_flags", "help_flags", "unknown_flag"]
