"""The flags of this repository's servers (the shims' read from their source, the reference
engine's generated from its settings): an engine arg that names none of them is refused before
anything starts."""

from __future__ import annotations

import textwrap
from pathlib import Path

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
