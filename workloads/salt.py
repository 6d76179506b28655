"""Per-run prompt salt: keep an engine's prefix cache from serving one run's prompts to the next.

An engine that outlives a run (an existing endpoint, ``--engine openai``) still holds the KV
blocks of the run's prompts in its prefix cache; a second run with the same workload and seed
sends the very same prompts and would measure cache hits the first run paid for. A salt is
one short text, the same for the whole run, put at the **very start** of every session's first
prompt:

- single-turn workloads: at the start of the prompt (completions API) or of the first
  message's content (chat API);
- agentic: at the start of the first initial message (the shared system prompt), so every
  later turn, which extends the previous turn's prompt, carries it too.

Because every prompt of the run starts with the same salt, the sharing the workload intends
is kept token for token (a session's turns extend each other, sessions share their system
prompt, RAG requests share their document; every shared prefix is only shifted by the salt),
while no prompt shares more than the chat template's own header with a run salted
differently or not at all. The salt adds its tokens to every prompt:
``prompt_token_ids`` / ``input_tokens_expected`` are recomputed from the salted text, so they
stay exactly what the server counts.

vLLM's ``cache_salt`` request field does the same inside one engine; a text salt works on
every engine.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Sequence

from workloads.base import RequestSpec, Session, SingleRequestSession
from workloads.errors import WorkloadError
from workloads.tokens import TokenKit

AUTO_SALTS = ("auto", "run")  # draw a random salt for this run
RANDOM_SALT_BYTES = 4  # 8 hex digits: two runs draw the same salt with probability 2**-32


NO_SALTS = ("none", "off")  # no salt, said explicitly (an endpoint just started, e.g. by bench serve: its cache is cold)


def resolve_salt(value: str | None) -> str | None:
    """The salt a run uses: None or ``none``/``off`` → None (no salt); ``auto``/``run`` (any
    case) → ``run-`` followed by 8 random hex digits (:func:`secrets.token_hex`, a new one per
    call); any other text as given."""
    if value is None or value.strip().lower() in NO_SALTS:
        return None
    if value.strip().lower() in AUTO_SALTS:
        return f"run-{secrets.token_hex(RANDOM_SALT_BYTES)}"
    return value


def salt_text(salt: str) -> str:
    """The text put before the prompt: ``[salt]`` and a newline (a newline keeps the byte-level
    pre-tokenizer from merging the salt with the prompt's first word)."""
    return f"[{salt}]\n"


def salt_request(req: RequestSpec, salt: str, kit: TokenKit) -> RequestSpec:
    """``req`` with :func:`salt_text` at the start of its prompt (completions) or of its first
    message's content (chat), its token ids recomputed as the server counts them.
    Raises :class:`WorkloadError` for a first message whose content is not text."""
    prefix = salt_text(salt)
    if req.messages is not None:
        if not req.messages or not isinstance(req.messages[0].get("content"), str):
            raise WorkloadError(f"request {req.request_id}: the first message has no text content to salt")
        messages = [dict(m) for m in req.messages]
        messages[0]["content"] = prefix + messages[0]["content"]
        ids = kit.chat_ids(messages)
        return dataclasses.replace(req, messages=messages, prompt_token_ids=ids, input_tokens_expected=len(ids))
    prompt = prefix + (req.prompt or "")
    ids = kit.completion_ids(prompt)
    return dataclasses.replace(req, prompt=prompt, prompt_token_ids=ids, input_tokens_expected=len(ids))


def salt_initial(initial: tuple[tuple[str, str], ...], salt: str | None) -> tuple[tuple[str, str], ...]:
    """An agentic session's initial ``(role, content)`` messages with :func:`salt_text` at the
    start of the first one (None: unchanged)."""
    if salt is None or not initial:
        return initial
    (role, content), rest = initial[0], initial[1:]
    return ((role, salt_text(salt) + content), *rest)


def task_tag(seed: int | None, index: int | None = None) -> str:
    """The tag of session ``index`` of the workload drawn with ``seed`` (``task 7.3``), or of the
    whole measurement (``task 7``) when ``index`` is None: what ``fresh_tasks`` puts before a
    session's task (:class:`workloads.spec.AgenticSpec`)."""
    return f"task {seed or 0}" + ("" if index is None else f".{index}")


def tag_task(initial: tuple[tuple[str, str], ...], tag: str | None) -> tuple[tuple[str, str], ...]:
    """``initial`` ``(role, content)`` messages with :func:`salt_text` of ``tag`` at the start of
    the first ``user`` message (the task; the system prompt before it stays shared); unchanged
    when ``tag`` is None or there is no user message."""
    if tag is None:
        return initial
    at = next((i for i, (role, _) in enumerate(initial) if role == "user"), None)
    if at is None:
        return initial
    role, content = initial[at]
    return (*initial[:at], (role, salt_text(tag) + content), *initial[at + 1:])


def salt_single_sessions(sessions: Sequence[Session], salt: str | None, kit: TokenKit) -> None:
    """Salt every single-request session's request in place (None: nothing); other sessions
    (agentic) are salted by their builder, which puts the salt in the shared system prompt."""
    if salt is None:
        return
    for s in sessions:
        if isinstance(s, SingleRequestSession):
            s.request = salt_request(s.request, salt, kit)
