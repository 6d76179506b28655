"""Device check of issue 43: the reference engine's ladder on a GPU with NVML energy and its
time series, the NVML counter against sampled power, and batch-1 decode against the bandwidth bound.

Sized to about 10 minutes of a lent NVIDIA GPU. Sections (each runs even when an earlier one
failed; its exception is stored):

- ``nvml`` — the NVML total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ) read
  before and after a sustained decode (batch 32, about 20 s), with the power
  (``nvmlDeviceGetPowerUsage``, mW) sampled every 100 ms beside it: ``counter_j`` against
  ``sampled_j`` = Σ power × Δt; pass when they agree within 5 %.
- ``decode`` — the engine's batch-1 decode tokens/s (median of 3, :func:`benchmarks.cuda_check.measure_decode`,
  CUDA graphs on, fp32) beside the bound a decode step cannot beat: it reads every weight once,
  so tokens/s ≤ HBM bandwidth / weight bytes (bandwidth from NVML: memory bus width × 2 × the
  maximum memory clock; weight bytes: parameters × 4).
- ``ladder`` — ``bench run --engine own --workload agentic`` on that model (energy source chosen
  by the harness: NVML on the GPU) for ``--time-budget``; from its ``ladder.json``: the
  capacity, output tokens per joule at the capacity point with its interval, every point's J per
  token and mean watts, and the engine's series (KV-cache usage, running, waiting, preemptions).

The model: ``--model DIR``, else a random-weight checkpoint of SmolLM2-135M's shape (the
embedded model's fp32 folder is 517 MB, over what travels to the device; the shape, not the
weights, sets the decode cost). Writes ``OUT/gpu_energy_check.json`` after every section and
``OUT/gpu_energy_check.md`` (the issue's table) at the end; exits 1 when a check failed or a
section raised. Without CUDA (and no ``--device cpu``) it prints one line and exits 0.

The device image lacks pydantic, FastAPI and uvicorn: carry them as wheels (the device
README's recipe, ``.whl``) for the ladder. The CPU dry run of the same code, tiny sizes::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/gpu_energy_check.py --device cpu --quick --out /tmp/gec
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

AGREEMENT = 0.05  # NVML counter vs Σ sampled power: within 5 %


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=Path, help="folder for gpu_energy_check.json/.md and the run")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="auto: CUDA if visible, else skip (exit 0); cpu: dry run of the logic")
    p.add_argument("--quick", action="store_true", help="tiny sizes (the CPU dry run)")
    p.add_argument("--model", type=Path, help="a Hugging Face Llama folder (default: random SmolLM2-135M shape)")
    p.add_argument("--tokenizer-from", type=Path,
                   help="a folder whose tokenizer files (tokenizer.json, tokenizer_config.json, special_tokens_map.json, chat_template.jinja) "
                        "the random checkpoint takes (default: the embedded model's, from the model cache); the agentic "
                        "workload needs a byte-level BPE tokenizer, which the synthetic one is not")
    p.add_argument("--time-budget", default="5m", help="the ladder's --time-budget (default 5m)")
    p.add_argument("--sections", default="nvml,decode,ladder")
    return p.parse_args(argv)


def nvml_handle():
    """(pynvml, the first GPU's handle), or (None, None) without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:  # no driver, no library: the CPU dry run
        return None, None


def bandwidth_bytes_s(nvml, handle) -> float | None:
    """HBM bandwidth from NVML: bus width (bits) / 8 × 2 (double data rate) × max memory clock (MHz)."""
    if nvml is None:
        return None
    width = nvml.nvmlDeviceGetMemoryBusWidth(handle)
    clock_mhz = nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM)
    return width / 8 * 2 * clock_mhz * 1e6


def make_engine(torch, model_dir: Path, device: str, batch: int):
    from own_engine.config import EngineConfig
    from own_engine.engine import LLMEngine

    return LLMEngine(EngineConfig(model_dir=model_dir, device=device, max_num_seqs=batch, max_model_len=1024,
                                  max_num_batched_tokens=batch * 64, enable_prefix_caching=False,
                                  kv_cache_bytes=2048 * 2**20, threads=torch.get_num_threads()))


