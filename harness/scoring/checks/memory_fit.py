"""Memory fit: do the weights plus the KV cache of the measured load fit the target?

``weights_bytes = num_params × dtype_bytes``; ``kv_bytes = kv_bytes_per_token × concurrency ×
context_tokens`` with ``kv_bytes_per_token`` from :func:`results.model_geometry.kv_bytes_per_token`
(vLLM's KV sizing); ``usable_bytes = memory_bytes × devices_used × memory_utilization``.
Concurrency is the largest number of requests the run had in flight (:func:`max_in_flight`),
context the largest input + output tokens of one request.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from results.hardware import GiB, HardwareProfile
from results.model_geometry import dtype_bytes_for, kv_bytes_per_token
from results.recommendation import DEFAULT_MEMORY_UTILIZATION, MemoryFit
from results.schema import RequestRecord

from ..measured.gather import ModelFacts


def max_in_flight(records: Iterable[RequestRecord]) -> int:
    """Largest number of requests in flight at once (send_ns → end_ns intervals; a request
    without an end counts until the last event). Ends sort before sends at equal times."""
    records = list(records)
    events: list[tuple[int, int]] = []  # (time in ns, +1 send / −1 end)
    ends_known = [record.end_ns for record in records if record.end_ns is not None]
    horizon = max(ends_known) if ends_known else None
    for record in records:
        if record.send_ns is None:
            continue
        end = record.end_ns if record.end_ns is not None else (record.last_token_ns or horizon or record.send_ns)
        events.append((record.send_ns, 1))
        events.append((end, -1))
    events.sort(key=lambda event: (event[0], event[1]))
    in_flight = most = 0
    for _, change in events:
        in_flight += change
        most = max(most, in_flight)
    return most


def _format_bytes(size: float) -> str:
    return f"{int(size):,} B ({size / GiB:.2f} GiB)"


def memory_fit(
    engine: str,
    model: ModelFacts,
    records: Sequence[RequestRecord],
    max_concurrency: int | None,
    hardware: HardwareProfile,
    *,
    dtype_bytes: int | None = None,
    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION,
    tensor_parallel: bool = True,
) -> MemoryFit:
    """Weights + KV cache vs the target's usable memory, with the arithmetic spelled out.

    ``model``: the manifest's model facts (num_params, num_layers, num_kv_heads, head_dim, dtype);
    ``records``: the engine's measured records — concurrency = their max in-flight, else the
    workload spec's ``max_concurrency``; context = the largest input + output tokens of one
    request. ``dtype_bytes`` overrides the bytes per weight and KV element (default: from the
    model's dtype). ``tensor_parallel=False`` limits the engine to one device. Never raises for
    missing data: ``fits`` is None and the arithmetic says what was not recorded.
    """
    fit = MemoryFit(engine=engine, memory_utilization=memory_utilization)
    element_bytes = dtype_bytes if dtype_bytes is not None else dtype_bytes_for(model.dtype)
    fit.dtype_bytes = element_bytes
    fit.num_params = model.num_params
    fit.num_layers = model.num_layers
    fit.num_kv_heads = model.num_kv_heads
    fit.head_dim = model.head_dim
    measured = [record for record in records if record.phase == "measured"]
    if measured:
        fit.concurrency = max_in_flight(measured) or None
        fit.concurrency_source = "max in flight in the run"
    if fit.concurrency is None and max_concurrency:
        fit.concurrency = int(max_concurrency)
        fit.concurrency_source = "workload max_concurrency"
    context_lengths = [(record.input_tokens or 0) + (record.output_tokens or 0) for record in measured]
    fit.context_tokens = max(context_lengths) if context_lengths and max(context_lengths) > 0 else None
    fit.devices_used = hardware.num_devices if tensor_parallel else 1
    fit.usable_bytes = int(hardware.memory_bytes * fit.devices_used * memory_utilization)

    missing = [
        what
        for what, value in (
            ("model num_params", fit.num_params),
            ("model dtype", element_bytes),
            ("num_layers", fit.num_layers),
            ("num_kv_heads", fit.num_kv_heads),
            ("head_dim", fit.head_dim),
            ("concurrency", fit.concurrency),
            ("context length", fit.context_tokens),
        )
        if value is None
    ]
    if missing:
        fit.arithmetic = f"memory fit not checked: {', '.join(missing)} not recorded"
        return fit
    # all recorded (checked above), for type checkers:
    assert element_bytes is not None and fit.num_params is not None and fit.num_layers is not None
    assert fit.num_kv_heads is not None and fit.head_dim is not None
    assert fit.concurrency is not None and fit.context_tokens is not None
    fit.weights_bytes = int(fit.num_params) * element_bytes
    fit.kv_bytes_per_token = kv_bytes_per_token(fit.num_layers, fit.num_kv_heads, fit.head_dim, element_bytes)
    fit.kv_tokens = int(fit.concurrency) * int(fit.context_tokens)
    fit.kv_bytes = fit.kv_bytes_per_token * fit.kv_tokens
    fit.total_bytes = fit.weights_bytes + fit.kv_bytes
    fit.fits = fit.total_bytes <= fit.usable_bytes
    fit.headroom = max(0.0, 1.0 - fit.total_bytes / fit.usable_bytes) if fit.usable_bytes else 0.0
    one_device = "" if tensor_parallel or hardware.num_devices == 1 else " (no tensor parallelism: one device)"
    fit.arithmetic = (
        f"weights {fit.num_params:,} params × {element_bytes} B = {fit.weights_bytes:,} B; "
        f"KV 2 × {fit.num_layers} layers × {fit.num_kv_heads} KV heads × {fit.head_dim} head dim × {element_bytes} B "
        f"= {fit.kv_bytes_per_token:,} B/token × ({fit.concurrency} in flight × {fit.context_tokens:,} tokens context "
        f"= {fit.kv_tokens:,} tokens) = {fit.kv_bytes:,} B; "
        f"total {_format_bytes(fit.total_bytes)} {'≤' if fit.fits else '>'} usable {fit.devices_used} × "
        f"{hardware.memory_bytes / GiB:.1f} GiB × {memory_utilization:g} = {_format_bytes(fit.usable_bytes)}{one_device}"
    )
    return fit
