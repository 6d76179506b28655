"""Can anything overlap an engine's measuring on this machine? (issue 39, item 4: engine starts,
the next engine's fidelity check, report writing, overlapped only where they cannot disturb).

The measured engine here is the reference engine (own_engine in this process, 1 thread, 4 greedy
sequences at a time: what an engine under a ladder point computes). It is measured alone, and
while a second process (1 thread, as the job gives each engine) does what the main job could
overlap with it:

- ``start``: an engine's start-up work (torch and transformers imported, the model loaded, one
  short generation; over and over while the measurement lasts);
- ``check``: a fidelity check (Hugging Face greedy ``generate`` of short prompts, as the
  reference and an engine's check compute);
- ``report``: report writing (matplotlib rendering a frontier-sized figure to PNG, over and over).

Conditions are interleaved (alone, start, alone, check, alone, report, …), ``--repeats`` times;
each measurement generates for ``--seconds``. Prints output tokens/s of each and the ratio to
the mean of the alone measurements beside it, median and range over the repeats: a ratio near
1 would allow the overlap, one well below 1 means the overlapped work would be measured as the
engine's slowness.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/overlap.py [--repeats 3] [--seconds 10] [--client-core]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from own_engine.config import EngineConfig  # noqa: E402
from own_engine.engine import LLMEngine  # noqa: E402
from own_engine.sampling_params import SamplingParams  # noqa: E402

WORK = {
    "start": """
import torch, transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
while True:
    tok = AutoTokenizer.from_pretrained(MODEL)
    m = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
    m.generate(tok("Hello", return_tensors="pt").input_ids, max_new_tokens=4, do_sample=False)
    del m
""",
    "check": """
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained(MODEL)
m = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
ids = tok("The capital of France is a city that", return_tensors="pt").input_ids
while True:
    m.generate(ids, max_new_tokens=32, do_sample=False)
""",
    "report": """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt, io, numpy as np
while True:
    fig, ax = plt.subplots(figsize=(10, 6))
    for k in range(8):
        x = np.sort(np.random.rand(12)) * 100
        ax.plot(x, np.sqrt(x) * (k + 1), marker="o")
    fig.savefig(io.BytesIO(), format="png", dpi=150)
    plt.close(fig)
""",
}


def model_dir() -> Path:
    from harness.app.core.model import default_model_dir

    return Path(default_model_dir())


def tokens_per_s(engine: LLMEngine, seconds: float) -> float:
    """Greedy generation of 4 sequences of 48 tokens, repeated for ``seconds``: output tokens/s."""
    prompts = ["Write a short story about a robot who learns to paint."] * 4
    params = [SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)] * 4
    t0, tokens = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        outs = engine.generate(prompts, params)
        tokens += sum(len(o.output_token_ids) for o in outs)
    return tokens / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--client-core", action="store_true",
                    help="keep a second core busy throughout (a spinning process), as the load generator's client "
                         "keeps it during a ladder point on the 2-core machine")
    args = ap.parse_args()
    if args.repeats < 1 or args.seconds <= 0:
        sys.exit("error: --repeats must be >= 1 and --seconds > 0")
    torch.set_num_threads(1)
    model = model_dir()
    engine = LLMEngine(EngineConfig(model_dir=model, max_num_seqs=8, max_model_len=512))
    tokens_per_s(engine, 2.0)  # warm-up
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    client = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.client_core else None
    ratios: dict[str, list[float]] = {k: [] for k in WORK}
    rates: dict[str, list[float]] = {"alone": [], **{k: [] for k in WORK}}
    for r in range(args.repeats):
        for kind, code in WORK.items():
            before = tokens_per_s(engine, args.seconds)
            proc = subprocess.Popen([sys.executable, "-c", f"MODEL = {str(model)!r}\n{code}"], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                time.sleep(1.0)  # the process is running (imports under way)
                during = tokens_per_s(engine, args.seconds)
            finally:
                proc.kill()
                proc.wait()
            after = tokens_per_s(engine, args.seconds)
            alone = (before + after) / 2
            rates["alone"] += [before, after]
            rates[kind].append(during)
            ratios[kind].append(during / alone)
            print(f"repeat {r + 1}, {kind}: alone {before:.1f} / {after:.1f} tok/s, during {during:.1f} tok/s: "
                  f"{during / alone:.2f}x", flush=True)
    if client is not None:
        client.kill()
        client.wait()
    print(f"\n{'with' if client is not None else 'without'} a second core kept busy (the client's)")
    print("\n| overlapped with | tok/s (median) | ratio to alone, median [min..max] |")
    print("|---|---:|---:|")
    print(f"| nothing | {statistics.median(rates['alone']):.1f} | 1 |")
    for kind in WORK:
        rs = ratios[kind]
        print(f"| {kind} | {statistics.median(rates[kind]):.1f} | {statistics.median(rs):.2f} "
              f"[{min(rs):.2f}..{max(rs):.2f}] |")


if __name__ == "__main__":
    main()
