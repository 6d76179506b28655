"""Single-turn workloads: random (vLLM-compatible), chat (ShareGPT), rag, summarization, code.

Every request is an independent :class:`workloads.base.SingleRequestSession` due at an
offset from :func:`workloads.arrivals.arrival_offsets`. Prompts are token-exact
(:class:`workloads.tokens.TokenKit`): ``len(prompt_token_ids) == input_tokens_expected`` is
what the server counts for the request's endpoint (chat template tokens included).
Lengths taken from trace statistics are Llama-2 token counts (Vidur/Sarathi) or the
serving tokenizer's counts (Azure); they are used as token counts for the target tokenizer
after ``× scale`` (rounded, at least 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from workloads.arrivals import schedule_offsets
from workloads.base import RequestSpec, SingleRequestSession
from workloads.errors import WorkloadError
from workloads.loaders import (
    MOONCAKE_BLOCK_SIZE,
    TraceRow,
    data_path,
    load_azure_trace,
    load_length_pairs,
    load_longbench_stats,
    load_mooncake_trace,
    load_sharegpt_prompts,
)
from workloads.spec import ChatSpec, CodeSpec, RagSpec, RandomSpec, SummarizationSpec, WorkloadSpec
from workloads.tokens import TokenKit

SUMMARIZE_INSTRUCTION = "\n\nSummarize the text above in a few sentences."
LONGBENCH_TOKENS_PER_WORD = 1.3  # English BPE tokens per word (LongBench reports words)


def scaled(n: float, scale: float, minimum: int = 1) -> int:
    """``round(n × scale)``, at least ``minimum``."""
    return max(minimum, int(round(n * scale)))


def make_request(
    kit: TokenKit,
    rng: np.random.Generator,
    request_id: str,
    spec: WorkloadSpec,
    content_ids: Sequence[int],
    input_tokens: int,
    max_tokens: int,
    clamp: bool = False,
) -> RequestSpec:
    """A token-exact single-turn request of ``input_tokens`` server-side tokens whose text
    starts with ``content_ids`` (cut or extended with random words to fit).

    ``clamp``: for lengths sampled from traces, raise a length below the chat template's
    overhead to overhead + 1 instead of failing (explicitly requested lengths never clamp).
    """
    if clamp and spec.api == "chat":
        input_tokens = max(input_tokens, kit.chat_overhead() + 1)
    prompt, messages, ids = kit.build_payload(content_ids, input_tokens, spec.api, rng, what=f"request {request_id}")
    return RequestSpec(
        request_id=request_id,
        max_tokens=int(max_tokens),
        prompt=prompt,
        messages=messages,
        prompt_token_ids=ids,
        input_tokens_expected=len(ids),
        ignore_eos=spec.ignore_eos,
        temperature=spec.temperature,
    )


def sessions_at_offsets(requests: list[RequestSpec], spec: WorkloadSpec) -> list[SingleRequestSession]:
    """One session per request, due at the spec's arrival process offsets (seeded by
    ``spec.seed``; a drawn schedule rescaled to offer exactly ``spec.request_rate``; with a
    ramp, vLLM's ramped gaps, :func:`workloads.arrivals.ramp_offsets`)."""
    offsets = schedule_offsets(
        len(requests), rate=spec.request_rate, burstiness=spec.burstiness, seed=spec.seed, process=spec.arrival,
        ramp=spec.ramp,
    )
    return [SingleRequestSession(r, float(t)) for r, t in zip(requests, offsets)]


def range_bounds(length: int, ratio: float) -> tuple[int, int]:
    """vLLM ``--random-range-ratio``: integer lengths uniform in ``[floor(len(1-r)), ceil(len(1+r))]``."""
    return max(1, math.floor(length * (1 - ratio))), max(1, math.ceil(length * (1 + ratio)))


def build_random(spec: RandomSpec, kit: TokenKit) -> list[SingleRequestSession]:
    """vLLM-compatible random workload (see :class:`workloads.spec.RandomSpec` for the semantics).

    Raises :class:`WorkloadError` when ``prefix_len`` leaves no room for the input length.
    """
    rng = np.random.default_rng([spec.seed, 0x52414E44])
    n = spec.num_requests or 32
    in_len, out_len = scaled(spec.input_len, spec.scale), scaled(spec.output_len, spec.scale)
    prefix_len = int(round(spec.prefix_len * spec.scale))
    lo, hi = range_bounds(in_len, spec.range_ratio)
    olo, ohi = range_bounds(out_len, spec.range_ratio)
    if prefix_len >= lo:
        raise WorkloadError(
            f"prefix_len {prefix_len} must be shorter than the smallest input length {lo}: lower --prefix-len or raise --input-len"
        )
    prefix = kit.random_words(rng, prefix_len)
    ins = rng.integers(lo, hi + 1, size=n)
    outs = rng.integers(olo, ohi + 1, size=n)
    reqs = [
        make_request(kit, rng, f"random-{i:05d}", spec, prefix + kit.random_words(rng, int(ins[i]) - prefix_len), int(ins[i]), int(outs[i]))
        for i in range(n)
    ]
    return sessions_at_offsets(reqs, spec)


