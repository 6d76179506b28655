"""Export a Hugging Face model folder to OpenVINO IR for the ``openvino`` engine (fp32 weights).

``python -m adapters.shims.ov_export --model HF_DIR --out OUT [--weight-format fp32]`` - runs in
``.engines/openvino/venv`` (optimum-intel, openvino, openvino-tokenizers, torch, transformers),
started by :func:`adapters.engines.openvino.ensure_ir` in its own watched process group with its
output in the engine's log. Steps (each prints ``[i/3] ...``):

1. ``optimum-cli export openvino --model DIR --task text-generation-with-past --weight-format
   fp32 OUT``: the stateful decoder IR the ``ContinuousBatchingPipeline`` turns into its
   paged-attention form, plus the tokenizer as OpenVINO models. ``--weight-format fp32`` is
   explicit because optimum compresses the weights of large models to int8 by default.
   A ``config.json`` that only transformers 5 reads (``rope_parameters`` without
   ``rope_theta``) is given the legacy keys in a staging copy (links to the other files) when
   the venv's transformers is older, so RoPE is not silently exported at its default base.
2. Check the precision: every weight constant of ``openvino_model.xml`` is counted by element
   type; any int8/int4/fp8 weight (or a ``quantization_config`` in ``openvino_config.json``)
   fails the export: the engine would otherwise run other numerics than it reports.
3. Write ``bench_export.json`` (weight element types, versions, seconds) into OUT.

Exits 1 with one ``ov_export: error: ...`` line on failure.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOW_PRECISION = ("i8", "u8", "i4", "u4", "nf4", "f4e2m1", "f8e4m3", "f8e5m2", "u1", "u2", "u3", "u6")
MIN_WEIGHT_ELEMENTS = 1024  # constants smaller than this are shapes, indices, scalars - not weights


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def legacy_config(cfg: dict) -> dict:
    """``config.json`` with the keys transformers < 5 reads: ``rope_theta`` (and ``rope_scaling``)
    from ``rope_parameters``, ``torch_dtype`` from ``dtype``. Unchanged when they are there."""
    out = dict(cfg)
    rope = cfg.get("rope_parameters")
    if isinstance(rope, dict):
        if "rope_theta" in rope and "rope_theta" not in out:
            out["rope_theta"] = rope["rope_theta"]
        kind = rope.get("rope_type", "default")
        if kind != "default" and "rope_scaling" not in out:
            out["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
    if "dtype" in cfg and "torch_dtype" not in out:
        out["torch_dtype"] = cfg["dtype"]
    return out


def staged_model(model: Path, work: Path) -> Path:
    """``model`` itself when this venv's transformers reads its config as it is (5 and newer),
    else a staging folder in ``work``: links to every file, ``config.json`` rewritten by
    :func:`legacy_config`."""
    version = _version("transformers") or "0"
    if int(version.split(".")[0]) >= 5:
        return model
    cfg = json.loads((model / "config.json").read_text())
    legacy = legacy_config(cfg)
    if legacy == cfg:
        return model
    stage = work / model.name
    stage.mkdir(parents=True)
    for f in model.iterdir():
        if f.name != "config.json":
            os.symlink(f.resolve(), stage / f.name)
    (stage / "config.json").write_text(json.dumps(legacy, indent=2))
    print(f"ov_export: transformers {version} reads no rope_parameters: staged {stage} with rope_theta="
          f"{legacy.get('rope_theta')}", flush=True)
    return stage


def export_command(model: Path, out: Path, weight_format: str = "fp32") -> list[str]:
    """``optimum-cli export openvino`` (the venv's console script) for ``model`` → ``out``."""
    cli = Path(sys.executable).with_name("optimum-cli")
    head = [str(cli)] if cli.exists() else [sys.executable, "-m", "optimum.commands.optimum_cli"]
    return [*head, "export", "openvino", "--model", str(model), "--task", "text-generation-with-past",
            "--weight-format", weight_format, str(out)]


def weight_types(xml: Path) -> dict[str, int]:
    """Element type → number of weight constants (at least :data:`MIN_WEIGHT_ELEMENTS` elements)
    in the IR ``xml``, read with OpenVINO."""
    import openvino as ov

    model = ov.Core().read_model(str(xml))
    counts: dict[str, int] = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Constant":
            continue
        shape = op.get_output_partial_shape(0)
        if not shape.is_static:
            continue
        n = 1
        for d in shape.to_shape():
            n *= int(d)
        if n < MIN_WEIGHT_ELEMENTS:
            continue
        kind = op.get_output_element_type(0).get_type_name()
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def check_precision(out: Path, weight_format: str = "fp32") -> dict[str, int]:
    """Raise RuntimeError when the export holds compressed weights (module docstring, step 2);
    return the weight element types."""
    types = weight_types(out / "openvino_model.xml")
    low = {k: v for k, v in types.items() if k in LOW_PRECISION}
    if weight_format == "fp32" and low:
        raise RuntimeError(f"the export compressed weights ({', '.join(f'{v} {k}' for k, v in low.items())} "
                           "constants) although --weight-format fp32 was asked for")
    cfg_path = out / "openvino_config.json"
    if weight_format == "fp32" and cfg_path.is_file():
        qc = json.loads(cfg_path.read_text()).get("quantization_config")
        if qc:
            raise RuntimeError(f"openvino_config.json records a quantization_config ({json.dumps(qc)[:200]})")
    return types


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--weight-format", default="fp32", choices=["fp32", "fp16", "int8", "int4"])
    args = parser.parse_args(argv)
    started = time.time()
    try:
        with tempfile.TemporaryDirectory(prefix="ov-export-") as work:
            model = staged_model(args.model.resolve(), Path(work))
            cmd = export_command(model, args.out, args.weight_format)
            print("[1/3] exporting with optimum-intel:", " ".join(cmd), flush=True)
            rc = subprocess.call(cmd)
            if rc != 0 or not (args.out / "openvino_model.xml").is_file():
                raise RuntimeError(f"optimum-cli export openvino failed (exit {rc}); its output is above")
        print("[2/3] checking the weights' precision", flush=True)
        types = check_precision(args.out, args.weight_format)
        tokenizer = (args.out / "openvino_tokenizer.xml").is_file()
        facts = {"weight_format": args.weight_format, "weight_types": types, "tokenizer_converted": tokenizer,
                 "source": str(args.model.resolve()), "seconds": round(time.time() - started, 1),
                 **{d.replace("-", "_"): _version(d) for d in ("optimum-intel", "optimum", "openvino", "openvino-genai",
                                                               "openvino-tokenizers", "transformers", "torch")}}
        (args.out / "bench_export.json").write_text(json.dumps(facts, indent=2))
        size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
        print(f"[3/3] done in {facts['seconds']} s: weights {types}, {size / 1e6:.0f} MB in {args.out}", flush=True)
        return 0
    except Exception as exc:
        print(f"ov_export: error: {exc}", flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
