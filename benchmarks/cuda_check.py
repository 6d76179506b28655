"""One-shot device check of the reference engine's CUDA path (Triton paged attention + engine on CUDA).

Sections (each runs even when an earlier one failed; a section's exception is recorded with its
traceback):

- ``a`` kernel: :func:`own_engine.triton_attention.triton_paged_attention` vs the CPU path
  (:func:`own_engine.attention.paged_attention`, fp32 and fp64) over block sizes 1..64, head dims
  32..256, GQA ratios 1..8, mixed prefill / chunk-with-context / decode / speculative-verify
  batches with ragged lengths, contexts of up to 512 blocks, shuffled block tables, q strided as
  the model passes it. Also the PyTorch path on CUDA vs CPU, and two shapes the kernel does not
  take (head dim 80, block size 12) that must fall back correctly. Pass: max abs error <= 2e-4
  (Triton) / 1e-3 (PyTorch on CUDA) against the CPU fp32 path; inputs are N(0, 1).
- ``b`` engine: a small random-weight Llama (written locally by :mod:`own_engine.random_model`,
  synthetic tokenizer) run greedily by :class:`own_engine.engine.LLMEngine` on the device and on
  the CPU (reference: no prefix caching, no chunking). Model logits over a multi-step mixed batch
  (max abs difference); then generated token ids for engine variants: defaults + a prefix-cache
  rerun, chunked prefill (budget 13), no cache / no chunking, n-gram and draft speculative
  decoding (plus a proposer that proposes every step, so verification always runs, also with
  seeded sampling through the rejection sampler), preemption, block size 32, the PyTorch attention path, n=3 forks (CoW), seeded
  sampling reproducibility and eager (``cuda_graphs=False``). A token mismatch counts as a near-tie (not a failure) only when the
  CPU logits of the two tokens differ by <= 1e-3 at the first divergence. On CUDA every variant
  with the Triton kernel must run with CUDA graphs active (:mod:`own_engine.cuda_graphs`), and
  ``cuda-graphs-vs-eager`` (fp32, then bf16) compares a graph engine with an eager one on the
  device: greedy tokens equal (fp32; bf16: informational), and the logits of padded decode batches
  replayed from graphs vs the same runner's eager forward (relative max abs difference <= 1e-3
  fp32 / 5e-2 bf16). Skipped on the CPU.
- ``c`` throughput: decode tokens/s of the SmolLM2-135M shape (random weights, fp32) at batch 1,
  8, 32, 128 (median of repeats, runs interleaved): Triton with CUDA graphs (``triton_graphs``),
  Triton eager (``triton``) and the PyTorch attention path (``torch``), with the ratios
  graphs/eager and triton/torch; then bf16 at batch 1 and 32, graphs and eager, vs fp32 graphs
  (``decode_bf16``); plus the attention call alone at decode shapes (CUDA events). On the CPU the
  graph and bf16 parts are reported as skipped.
- ``v`` (optional, not in the default ``--sections``): vLLM's offline decode step time on the same
  shape and batches (``LLM.generate`` of ``1 + N`` tokens minus 1 token, per step), when vLLM is
  importable, and the own engine's graph step time over it (the issue asks for <= 1.5x).

Writes ``OUT/cuda_check.json`` (after every section, so a timeout keeps what was measured), prints
a summary, exits 1 when a check failed or a section raised, 0 otherwise. Without CUDA (and no
``--device cpu``) it prints one line and exits 0.

``--device cpu --quick`` runs the same code on the CPU with tiny sizes (section ``a`` needs CUDA,
or Triton's interpreter: ``TRITON_INTERPRET=1`` with Triton installed), to catch script errors
before the device run:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cuda_check.py --device cpu --quick --out /tmp/cc

Only needs torch, numpy, transformers, tokenizers, safetensors (and triton on the device).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import traceback
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

KERNEL_TOL = 2e-4  # Triton vs CPU fp32, N(0,1) inputs: expect ~1e-6
TORCH_CUDA_TOL = 1e-3  # PyTorch path on CUDA vs CPU
LOGITS_TOL = 1e-3  # model logits device vs CPU, relative to max(1, max |logit|)
TIE_TOL = 1e-3  # a greedy mismatch is a near-tie when the CPU logits of both tokens differ by <= this


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=Path, help="folder for cuda_check.json")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="auto: CUDA if visible, else skip (exit 0); cpu: dry run of the logic")
    p.add_argument("--quick", action="store_true", help="tiny sizes (for the CPU dry run)")
    p.add_argument("--sections", default="a,b,c",
                   help="comma list of a (kernel), b (engine), c (throughput), v (vLLM step time, optional)")
    p.add_argument("--budget-s", type=float, default=180.0,
                   help="wall-clock budget; cases past it are skipped (not failed)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: 1 for cpu, 8 for cuda)")
    return p.parse_args(argv)


# ----------------------------------------------------------------------------- plumbing
class Budget:
    def __init__(self, seconds: float) -> None:
        self.t0 = time.monotonic()
        self.seconds = seconds

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def over(self, fraction: float) -> bool:
        """Whether more than ``fraction`` of the budget is spent (each section stops starting new
        cases at its own fraction, so the later sections keep their share)."""
        return self.elapsed() > fraction * self.seconds


def say(msg: str) -> None:
    print(msg, flush=True)


def fmt_err(x: float | None) -> str:
    return "-" if x is None else f"{x:.2e}"


class Checker:
    """Collects results into one JSON document and writes it after every section."""

    def __init__(self, out: Path, doc: dict) -> None:
        self.out = out
        self.doc = doc
        self.path = out / "cuda_check.json"

    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.doc, indent=1, default=str))
        tmp.replace(self.path)

    def progress(self, key: str, item: dict) -> None:
        """Record one finished case of the running section (kept if the run is killed mid-section)."""
        self.doc.setdefault("partial", {}).setdefault(key, []).append(item)
        self.write()

    def run_section(self, key: str, title: str, fn) -> None:
        say(f"\n=== section {key}: {title}")
        t0 = time.monotonic()
        sec: dict = {"title": title}
        try:
            sec.update(fn())
            sec.setdefault("status", "pass" if sec.get("ok", True) else "fail")
        except Exception as exc:  # noqa: BLE001 - one section must not hide the others
            sec["status"] = "error"
            sec["ok"] = False
            sec["error"] = f"{type(exc).__name__}: {exc}"
            sec["traceback"] = traceback.format_exc()
            say(f"  ERROR {type(exc).__name__}: {exc}")
            say(sec["traceback"])
        sec["seconds"] = round(time.monotonic() - t0, 2)
        self.doc["sections"][key] = sec
        self.doc.get("partial", {}).pop(key, None)
        say(f"=== section {key}: {sec['status'].upper()} ({sec['seconds']} s)")
        self.write()


def environment(torch, device) -> dict:
    env: dict = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "device": str(device),
        "threads": torch.get_num_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "cpu_count": os.cpu_count(),
    }
    for mod in ("numpy", "transformers", "tokenizers", "safetensors", "triton"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception as exc:  # noqa: BLE001
            env[mod] = f"unavailable ({type(exc).__name__}: {exc})"
    # Triton builds its launcher with a C compiler against Python.h at first launch
    env["c_compiler"] = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang") or shutil.which("cc")
    inc = sysconfig.get_paths().get("include") or ""
    env["python_h"] = os.path.isfile(os.path.join(inc, "Python.h"))
    if device.type == "cuda":
        i = device.index or 0
        props = torch.cuda.get_device_properties(i)
        env["gpu"] = torch.cuda.get_device_name(i)
        env["capability"] = list(torch.cuda.get_device_capability(i))
        env["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        try:  # torch's defaults keep fp32 matmuls in fp32 (no TF32); recorded, not changed
            env["float32_matmul_precision"] = torch.get_float32_matmul_precision()
            env["matmul_allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
        except Exception as exc:  # noqa: BLE001 - legacy/new TF32 API mix raises in some versions
            env["matmul_allow_tf32"] = f"unreadable ({type(exc).__name__}: {exc})"
        if shutil.which("nvidia-smi"):
            try:
                env["nvidia_smi"] = subprocess.run(
                    ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm", "--format=csv,noheader"],
                    capture_output=True, text=True, timeout=15).stdout.strip()
            except Exception as exc:  # noqa: BLE001
                env["nvidia_smi"] = f"failed: {exc}"
    return env


# ----------------------------------------------------------------------------- section a: kernel
def kernel_cases(quick: bool) -> list[dict]:
    def c(name, H, nkv, D, bs, q_lens, ctx_lens, contiguous_q=False, expect_kernel=True):
        return dict(name=name, H=H, nkv=nkv, D=D, bs=bs, q_lens=q_lens, ctx_lens=ctx_lens,
                    contiguous_q=contiguous_q, expect_kernel=expect_kernel)

    if quick:  # for the interpreter dry run
        return [
            c("smollm2-mixed-small", 9, 3, 64, 16, [17, 1, 4, 1], [17, 40, 20, 1]),
            c("bs1-gqa2", 4, 2, 32, 1, [5, 1, 2], [5, 20, 7]),
            c("d80-falls-back", 4, 2, 80, 16, [3, 1], [3, 30], expect_kernel=False),
        ]
    import random

    r = random.Random(1234)
    return [
        c("smollm2-mixed(test shape)", 9, 3, 64, 16, [37, 1, 4, 1, 20], [37, 50, 70, 1, 100]),
        c("smollm2-mixed-contiguous-q", 9, 3, 64, 16, [37, 1, 4, 1, 20], [37, 50, 70, 1, 100], contiguous_q=True),
        c("decode-b32-ragged-mha-d128", 8, 8, 128, 16, [1] * 32, [r.randint(1, 600) for _ in range(32)]),
        c("decode-b128-smollm2", 9, 3, 64, 16, [1] * 128, [r.randint(1, 300) for _ in range(128)]),
        c("llama3-gqa4-bs32-mixed", 32, 8, 128, 32, [1, 1, 1, 4, 4, 50, 300, 1], [1000, 33, 64, 129, 4, 200, 300, 2047]),
        c("gqa8-bs8-long-512-blocks", 16, 2, 64, 8, [1, 1, 3, 1], [4096, 3000, 1500, 9]),
        c("bs1-gqa2-d32", 4, 2, 32, 1, [5, 1, 2, 1], [5, 20, 7, 64]),
        c("bs64-d256-gqa2", 8, 4, 256, 64, [1, 2, 70], [300, 130, 70]),
        c("spec-verify-b16-q4", 9, 3, 64, 16, [4] * 16, [r.randint(5, 400) for _ in range(16)]),
        c("prefill-chunk-256-over-1024", 9, 3, 64, 16, [256, 17, 1], [1024, 17, 1023]),
        c("d16-gqa8-bs16", 8, 1, 16, 16, [9, 1, 1], [40, 1, 77]),
        c("d80-falls-back", 8, 2, 80, 16, [20, 1, 3], [20, 60, 40], expect_kernel=False),
        c("bs12-falls-back", 9, 3, 64, 12, [20, 1, 3], [20, 60, 40], expect_kernel=False),
    ]


def run_kernel_case(torch, case: dict, device, interpreted: bool) -> dict:
    from own_engine.attention import build_metadata, paged_attention, write_kv
    from own_engine import triton_attention as ta

    H, nkv, D, bs = case["H"], case["nkv"], case["D"], case["bs"]
    q_lens, ctx_lens = case["q_lens"], case["ctx_lens"]
    g = torch.Generator().manual_seed(zlib.crc32(case["name"].encode()))
    need = [-(-c // bs) for c in ctx_lens]
    nblocks = sum(need) + 7
    perm = torch.randperm(nblocks, generator=g).tolist()  # shuffled, non-contiguous block tables
    tables, i = [], 0
    for n in need:
        tables.append(perm[i:i + n])
        i += n
    T = sum(q_lens)
    # q as the model passes it: a [T, H, D] slice of the fused [T, H + nkv, D] q/k projection
    qk = torch.randn(T, H + nkv, D, generator=g)
    q = qk[:, :H].contiguous() if case["contiguous_q"] else qk[:, :H]
    k = torch.randn(T, nkv, D, generator=g)
    v = torch.randn(T, nkv, D, generator=g)
    kc = torch.randn(nblocks, bs, nkv, D, generator=g)
    vc = torch.randn(nblocks, bs, nkv, D, generator=g)
    scale = D ** -0.5
    cpu = torch.device("cpu")
    meta = build_metadata(q_lens, ctx_lens, tables, bs, H, nkv, cpu)
    write_kv(k, v, kc, vc, meta.slot_mapping)
    ref32 = paged_attention(q, k, v, kc, vc, meta, scale)
    meta64 = build_metadata(q_lens, ctx_lens, tables, bs, H, nkv, cpu)
    ref64 = paged_attention(q.double(), k.double(), v.double(), kc.double(), vc.double(), meta64, scale)

    res = dict(name=case["name"], H=H, nkv=nkv, G=H // nkv, D=D, block_size=bs, num_tokens=T,
               num_seqs=len(q_lens), max_ctx=max(ctx_lens), max_blocks=max(need),
               q_contiguous=bool(q.is_contiguous()))
    if interpreted:  # Triton interpreter on CPU tensors: the kernel itself, no fallback logic
        dq, dk, dv, dkc, dvc, dmeta = q, k, v, kc, vc, meta
        kernel_used = ta._pow2(bs) and ta._pow2(D)
        out = ta.launch(dq, dkc, dvc, dmeta, scale, nkv) if kernel_used else None
    else:
        dqk = qk.to(device)
        dq = dqk[:, :H].contiguous() if case["contiguous_q"] else dqk[:, :H]
        dk, dv, dkc, dvc = k.to(device), v.to(device), kc.to(device), vc.to(device)
        dmeta = build_metadata(q_lens, ctx_lens, tables, bs, H, nkv, device)
        kernel_used = ta.kernel_supports(dq, dkc, dvc)
        out = ta.triton_paged_attention(dq, dk, dv, dkc, dvc, dmeta, scale)
        torch.cuda.synchronize()
        tout = paged_attention(dq, dk, dv, dkc, dvc, dmeta, scale)
        res["torch_cuda_vs_cpu32"] = float((tout.cpu() - ref32).abs().max())
    res["kernel_used"] = bool(kernel_used)
    res["expect_kernel"] = case["expect_kernel"]
    if out is not None:
        out = out.cpu()
        res["triton_vs_cpu32"] = float((out - ref32).abs().max())
        res["triton_vs_fp64"] = float((out.double() - ref64).abs().max())
        res["finite"] = bool(torch.isfinite(out).all())
    res["cpu32_vs_fp64"] = float((ref32.double() - ref64).abs().max())
    problems = []
    if bool(kernel_used) != case["expect_kernel"]:
        problems.append(f"kernel_used={kernel_used}, expected {case['expect_kernel']}")
    if out is not None and not (res["triton_vs_cpu32"] <= KERNEL_TOL and res["finite"]):
        problems.append(f"triton error {res['triton_vs_cpu32']:.3g} > {KERNEL_TOL}")
    if "torch_cuda_vs_cpu32" in res and not res["torch_cuda_vs_cpu32"] <= TORCH_CUDA_TOL:
        problems.append(f"torch-on-cuda error {res['torch_cuda_vs_cpu32']:.3g} > {TORCH_CUDA_TOL}")
    res["ok"] = not problems
    res["problems"] = problems
    return res


def section_kernel(torch, device, args, budget: Budget, progress) -> dict:
    interpreted = device.type == "cpu"
    if interpreted and os.environ.get("TRITON_INTERPRET") != "1":
        return {"status": "skipped", "ok": True,
                "reason": "needs CUDA (or TRITON_INTERPRET=1 with Triton installed for a CPU dry run)"}
    try:
        import triton
    except ImportError as exc:
        if interpreted:
            return {"status": "skipped", "ok": True, "reason": f"Triton not importable: {exc}"}
        raise RuntimeError(f"Triton is not importable on this CUDA machine: {exc}") from exc
    from own_engine.model_runner import triton_unavailable_reason

    out: dict = {"interpreted": interpreted, "triton": triton.__version__, "tolerance": KERNEL_TOL,
                 "torch_cuda_tolerance": TORCH_CUDA_TOL, "cases": []}
    if not interpreted:
        out["smoke_test"] = triton_unavailable_reason(device) or "ok"
        say(f"  smoke test: {out['smoke_test']}")
    for case in kernel_cases(args.quick or interpreted):
        if budget.over(0.3):
            out["cases"].append({"name": case["name"], "skipped": "time budget"})
            continue
        t0 = time.monotonic()
        try:
            res = run_kernel_case(torch, case, device, interpreted)
        except Exception as exc:  # noqa: BLE001
            res = {"name": case["name"], "ok": False, "problems": [f"{type(exc).__name__}: {exc}"],
                   "traceback": traceback.format_exc()}
        res["seconds"] = round(time.monotonic() - t0, 2)
        out["cases"].append(res)
        progress(res)
        say(f"  {'PASS' if res['ok'] else 'FAIL'} {res['name']:<30} kernel={res.get('kernel_used')!s:<5} "
            f"triton-cpu={fmt_err(res.get('triton_vs_cpu32'))} triton-fp64={fmt_err(res.get('triton_vs_fp64'))} "
            f"torchcuda-cpu={fmt_err(res.get('torch_cuda_vs_cpu32'))} cpu-fp64={fmt_err(res.get('cpu32_vs_fp64'))} "
            f"{'; '.join(res.get('problems', []))}")
    out["ok"] = all(c.get("ok", True) for c in out["cases"]) and out.get("smoke_test", "ok") == "ok"
    return out


# ----------------------------------------------------------------------------- section b: engine
def engine_spec(quick: bool):
    from own_engine.random_model import RandomLlamaSpec

    if quick:
        return RandomLlamaSpec(num_layers=2, hidden_size=128, num_heads=4, num_kv_heads=2, head_dim=32,
                               intermediate_size=256, vocab_size=512, max_position_embeddings=1024, seed=3)
    return RandomLlamaSpec(num_layers=4, hidden_size=576, num_heads=9, num_kv_heads=3, head_dim=64,
                           intermediate_size=1536, vocab_size=4096, max_position_embeddings=2048, seed=3)


def make_prompts(torch, vocab: int, quick: bool) -> list[list[int]]:
    g = torch.Generator().manual_seed(11)

    def rand(n: int) -> list[int]:
        return torch.randint(3, vocab, (n,), generator=g).tolist()

    pattern = rand(10)
    p3 = rand(120 if quick else 260)
    p2 = rand(50 if quick else 100)
    return [
        rand(7),
        pattern * 4,  # repeats itself: n-gram proposals hit
        p2,
        p3,  # spans many blocks
        p3[:64] + rand(20),  # shares 4 blocks with p3
        p2[:48] + pattern,  # shares 3 blocks with p2
    ]


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def tie_gap(torch, ref_engine, prompt: list[int], ref: list[int], i: int, got: int) -> float | None:
    """CPU logit of the reference token minus that of the device's token at output position ``i``."""
    from own_engine.batch import BatchItem
    from own_engine.model_runner import ModelRunner

    ids = prompt + ref[:i]
    bs = 16
    nb = -(-len(ids) // bs)
    if i >= len(ref) or got is None:
        return None
    r = ModelRunner(ref_engine.runner.model, nb, bs, torch.device("cpu"))
    logits = r.run([BatchItem(ids, 0, list(range(nb)), 1)])[0]
    return float(logits[ref[i]] - logits[got])


def compare_outputs(torch, ref_engine, prompts, refs, outs) -> dict:
    per = []
    ok = True
    for pi, (prompt, ref, got) in enumerate(zip(prompts, refs, outs)):
        d = first_divergence(ref, got)
        rec: dict = {"prompt": pi, "len": len(got), "match": d is None}
        if d is not None:
            rec["first_divergence"] = d
            gap = tie_gap(torch, ref_engine, prompt, ref, d, got[d] if d < len(got) else None)
            rec["cpu_logit_gap"] = gap
            rec["near_tie"] = gap is not None and abs(gap) <= TIE_TOL
            ok = ok and rec["near_tie"]
        per.append(rec)
    exact = sum(r["match"] for r in per)
    return {"ok": ok, "exact_sequences": exact, "sequences": len(per), "per_prompt": per,
            "token_agreement": sum(sum(x == y for x, y in zip(ref, got)) for ref, got in zip(refs, outs))
            / max(1, sum(len(r) for r in refs))}


class AlwaysPropose:
    """A proposer that proposes at every step (prompt lookup with 1-grams, else the last k tokens
    again), so every decode of the variant is a speculative verification whatever the random
    model generates; greedy output must still equal the reference."""

    def __init__(self) -> None:
        from own_engine.spec_decode import NgramProposer

        self.ngram = NgramProposer(min_n=1, max_n=4)

    def propose_batch(self, seqs, ks):
        from own_engine.spec_decode import Proposal

        return [Proposal(list(self.ngram.propose(s.token_ids, k) or s.token_ids[-k:])) for s, k in zip(seqs, ks)]


def model_logits_check(torch, ref_model, dev_model, device, vocab: int) -> dict:
    """Logits of one model on the device vs the CPU over three steps that share a KV cache:
    prefills; then a decode, a chunk with cached context (> 16 queries), a speculative-verify-shaped
    query (4 tokens) and a new prefill in one batch; then decodes of all four."""
    from own_engine.batch import BatchItem
    from own_engine.model_runner import ModelRunner

    g = torch.Generator().manual_seed(5)
    toks = {n: torch.randint(3, vocab, (n,), generator=g).tolist() for n in (37, 25, 134, 3)}
    A, B, C, D = toks[37], toks[25], toks[134], toks[3]
    tables = {"A": [3, 9, 4], "B": [1, 0], "C": [12, 2, 5, 6, 7, 8, 10, 11, 13], "D": [14]}
    steps = [
        [BatchItem(A, 0, tables["A"], 37), BatchItem(B[:5], 0, tables["B"], 5), BatchItem(C[:130], 0, tables["C"], 130)],
        [BatchItem(A[-1:], 37, tables["A"], 1), BatchItem(B[5:], 5, tables["B"], 20),
         BatchItem(C[130:134], 130, tables["C"], 4), BatchItem(D, 0, tables["D"], 3)],
        [BatchItem([7], 38, tables["A"], 1), BatchItem([8], 25, tables["B"], 1), BatchItem([9], 134, tables["C"], 1),
         BatchItem([10], 3, tables["D"], 1)],
    ]
    r_cpu = ModelRunner(ref_model, 16, 16, torch.device("cpu"))
    r_dev = ModelRunner(dev_model, 16, 16, device)
    errs = []
    for items in steps:
        a = r_cpu.run(items)
        b = r_dev.run(items).cpu()
        errs.append({"max_abs": float((a - b).abs().max()), "max_logit": float(a.abs().max()),
                     "argmax_equal": bool((a.argmax(-1) == b.argmax(-1)).all())})
    worst = max(e["max_abs"] / max(1.0, e["max_logit"]) for e in errs)
    return {"ok": worst <= LOGITS_TOL, "worst_relative": worst, "tolerance": LOGITS_TOL, "steps": errs}


def section_engine(torch, device, args, budget: Budget, tmp: Path, progress) -> dict:
    from own_engine.config import EngineConfig
    from own_engine.engine import LLMEngine
    from own_engine.random_model import write_random_llama
    from own_engine.sampling_params import SamplingParams

    spec = engine_spec(args.quick)
    t0 = time.monotonic()
    model_dir = write_random_llama(tmp / "engine_model", spec)
    out: dict = {"model": {"spec": spec.__dict__, "params": spec.num_params, "write_s": round(time.monotonic() - t0, 2)}}
    prompts = make_prompts(torch, spec.vocab_size, args.quick)
    new = 12 if args.quick else 32
    greedy = SamplingParams(temperature=0, max_tokens=new, ignore_eos=True)
    base = dict(model_dir=model_dir, max_model_len=512, threads=torch.get_num_threads())
    out["prompt_lens"] = [len(p) for p in prompts]
    out["max_tokens"] = new

    ref_engine = LLMEngine(EngineConfig(**base, device="cpu", enable_prefix_caching=False,
                                        enable_chunked_prefill=False, max_num_batched_tokens=2048))
    refs = [o.output_token_ids for o in ref_engine.generate(prompts, greedy)]
    out["reference"] = "cpu, no prefix caching, no chunked prefill, batched"
    say(f"  reference: {len(refs)} prompts x {new} tokens on the CPU; first: {refs[0][:8]}...")

    checks: list[dict] = []

    def record(name: str, res: dict) -> None:
        res["name"] = name
        checks.append(res)
        progress(res)
        extra = {k: res[k] for k in ("attention_backend", "exact_sequences", "sequences", "note", "worst_relative",
                                     "prefix_cache_hits", "spec_verify_steps", "spec_accepted", "num_preemptions")
                 if k in res}
        say(f"  {'PASS' if res.get('ok') else 'FAIL'} {name:<22} {extra} {'; '.join(res.get('problems', []))}")

    def leak_problems(e) -> list[str]:
        s = e.stats()
        return [] if s["kv_blocks_used"] == 0 and s["num_running"] == 0 and s["num_waiting"] == 0 else \
            [f"leak: {s['kv_blocks_used']} blocks used, {s['num_running']} running, {s['num_waiting']} waiting"]

    # b0: logits of the model itself, device vs CPU, both attention paths on the device
    try:
        dev_engine = LLMEngine(EngineConfig(**base, device=device.type))
        res = model_logits_check(torch, ref_engine.runner.model, dev_engine.runner.model, device, spec.vocab_size)
        res["attention_backend"] = dev_engine.attention_backend
        res["note"] = dev_engine.attention_note
        res["problems"] = [] if res["ok"] else [f"logits differ by {res['worst_relative']:.3g} (relative)"]
        if device.type == "cuda" and dev_engine.attention_backend != "triton":
            res["ok"] = False
            res["problems"].append(f"engine on CUDA did not select Triton: {dev_engine.attention_note}")
        record("logits-auto", res)
        if device.type == "cuda":
            from own_engine.attention import paged_attention

            torch_model = dev_engine.runner.model.truncated(dev_engine.runner.model.num_layers)
            torch_model.attention_fn = paged_attention
            res = model_logits_check(torch, ref_engine.runner.model, torch_model, device, spec.vocab_size)
            res["attention_backend"] = "torch"
            res["problems"] = [] if res["ok"] else [f"logits differ by {res['worst_relative']:.3g} (relative)"]
            record("logits-torch-attn", res)
        del dev_engine
    except Exception as exc:  # noqa: BLE001
        record("logits", {"ok": False, "problems": [f"{type(exc).__name__}: {exc}"], "traceback": traceback.format_exc()})

    variants = [
        ("defaults+prefix-rerun", {}),
        ("chunked-13", dict(max_num_batched_tokens=13)),
        ("no-cache-no-chunk", dict(enable_prefix_caching=False, enable_chunked_prefill=False)),
        ("ngram-k3", dict(speculative="ngram", num_speculative_tokens=3)),
        ("spec-verify-every-step", dict(speculative="ngram", num_speculative_tokens=3, adaptive_speculation=False)),
        ("draft-k3", dict(speculative="draft", num_speculative_tokens=3, draft_num_layers=1,
                          adaptive_speculation=False)),
        ("preempt", dict(num_kv_blocks=40, block_size=8, max_num_batched_tokens=64, max_model_len=300)),
        ("block32", dict(block_size=32)),
        ("torch-attention", dict(attention_backend="torch")),
        ("eager-no-cuda-graphs", dict(cuda_graphs=False)),
    ]
    for name, kw in variants:
        if budget.over(0.55):
            checks.append({"name": name, "skipped": "time budget"})
            continue
        try:
            e = LLMEngine(EngineConfig(**{**base, "device": device.type, **kw}))
            if name == "spec-verify-every-step":
                e.proposer = AlwaysPropose()
            t1 = time.monotonic()
            outs = [o.output_token_ids for o in e.generate(prompts, greedy)]
            res = compare_outputs(torch, ref_engine, prompts, refs, outs)
            res["seconds"] = round(time.monotonic() - t1, 2)
            res["attention_backend"] = e.attention_backend
            res["problems"] = [] if res["ok"] else ["tokens differ from the CPU reference beyond near-ties"]
            s = e.stats()
            if name.startswith("defaults"):
                hits0 = s["prefix_cache_hits"]
                again = e.generate(prompts, greedy)
                rerun = compare_outputs(torch, ref_engine, prompts, refs, [o.output_token_ids for o in again])
                res["rerun_exact_sequences"] = rerun["exact_sequences"]
                res["prefix_cache_hits"] = e.stats()["prefix_cache_hits"] - hits0
                res["rerun_cached_tokens"] = [o.num_cached_tokens for o in again]
                if not rerun["ok"]:
                    res["ok"] = False
                    res["problems"].append("prefix-cache rerun differs from the reference")
                if res["prefix_cache_hits"] <= 0:
                    res["ok"] = False
                    res["problems"].append("rerun of the same prompts had no prefix-cache hits")
                # n=3 greedy forks share blocks and copy the partial one (CoW on the device)
                cows = e.block_manager.num_cow_copies
                forks = e.generate([prompts[2]], SamplingParams(temperature=0, max_tokens=new, n=3, ignore_eos=True))
                res["n3_forks_equal_reference"] = all(o.output_token_ids == refs[2] for o in forks)
                res["cow_copies"] = e.block_manager.num_cow_copies - cows
                if not res["n3_forks_equal_reference"]:
                    fork_cmp = compare_outputs(torch, ref_engine, [prompts[2]] * 3, [refs[2]] * 3,
                                               [o.output_token_ids for o in forks])
                    if not fork_cmp["ok"]:
                        res["ok"] = False
                        res["problems"].append("n=3 greedy forks differ from the reference")
                # seeded sampling (sort/top-p on the device, CPU generators) must be reproducible
                sp = SamplingParams(temperature=0.8, top_p=0.9, top_k=50, max_tokens=new, seed=7, ignore_eos=True, n=2)
                x = [o.output_token_ids for o in e.generate(prompts[:3], sp)]
                y = [o.output_token_ids for o in e.generate(prompts[:3], sp)]
                res["seeded_sampling_reproducible"] = x == y
                if x != y:
                    res["ok"] = False
                    res["problems"].append("seeded sampling not reproducible")
            if kw.get("speculative"):
                s = e.stats()
                res["spec_verify_steps"] = s["spec_num_verify_steps"]
                res["spec_drafted"] = s["spec_num_draft_tokens"]
                res["spec_accepted"] = s["spec_num_accepted_tokens"]
                # real prompt lookup proposes only when the random model's output repeats an
                # earlier 2-gram: informational there; the forced proposer must verify every step
                if s["spec_num_verify_steps"] <= 0 and name != "ngram-k3":
                    res["ok"] = False
                    res["problems"].append("speculative decoding never verified a proposal")
                if name == "spec-verify-every-step":  # sampled speculative path (rejection sampler) runs and reproduces
                    sp = SamplingParams(temperature=0.7, max_tokens=new, seed=3, ignore_eos=True)
                    x = [o.output_token_ids for o in e.generate(prompts[:2], sp)]
                    y = [o.output_token_ids for o in e.generate(prompts[:2], sp)]
                    res["sampled_spec_reproducible"] = x == y
                    if x != y:
                        res["ok"] = False
                        res["problems"].append("seeded speculative sampling not reproducible")
            if "num_kv_blocks" in kw:
                res["num_preemptions"] = e.stats()["num_preemptions"]  # informational
            if device.type == "cuda" and kw.get("attention_backend") != "torch" and e.attention_backend != "triton":
                res["ok"] = False
                res["problems"].append(f"engine on CUDA did not select Triton: {e.attention_note}")
            res["cuda_graphs_active"] = e.cuda_graphs_active
            res["cuda_graph_replays"] = e.runner.graphs.num_replays if e.runner.graphs is not None else 0
            if (device.type == "cuda" and e.attention_backend == "triton" and kw.get("cuda_graphs", True)
                    and not e.cuda_graphs_active):
                res["ok"] = False
                res["problems"].append(f"CUDA graphs not active: {e.cuda_graphs_note}")
            lp = leak_problems(e)
            if lp:
                res["ok"] = False
                res["problems"] += lp
            del e
        except Exception as exc:  # noqa: BLE001
            res = {"ok": False, "problems": [f"{type(exc).__name__}: {exc}"], "traceback": traceback.format_exc()}
        record(name, res)
    for dtype in ("float32", "bfloat16"):
        name = f"cuda-graphs-vs-eager-{dtype}"
        if device.type != "cuda":
            checks.append({"name": name, "skipped": "needs CUDA", "ok": True})
            say(f"  SKIP {name:<22} needs CUDA")
            continue
        if budget.over(0.6):
            checks.append({"name": name, "skipped": "time budget"})
            continue
        try:
            res = graphs_vs_eager_check(torch, base, device, prompts, greedy, dtype)
        except Exception as exc:  # noqa: BLE001
            res = {"ok": False, "problems": [f"{type(exc).__name__}: {exc}"], "traceback": traceback.format_exc()}
        record(name, res)
    out["checks"] = checks
    out["ok"] = all(c.get("ok", True) for c in checks)
    return out


def graphs_vs_eager_check(torch, base: dict, device, prompts, greedy, dtype: str) -> dict:
    """A graph engine and an eager engine (``cuda_graphs=False``) on ``device`` in ``dtype``: greedy
    tokens (must be equal in fp32; informational in bf16, where padded and unpadded batches round
    differently) and, on the graph engine's runner, the logits of decode batches of 1, 3 and 7
    sequences (buckets 1, 4, 8: padded rows) replayed from graphs vs its eager forward."""
    from own_engine.engine import LLMEngine
    from own_engine.config import EngineConfig
    from own_engine.batch import BatchItem

    tol = LOGITS_TOL if dtype == "float32" else 5e-2
    ge = LLMEngine(EngineConfig(**base, device=device.type, dtype=dtype, max_num_seqs=8))
    ee = LLMEngine(EngineConfig(**base, device=device.type, dtype=dtype, max_num_seqs=8, cuda_graphs=False))
    res: dict = {"dtype": dtype, "attention_backend": ge.attention_backend, "cuda_graphs_active": ge.cuda_graphs_active,
                 "note": ge.cuda_graphs_note, "problems": [], "tolerance_relative": tol}
    if not ge.cuda_graphs_active:
        res["ok"] = False
        res["problems"].append(f"CUDA graphs not active: {ge.cuda_graphs_note}")
        return res
    graphs = ge.runner.graphs
    res["sizes"], res["capture_s"] = list(graphs.sizes), round(graphs.capture_s, 3)
    want = [o.output_token_ids for o in ee.generate(prompts, greedy)]
    got = [o.output_token_ids for o in ge.generate(prompts, greedy)]
    res["graph_replays"] = graphs.num_replays
    res["exact_sequences"], res["sequences"] = sum(a == b for a, b in zip(got, want)), len(want)
    res["token_agreement"] = (sum(sum(x == y for x, y in zip(a, b)) for a, b in zip(got, want))
                              / max(1, sum(len(b) for b in want)))
    ok = True
    if dtype == "float32" and got != want:
        ok = False
        res["problems"].append("greedy tokens with CUDA graphs differ from eager")
    if graphs.num_replays <= 0:
        ok = False
        res["problems"].append("no decode step replayed a graph")
    # fresh blocks (the engine's prefix cache is not used after this)
    r = ge.runner
    bs = r.block_size
    errs = []
    nxt = 0
    for n in (1, 3, 7):
        items, dec = [], []
        for i in range(n):
            p = prompts[i % len(prompts)][: 5 + 9 * i]
            nb = -(-(len(p) + 1) // bs)
            table = list(range(nxt, nxt + nb))
            nxt += nb
            items.append(BatchItem(p, 0, table, 1))
            dec.append(BatchItem([3 + i], len(p), table, 1))
        r.run(items)  # prefill, eager
        before = graphs.num_replays
        a = r.run(dec)
        graphs.enabled = False
        b = r.run(dec)
        graphs.enabled = True
        rel = float((a - b).abs().max()) / max(1.0, float(b.abs().max()))
        errs.append({"batch": n, "replayed": graphs.num_replays == before + 1, "max_abs": float((a - b).abs().max()),
                     "relative": rel, "argmax_equal": bool((a.argmax(-1) == b.argmax(-1)).all())})
        if not (rel <= tol and graphs.num_replays == before + 1):
            ok = False
            res["problems"].append(f"decode batch of {n}: graph vs eager relative logits difference {rel:.3g}"
                                   + ("" if graphs.num_replays == before + 1 else " (graph not replayed)"))
    res["logits"] = errs
    res["worst_relative"] = max(e["relative"] for e in errs)
    res["ok"] = ok
    del ge, ee
    return res


# ----------------------------------------------------------------------------- section c: throughput
def measure_decode(torch, e, batch: int, prompt_len: int, decode_tokens: int, seed: int, device) -> dict:
    """Add ``batch`` random prompts, step until each has its first token (prefill), then time the
    decode steps until all finish. Returns tokens/s of both phases."""
    from own_engine.sampling_params import SamplingParams

    g = torch.Generator().manual_seed(seed)
    vocab = e.model_config.vocab_size
    sp = SamplingParams(temperature=0, max_tokens=decode_tokens + 1, ignore_eos=True)
    rids = [f"tp-{seed}-{i}" for i in range(batch)]
    for rid in rids:
        e.add_request(rid, torch.randint(3, vocab, (prompt_len,), generator=g).tolist(), sp)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    started: set[str] = set()
    t0 = time.perf_counter()
    prefill_steps = 0
    while len(started) < batch:
        for o in e.step():
            if o.new_token_ids:
                started.add(o.request_id)
        prefill_steps += 1
    sync()
    t1 = time.perf_counter()
    n = 0
    steps = 0
    while e.has_unfinished():
        n += sum(len(o.new_token_ids) for o in e.step())
        steps += 1
    sync()
    t2 = time.perf_counter()
    return {"decode_tok_s": n / (t2 - t1), "decode_tokens": n, "decode_steps": steps,
            "step_ms": 1000 * (t2 - t1) / max(1, steps), "prefill_tok_s": batch * prompt_len / (t1 - t0),
            "prefill_steps": prefill_steps}


def attention_microbench(torch, device, quick: bool) -> list[dict]:
    """Time one attention call at decode shapes (SmolLM2 heads), Triton vs PyTorch path."""
    from own_engine.attention import build_metadata, paged_attention, write_kv
    from own_engine.triton_attention import triton_paged_attention

    H, nkv, D, bs = 9, 3, 64, 16
    res = []
    for B, ctx in ([(1, 512), (8, 512)] if quick else [(1, 1024), (32, 1024), (128, 1024), (128, 4096)]):
        torch.manual_seed(B)
        need = -(-ctx // bs)
        tables = [list(range(i * need, (i + 1) * need)) for i in range(B)]
        q, k, v = (torch.randn(B, n, D, device=device) for n in (H, nkv, nkv))
        kc, vc = (torch.randn(B * need, bs, nkv, D, device=device) for _ in range(2))
        meta = build_metadata([1] * B, [ctx] * B, tables, bs, H, nkv, device)
        write_kv(k, v, kc, vc, meta.slot_mapping)
        row = {"batch": B, "ctx": ctx}
        for name, fn in (("triton", triton_paged_attention), ("torch", paged_attention)):
            for _ in range(3):
                fn(q, k, v, kc, vc, meta, D ** -0.5)
            times = []
            for _ in range(20):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn(q, k, v, kc, vc, meta, D ** -0.5)
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b))
            row[f"{name}_us"] = round(1000 * statistics.median(times), 1)
        row["speedup_triton_vs_torch"] = round(row["torch_us"] / row["triton_us"], 3)
        res.append(row)
        say(f"  attention call B={B} ctx={ctx}: triton {row['triton_us']} us, torch {row['torch_us']} us "
            f"(x{row['speedup_triton_vs_torch']})")
    return res


def _decode_rows(torch, e, variants: dict, batches: list[int], prompt_len: int, decode_tokens: int, repeats: int,
                 device, budget: Budget, fraction: float, seed0: int, progress, label: str = "") -> list[dict]:
    """Decode tok/s of engine ``e`` per batch size for ``variants`` (name → (attention_fn, graphs
    on)), runs interleaved, the first round a warm-up; median/min/max over ``repeats``."""
    model, graphs = e.runner.model, e.runner.graphs
    default_fn = model.attention_fn
    rows = []
    seed = seed0
    for B in batches:
        if budget.over(fraction):
            rows.append({"batch": B, "skipped": "time budget"})
            continue
        runs: dict[str, list[dict]] = {b: [] for b in variants}
        replays: dict[str, int] = {b: 0 for b in variants}
        for rep in range(repeats + 1):  # the first round warms up (Triton compiles, allocator)
            for name, (fn, use_graphs) in variants.items():
                model.attention_fn = fn
                if graphs is not None:
                    graphs.enabled = use_graphs
                n0 = graphs.num_replays if graphs is not None else 0
                seed += 1
                m = measure_decode(torch, e, B, prompt_len, decode_tokens, seed, device)
                if rep:
                    runs[name].append(m)
                    replays[name] += (graphs.num_replays if graphs is not None else 0) - n0
        model.attention_fn = default_fn
        if graphs is not None:
            graphs.enabled = True
        row: dict = {"batch": B}
        for name, ms in runs.items():
            tps = [m["decode_tok_s"] for m in ms]
            row[name] = {"decode_tok_s": round(statistics.median(tps), 1), "min": round(min(tps), 1),
                         "max": round(max(tps), 1),
                         "step_ms": round(statistics.median(m["step_ms"] for m in ms), 2),
                         "prefill_tok_s": round(statistics.median(m["prefill_tok_s"] for m in ms), 1),
                         "graph_replays": replays[name]}
        rows.append(row)
        progress(row)
        say(f"  {label}batch {B:>3}: " + ", ".join(f"{n} {row[n]['decode_tok_s']} tok/s (step {row[n]['step_ms']} ms)"
                                                  for n in runs))
    return rows


def _ratio(row: dict, a: str, b: str) -> float | None:
    if a in row and b in row and row[b]["decode_tok_s"]:
        return round(row[a]["decode_tok_s"] / row[b]["decode_tok_s"], 3)
    return None


def section_throughput(torch, device, args, budget: Budget, tmp: Path, progress) -> dict:
    from own_engine.attention import paged_attention
    from own_engine.config import EngineConfig
    from own_engine.engine import LLMEngine
    from own_engine.random_model import SMOLLM2_135M, write_random_llama

    if args.quick:
        spec = engine_spec(True)
        batches, prompt_len, decode_tokens, repeats = [1, 4], 16, 8, 2
        bf16_batches = [1, 4]
    else:
        spec = SMOLLM2_135M
        batches, prompt_len, decode_tokens, repeats = [1, 128, 32, 8], 64, 48, 3  # 128 early: it matters most
        bf16_batches = [1, 32]
    t0 = time.monotonic()
    model_dir = write_random_llama(tmp / "throughput_model", spec)
    out: dict = {"model": f"random weights, shape {'SmolLM2-135M' if spec is SMOLLM2_135M else 'tiny'}",
                 "params": spec.num_params, "write_s": round(time.monotonic() - t0, 2), "dtype": "float32",
                 "prompt_len": prompt_len, "decode_tokens": decode_tokens, "repeats": repeats,
                 "metric": "decode output tokens/s over the decode phase (all sequences running), median"}
    cfg = dict(model_dir=model_dir, device=device.type, max_num_seqs=max(batches),
               max_num_batched_tokens=max(batches) * prompt_len, max_model_len=512,
               enable_prefix_caching=False, kv_cache_bytes=(256 if args.quick else 2048) * 2**20,
               threads=torch.get_num_threads())
    e = LLMEngine(EngineConfig(**cfg))
    out["load_s"] = round(time.monotonic() - t0 - out["write_s"], 2)
    out["engine_attention"] = e.attention_backend
    out["engine_attention_note"] = e.attention_note
    g = e.runner.graphs
    out["cuda_graphs"] = {"active": e.cuda_graphs_active, "note": e.cuda_graphs_note,
                          "sizes": list(g.sizes) if g is not None else None,
                          "capture_s": round(g.capture_s, 3) if g is not None else None}
    say(f"  CUDA graphs: {'active, sizes ' + str(list(g.sizes)) + f', captured in {g.capture_s:.2f} s' if e.cuda_graphs_active else 'off: ' + str(e.cuda_graphs_note)}")
    model = e.runner.model
    fn = model.attention_fn
    variants: dict = {}
    if e.cuda_graphs_active:
        variants["triton_graphs"] = (fn, True)
    variants[e.attention_backend] = (fn, False)
    if e.attention_backend == "triton":
        variants["torch"] = (paged_attention, False)  # same engine and weights, attention swapped per run
    out["backends"] = list(variants)
    rows = _decode_rows(torch, e, variants, batches, prompt_len, decode_tokens, repeats, device, budget, 0.75, 0,
                        progress)
    for row in rows:
        for key, a, b in (("ratio_triton_vs_torch", "triton", "torch"), ("ratio_graphs_vs_eager", "triton_graphs", "triton")):
            r = _ratio(row, a, b)
            if r is not None:
                row[key] = r
        if "ratio_graphs_vs_eager" in row:
            say(f"  batch {row['batch']:>3}: graphs/eager x{row['ratio_graphs_vs_eager']}"
                + (f", triton/torch x{row['ratio_triton_vs_torch']}" if "ratio_triton_vs_torch" in row else ""))
    if device.type != "cuda":
        out["graphs_skipped"] = "CUDA graphs need CUDA: only the eager path measured"
    out["decode"] = sorted(rows, key=lambda r: r["batch"])
    leak = e.stats()["kv_blocks_used"]
    out["kv_blocks_used_after"] = leak
    ok = leak == 0
    problems = []
    if device.type == "cuda" and e.attention_backend == "triton" and not e.cuda_graphs_active:
        ok = False
        problems.append(f"CUDA graphs not active: {e.cuda_graphs_note}")
    if any(r.get("triton_graphs", {}).get("graph_replays", 1) <= 0 for r in rows):
        ok = False
        problems.append("a graph run replayed no graph")
    del e, model
    # bf16 (CUDA only): graphs and eager at batch 1 and 32, vs the fp32 graph rows above
    if device.type != "cuda":
        out["decode_bf16"] = {"skipped": "bfloat16 is CUDA-only (the CPU path runs float32)"}
    elif budget.over(0.85):
        out["decode_bf16"] = {"skipped": "time budget"}
    else:
        eb = LLMEngine(EngineConfig(**{**cfg, "dtype": "bfloat16"}))
        out["bf16_cuda_graphs"] = {"active": eb.cuda_graphs_active, "note": eb.cuda_graphs_note}
        fnb = eb.runner.model.attention_fn
        vb: dict = {}
        if eb.cuda_graphs_active:
            vb["bf16_graphs"] = (fnb, True)
        vb["bf16"] = (fnb, False)
        brows = _decode_rows(torch, eb, vb, bf16_batches, prompt_len, decode_tokens, repeats, device, budget, 0.9,
                             10_000, progress, label="bf16 ")
        fp32 = {r["batch"]: r for r in rows}
        for row in brows:
            r = _ratio(row, "bf16_graphs", "bf16")
            if r is not None:
                row["ratio_graphs_vs_eager"] = r
            ref = fp32.get(row["batch"], {})
            for a, b, key in (("bf16_graphs", "triton_graphs", "ratio_bf16_vs_fp32_graphs"),
                              ("bf16", "triton", "ratio_bf16_vs_fp32_eager")):
                if a in row and b in ref:
                    row[key] = round(row[a]["decode_tok_s"] / ref[b]["decode_tok_s"], 3)
            say(f"  bf16 batch {row['batch']:>3}: " + ", ".join(f"{k} x{row[k]}" for k in row if k.startswith("ratio")))
        out["decode_bf16"] = brows
        if eb.stats()["kv_blocks_used"]:
            ok = False
            problems.append("bf16 engine leaked KV blocks")
        if eb.attention_backend == "triton" and not eb.cuda_graphs_active:
            ok = False
            problems.append(f"bf16 CUDA graphs not active: {eb.cuda_graphs_note}")
        del eb
    if device.type == "cuda" and "triton" in variants and not budget.over(0.95):
        out["attention_call"] = attention_microbench(torch, device, args.quick)
    if device.type == "cuda" and out["engine_attention"] != "triton":
        ok = False
        problems.append(f"engine on CUDA did not select Triton: {out['engine_attention_note']}")
    out["ok"] = ok
    if problems:
        out["problem"] = "; ".join(problems)
    return out


# ----------------------------------------------------------------------------- section v: vLLM (optional)
def section_vllm(torch, device, args, budget: Budget, tmp: Path, progress, own: dict | None) -> dict:
    """vLLM's offline decode step time on section ``c``'s shape and batches, when importable:
    per batch ``(t(1 + N tokens) - t(1 token)) / N`` with ``LLM.generate`` (greedy, ignore_eos),
    median of 3, for fp32 and bf16 (each in its own ``LLM``, skipped where vLLM refuses it); and
    ``own_vs_vllm_step`` = the own engine's graph step time from section ``c`` over vLLM's."""
    if device.type != "cuda":
        return {"status": "skipped", "ok": True, "reason": "needs CUDA"}
    try:
        import vllm
    except Exception as exc:  # noqa: BLE001
        return {"status": "skipped", "ok": True, "reason": f"vLLM not importable: {type(exc).__name__}: {exc}"}
    import gc

    from own_engine.random_model import SMOLLM2_135M, write_random_llama

    spec = engine_spec(True) if args.quick else SMOLLM2_135M
    batches, prompt_len, n_dec = ([1, 4], 16, 8) if args.quick else ([1, 8, 32, 128], 64, 48)
    model_dir = tmp / "throughput_model"
    if not model_dir.is_dir():
        write_random_llama(model_dir, spec)
    out: dict = {"vllm": getattr(vllm, "__version__", "?"), "prompt_len": prompt_len, "decode_tokens": n_dec, "runs": {}}
    own_key = {"float32": ("decode", "triton_graphs"), "bfloat16": ("decode_bf16", "bf16_graphs")}
    for dtype in ("float32", "bfloat16"):
        if budget.over(0.97):
            out["runs"][dtype] = {"skipped": "time budget"}
            continue
        try:
            llm = vllm.LLM(model=str(model_dir), dtype=dtype, max_model_len=512, gpu_memory_utilization=0.25,
                           max_num_seqs=max(batches), seed=0)
            g = torch.Generator().manual_seed(1)
            rows = []
            for B in batches:
                ps = [{"prompt_token_ids": torch.randint(3, spec.vocab_size, (prompt_len,), generator=g).tolist()}
                      for _ in range(B)]

                def timed(n: int) -> float:
                    sp = vllm.SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)
                    t = time.perf_counter()
                    llm.generate(ps, sp, use_tqdm=False)
                    return time.perf_counter() - t

                timed(1 + n_dec)  # warm-up
                steps = [(timed(1 + n_dec) - timed(1)) / n_dec * 1000 for _ in range(3)]
                row = {"batch": B, "step_ms": round(statistics.median(steps), 3)}
                rows_key, variant = own_key[dtype]
                own_rows = (own or {}).get(rows_key)
                own_row = next((r.get(variant) for r in own_rows if r.get("batch") == B), None) \
                    if isinstance(own_rows, list) else None
                if own_row:
                    row["own_step_ms"] = own_row["step_ms"]
                    row["own_vs_vllm_step"] = round(own_row["step_ms"] / row["step_ms"], 3)
                    row["within_1_5x"] = row["own_vs_vllm_step"] <= 1.5
                rows.append(row)
                progress({"dtype": dtype, **row})
                say(f"  vLLM {dtype} batch {B:>3}: step {row['step_ms']} ms"
                    + (f", own/vLLM x{row['own_vs_vllm_step']}" if "own_vs_vllm_step" in row else ""))
            out["runs"][dtype] = rows
            del llm
        except Exception as exc:  # noqa: BLE001 - e.g. a dtype this vLLM build does not serve
            out["runs"][dtype] = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
            say(f"  vLLM {dtype}: {out['runs'][dtype]['error']}")
        gc.collect()
        torch.cuda.empty_cache()
    out["ok"] = True  # informational: vLLM's numbers are a comparison, not a check
    return out


