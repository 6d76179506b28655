"""ONNX Runtime GenAI as an OpenAI server: its ``Generator`` over static batches.

``python -m adapters.shims.ort_server --model HF_DIR --onnx-dir CACHE --port P [--threads N
--precision fp32 --provider cpu ...]`` - runs in ``.engines/onnxruntime/venv``.

On first use the ONNX model is built from the same Hugging Face folder with ONNX Runtime
GenAI's model builder (``python -m onnxruntime_genai.models.builder -i HF_DIR -o OUT -p fp32
-e cpu``; it needs ``onnx-ir``) into a temporary folder renamed to ``CACHE`` when complete, so
later launches reuse it. Prompts are tokenized by the Hugging Face tokenizer (the same ids as
every other engine). Batched rows are RIGHT-padded with the model's pad id: left padding gives
wrong tokens with this Generator (issue 5). The Generator has no per-row stop, so finished rows
are dropped by the shim and the call ends when every row is done (or at ``max_length``); it
cannot mix ``ignore_eos`` rows with others, so those go to separate batches, with
``min_length`` holding EOS off.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

from adapters.shims.openai_shim import GenRequest, add_common_args, serve


def build_onnx_model(hf_dir: str, out_dir: Path, precision: str = "fp32", provider: str = "cpu") -> Path:
    """Build (once) the ONNX model of ``hf_dir`` into ``out_dir``; return ``out_dir``.

    Raises RuntimeError when the builder fails (its output is in this server's log).
    """
    out_dir = Path(out_dir)
    if (out_dir / "genai_config.json").is_file():
        return out_dir
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", hf_dir, "-o", str(tmp), "-p", precision,
           "-e", provider, "-c", str(tmp / "cache")]
    print("building the ONNX model:", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd)
    if rc != 0 or not (tmp / "genai_config.json").is_file():
        raise RuntimeError(f"onnxruntime_genai model builder failed (exit {rc}); see the lines above")
    shutil.rmtree(tmp / "cache", ignore_errors=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir


class OrtGenAIBackend:
    """ONNX Runtime GenAI ``Generator`` over a right-padded static batch."""

    model_label = "onnxruntime-genai Generator (static batches)"

    def __init__(self, hf_dir: str, onnx_dir: Path, threads: int = 1, provider: str = "cpu") -> None:
        import onnxruntime_genai as og
        from transformers import AutoTokenizer

        self.og = og
        cfg_path = Path(onnx_dir) / "genai_config.json"
        gcfg = json.loads(cfg_path.read_text())
        self.tokenizer = AutoTokenizer.from_pretrained(hf_dir)
        config = og.Config(str(onnx_dir))
        overlay = {"model": {"decoder": {"session_options": {"intra_op_num_threads": threads,
                                                               "inter_op_num_threads": 1}}}}
        if hasattr(config, "overlay"):
            config.overlay(json.dumps(overlay))
        if provider == "cpu" and hasattr(config, "clear_providers"):
            config.clear_providers()
        self.model = og.Model(config)
        eos = gcfg["model"].get("eos_token_id")
        self.eos_token_ids: set[int] = set(eos if isinstance(eos, list) else [eos])
        pad = gcfg["model"].get("pad_token_id")
        self.pad_id = int(pad if pad is not None else min(self.eos_token_ids))
        self.context_length = int(gcfg["model"].get("context_length") or 2048)

    @staticmethod
    def batch_key(req: GenRequest) -> tuple:
        """Rows of one Generator call share ``ignore_eos`` (min_length is per call)."""
        return (req.ignore_eos,)

    def generate_batch(self, batch: list[GenRequest], emit: Callable[[int, int], None], done: Callable[[int], bool]) -> None:
        """ONE Generator over ``batch``: right-padded ``[batch, width]`` prompt ids."""
        import numpy as np

        og = self.og
        n = len(batch)
        width = max(len(r.prompt_ids) for r in batch)
        ids = np.full((n, width), self.pad_id, dtype=np.int32)
        for i, r in enumerate(batch):
            ids[i, : len(r.prompt_ids)] = r.prompt_ids
        max_new = max(r.max_tokens for r in batch)
        params = og.GeneratorParams(self.model)
        r0 = batch[0]
        opts = {"max_length": min(width + max_new, self.context_length), "batch_size": n}
        if r0.temperature > 0:
            opts.update(do_sample=True, temperature=r0.temperature, top_p=r0.top_p)
        else:
            opts.update(do_sample=False)
        if r0.ignore_eos:
            opts["min_length"] = opts["max_length"]
        params.set_search_options(**opts)
        gen = og.Generator(self.model, params)
        gen.append_tokens(ids)
        while not gen.is_done():
            gen.generate_next_token()
            step = gen.get_next_tokens()
            for i in range(n):
                emit(i, int(step[i]))
            if all(done(i) for i in range(n)):
                break


def main(argv: list[str] | None = None) -> None:
    """Parse flags, build/load the ONNX model (before health turns 200), serve."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--onnx-dir", required=True, help="cache folder of the ONNX build")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16", "int4"])
    parser.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    onnx_dir = build_onnx_model(args.model, Path(args.onnx_dir), args.precision, args.provider)
    serve(OrtGenAIBackend(args.model, onnx_dir, threads=args.threads, provider=args.provider), args)


if __name__ == "__main__":
    main()
