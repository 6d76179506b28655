"""DeepSpeed's CPU inference path as an OpenAI server: ``deepspeed.init_inference`` around the
Hugging Face model, ``generate`` underneath (static batches, exactly like the transformers shim).

``python -m adapters.shims.ds_server --model DIR --port P [--threads N ...]`` - runs in
``.engines/deepspeed/venv`` (``DS_BUILD_OPS=0 pip install deepspeed==0.19.8``).
``replace_with_kernel_inject=False``: DeepSpeed's fused inference kernels are CUDA-only, so on
CPU it keeps the Hugging Face modules (and adds tensor-parallel sharding when world size > 1).
Reported as "deepspeed (CPU init_inference, HF generate underneath)".
"""

from __future__ import annotations

import argparse
import os

from adapters.shims.hf_static_server import HFGenerateBackend
from adapters.shims.openai_shim import add_common_args, serve


class DeepSpeedBackend(HFGenerateBackend):
    """:class:`HFGenerateBackend` whose model is wrapped by ``deepspeed.init_inference``."""

    model_label = "deepspeed init_inference (HF generate underneath)"

    def __init__(self, model_dir: str, dtype: str = "float32", threads: int = 1) -> None:
        # A single-process "world": DeepSpeed initialises torch.distributed (gloo on CPU).
        for k, v in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.items():
            os.environ.setdefault(k, v)
        if "MASTER_PORT" not in os.environ:
            import socket

            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(s.getsockname()[1])
        super().__init__(model_dir, device="cpu", dtype=dtype, threads=threads)
        import deepspeed

        # max_tokens bounds prompt + output per request (DeepSpeed's default, 1024, rejected the
        # agentic workload's longer turns); use the model's context length like every other engine.
        max_len = int(getattr(self.model.config, "max_position_embeddings", 0) or 4096)
        self.engine = deepspeed.init_inference(self.model, dtype=getattr(self.torch, dtype),
                                               replace_with_kernel_inject=False, max_tokens=max_len)
        self.deepspeed_version = deepspeed.__version__
        from deepspeed.accelerator import get_accelerator

        print(f"deepspeed {deepspeed.__version__} init_inference ready: accelerator={get_accelerator().device_name()}, "
              f"engine={type(self.engine).__name__}, kernel_inject=False", flush=True)

    def generator(self):
        """DeepSpeed's InferenceEngine (its ``generate`` forwards to the wrapped module)."""
        return self.engine if hasattr(self.engine, "generate") else self.engine.module


def main(argv: list[str] | None = None) -> None:
    """Parse flags, build the DeepSpeed engine (before health turns 200), serve."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args(argv)
    serve(DeepSpeedBackend(args.model, dtype=args.dtype, threads=args.threads), args)


if __name__ == "__main__":
    main()
