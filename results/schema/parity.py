"""Engine-configuration parity: what each engine reports it runs with (:class:`EffectiveSettings`,
read by ``adapters.telemetry.effective``) and the audit that compares them (:class:`ParityAudit`,
``summary.json``'s ``parity``; built by ``harness.scoring.checks.parity``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .base import Artefact

EFFECTIVE_FIELDS: tuple[str, ...] = (
    "kv_capacity_tokens", "kv_capacity_bytes", "block_size", "prefix_caching", "chunked_prefill",
    "chunked_prefill_tokens", "max_num_seqs", "max_num_batched_tokens", "dtype", "threads", "cuda_graphs",
    "speculative", "max_model_len",
)
"""The settings :class:`EffectiveSettings` holds, in table order."""

FLAG_SOURCE = "flag we passed (engine did not report it)"
"""The source of a value read from our own command line because the engine did not report it."""


class EffectiveSettings(Artefact):
    """What one engine says it is running with (``adapters.telemetry.effective``), read once per run after
    health and before the measured phase: from the engine's own startup log, its ``/metrics``,
    its server-info route, or - marked with :data:`FLAG_SOURCE` - the flag we passed.

    ``kv_capacity_tokens``: KV-cache slots (tokens) the engine allocated; ``kv_capacity_bytes``:
    their memory (bytes; from a log rounded to 0.01 GiB where the engine logs GiB);
    ``block_size``: tokens per KV block/page; ``prefix_caching``: cross-request KV reuse on
    (SGLang's radix cache counts); ``chunked_prefill`` and ``chunked_prefill_tokens`` (the largest
    prefill chunk, tokens); ``max_num_seqs``: most sequences scheduled at once (SGLang's
    max_running_requests, a shim's static batch size); ``max_num_batched_tokens``: per-step
    token budget; ``dtype``: the model's compute dtype ("float32", "bfloat16"); ``threads``: CPU
    threads the engine computes with; ``cuda_graphs``: True = CUDA graphs, False = eager;
    ``speculative``: "off" or the method; ``max_model_len``: context limit (tokens).

    None = not reported, never a guessed value. ``sources``: field → where its value came from
    ("log: CPU KV cache size: 23,296 tokens", "/metrics vllm:cache_config_info", ...); a field may
    have a source and stay None when the engine says it has no such thing (a shim has no shared
    KV budget). ``hardware``: "cpu" / "nvidia" / "amd" (CUDA graphs only matter on a GPU);
    ``notes``: what could not be read and why.
    """

    kv_capacity_tokens: int | None = None
    kv_capacity_bytes: int | None = None
    block_size: int | None = None
    prefix_caching: bool | None = None
    chunked_prefill: bool | None = None
    chunked_prefill_tokens: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    dtype: str | None = None
    threads: int | None = None
    cuda_graphs: bool | None = None
    speculative: str | None = None
    max_model_len: int | None = None
    hardware: str | None = None
    sources: dict[str, str] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


class ParityFlag(Artefact):
    """One unfair difference between engines (``harness.scoring.checks.parity``): ``setting`` (an
    :data:`EFFECTIVE_FIELDS` name), the ``engines`` it concerns and the ``reason`` in words (what
    differs and why it changes what is measured)."""

    setting: str
    engines: list[str] = Field(default_factory=list)
    reason: str


class ParityRow(Artefact):
    """One setting across the audited engines: ``values`` engine → shown text (None = not
    reported), ``sources`` engine → where it came from; ``differs``: the reported values are not
    all equal; ``unfair``: a :class:`ParityFlag` was raised for it."""

    setting: str
    label: str
    values: dict[str, str | None] = Field(default_factory=dict)
    sources: dict[str, str] = Field(default_factory=dict)
    differs: bool = False
    unfair: bool = False


class ParityStrict(Artefact):
    """What ``bench run --parity strict`` did (``adapters.parity``): ``target`` the one value
    of each setting it aimed for; ``applied`` engine → the engine args it added; ``could_not``:
    one line per setting an engine could not be set to, with why; ``user_kept``: the
    ``--engine-arg`` values that won over the target (the user's word wins)."""

    target: dict[str, Any] = Field(default_factory=dict)
    applied: dict[str, dict[str, str]] = Field(default_factory=dict)
    could_not: list[str] = Field(default_factory=list)
    user_kept: list[str] = Field(default_factory=list)


class ParityAudit(Artefact):
    """The engine-configuration parity audit of one run (``summary.json``'s ``parity``):
    ``mode`` "report" (audit only) or "strict" (see ``strict``); ``hardware`` the run's kind;
    ``engines`` the measured engines compared; ``rows`` one per setting; ``flags`` the unfair
    differences; ``not_reported`` engine → settings it did not report (never flagged); ``notes``
    what a reader needs besides (the shared CPU KV budget, CUDA graphs not compared on a CPU)."""

    mode: str = "report"
    hardware: str | None = None
    engines: list[str] = Field(default_factory=list)
    rows: list[ParityRow] = Field(default_factory=list)
    flags: list[ParityFlag] = Field(default_factory=list)
    not_reported: dict[str, list[str]] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    strict: ParityStrict | None = None
