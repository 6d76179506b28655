"""Where a reference-engine step spends its time: torch profiler over decode and mixed steps.

Runs the engine on the default model (1 thread) and profiles ``--steps`` engine steps of each
scenario:

- ``decode-1``: one sequence decoding at context ~160 tokens (batch-1 decode step);
- ``decode-32``: 32 sequences decoding at context ~160 tokens;
- ``mixed``: 16 decoding sequences plus a 256-token prefill chunk in the same step;
- ``prefill``: one 512-token prompt, prefilled in one step (nothing else running).

Prints, per scenario, the mean wall time of a step and its breakdown by operator class
(``matmul``: aten::mm/addmm/linear/bmm, oneDNN and the native panel GEMM; ``attention``: SDPA
and its softmax/bmm internals and the native paged kernel (native C kernels are ctypes calls the
torch profiler cannot see: they are wrapped in ``record_function("native::...")``);
``gather/copy``: index_select/index_copy/cat/copy/contiguous; ``elementwise``: mul/add/rsqrt/silu
/...; ``outside``: step time not inside any op: scheduler, metadata building, Python),
and the top operators by self CPU time. ``--json PATH`` writes the numbers.

A decode-only step normally runs every layer in one native call (``LlamaModel.fused_decode``),
which the profiler sees as one opaque op; the breakdown is therefore profiled on the per-op layer
loop (same kernels, one call each), and both unprofiled step times are printed: ``step_ms`` (the
engine as it runs) and ``step_ms_per_op_loop``.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/profile_own_engine.py [--steps 20]``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import typer  # noqa: E402
from rich.table import Table  # noqa: E402

from harness.app.cli.common import fail, make_console  # noqa: E402
from own_engine.config import EngineConfig  # noqa: E402
from own_engine.engine import LLMEngine  # noqa: E402
from own_engine.sampling_params import SamplingParams  # noqa: E402

console = make_console()  # 160 columns when not a terminal: tables stay readable in logs
app = typer.Typer(add_completion=False)

CLASSES = {
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "mkldnn",
               "native::panel_linear"),
    "attention": ("scaled_dot_product", "flash_attention", "aten::_softmax", "aten::softmax",
                  "_scaled_dot_product", "native::paged_decode_attention", "native::prefill_attention_paged"),
    "native elementwise (RoPE+KV write, add+RMSNorm, SiLU*up)": ("native::rope_kv_write", "native::add_rms_norm",
                                                                 "native::silu_mul"),
    "gather/copy": ("index_select", "index_copy", "aten::cat", "aten::copy_", "aten::contiguous",
                    "aten::clone", "aten::embedding", "aten::index", "aten::repeat", "aten::stack",
                    "aten::masked", "aten::to", "aten::_to_copy", "aten::where"),
}


def classify(name: str) -> str:
    for cls, keys in CLASSES.items():
        if any(k in name for k in keys):
            return cls
    return "elementwise/other aten"


def _prompt(engine: LLMEngine, n: int, salt: int) -> list[int]:
    vocab = engine.model_config.vocab_size
    return [(salt * 7919 + i * 104729) % (vocab - 10) + 5 for i in range(n)]


def _setup(engine: LLMEngine, scenario: str) -> None:
    sp = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)
    n_dec = {"decode-1": 1, "decode-32": 32, "mixed": 16, "prefill": 0}[scenario]
    for i in range(n_dec):
        engine.add_request(f"d{i}", _prompt(engine, 150, i), sp)
    while any(s.num_output_tokens < 8 for s in engine.scheduler.running) or engine.scheduler.waiting:
        engine.step()


def _annotate_native(engine: LLMEngine) -> None:
    """Wrap the native C kernels (ctypes calls, invisible to the torch profiler) in
    ``record_function("native::<name>")`` so their time shows as its own class."""
    attn = engine.runner.model.attention_fn
    lib = getattr(attn, "lib", None)
    if lib is None:
        return
    for name in ("paged_decode_attention", "prefill_attention_paged", "rope_kv_write", "add_rms_norm", "silu_mul",
                 "panel_linear"):
        fn = getattr(lib, name, None)
        if fn is None:
            continue

        def wrapped(*a, _fn=fn, _name=name):
            with torch.profiler.record_function(f"native::{_name}"):
                return _fn(*a)

        setattr(lib, name, wrapped)


def profile(model_dir: Path, scenario: str, steps: int) -> dict:
    engine = LLMEngine(EngineConfig(model_dir=model_dir, threads=1, max_model_len=1024,
                                    max_num_batched_tokens=512, max_num_seqs=64, enable_prefix_caching=False))
    _setup(engine, scenario)
    sp = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)

    def one_step(i: int) -> None:
        if scenario == "mixed":  # a fresh 256-token prompt joins the 16 decodes each step
            engine.add_request(f"p{i}", _prompt(engine, 256, 1000 + i), sp)
        if scenario == "prefill":  # a fresh 512-token prompt alone; its one token ends it
            engine.add_request(f"p{i}", _prompt(engine, 512, 1000 + i), SamplingParams(temperature=0, max_tokens=1))
        engine.step()

    _annotate_native(engine)
    model = engine.runner.model
    fused = model.fused_decode
    for i in range(3):
        one_step(-1 - i)
    t = time.perf_counter()
    for i in range(steps):
        one_step(i)
    wall = (time.perf_counter() - t) / steps
    model.fused_decode = False  # the breakdown needs the kernels as separate calls
    t = time.perf_counter()
    for i in range(steps):
        one_step(steps + i)
    wall_loop = (time.perf_counter() - t) / steps
    acts = torch.profiler.ProfilerActivity.CPU
    with torch.profiler.profile(activities=[acts]) as prof:
        for i in range(steps):
            one_step(2 * steps + i)
    model.fused_decode = fused
    per_class: dict[str, float] = defaultdict(float)
    top = []
    events = prof.key_averages()
    for ev in events:
        if not ev.key.startswith(("aten::", "native::")) and "mkldnn" not in ev.key:
            continue
        self_us = ev.self_cpu_time_total / steps
        per_class[classify(ev.key)] += self_us
        top.append((ev.key, self_us, ev.count / steps))
    top.sort(key=lambda r: -r[1])
    in_ops_ms = sum(per_class.values()) / 1e3
    out = {"scenario": scenario, "step_ms": wall * 1e3, "step_ms_per_op_loop": wall_loop * 1e3,
           "classes_ms": {k: v / 1e3 for k, v in sorted(per_class.items(), key=lambda kv: -kv[1])},
           "aten_total_ms": in_ops_ms,
           "top": [{"op": k, "self_ms": us / 1e3, "calls_per_step": c} for k, us, c in top[:12]]}
    out["python_other_ms"] = max(0.0, out["step_ms_per_op_loop"] - in_ops_ms)
    return out


@app.command()
def main(steps: int = typer.Option(20, min=1, help="profiled steps per scenario"),
         scenario: str = typer.Option("all", help="all | decode-1 | decode-32 | mixed | prefill"),
         json_path: Path = typer.Option(None, "--json", help="write the numbers here")) -> None:
    """Profile decode and mixed steps of the reference engine; print the time breakdown."""
    from harness.app.core.model import resolve_model

    scenarios = ["decode-1", "decode-32", "mixed", "prefill"]
    if scenario != "all" and scenario not in scenarios:
        fail(f"--scenario must be all or one of {', '.join(scenarios)}, got {scenario!r}")
    torch.set_num_threads(1)
    model_dir = resolve_model(None)
    names = scenarios if scenario == "all" else [scenario]
    results = [profile(model_dir, s, steps) for s in names]
    for r in results:
        t = Table(title=f"{r['scenario']}: {r['step_ms']:.1f} ms/step unprofiled ({r['step_ms_per_op_loop']:.1f} "
                        "with the per-op layer loop, whose profile this is)")
        t.add_column("class / op")
        t.add_column("ms/step", justify="right")
        t.add_column("share", justify="right")
        t.add_column("calls/step", justify="right")
        # shares of the profiled time (ops + outside): the profiler's own overhead can make the ops
        # sum past the unprofiled step time
        whole = max(r["step_ms_per_op_loop"], r["aten_total_ms"])
        for k, v in r["classes_ms"].items():
            t.add_row(k, f"{v:.2f}", f"{v / whole:.0%}", "")
        t.add_row("outside aten ops (Python, scheduler, profiler)", f"{r['python_other_ms']:.2f}",
                  f"{r['python_other_ms'] / whole:.0%}", "")
        for row in r["top"]:
            t.add_row(f"  {row['op']}", f"{row['self_ms']:.2f}", "", f"{row['calls_per_step']:.0f}")
        console.print(t)
    if json_path:
        json_path.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    app()
