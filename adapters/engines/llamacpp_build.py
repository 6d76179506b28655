"""llama.cpp's ``llama-server``, built from source once.

PyPI has no official ``llama-server`` binary, but the ``llama-cpp-python`` sdist vendors the whole
llama.cpp tree (``vendor/llama.cpp``: its CMake project, ``convert_hf_to_gguf.py`` and ``gguf-py``).
``bench engines setup llamacpp`` (:func:`build_server`, called by :func:`adapters.runtime.envs.setup_engine`
after the converter's venv is installed) downloads that sdist with pip's own sources, extracts it
into ``.engines/llamacpp/src`` and builds only the ``llama-server`` target with CMake into
``.engines/llamacpp/build`` (``bin/llama-server``), showing ninja's ``[n/N]`` steps as a progress
bar; everything it runs goes to ``.engines/llamacpp/build.log``, and a failed step raises
:class:`~adapters.base.EngineError` with the log's tail. On the 2-core reference machine the
build is 212 steps: about 10 minutes when idle, 25 beside other work (2026-12-02).

The model's conversion to GGUF, by the tree's own converter, is :mod:`adapters.engines.llamacpp_gguf`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from adapters.base import EngineError
from adapters.runtime.process import tail_file
from adapters.runtime.recipes import engine_env_dir

ENGINE = "llamacpp"
SDIST = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
TARGET = "llama-server"
BUILD_JOBS = 2
CMAKE_OPTIONS = ("-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                 "-DLLAMA_BUILD_EXAMPLES=OFF", "-DGGML_NATIVE=ON")
_NINJA = re.compile(r"^\[(\d+)/(\d+)\]")  # ninja: "[17/212] Building CXX object ..."
_MAKE = re.compile(r"^\[\s*(\d+)%\]")  # make: "[ 45%] Building CXX object ..."
# `llama-server --version`: "version: 6790 (0b1bad14f)" from a git checkout; from the sdist's tree
# (no git) "version: 0.5.0-dev (build 1, commit 0c1e570)"
_VERSION = re.compile(r"version:\s*(\S+)\s*\((?:build \d+, commit )?([0-9a-f]+|unknown)\)")
_BUILT = "built.json"

Runner = Callable[[list[str], "Path | None", dict[str, str], Callable[[str], None]], int]
"""Runs one command: ``(argv, cwd, env, on_line) -> exit code``, each output line to ``on_line``."""


# ------------------------------------------------------------------------------------------
# where things are
def root() -> Path:
    """``.engines/llamacpp`` (under ``$BENCH_ENGINES_DIR`` when set)."""
    return engine_env_dir(ENGINE)


def source_dir(base: Path | None = None) -> Path:
    """The llama.cpp tree inside the extracted sdist (``src/<sdist folder>/vendor/llama.cpp``; the
    folder is ``llama_cpp_python-0.3.36`` or ``llama-cpp-python-0.3.36`` by the sdist's naming)."""
    src = (base or root()) / "src"
    found = sorted(src.glob(f"*-{SDIST_VERSION}/vendor/llama.cpp")) if src.is_dir() else []
    return found[0] if found else src / f"{SDIST.replace('-', '_')}-{SDIST_VERSION}" / "vendor" / "llama.cpp"


def build_dir(base: Path | None = None) -> Path:
    return (base or root()) / "build"


def server_binary(base: Path | None = None) -> Path:
    """``.engines/llamacpp/build/bin/llama-server``."""
    return build_dir(base) / "bin" / TARGET


def converter(base: Path | None = None) -> Path:
    """The tree's ``convert_hf_to_gguf.py``."""
    return source_dir(base) / "convert_hf_to_gguf.py"


def built_info(base: Path | None = None) -> dict[str, Any] | None:
    """What the last successful build recorded (version, commit, seconds), None without one."""
    path = (base or root()) / _BUILT
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and server_binary(base).is_file() else None


# ------------------------------------------------------------------------------------------
# the build
@dataclass(frozen=True)
class BuildStep:
    """One step of the build: a command (``cmd``, run in ``cwd``) or a Python ``action``;
    ``progress``: its output carries ninja's ``[n/N]`` (or make's ``[ p%]``) lines."""

    label: str
    cmd: tuple[str, ...] = ()
    cwd: Path | None = None
    action: Callable[[], None] | None = None
    progress: bool = False


def sdist_file(base: Path) -> Path | None:
    """The downloaded sdist in ``base/sdist`` (None before the download)."""
    found = sorted((base / "sdist").glob(f"llama[-_]cpp[-_]python-{SDIST_VERSION}.tar.gz"))
    return found[0] if found else None


def extract(archive: Path, dest: Path) -> None:
    """Unpack the sdist into ``dest`` (only regular files and folders inside it: tarfile's
    ``data`` filter); an earlier partial extraction is replaced."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")


def build_steps(base: Path, *, pip_python: str | None = None, jobs: int = BUILD_JOBS) -> list[BuildStep]:
    """The steps still to do, in order: download the sdist (pip, with pip's configured sources),
    extract it, configure with CMake (Ninja when installed), build the ``llama-server`` target."""
    steps: list[BuildStep] = []
    if sdist_file(base) is None:
        steps.append(BuildStep(f"download the {SDIST}=={SDIST_VERSION} sdist (the llama.cpp source)",
                               (pip_python or sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                                ":all:", f"{SDIST}=={SDIST_VERSION}", "-d", str(base / "sdist"))))

    def unpack() -> None:
        archive = sdist_file(base)
        if archive is None:
            raise EngineError(f"{ENGINE}: pip download left no {SDIST}-{SDIST_VERSION} sdist in {base / 'sdist'}")
        extract(archive, base / "src")

    if not (source_dir(base) / "CMakeLists.txt").is_file():
        steps.append(BuildStep("extract the llama.cpp source", action=unpack))
    generator = ("-G", "Ninja") if shutil.which("ninja") else ()
    steps.append(BuildStep("configure (cmake)", ("cmake", "-S", str(source_dir(base)), "-B", str(build_dir(base)),
                                                 *generator, *CMAKE_OPTIONS)))
    steps.append(BuildStep(f"build {TARGET} (-j{jobs})", ("cmake", "--build", str(build_dir(base)), "--target",
                                                          TARGET, "-j", str(jobs)), progress=True))
    return steps


def parse_progress(line: str) -> tuple[int, int] | None:
    """``"[17/212] Building ..."`` → ``(17, 212)``; make's ``"[ 45%] ..."`` → ``(45, 100)``; else None."""
    if m := _NINJA.match(line):
        return int(m[1]), int(m[2])
    if m := _MAKE.match(line):
        return int(m[1]), 100
    return None


def run_command(cmd: list[str], cwd: Path | None, env: dict[str, str], on_line: Callable[[str], None]) -> int:
    """Run ``cmd``, every output line (stdout and stderr) to ``on_line``; the exit code.
    The child is killed if this is interrupted (Ctrl-C)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace")
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            on_line(line)
        return proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise


class _Display:
    """One rich progress line per step (a bar once ninja says how many steps); silent without a console."""

    def __init__(self, console: Any, label: str) -> None:
        self.progress = None
        if console is None or not console.is_terminal:  # in a log or pipe: only the "done" lines
            return
        from rich.markup import escape
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn(escape(label)), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("[dim]{task.fields[line]}[/dim]"), console=console, transient=True)
        self.task = self.progress.add_task(label, total=None, line="")
        self.progress.start()

    def line(self, text: str) -> None:
        if self.progress is None or not text.strip():
            return
        from rich.markup import escape

        done = parse_progress(text)
        fields: dict[str, Any] = {"line": escape(text.strip()[:70])}
        if done is not None:
            fields.update(completed=done[0], total=done[1])
        self.progress.update(self.task, **fields)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def run_steps(steps: list[BuildStep], log_path: Path, *, console: Any = None, runner: Runner = run_command,
              env: dict[str, str] | None = None) -> None:
    """Run ``steps`` in order, appending everything to ``log_path``; each shows a progress line.

    Raises :class:`EngineError` naming the step and the log, with the log's last lines in
    ``log_tail``, when a command exits nonzero, cannot be started, or an action fails."""
    env = {**os.environ, **(env or {})}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a", encoding="utf-8") as log:
        for i, step in enumerate(steps, 1):
            msg = f"[{ENGINE}] build step {i}/{len(steps)}: {step.label}"
            log.write(f"\n### {msg}\n" + (f"$ {' '.join(step.cmd)}\n" if step.cmd else ""))
            log.flush()
            display = _Display(console, msg)
            started = time.monotonic()
            try:
                rc = _run_one(step, runner, env, log, display)
            finally:
                display.stop()
                log.flush()
            if rc != 0:
                raise EngineError(f"{msg} failed (exit {rc}); full log: {log_path}", tail_file(log_path))
            if console is not None:
                from rich.markup import escape

                console.print(f"[dim]{escape(msg)}: done in {time.monotonic() - started:.0f} s[/dim]", highlight=False)


def _run_one(step: BuildStep, runner: Runner, env: dict[str, str], log: Any, display: _Display) -> int:
    """One step's exit code (an action: 0, or 1 with its error in the log)."""
    if step.action is not None:
        try:
            step.action()
        except (OSError, tarfile.TarError, EngineError) as exc:
            log.write(f"{type(exc).__name__}: {exc}\n")
            return 1
        return 0

    def on_line(line: str) -> None:
        log.write(line if line.endswith("\n") else line + "\n")
        log.flush()  # `tail -f build.log` follows the build as it goes
        display.line(line)

    try:
        return runner(list(step.cmd), step.cwd, env, on_line)
    except OSError as exc:  # the program is missing or cannot run
        log.write(f"could not run {step.cmd[0]!r}: {exc}\n")
        return 127


def check_tools() -> None:
    """Raise :class:`EngineError` (one line with the fix) when cmake or a C++ compiler is missing."""
    missing = [t for t in ("cmake",) if shutil.which(t) is None]
    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler (g++ or clang++)")
    if missing:
        raise EngineError(f"{ENGINE}: building llama-server needs {' and '.join(missing)}: install them "
                          "(e.g. apt-get install cmake g++ ninja-build) and rerun `bench engines setup llamacpp`")


def server_version(binary: Path, timeout_s: float = 60.0) -> tuple[str | None, str | None]:
    """``(version, commit)`` from ``llama-server --version``: a build number as ``"b6790"`` or the
    tree's own version (``"0.5.0-dev"``), and the commit; ``(None, None)`` when unreadable."""
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    m = _VERSION.search(out.stdout + out.stderr)
    if m is None:
        return None, None
    return (f"b{m[1]}" if m[1].isdigit() else m[1]), (None if m[2] == "unknown" else m[2])


def _record(base: Path, started: float | None = None, previous: dict[str, Any] | None = None) -> str:
    """Write ``built.json`` (version and commit read from the binary) and return the version."""
    version, commit = server_version(server_binary(base))
    info = {**(previous or {}), "version": version or "unknown", "commit": commit,
            "sdist": f"{SDIST}=={SDIST_VERSION}"}
    if started is not None:
        info["seconds"] = round(time.monotonic() - started, 1)
    (base / _BUILT).write_text(json.dumps(info, indent=2))
    return info["version"]


def build_server(base: Path | None = None, *, console: Any = None, force: bool = False,
                 runner: Runner = run_command, pip_python: str | None = None) -> str:
    """Build ``llama-server`` into ``base`` (default ``.engines/llamacpp``) unless it is already
    built (``force``: rebuild from a clean build folder); return its version (``"b6790"``).

    Raises :class:`EngineError` (with the tail of ``build.log``) when a tool is missing or a step fails."""
    base = base or root()
    info = built_info(base)
    if info is not None and not force:
        version = str(info.get("version") or "unknown")
        if version == "unknown":  # recorded by an older reader of `--version`: read it again
            version = _record(base, previous=info)
        if console is not None:
            console.print(f"[dim]{ENGINE}: {server_binary(base)} is already built ({version}); "
                          "--force rebuilds it[/dim]")
        return version
    check_tools()
    (base / _BUILT).unlink(missing_ok=True)
    if force:
        shutil.rmtree(build_dir(base), ignore_errors=True)
    started = time.monotonic()
    run_steps(build_steps(base, pip_python=pip_python), base / "build.log", console=console, runner=runner)
    if not server_binary(base).is_file():
        raise EngineError(f"{ENGINE}: the build finished but {server_binary(base)} is missing; full log: "
                          f"{base / 'build.log'}", tail_file(base / "build.log"))
    return _record(base, started)
