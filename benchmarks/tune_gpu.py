"""Device check of ``bench run --tune`` on a GPU (issue 27): the reference engine's GPU search space.

The 2-core machine has no GPU, so the GPU half of the search space (``own``'s ``cuda_graphs``,
``block_size``, the larger ``max_num_seqs`` and per-step budgets; ``adapters/engines/own.py``) is only
exercised on a lent device machine. This script runs, in one go:

1. a model folder of the embedded model's shape (SmolLM2-135M: 30 layers, hidden 576, 9 heads,
   3 KV heads, vocab 49152; :data:`own_engine.random_model.SMOLLM2_135M`) with **random weights**
   and the embedded model's real tokenizer and chat template (``--tokenizer-from``): the real
   weights (540 MB) do not fit the device machine's 64 MiB transfer, and nothing can be fetched
   there. The output text is gibberish; the serving work (prefill, decode, KV cache, batching) is
   the real model's, so capacities are those of a 135M model, not of a useful one;
2. ``bench run --engine own --workload agentic --tune T --tune-configs 6 --ladder-budget L``: the
   configuration search on the detected hardware (``gpu`` there), the tuned main job, the
   verdict, ``recipe.json``;
3. the chosen configuration re-run: ``bench run --engine own --engine-arg own:K=V … --ladder-budget
   L`` (the reference engine is never the recommendation, so it gets no ``recipe.json``; its
   chosen configuration is read from ``ladder.json``'s ``tuning``), to see whether it lands inside
   the tuned result's interval.

It copies the console logs and both ``ladder.json`` files into ``--out`` (flat:
the device tool returns at most 8 files) and writes ``tune_gpu.json`` with the search, the gain
and the re-run's verdict, after each step (a timeout keeps what was done).

Device run (carried wheels for pydantic/fastapi/uvicorn, see the device tool's README)::

    python3 benchmarks/tune_gpu.py --out $OUT --tokenizer-from .gpu_carry/tok

CPU dry run (the same code; the search space is the CPU one)::

    .venv/bin/python benchmarks/tune_gpu.py --out /tmp/tg --tokenizer-from ~/.cache/llm-serve-bench/models/<name> \
        --tune 40 --ladder-budget 20
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=Path, help="folder for the logs, ladders, recipe and tune_gpu.json")
    p.add_argument("--tokenizer-from", required=True, type=Path,
                   help="a folder holding the embedded model's tokenizer.json, tokenizer_config.json, chat_template.jinja")
    p.add_argument("--tune", type=float, default=150.0, help="--tune seconds (default 150)")
    p.add_argument("--tune-configs", type=int, default=6, help="--tune-configs (default 6: every GPU knob moved once)")
    p.add_argument("--ladder-budget", type=float, default=30.0, help="--ladder-budget seconds (default 30)")
    p.add_argument("--deadline", type=float, default=420.0,
                   help="seconds for the whole script: each run is interrupted (SIGINT, what it measured kept) in time")
    p.add_argument("--rerun-reserve", type=float, default=150.0,
                   help="seconds of the deadline kept for the re-run of the chosen configuration")
    return p.parse_args(argv)


def build_model(folder: Path, tokenizer_from: Path) -> Path:
    """Random weights of SmolLM2-135M's shape with the real tokenizer files; returns ``folder``.
    Raises SystemExit naming a missing tokenizer file."""
    from own_engine.random_model import SMOLLM2_135M, write_random_llama

    missing = [f for f in TOKENIZER_FILES if not (tokenizer_from / f).is_file()]
    if missing:
        raise SystemExit(f"error: {tokenizer_from} lacks {', '.join(missing)}: point --tokenizer-from at the "
                         "prepared embedded model (bench model prepare)")
    write_random_llama(folder, SMOLLM2_135M)
    for f in TOKENIZER_FILES:
        shutil.copy2(tokenizer_from / f, folder / f)
    return folder


def bench(args: list[str], log: Path, seconds: float) -> int:
    """``python -m harness.app.cli ARGS``, its output echoed and kept in ``log``; after ``seconds``
    it gets SIGINT (the harness then keeps what it measured and writes its artefacts) and 60 s
    more before SIGKILL. Returns its exit code."""
    cmd = [sys.executable, "-m", "harness.app.cli", *args]
    print("$", " ".join(cmd), flush=True)
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "160"})
        assert proc.stdout is not None
        timers = [threading.Timer(max(1.0, seconds), proc.send_signal, (signal.SIGINT,)),
                  threading.Timer(max(1.0, seconds) + 60, proc.kill)]
        for t in timers:
            t.start()
        try:
            for line in proc.stdout:
                sys.stdout.write(line)
                fh.write(line)
            return proc.wait()
        finally:
            for t in timers:
                t.cancel()


def summarize(ladder: Path) -> dict:
    """The search, the capacities and the gain from one ``ladder.json``."""
    doc = json.loads(ladder.read_text())
    out: dict = {"decision": (doc.get("decision") or {}).get("sentence")}
    out["engines"] = {name: {"status": e.get("status"), "excluded": e.get("excluded"),
                             "capacity": {k: (e.get("capacity") or {}).get(k) for k in ("output_tps", "interval", "load", "open")},
                             "points": [(p.get("load"), p.get("output_tps")) for p in e.get("points", [])]}
                      for name, e in (doc.get("engines") or {}).items()}
    tuning = doc.get("tuning")
    if tuning:
        out["tuning"] = tuning
    return out


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    doc: dict = {"argv": sys.argv[1:], "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "steps": {}}

    def write() -> None:
        (a.out / "tune_gpu.json").write_text(json.dumps(doc, indent=1, default=str))

    try:
        import torch
        doc["torch"] = torch.__version__
        doc["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
        doc["torch"] = f"unavailable: {exc}"
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="tune_gpu-"))
    t0 = time.monotonic()
    model = build_model(work / "model", a.tokenizer_from.expanduser())
    doc["steps"]["model"] = {"seconds": round(time.monotonic() - t0, 1), "folder": str(model)}
    write()

    runs = work / "runs"
    common = ["--engine", "own", "--workload", "agentic", "--model", str(model), "--ladder-budget", str(a.ladder_budget),
              "--no-feature-probes", "--output-dir", str(runs)]
    left = lambda: a.deadline - (time.monotonic() - start)  # noqa: E731
    t0 = time.monotonic()
    rc = bench(["run", *common, "--tune", str(a.tune), "--tune-configs", str(a.tune_configs), "--run-id", "tuned"],
               a.out / "tuned.log", left() - a.rerun_reserve)
    step: dict = {"rc": rc, "seconds": round(time.monotonic() - t0, 1)}
    tuned = runs / "tuned"
    chosen_args: dict[str, str] | None = None
    if (tuned / "ladder.json").is_file():
        shutil.copy2(tuned / "ladder.json", a.out / "tuned_ladder.json")
        step.update(summarize(tuned / "ladder.json"))
        own = (step.get("tuning") or {}).get("own") or {}
        chosen_args = next((c.get("engine_args") for c in own.get("configs", []) if c.get("id") == own.get("chosen")), None)
    doc["steps"]["tuned"] = step
    doc["chosen_engine_args"] = chosen_args
    write()
    # the reference engine is never the recommendation, so no recipe.json: its chosen configuration
    # is re-run from ladder.json's tuning as --engine-arg flags (what a recipe re-run would start)
    if chosen_args is not None and left() > 60:
        t0 = time.monotonic()
        flags = [x for k, v in chosen_args.items() for x in ("--engine-arg", f"own:{k}={v}")]
        rc = bench(["run", *common, *flags, "--run-id", "rerun"], a.out / "rerun.log", left() - 20)
        step = {"rc": rc, "seconds": round(time.monotonic() - t0, 1), "engine_args": chosen_args}
        if (runs / "rerun" / "ladder.json").is_file():
            shutil.copy2(runs / "rerun" / "ladder.json", a.out / "rerun_ladder.json")
            step.update({k: v for k, v in summarize(runs / "rerun" / "ladder.json").items() if k != "tuning"})
        doc["steps"]["rerun"] = step
    write()
    print(json.dumps({k: v for k, v in doc.items() if k != "steps"}, indent=1, default=str))
    return 0 if all(s.get("rc", 0) == 0 for s in doc["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
