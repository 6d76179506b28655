"""Benchmarks of the reference engine (own_engine) on the default model, printed as ratios measured
side by side in one run (median and spread = min..max over ``--repeats``, runs interleaved).

Sections (``--section``):
- ``vs-hf``: own engine (continuous batching, paged KV) vs transformers static-batch ``generate``
  on a length-skewed workload; metric: useful output tokens/s (goal >= 3x).
- ``paged-vs-naive``: concurrent sequences and throughput at one fixed KV budget, paged vs naive
  (one ``max_model_len`` reservation per sequence) (goal >= 2.5x concurrency).
- ``ngram``: TPOT at batch 1 on code-editing prompts, n-gram speculation vs none (goal >= 1.5x).
- ``bandwidth``: decode batch-1 tok/s as a fraction of the memory-bandwidth bound
  (weight bytes read per token / measured copy bandwidth, STREAM-copy convention: 2 x bytes / time;
  goal >= 0.85), and the one-call decode forward vs the per-op layer loop, alternating by repeat.
- ``prefill``: model FLOP/s of a 512-token prefill / 1-thread ``torch.mm`` FLOP/s on the same
  projection shapes (goal >= 0.9).
- ``attention``: decode attention per (token, KV head, key): the native kernel on huge pages vs 4 KiB
  pages vs the PyTorch gather + SDPA path, at a serving step's KV footprint.
- ``verify``: a 6-row speculative verify forward / a 1-row decode forward, batch 1 (goal: ~1).
- ``linear``: the model's projections and LM head at M = 1..512 rows: MKL vs oneDNN-prepacked vs the native
  panel GEMM (what :class:`own_engine.linear.Linear` chooses between).

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_own_engine.py [--section all] [--repeats 3]``.
Numbers on a shared machine are "measured under load"; compare the ratios, not the absolute values.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import typer  # noqa: E402
from rich.table import Table  # noqa: E402

from harness.app.cli.common import make_console  # noqa: E402
from own_engine.config import EngineConfig  # noqa: E402
from own_engine.engine import LLMEngine  # noqa: E402
from own_engine.sampling_params import SamplingParams  # noqa: E402

console = make_console()  # 160 columns when not a terminal: tables stay readable in logs
app = typer.Typer(add_completion=False)

CODE = '''import json
from dataclasses import dataclass


@dataclass
class Order:
    order_id: int
    customer: str
    amount: float
    status: str = "open"


def load_orders(path):
    with open(path) as f:
        rows = json.load(f)
    return [Order(r["order_id"], r["customer"], r["amount"], r.get("status", "open")) for r in rows]


def total_by_customer(orders):
    totals = {}
    for order in orders:
        totals[order.customer] = totals.get(order.customer, 0.0) + order.amount
    return totals


def open_orders(orders):
    return [order for order in orders if order.status == "open"]
'''

CODE_PROMPTS = [
    "Here is a Python module:\n\n" + CODE + "\nRewrite the module exactly, adding type hints to every function:\n\n",
    "You are a coding agent. The file orders.py contains:\n\n" + CODE
    + "\nShow the full updated file after renaming `amount` to `total`:\n\n",
    "Fix the bug in this code and print the whole corrected file.\n\n" + CODE + "\nCorrected file:\n\n",
]


def summarize(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}..{max(values):.2f}]"


def make_engine(model_dir: Path, **kw) -> LLMEngine:
    kw.setdefault("threads", 1)
    return LLMEngine(EngineConfig(model_dir=model_dir, **kw))


def skewed_workload(tokenizer, n: int, seed: int) -> list[tuple[list[int], int]]:
    """Prompts of 16..384 tokens (log-uniform) with log-normal output lengths clipped to 4..192."""
    rng = np.random.default_rng(seed)
    base = tokenizer(CODE * 4)["input_ids"]
    out = []
    for _ in range(n):
        plen = int(np.exp(rng.uniform(np.log(16), np.log(384))))
        start = int(rng.integers(0, len(base) - plen))
        olen = int(np.clip(rng.lognormal(np.log(24), 0.9), 4, 192))
        out.append((base[start:start + plen], olen))
    return out


def bench_vs_hf(model_dir: Path, repeats: int, n: int, hf_batch: int) -> list[tuple[str, str, str]]:
    from transformers import AutoModelForCausalLM

    engine = make_engine(model_dir, max_num_seqs=32, max_num_batched_tokens=512, max_model_len=1024)
    hf = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    hf.generation_config.pad_token_id = engine.tokenizer.pad_token_id or 0
    work = skewed_workload(engine.tokenizer, n, seed=0)
    useful = sum(o for _, o in work)
    own_tps, hf_tps = [], []
    for _ in range(repeats):
        engine.block_manager.reset_prefix_cache()  # no cross-repeat cache hits
        t = time.perf_counter()
        outs = engine.generate([p for p, _ in work], [SamplingParams(temperature=0, max_tokens=o, ignore_eos=True)
                                                      for _, o in work])
        own_tps.append(sum(len(o.output_token_ids) for o in outs) / (time.perf_counter() - t))
        t = time.perf_counter()
        for i in range(0, n, hf_batch):  # static batches in arrival order, left-padded
            batch = work[i:i + hf_batch]
            L = max(len(p) for p, _ in batch)
            new = max(o for _, o in batch)
            ids = torch.tensor([[0] * (L - len(p)) + p for p, _ in batch])
            mask = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p, _ in batch])
            with torch.inference_mode():
                hf.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False)
        hf_tps.append(useful / (time.perf_counter() - t))
    ratio = [a / b for a, b in zip(own_tps, hf_tps)]
    return [
        ("own engine tok/s (length-skewed, %d req)" % n, summarize(own_tps), ""),
        (f"transformers static generate (batch {hf_batch}) tok/s", summarize(hf_tps), ""),
        ("own / transformers", summarize(ratio), "goal >= 3x"),
    ]


def bench_paged_vs_naive(model_dir: Path, repeats: int, n: int) -> list[tuple[str, str, str]]:
    kv_bytes = 96 * 2**20  # one fixed KV budget for both (~136 blocks of 16 tokens)
    rows = []
    conc = {"paged": [], "naive": []}
    tps = {"paged": [], "naive": []}
    engines = {mode: make_engine(model_dir, kv_allocation=mode, kv_cache_bytes=kv_bytes, max_model_len=1024,
                                 max_num_seqs=64, enable_prefix_caching=False) for mode in ("paged", "naive")}
    tok = engines["paged"].tokenizer
    base = tok(CODE * 2)["input_ids"]
    rng = np.random.default_rng(1)
    prompts = [base[s:s + 64] for s in rng.integers(0, len(base) - 64, n)]
    for _ in range(repeats):
        for mode, e in engines.items():
            for i, p in enumerate(prompts):
                e.add_request(f"{mode}-{i}", p, SamplingParams(temperature=0, max_tokens=32, ignore_eos=True))
            peak, produced = 0, 0
            t = time.perf_counter()
            while e.has_unfinished():
                outs = e.step()
                peak = max(peak, e.stats()["num_running"])
                produced += sum(len(o.new_token_ids) for o in outs)
            tps[mode].append(produced / (time.perf_counter() - t))
            conc[mode].append(float(peak))
    e = engines["paged"]
    rows.append((f"KV budget {kv_bytes >> 20} MiB = {e.num_kv_blocks} blocks x 16 tokens; max_model_len 1024",
                 "", ""))
    rows.append(("peak concurrent sequences paged / naive",
                 f"{summarize(conc['paged'])} / {summarize(conc['naive'])}", ""))
    rows.append(("concurrency ratio paged / naive", summarize([a / b for a, b in zip(conc["paged"], conc["naive"])]),
                 "goal >= 2.5x"))
    rows.append(("throughput ratio paged / naive (tok/s)",
                 summarize([a / b for a, b in zip(tps["paged"], tps["naive"])]), ""))
    return rows


def bench_ngram(model_dir: Path, repeats: int, max_tokens: int) -> list[tuple[str, str, str]]:
    modes = {"none": dict(speculative="none"), "ngram": dict(speculative="ngram", adaptive_speculation=False),
             "ngram-adaptive": dict(speculative="ngram", adaptive_speculation=True)}
    engines = {mode: make_engine(model_dir, num_speculative_tokens=5, max_model_len=1024,
                                 enable_prefix_caching=False, **kw) for mode, kw in modes.items()}
    ids = [engines["none"].tokenizer(p)["input_ids"] for p in CODE_PROMPTS]
    tpot: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(repeats):
        for mode, e in engines.items():
            per = []
            for i, p in enumerate(ids):
                e.add_request(f"{mode}-{i}", p, SamplingParams(temperature=0, max_tokens=max_tokens))
                first = last = None
                n = 0
                t0 = time.perf_counter()
                while e.has_unfinished():
                    for o in e.step():
                        if o.new_token_ids:
                            now = time.perf_counter()
                            first = first or now
                            last = now
                            n = o.num_output_tokens
                if n >= 2:
                    per.append((last - first) / (n - 1) * 1e3)
                del t0
            tpot[mode].append(statistics.mean(per))
    rows = [("TPOT ms batch 1, no speculation", summarize(tpot["none"]), "")]
    for mode, label in (("ngram", "n-gram, fixed k=5"), ("ngram-adaptive", "n-gram, adaptive k<=5")):
        s = engines[mode].stats()
        ratio = [a / b for a, b in zip(tpot["none"], tpot[mode])]
        rows += [(f"TPOT ms batch 1, {label}", summarize(tpot[mode]), ""),
                 (f"TPOT speedup, {label}", summarize(ratio), "goal >= 1.5x at the worst repeat"),
                 (f"acceptance rate / mean accepted length, {label}",
                  f"{s['spec_acceptance_rate']:.2f} / {s['spec_mean_accepted_length']:.2f}", "")]
    return rows


def bench_bandwidth(model_dir: Path, repeats: int, tokens: int) -> list[tuple[str, str, str]]:
    """Batch-1 decode tok/s vs the copy-bandwidth bound, and the one-call decode forward
    (``LlamaModel.fused_decode``) against the per-op layer loop, alternating by repeat."""
    e = make_engine(model_dir, max_model_len=512, enable_prefix_caching=False)
    m = e.runner.model
    weight_bytes = m.weight_bytes_per_token()  # LM head read in full; embedding: 1 row
    src = torch.empty(weight_bytes // 4, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    bw, tps, loop_tps = [], [], []
    prompt = e.tokenizer(CODE)["input_ids"][:32]
    fused_available = m.fused_decode

    def decode_tps() -> float:
        e.add_request("bw", prompt, SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True))
        e.step()  # prefill + first token
        t = time.perf_counter()
        while e.has_unfinished():
            e.step()
        return (tokens - 1) / (time.perf_counter() - t)

    for r in range(repeats):
        dst.copy_(src)
        t = time.perf_counter()
        for _ in range(3):
            dst.copy_(src)
        bw.append(2 * src.numel() * 4 * 3 / (time.perf_counter() - t))
        for fused in ((True, False) if r % 2 == 0 else (False, True)) if fused_available else (True,):
            m.fused_decode = fused and fused_available
            (tps if fused else loop_tps).append(decode_tps())
    m.fused_decode = fused_available
    bound = [b / weight_bytes for b in bw]
    rows = [
        ("weight bytes read per decode step", f"{weight_bytes / 1e6:.1f} MB", ""),
        ("copy bandwidth GB/s (STREAM copy)", summarize([b / 1e9 for b in bw]), ""),
        ("bandwidth bound tok/s", summarize(bound), ""),
        ("measured decode batch-1 tok/s", summarize(tps), ""),
        ("fraction of bound", summarize([a / b for a, b in zip(tps, bound)]), "goal >= 0.85"),
    ]
    if loop_tps:
        rows += [("  per-op layer loop tok/s", summarize(loop_tps), ""),
                 ("  one-call decode ÷ per-op loop", summarize([a / b for a, b in zip(tps, loop_tps)]), "")]
    return rows


def _interleaved(fns: dict, repeats: int, inner: int) -> dict[str, list[float]]:
    """Seconds per call of each function, ``inner`` calls per sample, runs alternating in order."""
    out: dict[str, list[float]] = {k: [] for k in fns}
    for f in fns.values():
        f()  # warm-up
    for r in range(repeats):
        for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            t = time.perf_counter()
            for _ in range(inner):
                fns[name]()
            out[name].append((time.perf_counter() - t) / inner)
    return out


def bench_prefill(model_dir: Path, repeats: int, tokens: int) -> list[tuple[str, str, str]]:
    """Prefill model FLOP/s vs 1-thread ``torch.mm`` on the model's own projection shapes at M = tokens.

    Model FLOPs of one prefill (causal, no cache): 2 x (linear params per layer x layers) x T for the
    projections + 2 x 2 x T^2/2 x H x D x layers for QK^T and PV (half the square: causal) + the LM
    head for the one sampled row (2 x hidden x vocab). The mm reference runs F.linear on the same
    weights (dense, MKL) for the same four projections of every layer.
    """
    from own_engine.batch import BatchItem

    e = make_engine(model_dir, max_model_len=tokens + 64, max_num_batched_tokens=tokens, enable_prefix_caching=False)
    m, c = e.runner.model, e.model_config
    ids = (e.tokenizer(CODE * 8)["input_ids"] * 4)[:tokens]
    table = list(range(-(-tokens // e.config.block_size)))
    lin_params = sum(layer[k].weight.numel() for layer in m.layers for k in ("qkv", "o", "gate_up", "down"))
    flops = 2 * lin_params * tokens + 2 * tokens * tokens * c.num_heads * c.head_dim * m.num_layers \
        + 2 * c.hidden_size * c.vocab_size
    xs = {n: torch.randn(tokens, n) for n in (c.hidden_size, c.intermediate_size, c.num_heads * c.head_dim)}

    def prefill():
        e.runner.run([BatchItem(ids, 0, table, 1)])

    def mm_only():
        for layer in m.layers:
            for k in ("qkv", "o", "gate_up", "down"):
                w = layer[k].weight
                torch.nn.functional.linear(xs[w.shape[1]], w)

    attn = m.attention_fn
    native = getattr(attn, "native_prefill", False)

    def prefill_sdpa():  # the same prefill with PyTorch's SDPA for the prefill attention
        attn.native_prefill = False
        try:
            prefill()
        finally:
            attn.native_prefill = native

    fns = {"prefill": prefill, "mm": mm_only} | ({"sdpa": prefill_sdpa} if native else {})
    t = _interleaved(fns, repeats, 1)
    mm_flops = 2 * lin_params * tokens
    model_rate = [flops / x for x in t["prefill"]]
    mm_rate = [mm_flops / x for x in t["mm"]]
    rows = [
        (f"prefill of {tokens} tokens: model GFLOP/s", summarize([r / 1e9 for r in model_rate]), ""),
        ("torch.mm GFLOP/s on the same projections (dense weights)", summarize([r / 1e9 for r in mm_rate]), ""),
        ("prefill FLOP/s / torch.mm FLOP/s", summarize([a / b for a, b in zip(model_rate, mm_rate)]), "goal >= 0.9"),
    ]
    if native:
        rows.append(("  prefill time, native flash attention / SDPA attention",
                     summarize([a / b for a, b in zip(t["prefill"], t["sdpa"])]), ""))
        rows += bench_prefill_attention(e, repeats)
    return rows


def bench_prefill_attention(e: LLMEngine, repeats: int) -> list[tuple[str, str, str]]:
    """One layer's prefill attention alone (no cached context, the model's head geometry): the native
    flash kernel vs ``prefill_attention`` (SDPA), interleaved, at 512 and 1,273 tokens (the agentic
    workload's longest first turn)."""
    from own_engine.attention import build_metadata, prefill_attention

    c, attn = e.model_config, e.runner.model.attention_fn
    H, nkv, D, bs = c.num_heads, c.num_kv_heads, c.head_dim, e.config.block_size
    rows = []
    for T in (512, 1273):
        nb = -(-T // bs)
        kc, vc = torch.randn(nb, bs, nkv, D), torch.randn(nb, bs, nkv, D)
        meta = build_metadata([T], [T], [list(range(nb))], bs, H, nkv, torch.device("cpu"), torch_decode=False)
        qkv = torch.randn(T, (H + 2 * nkv) * D)
        q = qkv[:, :H * D].view(T, H, D)
        k, v = kc.view(-1, nkv, D)[:T], vc.view(-1, nkv, D)[:T]
        out = torch.empty(T, H, D)
        t = _interleaved({"native": lambda: attn.prefill(q, kc, vc, meta, D ** -0.5, out),
                          "sdpa": lambda: prefill_attention(q, k, v, kc, vc, meta, D ** -0.5, out)}, repeats, 3)
        flops = 2 * T * T * H * D
        rows.append((f"  attention of a {T}-token prefill, one layer: native / SDPA GFLOP/s",
                     f"{summarize([flops / x / 1e9 for x in t['native']])} / {summarize([flops / x / 1e9 for x in t['sdpa']])}", ""))
        rows.append(("    native / SDPA time", summarize([a / b for a, b in zip(t["native"], t["sdpa"])]), ""))
    return rows


def bench_verify(model_dir: Path, repeats: int, k: int, context: int) -> list[tuple[str, str, str]]:
    """Cost of a speculative verify forward (k+1 query rows, k+1 logits rows) vs a decode forward
    (1 row), batch 1, at ``context`` tokens: both read the same weights once."""
    from own_engine.batch import BatchItem

    e = make_engine(model_dir, max_model_len=context + 64, enable_prefix_caching=False)
    ids = (e.tokenizer(CODE * 8)["input_ids"] * 4)[:context]
    table = list(range(-(-(context + k + 1) // e.config.block_size)))
    e.runner.run([BatchItem(ids, 0, table, 1)])
    t = _interleaved({"decode": lambda: e.runner.run([BatchItem(ids[-1:], context, table, 1)]),
                      "verify": lambda: e.runner.run([BatchItem(ids[-k - 1:], context, table, k + 1)])},
                     repeats, 5)
    ratio = [v / d for v, d in zip(t["verify"], t["decode"])]
    return [
        (f"decode forward ms (batch 1, context {context})", summarize([x * 1e3 for x in t["decode"]]), ""),
        (f"verify forward ms ({k + 1} rows)", summarize([x * 1e3 for x in t["verify"]]), ""),
        ("verify / decode cost", summarize(ratio), "goal: close to 1 (same weights read once)"),
    ]


def bench_linear(model_dir: Path, repeats: int) -> list[tuple[str, str, str]]:
    """The default model's 30 layers of projections (qkv, o, gate_up, down) and the LM head (538 MB)
    at M rows: MKL (``torch.mm`` on the dense weight, what ``F.linear`` runs), oneDNN-prepacked and
    the native panel GEMM, interleaved; ms per pass over all of them."""
    from own_engine.cpu_kernels import native_attention

    e = make_engine(model_dir, max_model_len=256)
    m = e.runner.model
    native, why = native_attention()
    lins = [layer[k] for layer in m.layers for k in ("qkv", "o", "gate_up", "down")] + [m.lm_head]
    onednn = [torch.ops.mkldnn._reorder_linear_weight(lin.weight, None) for lin in lins] \
        if torch.backends.mkldnn.is_available() else None
    panels = None if native is None else [lin.panels if lin.panels is not None
                                          else native.layer_ops.pack_panels(lin.weight) for lin in lins]
    rows: list[tuple[str, str, str]] = []
    for M in (1, 2, 4, 8, 16, 17, 32, 48, 96, 512):
        xs = {n: torch.randn(M, n) for n in {lin.weight.shape[1] for lin in lins}}
        fns = {"mkl": lambda: [torch.mm(xs[lin.weight.shape[1]], lin.weight_t) for lin in lins]}
        if onednn is not None:
            fns["onednn"] = lambda: [torch.ops.mkldnn._linear_pointwise(xs[lin.weight.shape[1]], pk, None, "none", [], "")
                                     for lin, pk in zip(lins, onednn)]
        if panels is not None:
            fns["panel"] = lambda: [native.layer_ops.panel_linear(xs[lin.weight.shape[1]], pn, lin.weight.shape[0])
                                    for lin, pn in zip(lins, panels)]
        t = _interleaved(fns, repeats, 1)
        rows.append((f"M={M}: " + " / ".join(fns) + " ms", " / ".join(summarize([x * 1e3 for x in v]) for v in t.values()),
                     ""))
        if "panel" in t:
            best = "onednn" if "onednn" in t and M > 1 else "mkl"
            rows.append((f"M={M}: panel / {best} time", summarize([b / a for a, b in zip(t[best], t["panel"])]), ""))
    if native is None:
        rows.append(("native panel GEMM", f"unavailable: {why}", ""))
    return rows


def bench_attention(repeats: int, n: int = 48, context: int = 190, layers: int = 30) -> list[tuple[str, str, str]]:
    """Decode attention at the default model's geometry (9 query heads, 3 KV heads, head_dim 64,
    16-token blocks): ``n`` sequences of ``context`` keys each, one KV cache per layer (``layers``
    of them, block tables a random permutation over twice the blocks needed: the KV stream is far
    larger than the caches, as in a serving step). The native kernel on a huge-page cache (what the
    engine allocates, :mod:`own_engine.hugepages`) and on a 4 KiB-page cache, and the PyTorch path
    (gather + SDPA) on the latter, interleaved; ns per (token, KV head, key)."""
    from own_engine import hugepages
    from own_engine.attention import build_metadata, paged_attention
    from own_engine.cpu_kernels import native_attention

    native, why = native_attention()
    H, nkv, D, bs = 9, 3, 64, 16
    per = -(-context // bs)
    nblocks = 2 * n * per
    g = torch.Generator().manual_seed(0)
    shape = (nblocks, bs, nkv, D)

    def caches(huge: bool) -> list[tuple[torch.Tensor, torch.Tensor]]:
        out = []
        for _ in range(layers):
            kv = [hugepages.zeros(shape, torch.float32, torch.device("cpu"))[0] if huge else torch.empty(shape)
                  for _ in range(2)]
            for t in kv:
                t.copy_(torch.randn(shape, generator=g))
            out.append((kv[0], kv[1]))
        return out

    tables = torch.randperm(nblocks, generator=g)[:n * per].view(n, per).tolist()
    q = torch.randn(n, H, D, generator=g)
    kv_new = torch.randn(n, nkv, D, generator=g)
    args = ([1] * n, [context] * n, tables, bs, H, nkv, torch.device("cpu"))
    meta_native, meta_torch = build_metadata(*args, torch_decode=False), build_metadata(*args)
    sets = {"huge": caches(True), "4k": caches(False)}
    fns = {}
    if native is not None:
        fns["native, huge pages"] = lambda: [native(q, kv_new, kv_new, k, v, meta_native, D ** -0.5) for k, v in sets["huge"]]
        fns["native, 4 KiB pages"] = lambda: [native(q, kv_new, kv_new, k, v, meta_native, D ** -0.5) for k, v in sets["4k"]]
    fns["torch, 4 KiB pages"] = lambda: [paged_attention(q, kv_new, kv_new, k, v, meta_torch, D ** -0.5) for k, v in sets["4k"]]
    t = _interleaved(fns, repeats, 1)
    keys = n * nkv * context * layers
    rows = [(f"{name}: ns per token x KV head x key", summarize([x / keys * 1e9 for x in v]), "") for name, v in t.items()]
    if native is None:
        rows.append(("native attention", f"unavailable: {why}", ""))
    else:
        rows.append(("native: huge / 4 KiB pages time", summarize([a / b for a, b in zip(t["native, huge pages"],
                                                                                       t["native, 4 KiB pages"])]), ""))
        rows.append(("native huge pages / torch time", summarize([a / b for a, b in zip(t["native, huge pages"],
                                                                                      t["torch, 4 KiB pages"])]), ""))
    return rows


@app.command()
def main(section: str = typer.Option("all", help="all | vs-hf | paged-vs-naive | ngram | bandwidth | prefill | verify | linear | attention"),
         repeats: int = typer.Option(3, min=1, help="interleaved repeats; every row is median [min..max] over them"),
         requests: int = typer.Option(24, min=2, help="requests in the vs-hf length-skewed workload"),
         hf_batch: int = typer.Option(8, min=1, help="static batch size of the transformers generate baseline"),
         threads: int = typer.Option(1, min=1, help="torch threads (the harness runs engines with 1)")) -> None:
    """Run the own-engine benchmarks and print one table of ratios."""
    from harness.app.core.model import resolve_model

    torch.set_num_threads(threads)
    model_dir = resolve_model(None)
    valid = ("all", "vs-hf", "paged-vs-naive", "ngram", "bandwidth", "prefill", "verify", "linear", "attention")
    if section not in valid:
        raise typer.BadParameter(f"--section must be one of {', '.join(valid)}")
    rows: list[tuple[str, str, str]] = []
    load = os.getloadavg()[0]
    if section in ("all", "bandwidth"):
        rows += [("[bold]decode vs memory bandwidth[/bold]", "", "")] + bench_bandwidth(model_dir, repeats, 32)
    if section in ("all", "linear"):
        rows += [("[bold]linear kernels by rows M[/bold]", "", "")] + bench_linear(model_dir, max(repeats, 5))
    if section in ("all", "attention"):
        rows += [("[bold]decode attention, 48 x 190 keys x 30 layers[/bold]", "", "")] + bench_attention(max(repeats, 5))
    if section in ("all", "prefill"):
        rows += [("[bold]prefill efficiency[/bold]", "", "")] + bench_prefill(model_dir, max(repeats, 3), 512)
    if section in ("all", "verify"):
        rows += [("[bold]speculative verify cost[/bold]", "", "")] + bench_verify(model_dir, max(repeats, 3), 5, 256)
    if section in ("all", "ngram"):
        rows += [("[bold]n-gram speculation, batch 1[/bold]", "", "")] + bench_ngram(model_dir, repeats, 96)
    if section in ("all", "paged-vs-naive"):
        rows += [("[bold]paged vs naive KV[/bold]", "", "")] + bench_paged_vs_naive(model_dir, repeats, 48)
    if section in ("all", "vs-hf"):
        rows += [("[bold]vs transformers[/bold]", "", "")] + bench_vs_hf(model_dir, repeats, requests, hf_batch)
    table = Table(title=f"own_engine benchmarks (median \\[min..max] over {repeats} repeats, at least 5 for linear "
                        f"and attention, 3 for prefill and verify; "
                        f"threads={threads}; load avg at start {load:.1f})")
    table.add_column("metric")
    table.add_column("value")
    table.add_column("goal")
    for r in rows:
        table.add_row(*r)
    console.print(table)


if __name__ == "__main__":
    app()
