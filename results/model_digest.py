"""A model folder's content digest: what caches derived from the weights are keyed by (the
llama.cpp GGUF conversion, the OpenVINO IR export, the fidelity reference)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def _file_sha256(path: Path, memo: dict[str, str]) -> str:
    """SHA-256 of ``path``'s bytes, remembered in ``memo`` by path, size and mtime."""
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    if key not in memo:
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        memo[key] = h.hexdigest()
    return memo[key]


def model_digest(model_dir: Path, memo_path: Path | None = None) -> str:
    """SHA-256 over the folder's files (names and contents; dot-files left out). With
    ``memo_path``, each file's hash is remembered there by path, size and mtime, so the weights
    are read once (an unreadable or unwritable memo is ignored)."""
    memo: dict[str, str] = {}
    if memo_path is not None:
        try:
            memo = json.loads(memo_path.read_text())
        except (OSError, ValueError):
            memo = {}
    h = hashlib.sha256()
    for f in sorted(p for p in Path(model_dir).iterdir() if p.is_file() and not p.name.startswith(".")):
        h.update(f"{f.name}:{_file_sha256(f, memo)}\n".encode())
    if memo_path is not None:
        try:
            memo_path.parent.mkdir(parents=True, exist_ok=True)
            memo_path.write_text(json.dumps(memo))
        except OSError:
            pass
    return h.hexdigest()
