"""The fidelity check's ground truth: Hugging Face transformers, fp32, greedy, on the run's model.

:func:`workload_prompts` draws the prompts from the run's own workload (:func:`fidelity_workload`:
the same options, a seed of its own; each session's first request, chat messages rendered with the model's chat template, duplicates and prompts over
:data:`MAX_PROMPT_TOKENS` left out); :func:`reference_for` generates each prompt's greedy
continuation one prompt at a time (no padding, so nothing but the prompt shapes the logits) and
keeps, per position, the top-k log-softmax of the raw fp32 logits, the top-1 − top-2 gap and the
decoded text of the continuation so far (what the engines' text is compared with).
The result is cached by content hash (the model folder's files, the prompts, the token count,
k) under ``<cache>/fidelity/``, so a model is run once whatever the number of runs.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from results.model_digest import model_digest
from results.schema import FidelityReference, ReferencePrompt
from rich.console import Console

if TYPE_CHECKING:
    from workloads.base import Workload
    from workloads.options import WorkloadOptions

if TYPE_CHECKING:  # transformers is slow to import: only where a tokenizer is loaded
    from transformers import PreTrainedTokenizerBase

MAX_PROMPT_TOKENS = 1536  # longer prompts are left out (the check is about numerics, not context)
TOP_K = 5  # logprobs kept per position (and asked of the engines)
REFERENCE_VERSION = "3"  # bump when what the reference stores changes meaning (3: decoded prefixes, ``texts``)
SEED_OFFSET = 1_000_003  # the fidelity prompts' seed, apart from every ladder point's (base seed + k)


def workload_prompts(workload: Workload, tokenizer: PreTrainedTokenizerBase, count: int) -> list[tuple[str, list[int]]]:
    """Up to ``count`` distinct ``(prompt text, prompt token ids)`` from ``workload``'s sessions'
    first requests, in order; chat messages are rendered with the chat template (generation
    prompt added, no extra special tokens)."""
    out: list[tuple[str, list[int]]] = []
    seen: set[str] = set()
    for session in workload.sessions:
        req = session.first_request()
        if req.messages is not None:
            text = tokenizer.apply_chat_template(req.messages, tokenize=False, add_generation_prompt=True)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            text = req.prompt or ""
            ids = tokenizer(text)["input_ids"]
        if not text or text in seen or len(ids) > MAX_PROMPT_TOKENS:
            continue
        seen.add(text)
        out.append((text, list(ids)))
        if len(out) >= count:
            break
    return out


def reference_key(model_dir: Path, prompts: Sequence[tuple[str, list[int]]], max_tokens: int, top_k: int) -> str:
    """The cache key: the model's content hash, the prompts' token ids, the settings."""
    h = hashlib.sha256()
    h.update(model_digest(model_dir).encode())
    h.update(json.dumps([ids for _, ids in prompts]).encode())
    h.update(f"{max_tokens}/{top_k}/{REFERENCE_VERSION}".encode())
    return h.hexdigest()[:24]


def _greedy(model: Any, tokenizer: PreTrainedTokenizerBase, ids: list[int], max_tokens: int, top_k: int) -> ReferencePrompt:
    """One prompt's greedy continuation with per-position top-k logprobs and top-2 gaps."""
    import torch

    eos = set(_eos_ids(model, tokenizer))
    tokens, pieces, texts, top, gap = [], [], [], [], []
    past, inp = None, torch.tensor([ids])
    # the KV cache's keyword: ``cache`` from transformers 5.2x on (``past_key_values`` warns, and goes in 5.40)
    new_api = "cache" in inspect.signature(model.forward).parameters
    with torch.no_grad():
        for _ in range(max_tokens):
            kv = {} if past is None else ({"cache": past} if new_api else {"past_key_values": past})
            out = model(input_ids=inp, use_cache=True, **kv)
            past = getattr(out, "cache", None) if new_api else out.past_key_values
            logprobs = torch.log_softmax(out.logits[0, -1].float(), dim=-1)  # [vocab]
            values, indices = logprobs.topk(max(2, top_k))
            tok = int(logprobs.argmax())  # the first maximal index, as the engines' argmax
            tokens.append(tok)
            pieces.append(tokenizer.decode([tok], skip_special_tokens=True))  # as engines print text
            texts.append(decoded_prefix(tokenizer, tokens))
            top.append([(tokenizer.decode([int(i)]), float(v)) for v, i in zip(values[:top_k], indices[:top_k])])
            gap.append(float(values[0] - values[1]))
            if tok in eos:
                break
            inp = torch.tensor([[tok]])
    return ReferencePrompt(prompt="", prompt_token_ids=ids, tokens=tokens, pieces=pieces, texts=texts, top=top, gap=gap,
                           eos=tokens[-1] in eos if tokens else False)


def decoded_prefix(tokenizer: PreTrainedTokenizerBase, tokens: Sequence[int]) -> str:
    """The text of ``tokens`` decoded at once, as engines print a completion (special tokens
    skipped, no clean-up of spaces): a character whose bytes span two tokens is whole here, where
    each token decoded alone is a replacement character."""
    return tokenizer.decode(list(tokens), skip_special_tokens=True, clean_up_tokenization_spaces=False)


