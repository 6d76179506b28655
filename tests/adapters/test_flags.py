"""The flags of this repository's servers (the shims' read from their source, the reference
engine's generated from its settings), and of an installed third-party engine, read from its own
help: an engine arg that names none of them is refused before anything starts."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from adapters.flags import declared_flags, unknown_flag
from adapters.registry import get_adapter


def test_argparse_flags_are_read(tmp_path: Path) -> None:
    argparse_src = tmp_path / "shim.py"
    argparse_src.write_text(textwrap.dedent('''
        import argparse
        def main():
            p = argparse.ArgumentParser()
            p.add_argument("--ir-dir", required=True)
            p.add_argument("-t", "--threads", type=int)
            p.add_argument("--prefix-caching", action="store_true")
            p.add_argument("--no-prefix-caching", action="store_true")
    '''))
    known = declared_flags(argparse_src)
    assert known == {"--ir-dir", "--threads", "--prefix-caching", "--no-prefix-caching"}
    assert unknown_flag("threads", "4", known) is None and unknown_flag("prefix_caching", "false", known) is None
    assert unknown_flag("bogus_key", "1", known) == "--bogus-key"


def test_the_shipped_servers_declare_the_flags_their_adapters_pass() -> None:
    own = get_adapter("own")
    assert own.unknown_args({"max_num_seqs": "8", "speculative": "ngram", "prefix_caching": "false"}) == []
    assert own.unknown_args({"bogus_key": "1", "env.FOO": "1"}) == ["bogus_key=1"]  # env.* is no flag
    ov = get_adapter("openvino")
    assert ov.unknown_args({"weight_format": "int8"}) == []  # the adapter's own key, not a flag
    assert "--kv-cache-bytes" in declared_flags(ov.flag_source) and "--max-batch-size" in declared_flags(
        get_adapter("onnxruntime").flag_source)  # add_common_args of openai_shim, read through the shim
    assert get_adapter("vllm").unknown_args({"anything_goes": "1"}) == []  # not ours: vLLM checks its flags at start


def _fake_vllm(engines: Path, help_text: str, version: str = "0.32.0") -> Path:
    """An installed vLLM whose interpreter only prints ``help_text`` (whatever it is asked)."""
    python = engines / "vllm" / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text(f"#!/bin/sh\ncat <<'EOF'\n{help_text}\nEOF\n")
    python.chmod(0o755)
    (engines / "vllm" / "installed.json").write_text(f'{{"engine": "vllm", "version": "{version}"}}')
    return python


def test_a_third_party_engine_s_flags_are_read_from_its_installed_help(tmp_path: Path, monkeypatch) -> None:
    from harness.app.settings.checks import check_engine_args

    monkeypatch.setenv("BENCH_ENGINES_DIR", str(tmp_path / "engines"))
    vllm = get_adapter("vllm", "cpu")
    assert vllm.help_argvs() == ()  # not installed: nothing to read, the engine checks at start
    _fake_vllm(tmp_path / "engines", "usage: api_server [--host HOST] [--port PORT]\n  --max-num-seqs MAX_NUM_SEQS\n"
                                      "  --enable-prefix-caching, --no-enable-prefix-caching")
    args = {"max_num_seqs": "8", "enable_prefix_caching": "false", "env.VLLM_X": "1", "max_num_seqs.x": "1",
            "bogus_key": "1"}
    assert vllm.unknown_args(args) == ["bogus_key=1"]
    with pytest.raises(ValueError, match=r"--engine-arg vllm:bogus_key=1 names no flag of vllm's server: see "
                                         r"\S+/engines/vllm/venv/bin/python -m vllm.entrypoints.openai.api_server "
                                         r"--help=all for its flags"):
        check_engine_args(["vllm"], {"vllm": args})
    # read once per installation: the same marker reads the cache, a new setup reads the help again
    _fake_vllm(tmp_path / "engines", "nothing")
    assert vllm.unknown_args(args) == ["bogus_key=1"]
    _fake_vllm(tmp_path / "engines", "usage: api_server [--help] (see --help=all)", version="0.33.0")
    assert vllm.unknown_args(args) == []  # a help that lacks --host/--port is no list: skipped honestly