def build_chat(spec: ChatSpec, kit: TokenKit) -> list[SingleRequestSession]:
    """ShareGPT chat: real first-turn prompts (sampled with replacement, cut to
    ``ceil(tokens × scale)`` tokens), output lengths sampled from the Sarathi ShareGPT decode
    lengths × scale. Input length = the exact token count of the (cut) real prompt."""
    rng = np.random.default_rng([spec.seed, 0x43484154])
    prompts = load_sharegpt_prompts(data_path("sharegpt_prompts_1000", "ShareGPT_V3_filtered_1000.json"))
    lengths = load_length_pairs(data_path("sharegpt_lengths_sarathi", "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"))
    n = spec.num_requests or 32
    picks = rng.integers(0, len(prompts), size=n)
    outs = lengths[rng.integers(0, len(lengths), size=n), 1]
    reqs = []
    for i in range(n):
        ids = kit.encode(prompts[picks[i]])
        ids = ids[: max(1, math.ceil(len(ids) * spec.scale))]
        text = kit.decode(ids)
        if spec.api == "chat":
            prompt, messages, pids = None, [{"role": "user", "content": text}], kit.chat_ids([{"role": "user", "content": text}])
        else:
            prompt, messages, pids = text, None, kit.completion_ids(text)
        reqs.append(
            RequestSpec(
                request_id=f"chat-{i:05d}",
                max_tokens=scaled(int(outs[i]), spec.scale, spec.min_output_tokens),
                prompt=prompt,
                messages=messages,
                prompt_token_ids=pids,
                input_tokens_expected=len(pids),
                ignore_eos=spec.ignore_eos,
                temperature=spec.temperature,
            )
        )
    return sessions_at_offsets(reqs, spec)


def build_summarization(spec: SummarizationSpec, kit: TokenKit) -> list[SingleRequestSession]:
    """arXiv summarization: (article, abstract) token lengths sampled from the Vidur stats ×
    scale; the prompt is synthetic document text ending with a summarise instruction, exactly
    ``article × scale`` tokens in total."""
    rng = np.random.default_rng([spec.seed, 0x53554D])
    pairs = load_length_pairs(data_path("vidur_arxiv_summarization", "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"))
    n = spec.num_requests or 16
    rows = pairs[rng.integers(0, len(pairs), size=n)]
    instr = kit.encode(SUMMARIZE_INSTRUCTION)
    reqs = []
    for i, (pre, dec) in enumerate(rows):
        target = scaled(int(pre), spec.scale, len(instr) + 1)
        doc = kit.random_words(rng, max(1, target - len(instr)))
        reqs.append(make_request(kit, rng, f"summarization-{i:05d}", spec, doc + instr, target,
                                 scaled(int(dec), spec.scale, spec.min_output_tokens), clamp=True))
    return sessions_at_offsets(reqs, spec)


def build_code(spec: CodeSpec, kit: TokenKit) -> list[SingleRequestSession]:
    """Code completion: (context, generated) lengths sampled from the Azure 2023 code trace × scale."""
    rng = np.random.default_rng([spec.seed, 0x434F4445])
    rows = load_azure_trace(data_path("azure_llm_2023", "AzureLLMInferenceTrace_code.csv"))
    n = spec.num_requests or 32
    picks = rng.integers(0, len(rows), size=n)
    reqs = []
    for i, p in enumerate(picks):
        r = rows[p]
        target = scaled(r.input_tokens, spec.scale)
        reqs.append(make_request(kit, rng, f"code-{i:05d}", spec, kit.random_words(rng, target), target,
                                 scaled(r.output_tokens, spec.scale, spec.min_output_tokens), clamp=True))
    return sessions_at_offsets(reqs, spec)


# --- prefix-block synthesis (Mooncake hash ids) --------------------------------------------------
def block_tokens_for(scale: float) -> int:
    """Tokens per hash block after scaling: ``round(512 × scale)``, at least 1."""
    return scaled(MOONCAKE_BLOCK_SIZE, scale)


