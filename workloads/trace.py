"""Trace replay: production traces with their own arrival times.

- ``azure-code`` / ``azure-conv`` (or any ``.csv`` in that format): Azure LLM inference
  trace 2023; each row's (context, generated) tokens × scale, synthetic word text, arrival
  = recorded timestamp / ``time_scale``.
- ``mooncake`` (or any ``.jsonl`` in that format): Mooncake FAST'25 conversation trace;
  hash ids → identical token blocks of ``round(512 × scale)`` tokens (so engines with prefix
  caching see the trace's real cache-hit structure), arrival = timestamp / ``time_scale``.
- ``servegen-language`` / ``servegen-reason``: ServeGen per-client rate windows: each
  600 s window (shortened to ``600 / time_scale`` s) replays its mean rate × ``rate_scale``
  with gamma gaps of the window's CV; lengths sampled from the client's first 6-hour
  input/output PMFs × scale.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from workloads.arrivals import scale_timestamps, windowed_rate_offsets
from workloads.base import SingleRequestSession
from workloads.errors import WorkloadError
from workloads.loaders import data_path, load_azure_trace, load_mooncake_trace, load_servegen_pmf, load_servegen_windows
from workloads.single import make_request, mooncake_requests, scaled
from workloads.spec import TraceSpec
from workloads.tokens import TokenKit

SERVEGEN_WINDOW_S = 600.0

TRACES: dict[str, tuple[str, Path, Path | None, str]] = {
    # name: (format, file, second file, description)
    "azure-code": ("azure", data_path("azure_llm_2023", "AzureLLMInferenceTrace_code.csv"), None,
                   "Azure LLM inference 2023, code completion (long prompt, short output), real arrivals"),
    "azure-conv": ("azure", data_path("azure_llm_2023", "AzureLLMInferenceTrace_conv.csv"), None,
                   "Azure LLM inference 2023, conversation, real arrivals"),
    "mooncake": ("mooncake", data_path("mooncake_fast25", "conversation_trace.jsonl"), None,
                 "Mooncake FAST'25 conversation trace: real arrivals + prefix block hashes"),
    "servegen-language": ("servegen", data_path("servegen_subset", "language", "m-large", "chunk-61-trace.csv"),
                          data_path("servegen_subset", "language", "m-large", "chunk-61-dataset.json"),
                          "ServeGen m-large client 61: bursty production rate windows (Gamma/Weibull CV)"),
    "servegen-reason": ("servegen", data_path("servegen_subset", "reason", "deepseek-r1", "chunk-35-trace.csv"),
                        data_path("servegen_subset", "reason", "deepseek-r1", "chunk-35-dataset.json"),
                        "ServeGen DeepSeek-R1 client 35: reasoning rate windows, long outputs"),
}


def resolve_trace(trace: str) -> tuple[str, Path, Path | None]:
    """``(format, file, pmf_file)`` for a trace name or a file path.

    Raises :class:`WorkloadError` for an unknown name or a file with an unknown extension.
    """
    if trace in TRACES:
        fmt, f, f2, _ = TRACES[trace]
        return fmt, f, f2
    path = Path(trace).expanduser()
    if path.suffix in (".csv",) or path.name.endswith(".csv.gz"):
        return "azure", path, None
    if path.suffix in (".jsonl",) or path.name.endswith(".jsonl.gz"):
        return "mooncake", path, None
    raise WorkloadError(
        f"unknown trace {trace!r}: use one of {', '.join(TRACES)} or a .csv (Azure format) / .jsonl (Mooncake format) file"
    )


def build_trace(spec: TraceSpec, kit: TokenKit) -> list[SingleRequestSession]:
    """Sessions replaying ``spec.trace`` (first ``num_requests`` requests of the trace)."""
    fmt, path, pmf_path = resolve_trace(spec.trace)
    n = spec.num_requests
    if fmt == "azure":
        rows = load_azure_trace(path, limit=n)
        rng = np.random.default_rng([spec.seed, 0x415A])
        reqs = []
        for i, r in enumerate(rows):
            target = scaled(r.input_tokens, spec.scale)
            reqs.append(make_request(kit, rng, f"trace-{i:05d}", spec, kit.random_words(rng, target), target,
                                     scaled(r.output_tokens, spec.scale, spec.min_output_tokens), clamp=True))
        offsets = scale_timestamps([r.timestamp_s for r in rows], spec.time_scale)
    elif fmt == "mooncake":
        rows = load_mooncake_trace(path, limit=n)
        reqs = mooncake_requests(rows, spec, kit, "trace", spec.min_output_tokens)
        offsets = scale_timestamps([r.timestamp_s for r in rows], spec.time_scale)
    else:
        windows = load_servegen_windows(path)
        first = next((i for i, w in enumerate(windows) if i >= spec.start_window and w.rate_rps > 0), None)
        if first is None:
            raise WorkloadError(f"{path}: no active window at or after start_window={spec.start_window}: lower --start-window")
        offsets = windowed_rate_offsets(
            [(w.rate_rps * spec.rate_scale, w.cv) for w in windows[first:]],
            window_s=SERVEGEN_WINDOW_S / spec.time_scale,
            seed=spec.seed,
            max_arrivals=n or 64,
        )
        assert pmf_path is not None
        in_v, in_p = load_servegen_pmf(pmf_path, "input_tokens")
        out_v, out_p = load_servegen_pmf(pmf_path, "output_tokens")
        rng = np.random.default_rng([spec.seed, 0x5347])
        ins = rng.choice(in_v, size=len(offsets), p=in_p)
        outs = rng.choice(out_v, size=len(offsets), p=out_p)
        reqs = []
        for i in range(len(offsets)):
            target = scaled(int(ins[i]), spec.scale)
            reqs.append(make_request(kit, rng, f"trace-{i:05d}", spec, kit.random_words(rng, target), target,
                                     scaled(int(outs[i]), spec.scale, spec.min_output_tokens), clamp=True))
    return [SingleRequestSession(r, float(t)) for r, t in zip(reqs, offsets)]
