"""``bench serve RECIPE`` (issue 41): the recipe's engine starts as measured on the port asked for,
answers there, and SIGTERM stops it with its whole process group (exit 143); bad input is one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from typer.testing import CliRunner

from adapters.runtime.process import find_free_port
from harness.app.cli import app


def _recipe(tmp_path: Path) -> Path:
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps({"engine": "own", "engine_args": {"max_num_seqs": "4"}, "threads": 1, "run_id": "r1",
                                "slos": {"tpot_p90": 200.0}, "capacity_tps": 50.0, "capacity_interval": [45.0, 55.0]}))
    return path


def test_serve_answers_on_its_port_and_sigterm_leaves_nothing_behind(tmp_path: Path) -> None:
    port = find_free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "harness.app.cli", "serve", str(_recipe(tmp_path)), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        deadline, models = time.monotonic() + 180, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as resp:
                    models = json.load(resp)
                break
            except OSError:
                time.sleep(0.5)
        assert models is not None and models["data"][0]["id"] == "SmolLM2-135M-Instruct"
        time.sleep(1.0)  # past the "Serving …" lines
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, out
    assert f"Serving own (own (reference engine)) at http://127.0.0.1:{port}/v1" in out and "Stopped own (SIGTERM)" in out
    assert "45.0–55.0" in out and f"bench run --endpoint own-served=http://127.0.0.1:{port}" in " ".join(out.split())
    try:  # the server is gone with the command: nothing answers on the port
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
        answered = True
    except OSError:
        answered = False
    assert not answered


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    for argv, fragment in ((["serve", str(tmp_path / "none.json")], "RECIPE"),
                           (["serve", str(_recipe(tmp_path)), "--port", "0"], "--port 0 is not a TCP port")):
        res = runner.invoke(app, argv)
        assert res.exit_code == 2 and res.stdout == "" and fragment in res.stderr, res.output
        assert len(res.stderr.strip().splitlines()) == 1