def hashed_block_ids(kit: TokenKit, seed: int, hash_ids: Sequence[int], input_tokens: int, scale: float, cache: dict[int, list[int]]) -> list[int]:
    """Content token ids for a Mooncake request: hash id h → one fixed block of
    ``block_tokens_for(scale)`` random word tokens (seeded by ``(seed, h)``, so the same id is
    the same block in every request); the last block is cut so the total is the scaled input
    length ``(n-1)·B + max(1, round((input - (n-1)·512) · B/512))``. Equal hash-id prefixes →
    equal token prefixes."""
    b = block_tokens_for(scale)
    n = len(hash_ids)
    last = input_tokens - (n - 1) * MOONCAKE_BLOCK_SIZE
    last_scaled = min(b, max(1, int(round(last * b / MOONCAKE_BLOCK_SIZE))))
    out: list[int] = []
    for k, h in enumerate(hash_ids):
        if h not in cache:
            cache[h] = kit.random_words(np.random.default_rng([seed, 0x4D4F4F4E, int(h) & 0xFFFFFFFF, int(h) >> 32]), b)
        out.extend(cache[h] if k < n - 1 else cache[h][:last_scaled])
    return out


def mooncake_requests(
    rows: Sequence[TraceRow], spec: WorkloadSpec, kit: TokenKit, prefix: str, min_output: int = 1
) -> list[RequestSpec]:
    """Requests for Mooncake rows: hash blocks → identical token blocks (see
    :func:`hashed_block_ids`); with the chat API the template wraps the content (so blocks
    stay identical, shifted by the template header). Outputs × scale, at least ``min_output``."""
    cache: dict[int, list[int]] = {}
    rng = np.random.default_rng([spec.seed, 0x4D43])
    reqs = []
    for i, r in enumerate(rows):
        content = hashed_block_ids(kit, spec.seed, r.hash_ids, r.input_tokens, spec.scale, cache)
        if spec.api == "chat":
            target = len(kit.chat_ids([{"role": "user", "content": kit.decode(content)}]))
        else:
            target = len(kit.completion_ids(kit.decode(content)))
        reqs.append(make_request(kit, rng, f"{prefix}-{i:05d}", spec, content, target, scaled(r.output_tokens, spec.scale, min_output)))
    return reqs


def build_rag(spec: RagSpec, kit: TokenKit) -> list[SingleRequestSession]:
    """RAG: shared long document prefixes + unique questions (``source="gsp"``, SGLang's
    generated-shared-prefix benchmark), or Mooncake prefix block hashes (``source="mooncake"``).

    gsp: group g's requests are ``document_g + question_i``; the document is identical token
    for token within a group. Raises :class:`WorkloadError` when ``num_requests < num_groups``.
    """
    n = spec.num_requests or 32
    if spec.source == "mooncake":
        rows = load_mooncake_trace(data_path("mooncake_fast25", "conversation_trace.jsonl"), limit=n)
        return sessions_at_offsets(mooncake_requests(rows, spec, kit, "rag"), spec)
    if n < spec.num_groups:
        raise WorkloadError(f"rag needs num_requests >= num_groups ({n} < {spec.num_groups}): lower num_groups")
    rng = np.random.default_rng([spec.seed, 0x524147])
    if spec.document_tokens is not None:
        doc_len = spec.document_tokens
    else:
        multi_doc = [r for r in load_longbench_stats() if r["task_type"] == "Multi-doc QA" and r["avg_len_unit"] == "words"]
        words = float(np.mean([r["avg_len"] for r in multi_doc]))
        doc_len = scaled(words * LONGBENCH_TOKENS_PER_WORD, spec.scale)
    docs = [kit.random_words(rng, doc_len) for _ in range(spec.num_groups)]
    groups = [i % spec.num_groups for i in range(n)]
    if spec.shuffle:
        groups = [groups[i] for i in rng.permutation(n)]
    reqs = []
    for i, g in enumerate(groups):
        question = kit.random_words(rng, spec.question_tokens)
        content = docs[g] + question
        if spec.api == "chat":
            target = len(kit.chat_ids([{"role": "user", "content": kit.decode(content)}]))
        else:
            target = len(kit.completion_ids(kit.decode(content)))
        req = make_request(kit, rng, f"rag-g{g:02d}-{i:05d}", spec, content, target, spec.output_tokens)
        reqs.append(req)
    return sessions_at_offsets(reqs, spec)
