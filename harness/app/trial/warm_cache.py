"""A warning before measuring: the engine's prefix cache may be warm from an identical earlier run.

An engine the harness starts is a new process with an empty prefix cache. An engine it does
not start (an existing endpoint: ``--engine openai --base-url URL``) keeps the KV blocks of
every prompt it served; a run that sends the same prompts again (same workload spec and seed,
same tokenizer, no prompt salt) would measure cache hits an earlier run paid for. The check
reads the ``manifest.json`` of every earlier run folder in the output folder: a folder whose
workload spec is the same as this run's (the spec holds the seed, every length parameter, the
tokenizer and the salt) and that measured the same endpoint (``engines[name].base_url``) names
the run the cache may be warm from. Damaged or foreign folders are skipped silently: the
check only ever adds a warning.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from rich.markup import escape

from results.schema import Manifest
from rich.console import Console

MANIFEST = "manifest.json"


def _comparable(spec: Any) -> Any:
    """``spec`` as stored JSON reads back, with an unset ``prompt_salt`` dropped (manifests
    written before the salt existed have no such key; both mean no salt)."""
    data = json.loads(json.dumps(spec, default=str))
    if isinstance(data, dict) and data.get("prompt_salt") is None:
        data.pop("prompt_salt", None)
    return data


def _normal_url(url: Any) -> str | None:
    if not isinstance(url, str) or not url:
        return None
    from adapters.engines.openai import normalize_base_url

    try:
        return normalize_base_url(url)
    except ValueError:
        return None


def identical_earlier_run(output_dir: Path, run_id: str, spec: dict[str, Any], engine: str,
                          base_url: str | None) -> str | None:
    """The most recent run folder in ``output_dir`` (other than ``run_id``) whose manifest has
    the same workload spec as ``spec`` and measured ``engine`` at ``base_url``; None when there
    is none, when ``spec`` has a prompt salt (no earlier run sent these prompts) or when the
    endpoint is unknown. Recency: the manifest's ``created_at``, then the folder name."""
    url = _normal_url(base_url)
    if url is None or spec.get("prompt_salt") is not None:
        return None
    want = _comparable(spec)
    found: list[tuple[str, str]] = []
    try:
        folders = [p for p in Path(output_dir).iterdir() if p.is_dir() and p.name != run_id]
    except OSError:
        return None
    for folder in folders:
        try:
            manifest = Manifest.model_validate_json((folder / MANIFEST).read_bytes())
        except (OSError, ValueError):  # unreadable, not JSON or not a manifest (a ValidationError is a ValueError)
            continue
        entry = manifest.engines.get(engine)
        if entry is None or _normal_url(entry.base_url) != url:
            continue
        if _comparable(manifest.workload) == want:
            found.append((manifest.created_at or "", folder.name))
    return max(found)[1] if found else None


def warn_if_cache_may_be_warm(console: Console, run_dir: Path, spec: dict[str, Any], plans: Iterable[Any]) -> list[str]:
    """Print one line per engine the harness does not start (``plan.starts_process`` False)
    whose endpoint an identical earlier run in ``run_dir``'s parent folder measured; returns
    the lines printed (plain text). ``spec``: this run's workload as its manifest stores it
    (``manifest.workload``), so both sides of the comparison are the stored form."""
    lines = []
    for plan in plans:
        if plan.starts_process:
            continue  # started fresh by this run: its prefix cache is empty
        earlier = identical_earlier_run(run_dir.parent, run_dir.name, spec, plan.name, plan.launch.base_url)
        if earlier is None:
            continue
        line = (f"{plan.name}: the engine's prefix cache may be warm from run {earlier} (same endpoint, workload "
                f"and seed: identical prompts); pass --prompt-salt auto, or restart the engine, to measure a cold cache")
        console.print(f"[yellow]{escape(line)}[/]", soft_wrap=True)
        lines.append(line)
    return lines
