"""The manifest's model facts carry the weights' content digest: the same weights under another
folder name digest alike, other weights differently (``bench compare`` names a changed model)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.app.core.model import model_summary


def _folder(root: Path, name: str, weights: bytes) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
                                                    "hidden_size": 8, "num_attention_heads": 2}))
    (folder / "model.bin").write_bytes(weights)
    return folder


def test_the_digest_follows_the_weights_not_the_path(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    one = model_summary(_folder(tmp_path, "one", b"\x00" * 1024))
    again = model_summary(_folder(tmp_path, "elsewhere", b"\x00" * 1024))
    other = model_summary(_folder(tmp_path, "other", b"\x01" * 1024))
    assert len(one["digest"]) == 64 and one["digest"] == again["digest"] != other["digest"]
