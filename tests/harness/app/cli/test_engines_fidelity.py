"""``bench engines fidelity``: the output-fidelity check on its own, on the reference engine against
transformers fp32 on the default model (prompts of the chat workload)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from harness.app.cli.engines import app


def test_the_reference_engine_agrees_with_transformers(tmp_path, monkeypatch) -> None:
    from harness.app.trial import fidelity_reference

    real = fidelity_reference.reference_for
    monkeypatch.setattr(fidelity_reference, "reference_for",  # the cache in the test's folder, not the user's
                        lambda *a, **k: real(*a, **{**k, "cache_root": tmp_path / "cache"}))
    res = CliRunner().invoke(app, ["fidelity", "--engines", "own", "--workload", "chat", "--prompts", "3", "--tokens",
                                   "8", "--run-dir", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    stored = json.loads((tmp_path / "out" / "fidelity.json").read_text())
    own = stored["engines"]["own"]
    assert stored["prompts"] == 3 and stored["max_tokens"] == 8 and own["positions"] == 24
    assert own["passed"] is True and own["agreement_outside_near_ties"] == 1.0 and own["logprobs"] is True
    assert own["logprob_error_max"] < 1e-3  # the reference engine's logprobs are transformers' log-softmax
    assert "fidelity 1.000" in " ".join(res.output.split())


def test_an_unknown_engine_is_one_line(tmp_path) -> None:
    res = CliRunner().invoke(app, ["fidelity", "--engines", "nope", "--run-dir", str(tmp_path)])
    assert res.exit_code == 2 and "nope" in res.output and "Traceback" not in res.output
