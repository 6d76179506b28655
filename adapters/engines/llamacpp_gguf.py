"""The model as GGUF for llama.cpp, converted once by the tree's own ``convert_hf_to_gguf.py``.

Every engine serves the same Hugging Face folder; llama.cpp needs it as GGUF. The converter that
ships in the llama.cpp tree (:func:`adapters.engines.llamacpp_build.converter`) runs in the engine's venv
(torch, transformers, numpy, sentencepiece; ``gguf-py`` from the tree on ``PYTHONPATH``) at the
precision of the others (``f32``) or, as a separately named configuration, ``q8_0``.
:func:`gguf_path` names the file by the folder's content hash, beside the model (``<model>-gguf/``;
in ``.engines/llamacpp/models`` when that folder cannot be written), and :func:`ensure_gguf`
converts once, in its own process group guarded by a watchdog like an engine server.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from results.model_digest import model_digest
from adapters.base import EngineError
from adapters.engines.llamacpp_build import ENGINE, converter, root, source_dir
from adapters.runtime.process import run_guarded, tail_file

OUTTYPES = ("f32", "f16", "bf16", "q8_0")


def gguf_dir(model_dir: Path) -> Path:
    """Where the model's GGUF files go: ``<model>-gguf`` beside the folder when it can be written
    there, else ``.engines/llamacpp/models/<model>-gguf``."""
    model_dir = Path(model_dir).resolve()
    beside = model_dir.parent / f"{model_dir.name}-gguf"
    if beside.is_dir() or os.access(model_dir.parent, os.W_OK):
        return beside
    return root() / "models" / beside.name


def gguf_path(model_dir: Path, outtype: str = "f32") -> Path:
    """The GGUF file of ``model_dir`` at ``outtype`` (one of :data:`OUTTYPES`), named by the
    folder's content hash: ``<model>-gguf/<model>-<outtype>-<hash 16>.gguf``."""
    if outtype not in OUTTYPES:
        raise ValueError(f"llamacpp outtype {outtype!r}: choose from {', '.join(OUTTYPES)}")
    folder = gguf_dir(model_dir)
    digest = model_digest(model_dir, folder / "digests.json")
    return folder / f"{Path(model_dir).resolve().name}-{outtype}-{digest[:16]}.gguf"


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def convert_command(python: Path, model_dir: Path, outtype: str, outfile: Path, base: Path | None = None) -> list[str]:
    """``python convert_hf_to_gguf.py MODEL --outtype T --outfile F`` (run with ``gguf-py`` on PYTHONPATH)."""
    return [str(python), str(converter(base)), str(model_dir), "--outtype", outtype, "--outfile", str(outfile)]


def ensure_gguf(python: Path, model_dir: Path, outtype: str, log_path: Path, *, env: dict[str, str],
                cancel: threading.Event | None = None, timeout_s: float = 1800.0) -> tuple[Path, float]:
    """The GGUF file of ``model_dir`` at ``outtype``, converted first when it is not cached;
    returns ``(path, seconds spent converting)`` (0 when cached). The converter runs in its own
    process group, output appended to ``log_path``, guarded by a watchdog; one conversion at a time
    per file (a lock). Raises :class:`EngineError` (with the log tail) when it fails, times out or
    ``cancel`` is set."""
    out = gguf_path(model_dir, outtype)
    if out.is_file():
        return out, 0.0
    with _lock(out.with_name(out.name + ".lock")):
        if out.is_file():
            return out, 0.0
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        started = time.monotonic()
        cmd = convert_command(python, model_dir, outtype, tmp)
        full_env = {**os.environ, **env, "PYTHONPATH": str(source_dir() / "gguf-py")}
        try:
            code = run_guarded(cmd, full_env, log_path, cancel, timeout_s, what=f"{ENGINE}: the GGUF conversion")
            if code != 0:
                raise EngineError(f"{ENGINE}: converting the model to GGUF failed (exit {code}); log: {log_path}",
                                  tail_file(log_path))
            if not tmp.is_file():
                raise EngineError(f"{ENGINE}: the GGUF converter wrote no file (log: {log_path})", tail_file(log_path))
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
        return out, time.monotonic() - started


