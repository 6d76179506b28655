"""The naive baseline: static batching with Hugging Face ``model.generate``, as an OpenAI server.

``python -m adapters.shims.hf_static_server --model DIR --port P [--threads N --max-batch-size B
--batch-window-ms W --device cpu --dtype float32]``

Requests that arrive while the server is idle are collected into one batch (see
``openai_shim.BatchWorker``) and run as ONE ``generate`` call: left-padded ``input_ids``
``[batch, max_prompt_len]``; a streamer hands each step's new tokens ``[batch]`` to the
rows as soon as they exist. Per-row rules inside one ``generate``: a
:class:`RowEosMask` logits processor forbids EOS for rows that asked for ``ignore_eos``; a
:class:`RowsDone` stopping criterion marks a row finished once it hit its own ``max_tokens``
or EOS (``generate`` then pads it), so the call ends when its longest member ends.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

from adapters.shims.openai_shim import GenRequest, add_common_args, serve


class HFGenerateBackend:
    """``model.generate`` over a static batch (also the engine under DeepSpeed's CPU path).

    ``model_dir``: Hugging Face folder; ``device``: ``cpu``/``cuda``; ``dtype``: torch dtype name;
    ``threads``: ``torch.set_num_threads``. Raises ValueError for an unknown dtype.
    """

    model_label = "transformers generate (static batching)"

    def __init__(self, model_dir: str, device: str = "cpu", dtype: str = "float32", threads: int = 1) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(threads)
        if not hasattr(torch, dtype):
            raise ValueError(f"unknown --dtype {dtype!r}: use float32, bfloat16 or float16")
        self.torch = torch
        self.device = device
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).to(device).eval()
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_token_ids: set[int] = set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_token_ids)

    def generator(self) -> Any:
        """The object whose ``generate`` is called (DeepSpeed wraps the model)."""
        return self.model

    def generate_batch(self, batch: list[GenRequest], emit: Callable[[int, int], None], done: Callable[[int], bool]) -> None:
        """ONE ``generate`` over ``batch`` (see module docstring)."""
        torch = self.torch
        from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
        from transformers.generation.streamers import BaseStreamer

        n = len(batch)
        width = max(len(r.prompt_ids) for r in batch)
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, r in enumerate(batch):  # left padding: decoder-only generate appends on the right
            ids[i, width - len(r.prompt_ids):] = torch.tensor(r.prompt_ids)
            mask[i, width - len(r.prompt_ids):] = 1
        eos_list = sorted(self.eos_token_ids)
        no_eos_rows = [i for i, r in enumerate(batch) if r.ignore_eos]

        class RowEosMask(LogitsProcessor):
            def __call__(self, input_ids, scores):
                for i in no_eos_rows:
                    scores[i, eos_list] = -float("inf")
                return scores

        class RowsDone(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                return torch.tensor([done(i) for i in range(n)], dtype=torch.bool, device=input_ids.device)

        class RowStreamer(BaseStreamer):
            def __init__(self) -> None:
                self.prompt_seen = False

            def put(self, value):
                if not self.prompt_seen:  # the first call carries the prompt
                    self.prompt_seen = True
                    return
                for i, t in enumerate(value.reshape(-1).tolist()):
                    emit(i, int(t))

            def end(self):
                pass

        r0 = batch[0]
        sample = r0.temperature > 0
        kwargs: dict[str, Any] = {"do_sample": sample}
        if sample:
            kwargs.update(temperature=r0.temperature, top_p=r0.top_p)
            if r0.seed is not None:
                torch.manual_seed(r0.seed)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        with torch.inference_mode():
            self.generator().generate(
                input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                max_new_tokens=max(r.max_tokens for r in batch), eos_token_id=eos_list, pad_token_id=self.pad_id,
                logits_processor=LogitsProcessorList([RowEosMask()]), stopping_criteria=StoppingCriteriaList([RowsDone()]),
                streamer=RowStreamer(), **kwargs,
            )


def main(argv: list[str] | None = None) -> None:
    """Parse flags, load the model (before health turns 200), serve."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args(argv)
    backend = HFGenerateBackend(args.model, device=args.device, dtype=args.dtype, threads=args.threads)
    serve(backend, args)


if __name__ == "__main__":
    main()
