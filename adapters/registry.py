"""Engine names → adapters, and ``--engine-arg NAME:key=value`` parsing."""

from __future__ import annotations

import inspect
import re

from adapters.base import EngineAdapter
from adapters.engines.hf import TransformersServeAdapter, TransformersStaticAdapter
from adapters.engines.llamacpp import LlamaCppAdapter, LlamaCppQ8Adapter
from adapters.engines.openai import OpenAIAdapter
from adapters.engines.openvino import OpenVinoAdapter
from adapters.engines.own import OwnAdapter
from adapters.engines.sglang import SglangAdapter
from adapters.engines.shim_engines import DeepSpeedAdapter, OnnxRuntimeGenAIAdapter
from adapters.engines.tensorrt_llm import TensorRTLLMAdapter
from adapters.engines.vllm import VllmAdapter
from results.pairs import parse_pairs

ENGINE_NAMES = ("own", "transformers", "transformers_serve", "vllm", "sglang", "onnxruntime", "deepspeed",
                "llamacpp", "llamacpp_q8_0", "openvino", "tensorrt_llm", "openai")
NOT_IN_ALL = ("openai", "llamacpp_q8_0")
"""Left out of ``--engine all``: ``openai`` needs --base-url; ``llamacpp_q8_0`` serves quantised
weights (other numerics than every other engine), so it is measured only when named."""

_FACTORIES = {
    "own": OwnAdapter,
    "transformers": TransformersStaticAdapter,
    "transformers_serve": TransformersServeAdapter,
    "vllm": VllmAdapter,
    "sglang": SglangAdapter,
    "onnxruntime": OnnxRuntimeGenAIAdapter,
    "deepspeed": DeepSpeedAdapter,
    "llamacpp": LlamaCppAdapter,
    "llamacpp_q8_0": LlamaCppQ8Adapter,
    "openvino": OpenVinoAdapter,
    "tensorrt_llm": TensorRTLLMAdapter,
    "openai": OpenAIAdapter,
}
_NAME_RE = re.compile(r"(?P<engine>[A-Za-z_][A-Za-z0-9_]*):(?P<key>[A-Za-z0-9_.\-]+)")  # ENGINE:key, before the first "="


def get_adapter(name: str, hardware: str | None = None) -> EngineAdapter:
    """A fresh adapter for engine ``name``; ``hardware`` (``"nvidia"|"amd"|"cpu"``, detected
    once by the caller) is given to the adapters whose probe or command depends on it, so they
    do not detect it again. Raises ValueError naming the valid choices."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ValueError(f"unknown engine {name!r}: choose from {', '.join(ENGINE_NAMES)}")
    if hardware is not None and "hardware" in inspect.signature(factory).parameters:
        return factory(hardware=hardware)
    return factory()


def all_adapters(hardware: str | None = None) -> list[EngineAdapter]:
    """Every engine but those of :data:`NOT_IN_ALL`: what ``--engine all`` probes."""
    return [get_adapter(n, hardware) for n in ENGINE_NAMES if n not in NOT_IN_ALL]


def endpoint_adapters(endpoints: dict[str, str]) -> list[EngineAdapter]:
    """One adapter per ``--endpoint NAME=URL``: an OpenAI-compatible deployment the harness does
    not start, compared under ``NAME``."""
    from adapters.engines.openai import OpenAIAdapter

    return [OpenAIAdapter(url, name=name) for name, url in endpoints.items()]


def parse_engine_args(items: list[str]) -> dict[str, dict[str, str]]:
    """``["vllm:max_num_seqs=64", "own:block_size=16"]`` → ``{"vllm": {"max_num_seqs": "64"}, "own": {...}}``.

    Later items override earlier ones for the same key. Raises ValueError (one line) for an
    item not shaped ``ENGINE:key=value`` or an unknown engine.
    """
    def shape(item: str) -> ValueError:
        return ValueError(f"--engine-arg {item!r} is not ENGINE:key=value (e.g. vllm:max_num_seqs=64)")

    out: dict[str, dict[str, str]] = {}
    for item, (name, value) in zip(items, parse_pairs(items, shape)):
        m = _NAME_RE.fullmatch(name)
        if m is None or "\n" in value:  # one line: a value with a newline was never taken
            raise shape(item)
        engine = m["engine"]
        if engine not in _FACTORIES:
            raise ValueError(f"--engine-arg {item!r}: unknown engine {engine!r}: choose from {', '.join(ENGINE_NAMES)}")
        out.setdefault(engine, {})[m["key"]] = value
    return out