def section_nvml(torch, device, model_dir: Path, quick: bool) -> dict:
    """The counter's joules over a sustained decode against Σ sampled power × Δt (W × s)."""
    from benchmarks.cuda_check import measure_decode

    nvml, handle = nvml_handle()
    e = make_engine(torch, model_dir, device.type, 4 if quick else 32)
    measure_decode(torch, e, 4 if quick else 32, 16, 8, 0, device)  # warm (graphs, allocator)
    samples: list[tuple[float, float]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            if nvml is not None:
                samples.append((time.perf_counter(), nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0))
            stop.wait(0.1)

    before = nvml.nvmlDeviceGetTotalEnergyConsumption(handle) if nvml else None
    sampler = threading.Thread(target=sample, daemon=True)
    t0 = time.perf_counter()
    sampler.start()
    rounds = 0
    while time.perf_counter() - t0 < (2.0 if quick else 20.0):
        measure_decode(torch, e, 4 if quick else 32, 64, 16 if quick else 256, rounds + 1, device)
        rounds += 1
    stop.set()
    sampler.join()
    seconds = time.perf_counter() - t0
    out: dict = {"seconds": round(seconds, 2), "rounds": rounds, "power_samples": len(samples)}
    if nvml is None:
        return {**out, "skipped": "no NVML on this machine"}
    counter_j = (nvml.nvmlDeviceGetTotalEnergyConsumption(handle) - before) / 1000.0
    sampled_j = sum(w * (t1 - t0_) for (t0_, w), (t1, _) in zip(samples, samples[1:]))
    span = samples[-1][0] - samples[0][0] if len(samples) > 1 else 0.0
    sampled_j *= seconds / span if span > 0 else float("nan")  # the same window as the counter's
    ratio = counter_j / sampled_j if sampled_j else None
    return {**out, "counter_j": round(counter_j, 2), "sampled_j": round(sampled_j, 2),
            "mean_watts": round(counter_j / seconds, 1), "counter_over_sampled": ratio,
            "pass": ratio is not None and abs(ratio - 1) <= AGREEMENT}


def section_decode(torch, device, model_dir: Path, quick: bool) -> dict:
    """Batch-1 decode tokens/s (median of 3) against HBM bandwidth / weight bytes."""
    from benchmarks.cuda_check import measure_decode

    e = make_engine(torch, model_dir, device.type, 1)
    measure_decode(torch, e, 1, 16, 8, 0, device)
    runs = [measure_decode(torch, e, 1, 64, 16 if quick else 256, i + 1, device)["decode_tok_s"] for i in range(3)]
    params = weight_count(e.model_config)
    nvml, handle = nvml_handle()
    bw = bandwidth_bytes_s(nvml, handle)
    weight_bytes = params * 4 if params else None
    bound = bw / weight_bytes if bw and weight_bytes else None
    tps = statistics.median(runs)
    return {"decode_tok_s": round(tps, 1), "runs": [round(r, 1) for r in runs], "params": params,
            "weight_bytes": weight_bytes, "bandwidth_gb_s": round(bw / 1e9, 1) if bw else None,
            "bound_tok_s": round(bound, 0) if bound else None,
            "fraction_of_bound": round(tps / bound, 4) if bound else None,
            "cuda_graphs": getattr(e, "cuda_graphs_active", None), "attention": e.attention_backend}


def weight_count(m) -> int:
    """Parameters of a Llama of :class:`own_engine.config.ModelConfig` ``m``: embeddings (twice when
    untied) + per layer the q/k/v/o projections, the gated MLP's three matrices and two norms, + the final norm."""
    h, d, i, v = m.hidden_size, m.head_dim, m.intermediate_size, m.vocab_size
    per_layer = h * (m.num_heads + 2 * m.num_kv_heads) * d + m.num_heads * d * h + 3 * h * i + 2 * h
    return v * h * (1 if m.tie_word_embeddings else 2) + m.num_layers * per_layer + h


def section_ladder(model_dir: Path, out: Path, budget: str, quick: bool) -> dict:
    """``bench run --engine own`` on ``model_dir``; the capacity, tokens/J and the series from its ladder.json."""
    runs = out / "run"
    cmd = [sys.executable, "-m", "harness.app.cli", "run", "--engine", "own", "--workload", "agentic",
           "--model", str(model_dir), "--time-budget", "90s" if quick else budget, "--no-feature-probes",
           "--output-dir", str(runs)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    (out / "ladder_console.txt").write_text(proc.stdout + proc.stderr)
    found = sorted(runs.glob("*/ladder.json"))
    if not found:
        return {"rc": proc.returncode, "error": "no ladder.json: see ladder_console.txt", "cmd": cmd}
    own = json.loads(found[-1].read_text())["engines"]["own"]
    cap = own.get("capacity") or {}
    energy = cap.get("energy") or {}
    points = [{"load": p["load"], "passed": p["passed"], "output_tps": p.get("output_tps"),
               "j_per_token": (p.get("energy") or {}).get("j_per_token"),
               "tokens_per_j": (p.get("energy") or {}).get("tokens_per_j"),
               "mean_watts": (p.get("energy") or {}).get("mean_watts"),
               "series_peak": _series_peak(p.get("series") or [])} for p in own.get("points", [])]
    return {"rc": proc.returncode, "wall_s": round(time.monotonic() - t0, 1), "run": found[-1].parent.name,
            "capacity_tps": cap.get("output_tps"), "capacity_interval": cap.get("interval"),
            "capacity_load": cap.get("load"), "binding": cap.get("binding"), "energy_source": energy.get("source"),
            "energy_reason": energy.get("reason"), "tokens_per_j": energy.get("tokens_per_j"),
            "tokens_per_j_interval": energy.get("tokens_per_j_interval"), "energy_load": cap.get("energy_load"),
            "points": points}


def _series_peak(series: list[dict]) -> dict:
    """The peak of each sampled quantity over a point's engine series (KV usage, running, waiting, preemptions)."""
    out: dict = {}
    for s in series:
        for sample in s.get("samples", []):
            for key, value in sample.items():
                if key != "t_s" and value is not None:
                    out[key] = max(out.get(key, value), value)
    return out


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def with_tokenizer(model_dir: Path, source: Path | None) -> Path:
    """``model_dir`` with the tokenizer of ``source`` (default: the embedded model's folder in the
    model cache), whose vocabulary must be the checkpoint's (SmolLM2's 49,152). Raises SystemExit
    with one line when there is none."""
    if source is None:
        from harness.app.core.model import default_model_dir

        source = default_model_dir()
    if not (Path(source) / "tokenizer.json").is_file():
        raise SystemExit(f"gpu_energy_check: {source} has no tokenizer.json: pass --tokenizer-from DIR "
                         "(copy the embedded model's tokenizer files there before a device run)")
    for name in TOKENIZER_FILES:
        if (Path(source) / name).is_file():
            shutil.copy(Path(source) / name, model_dir / name)
    return model_dir


def _g(x, digits: int = 3) -> str:
    """A figure to ``digits`` significant digits; an interval as [lo–hi]; None as "–"."""
    if x is None:
        return "–"
    if isinstance(x, (list, tuple)):
        return "[" + "–".join(_g(v, digits) for v in x) + "]"
    if isinstance(x, (int, float)) and abs(x) >= 10 ** digits:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def table(doc: dict) -> str:
    """The issue's table (markdown): tokens per joule at capacity, counter vs sampled power, decode vs bound."""
    s = doc["sections"]
    lad, nv, dec = s.get("ladder", {}), s.get("nvml", {}), s.get("decode", {})
    why = f" ({lad.get('energy_reason')})" if lad.get("energy_reason") else ""
    rows = [
        ("device", doc.get("device_name")),
        ("own capacity, output tok/s", f"{_g(lad.get('capacity_tps'))} {_g(lad.get('capacity_interval'))} at "
                                       f"{_g(lad.get('capacity_load'))} in flight ({lad.get('binding') or 'open'})"),
        ("output tokens per joule at capacity", f"{_g(lad.get('tokens_per_j'))} {_g(lad.get('tokens_per_j_interval'))}, "
                                                f"{lad.get('energy_source')}{why}"),
        ("NVML counter vs Σ sampled power × Δt", f"{_g(nv.get('counter_j'))} J vs {_g(nv.get('sampled_j'))} J: "
                                                 f"{_g(nv.get('counter_over_sampled'), 4)} (within 5 %: {nv.get('pass')})"),
        ("batch-1 decode vs bandwidth bound", f"{_g(dec.get('decode_tok_s'))} vs {_g(dec.get('bound_tok_s'))} tok/s "
                                              f"({_g(dec.get('bandwidth_gb_s'))} GB/s ÷ {_g(dec.get('weight_bytes'))} B "
                                              f"of weights): {_g(dec.get('fraction_of_bound'))} of it"),
    ]
    return "| figure | value |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if args.device == "auto" and not torch.cuda.is_available():
        print("gpu_energy_check: no CUDA device visible; nothing to check (pass --device cpu for a dry run)")
        return 0
    device = torch.device("cuda" if args.device != "cpu" else "cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    doc: dict = {"argv": sys.argv[1:], "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "device_name": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu (dry run)",
                 "sections": {}, "failed": []}
    path = args.out / "gpu_energy_check.json"
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model
        if model_dir is None:
            from own_engine.random_model import SMOLLM2_135M, RandomLlamaSpec, write_random_llama

            spec = RandomLlamaSpec(num_layers=2, vocab_size=SMOLLM2_135M.vocab_size) if args.quick else SMOLLM2_135M
            model_dir = with_tokenizer(write_random_llama(Path(tmp) / "model", spec), args.tokenizer_from)
        steps = {"nvml": lambda: section_nvml(torch, device, model_dir, args.quick),
                 "decode": lambda: section_decode(torch, device, model_dir, args.quick),
                 "ladder": lambda: section_ladder(model_dir, args.out, args.time_budget, args.quick)}
        for key in args.sections.split(","):
            print(f"gpu_energy_check: {key} ...", flush=True)
            try:
                doc["sections"][key] = steps[key]()
            except Exception:
                doc["sections"][key] = {"error": traceback.format_exc()}
            if doc["sections"][key].get("pass") is False or "error" in doc["sections"][key]:
                doc["failed"].append(key)
            path.write_text(json.dumps(doc, indent=1))
    (args.out / "gpu_energy_check.md").write_text(table(doc))
    print(table(doc))
    return 1 if doc["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