# ----------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    threads = args.threads or (1 if args.device == "cpu" else 8)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    sys.path.insert(0, str(ROOT))
    import torch

    torch.set_num_threads(threads)
    cuda = torch.cuda.is_available()
    if args.device == "auto" and not cuda:
        msg = (f"cuda_check: SKIPPED: no CUDA device visible (torch {torch.__version__}, "
               f"torch.cuda.is_available() is False); run with --device cpu --quick for a CPU dry run")
        say(msg)
        Checker(args.out, {"status": "skipped", "reason": msg, "sections": {}}).write()
        return 0
    if args.device == "cuda" and not cuda:
        say("cuda_check: ERROR: --device cuda but torch.cuda.is_available() is False")
        return 2
    device = torch.device("cpu" if args.device == "cpu" else "cuda")
    budget = Budget(args.budget_s)
    doc: dict = {"status": "running", "argv": sys.argv[1:], "quick": args.quick,
                 "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "sections": {}}
    chk = Checker(args.out, doc)
    try:
        doc["env"] = environment(torch, device)
    except Exception as exc:  # noqa: BLE001
        doc["env"] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(), "device": str(device)}
    say("cuda_check: " + ", ".join(f"{k}={doc['env'][k]}" for k in (
        "device", "gpu", "torch", "torch_cuda", "triton", "transformers", "python", "c_compiler", "python_h")
        if k in doc["env"]))
    chk.write()
    wanted = {s.strip() for s in args.sections.split(",") if s.strip()}
    with tempfile.TemporaryDirectory(prefix="cuda_check_") as td:
        tmp = Path(td)
        if "a" in wanted:
            chk.run_section("a", "Triton paged attention vs CPU path",
                            lambda: section_kernel(torch, device, args, budget, lambda r: chk.progress("a", r)))
        if "b" in wanted:
            chk.run_section("b", f"engine on {device.type} vs CPU (random-weight Llama)",
                            lambda: section_engine(torch, device, args, budget, tmp, lambda r: chk.progress("b", r)))
        if "c" in wanted:
            chk.run_section("c", f"decode throughput on {device.type}",
                            lambda: section_throughput(torch, device, args, budget, tmp,
                                                       lambda r: chk.progress("c", r)))
        if "v" in wanted:
            chk.run_section("v", "vLLM offline decode step time (optional)",
                            lambda: section_vllm(torch, device, args, budget, tmp, lambda r: chk.progress("v", r),
                                                 doc["sections"].get("c")))
    failed = [k for k, s in doc["sections"].items() if s["status"] in ("fail", "error")]
    doc["status"] = "fail" if failed else "pass"
    doc["failed_sections"] = failed
    doc["seconds"] = round(budget.elapsed(), 1)
    chk.write()
    say(f"\ncuda_check: {doc['status'].upper()} in {doc['seconds']} s; "
        + ", ".join(f"{k}={s['status']}" for k, s in doc["sections"].items()) + f"; results in {chk.path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