def _eos_ids(model: Any, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The end-of-sequence ids generation stops on (generation config, else the tokenizer's)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None]


def reference_for(model_dir: Path, prompts: Sequence[tuple[str, list[int]]], *, max_tokens: int = 64,
                  top_k: int = TOP_K, cache_root: Path | None = None, console: Console | None = None) -> FidelityReference:
    """The ground truth for ``prompts`` (module docstring), from the cache when it holds it.
    Raises ValueError for no prompts or ``max_tokens < 1``; OSError / transformers' errors when
    the model folder cannot be loaded."""
    if not prompts:
        raise ValueError("no prompts for the fidelity reference")
    if max_tokens < 1:
        raise ValueError(f"--fidelity-tokens must be >= 1 (got {max_tokens})")
    if cache_root is None:
        from harness.app.core.model import cache_dir

        cache_root = cache_dir()
    key = reference_key(model_dir, prompts, max_tokens, top_k)
    path = Path(cache_root) / "fidelity" / f"{key}.json"
    if path.is_file():
        try:
            return FidelityReference.model_validate_json(path.read_text())
        except ValueError:
            path.unlink(missing_ok=True)  # a torn or stale file: made again below (another run may have removed it)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if console is not None:
        console.print(f"Fidelity reference: transformers fp32 greedy, {len(prompts)} prompts × {max_tokens} tokens "
                      "(once per model; cached) …")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    refs = []
    for text, ids in prompts:
        ref = _greedy(model, tokenizer, list(ids), max_tokens, top_k)
        refs.append(ref.model_copy(update={"prompt": text}))
    reference = FidelityReference(key=key, max_tokens=max_tokens, top_k=top_k, prompts=refs)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a temp file of its own, then a rename: two runs making one reference at once never share a half-written file
    fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(reference.model_dump_json())
        os.chmod(tmp, 0o644)  # readable as the cache's other files are (mkstemp makes it 0600)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return reference


def fidelity_workload(options: WorkloadOptions, tokenizer: PreTrainedTokenizerBase, count: int) -> Any:
    """The workload the fidelity prompts are drawn from: the run's own (``options``), with
    enough requests for ``count`` distinct first turns and its own seed (the base seed +
    :data:`SEED_OFFSET`), so no ladder point finds these prompts in a prefix cache (the shipped
    agentic set's tasks verbatim: the measurements tag theirs). Raises
    :class:`~workloads.errors.WorkloadError` when the options cannot be built that way."""
    from workloads.registry import build_workload

    update = {"seed": (options.seed or 0) + SEED_OFFSET, "duration_s": None, "drain_timeout_s": None}
    if options.name == "agentic" and options.trace is None:
        # the tasks verbatim: the distinct first turns are distinct tasks (not one task under many tags), and none
        # is a measured prompt (every measurement tags its tasks: workloads.spec.AgenticSpec.fresh_tasks)
        update["fresh_tasks"] = False
    if options.trace is None:
        update["num_requests"] = max(16, 4 * count)
    return build_workload(options.model_copy(update=update), tokenizer, with_stats=False)


def run_reference(model_dir: Path, options: WorkloadOptions, tokenizer: PreTrainedTokenizerBase, prompts: int, max_tokens: int,
                  console: Console) -> FidelityReference | None:
    """The run's reference (``prompts`` from the workload of ``options``, ``max_tokens`` each:
    :func:`fidelity_workload`), or None with a printed reason when ``prompts`` is 0, the workload
    has no usable prompt, or transformers cannot run the model here (the run goes on without the
    fidelity check)."""
    from workloads.errors import WorkloadError

    if prompts <= 0:
        return None
    try:
        chosen = workload_prompts(fidelity_workload(options, tokenizer, prompts), tokenizer, prompts)
    except WorkloadError as exc:
        console.print(f"[yellow]fidelity check skipped[/]: its prompts could not be drawn — {exc}")
        return None
    if not chosen:
        console.print("[yellow]fidelity check skipped[/]: the workload has no prompt short enough "
                      f"(≤ {MAX_PROMPT_TOKENS} tokens)")
        return None
    if len(chosen) < prompts:
        console.print(f"Fidelity check on {len(chosen)} prompts, not the {prompts} asked (--fidelity-prompts): the "
                      f"workload has only {len(chosen)} distinct first turns of at most {MAX_PROMPT_TOKENS} tokens",
                      highlight=False)
    try:
        ref = reference_for(model_dir, chosen, max_tokens=max_tokens, console=console)
        return ref.model_copy(update={"model": Path(model_dir).name})  # whose weights it ran (a cached one too)
    except (OSError, ValueError, RuntimeError, ImportError) as exc:
        console.print(f"[yellow]fidelity check skipped[/]: transformers could not make the reference here — "
                      f"{type(exc).__name__}: {str(exc)[:200]} (--fidelity-prompts 0 skips it)")
        return None
