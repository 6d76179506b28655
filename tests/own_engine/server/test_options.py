"""The server's options are generated from the settings' declarations: a field is its flag."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

import pytest

import own_engine.server.cli as cli_main
from own_engine.config import EngineConfig, flag
from own_engine.server import options


def test_every_declared_engine_setting_is_a_flag_and_nothing_else_is() -> None:
    declared = {f.name for f in dataclasses.fields(EngineConfig) if "flag" in f.metadata}
    assert {f.name for f in dataclasses.fields(EngineConfig)} - declared == {"cuda_graph_batch_sizes"}
    flags = options.declared_flags()
    assert {"--model", "--block-size", "--prefix-caching", "--no-prefix-caching", "--kv-cache-bytes",
            "--speculative-model", "--host", "--port", "--max-body-bytes"} <= flags
    assert "--enable-prefix-caching" not in flags and "--model-dir" not in flags  # the declared names win
    assert len(flags) == len(declared) + 5 + 4  # + the server's five, + --no-x of the four booleans


def test_a_new_field_is_its_flag_with_its_type_choices_and_bounds() -> None:
    @dataclass
    class Probe:
        level: int = field(default=3, metadata=flag("A level.", min=1, max=9))
        mode: str = field(default="fast", metadata=flag("A mode.", choices=("fast", "slow")))
        fused: bool = field(default=True, metadata=flag("Fused kernels."))
        budget: Optional[int] = field(default=None, metadata=flag("A budget.", name="token-budget"))
        internal: int = 0

    got = {p.name: p for p in options._params(Probe)}
    assert set(got) == {"level", "mode", "fused", "budget"}
    assert got["level"].flags == ("--level",) and got["level"].default == 3
    assert got["fused"].flags == ("--fused/--no-fused",)
    assert got["budget"].flags == ("--token-budget",) and got["budget"].default is None
    assert [m.value for m in got["mode"].annotation] == ["fast", "slow"] and got["mode"].default.value == "fast"


@pytest.mark.parametrize("argv, field_name, value", [
    (["--dtype", "float32"], "dtype", "float32"),
    (["--no-cuda-graphs"], "cuda_graphs", False),
    (["--attention-backend", "torch"], "attention_backend", "torch"),
    (["--kv-cache-bytes", "4096"], "kv_cache_bytes", 4096),
])
def test_each_flag_reaches_its_engine_config_field(monkeypatch, tmp_path, argv, field_name, value) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # main() sets it from --threads
    seen: dict = {}

    def fake_load(opts):
        seen.update(opts)
        raise cli_main._Exit("stop here", 3)

    monkeypatch.setattr(cli_main, "_load_engine", fake_load)
    assert cli_main.main(["--model", str(tmp_path), *argv]) == 3
    assert getattr(EngineConfig(**seen), field_name) == value
    seen.clear()
    assert cli_main.main(["--model", str(tmp_path)]) == 3
    assert "kv_cache_bytes" not in seen  # an unset alternative leaves the field's default (256 MiB)
    assert EngineConfig(**seen).kv_cache_bytes == 256 * 2**20


def test_a_bad_choice_is_one_line_exit_2(capsys, tmp_path) -> None:
    assert cli_main.main(["--model", str(tmp_path), "--log-level", "loud"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "--log-level" in err, err
