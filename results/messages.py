"""A pydantic validation error as the one line a person reads: the option or field it is about,
what it takes and how to fix it, never pydantic's own wording ("Input should be ...") or URL.
Read by every command's error path (:func:`harness.app.settings.fields.error_line`, the CLI's
usage errors) and by the workload spec's checks (:mod:`workloads.spec`)."""

from __future__ import annotations

import re
from typing import Any, Mapping

# pydantic's error types → what the value must be, and an example of one
_TAKES = {"int": ("a whole number", "4"), "float": ("a number", "0.5"), "finite_number": ("a finite number", "0.5"),
          "bool": ("true or false", "true"), "string": ("text", "NAME"), "dict": ("NAME=VALUE items", "a=1"),
          "list": ("a list", "a,b")}
_NOT_ONE_OF = re.compile(r"'.*' is not one of (.+?)\.?")
_BOUNDS = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"), "less_than_equal": ("<=", "le"),
           "less_than": ("<", "lt")}


def plain_error(err: Mapping[str, Any], name: str) -> str:
    """One pydantic error (``ValidationError.errors()``'s item) about ``name`` (an option,
    ``--threads``, or a stored field) as one line saying what it takes and how to fix it:
    ``--threads takes a whole number, got 'many': e.g. --threads 4``; ``--max-load must be <= 4096,
    got 5000``; ``--parity takes one of 'report' or 'strict', got 'fair'``."""
    kind, ctx, got = str(err.get("type", "")), err.get("ctx") or {}, err.get("input")
    if kind in _BOUNDS:
        sign, key = _BOUNDS[kind]
        return f"{name} must be {sign} {ctx.get(key)}, got {got}"
    if kind in ("literal_error", "enum"):
        return f"{name} takes one of {ctx.get('expected', '?')}, got {got!r}"
    if kind == "value_error" and (m := _NOT_ONE_OF.fullmatch(str(ctx.get("error", "")))):
        return f"{name} takes one of {m.group(1)}, got {got!r}"  # typer's choice check, raised inside its coercion
    if kind == "value_error" and ctx.get("error") is not None:
        return f"{name}: {str(ctx['error']).rstrip('.')}"
    if kind == "missing":
        return f"{name} is required: give it"
    if kind == "extra_forbidden":
        return f"{name} is not a setting here: drop it"
    what, example = next((v for k, v in _TAKES.items() if kind.startswith(k)), ("another value", "..."))
    return f"{name} takes {what}, got {got!r}: e.g. {name} {example}"
