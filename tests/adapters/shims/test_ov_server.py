"""The OpenVINO GenAI shim (``adapters.shims.ov_server``) against a stub ``ContinuousBatchingPipeline``:
requests joining a running batch step by step, tokens streamed in the order the steps produced
them, EOS / max_tokens / stop strings, usage counts, a request the engine ignores, an engine
error, clients that leave (their requests stopped in the engine) and ``/v1/server_info``. No
OpenVINO needed; the real pipeline is tested in ``tests/adapters/engines/test_openvino.py``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from enum import Enum
from pathlib import Path
from types import SimpleNamespace

import aiohttp
import pytest

from adapters.shims.openai_shim import GenRequest, create_app
from adapters.shims.ov_server import OVBackend, StepWorker, effective_info, generation_config, kv_layout
from tests.adapters.shims.test_openai_shim import ScriptedTokenizer, _stream

EOS = 99


class Reason(Enum):
    NONE = 0
    STOP = 1
    LENGTH = 2


class Status(Enum):
    RUNNING = 0
    FINISHED = 1
    IGNORED = 2
    CANCEL = 3
    STOP = 4


class GenerationConfig(SimpleNamespace):
    """``openvino_genai.GenerationConfig``'s fields with its defaults."""

    def __init__(self) -> None:
        super().__init__(max_new_tokens=0, ignore_eos=False, eos_token_id=-1, stop_token_ids=set(), do_sample=False,
                         temperature=1.0, top_p=1.0, rng_seed=0)


GENAI = SimpleNamespace(GenerationConfig=GenerationConfig)


class StubHandle:
    def __init__(self, request_id: int, prompt: list[int], cfg: GenerationConfig) -> None:
        self.request_id, self.prompt, self.cfg = request_id, prompt, cfg
        self.queue: list[dict] = []
        self.status = Status.RUNNING
        self.generated: list[int] = []
        self.stopped = False

    def can_read(self) -> bool:
        return bool(self.queue)

    def read(self) -> dict:
        return self.queue.pop(0)

    def get_status(self) -> Status:
        return self.status

    def stop(self) -> None:
        self.stopped = True
        self.status = Status.STOP


class StubPipeline:
    """A continuous-batching engine in miniature: every ``step()`` gives each running request its
    next scripted token (by prompt length), applying the GenerationConfig's stop rules as
    OpenVINO does; ``report_eos``: whether the EOS token is in the reported ids; ``ignore_len``:
    prompts of this length are IGNORED (do not fit the KV cache)."""

    def __init__(self, scripts: dict[int, list[int]], report_eos: bool = True, ignore_len: int | None = None,
                 fail_at_step: int | None = None, chunk: int = 1, delay_s: float = 0.0) -> None:
        self.scripts, self.report_eos, self.ignore_len = scripts, report_eos, ignore_len
        self.fail_at_step, self.chunk, self.delay_s = fail_at_step, chunk, delay_s
        self.handles: list[StubHandle] = []
        self.steps: list[list[int]] = []  # the request ids each step ran

    def add_request(self, request_id, input_ids, cfg) -> StubHandle:
        h = StubHandle(request_id, list(input_ids), cfg)
        self.handles.append(h)
        return h

    def step(self) -> None:
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail_at_step is not None and len(self.steps) == self.fail_at_step:
            self.steps.append([])
            raise RuntimeError("Exception from src/inference: out of memory (stub)")
        ran = []
        for h in self.handles:
            if h.status != Status.RUNNING:
                continue
            ran.append(h.request_id)
            if len(h.prompt) == self.ignore_len:
                h.status = Status.IGNORED
                continue
            new, reason = [], Reason.NONE
            for _ in range(self.chunk):
                script = self.scripts.get(len(h.prompt), [0, 1, 2, EOS])
                tok = script[len(h.generated)] if len(h.generated) < len(script) else 25
                h.generated.append(tok)
                if tok in h.cfg.stop_token_ids:
                    reason = Reason.STOP
                    if self.report_eos:
                        new.append(tok)
                    break
                new.append(tok)
                if len(h.generated) >= h.cfg.max_new_tokens:
                    reason = Reason.LENGTH
                    break
            h.queue.append({0: SimpleNamespace(generated_ids=new, finish_reason=reason)})
            if reason != Reason.NONE:
                h.status = Status.FINISHED
        self.steps.append(ran)

    def get_metrics(self):
        return SimpleNamespace(requests=len(self.handles), scheduled_requests=1, cache_usage=12.5)


def make_worker(pipe: StubPipeline) -> StepWorker:
    backend = OVBackend(pipe, GENAI, lambda ids: list(ids), ScriptedTokenizer(), {EOS}, {})
    return StepWorker(pipe, backend.make_request, {EOS})


def row(loop, prompt_len: int, max_tokens: int = 10, **kw) -> GenRequest:
    return GenRequest(list(range(prompt_len)), max_tokens=max_tokens, loop=loop, out=asyncio.Queue(), **kw)


def drain(req: GenRequest, loop) -> list[tuple]:
    loop.run_until_complete(asyncio.sleep(0))
    items = []
    while not req.out.empty():
        items.append(req.out.get_nowait())
    return items


@pytest.fixture
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


# ---------------------------------------------------------------------------------------------
# the stepping worker
# ---------------------------------------------------------------------------------------------
def test_tokens_stream_step_by_step_and_requests_join_a_running_batch(loop):
    pipe = StubPipeline({2: [7, 4, 11, EOS], 3: [1, 24, 4, 11, 11]})
    worker = make_worker(pipe)
    a = row(loop, 2)
    worker.submit(a)
    worker.run_once()
    assert drain(a, loop) == [("token", 7)]  # handed over right after the step that made it
    b = row(loop, 3, max_tokens=3)
    worker.submit(b)  # joins while a runs
    worker.run_once()
    assert drain(a, loop) == [("token", 4)] and drain(b, loop) == [("token", 1)]
    worker.run_once()
    worker.run_once()
    assert drain(a, loop) == [("token", 11), ("done", "stop")] and a.generated == [7, 4, 11, EOS]  # EOS counted
    assert drain(b, loop) == [("token", 24), ("token", 4), ("done", "length")]
    assert pipe.steps == [[0], [0, 1], [0, 1], [0, 1]] and worker.active == {}
    cfg = pipe.handles[1].cfg
    assert cfg.max_new_tokens == 3 and cfg.stop_token_ids == {EOS} and cfg.do_sample is False


def test_an_eos_the_engine_does_not_report_is_counted_once(loop):
    pipe = StubPipeline({2: [7, 4, EOS]}, report_eos=False)
    worker = make_worker(pipe)
    a = row(loop, 2)
    worker.submit(a)
    for _ in range(3):
        worker.run_once()
    assert drain(a, loop) == [("token", 7), ("token", 4), ("done", "stop")] and a.generated == [7, 4, EOS]


def test_several_tokens_in_one_step_keep_their_order(loop):
    pipe = StubPipeline({2: [7, 4, 11, 14, EOS]}, chunk=3)
    worker = make_worker(pipe)
    a = row(loop, 2)
    worker.submit(a)
    worker.run_once()
    worker.run_once()
    assert drain(a, loop) == [("token", 7), ("token", 4), ("token", 11), ("token", 14), ("done", "stop")]


def test_ignore_eos_and_stop_token_ids_reach_the_engine(loop):
    pipe = StubPipeline({2: [EOS, 5, EOS, 6]})
    worker = make_worker(pipe)
    a = row(loop, 2, max_tokens=4, ignore_eos=True)
    b = row(loop, 2, max_tokens=9, stop_token_ids=frozenset({5}))
    worker.submit(a)
    worker.run_once()
    cfg = pipe.handles[0].cfg
    assert cfg.ignore_eos is True and cfg.stop_token_ids == set() and cfg.eos_token_id == EOS
    for _ in range(3):
        worker.run_once()
    assert drain(a, loop) == [("token", EOS), ("token", 5), ("token", EOS), ("token", 6), ("done", "length")]
    sampled = generation_config(GENAI, row(loop, 1, temperature=0.7, top_p=0.9, seed=3), {EOS})
    assert sampled.do_sample is True and sampled.temperature == 0.7 and sampled.top_p == 0.9 and sampled.rng_seed == 3
    assert generation_config(GENAI, b, {EOS}).stop_token_ids == {5, EOS}


def test_a_cancelled_request_is_stopped_in_the_engine(loop):
    pipe = StubPipeline({2: list(range(20))})
    worker = make_worker(pipe)
    a, b = row(loop, 2, max_tokens=20), row(loop, 3)
    worker.submit(a)
    worker.submit(b)
    worker.run_once()
    a.cancelled = True  # a stop string matched, or the client left
    worker.run_once()
    assert pipe.handles[0].stopped and 0 not in worker.active and pipe.steps[-1] == [1]
    late = row(loop, 4)
    late.cancelled = True
    worker.submit(late)
    worker.run_once()
    assert len(pipe.handles) == 2  # a request cancelled before it started never reaches the engine


def test_ignored_request_and_engine_error_are_reported_and_serving_goes_on(loop):
    pipe = StubPipeline({}, ignore_len=5)
    worker = make_worker(pipe)
    big, ok = row(loop, 5), row(loop, 2)
    worker.submit(big)
    worker.submit(ok)
    worker.run_once()
    kind, message = drain(big, loop)[0]
    assert kind == "error" and "does not fit in the KV cache" in message and big.finish_reason == "error"
    assert drain(ok, loop) == [("token", 0)]
    failing = StubPipeline({}, fail_at_step=1)
    worker = make_worker(failing)
    x = row(loop, 2)
    worker.submit(x)
    worker.run_once()
    with pytest.raises(RuntimeError):  # run_once lets it through; the thread's loop reports it instead
        worker.run_once()
    worker.active.clear()
    threaded = make_worker(StubPipeline({}, fail_at_step=0))
    y, z = row(loop, 2), row(loop, 2)
    threaded.start()
    threaded.submit(y)
    _wait_for(lambda: y.finish_reason is not None)
    threaded.submit(z)  # the worker keeps serving after an engine error
    _wait_for(lambda: z.finish_reason is not None)
    threaded.stop()
    kind, message = drain(y, loop)[0]
    assert kind == "error" and "out of memory (stub)" in message and y.finish_reason == "error"
    assert z.finish_reason == "stop" and drain(z, loop)[-1] == ("done", "stop")


def _wait_for(cond, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# ---------------------------------------------------------------------------------------------
# the OpenAI front-end over the worker
# ---------------------------------------------------------------------------------------------
async def test_openai_streams_usage_finish_reasons_and_server_info():
    import uvicorn

    from adapters.runtime.process import find_free_port

    pipe = StubPipeline({2: [7, 4, 11, 11, 14, EOS], 3: [1, 24, 4, EOS], 4: [0, 1, 2, 3, 4, 5, 6, 7]}, delay_s=0.002)
    backend = OVBackend(pipe, GENAI, lambda ids: list(ids), ScriptedTokenizer(), {EOS}, {})

    class SC:
        max_num_seqs, max_num_batched_tokens, enable_prefix_caching, dynamic_split_fuse = 256, 256, True, True

    info = effective_info(SC(), kv_layout(1 << 30, 46_080), {"INFERENCE_NUM_THREADS": 1,
                                                            "INFERENCE_PRECISION_HINT": "f32"}, 2048, {})
    worker = StepWorker(pipe, backend.make_request, {EOS})
    worker.start()
    app = create_app(backend, worker, "ov-model", max_model_len=2048, info=lambda: info,
                     stats=lambda: {**worker.stats(), **backend.metrics()})
    port = find_free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            comp = {"model": "ov-model", "prompt": "ab", "max_tokens": 10, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}}
            chat = {"model": "ov-model", "messages": [{"role": "user", "content": "xyz"}], "max_tokens": 10,
                    "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
            stop = {**comp, "prompt": "abcd", "stop": ["def"], "max_tokens": 500}
            (c1, u1, f1), (c2, u2, f2), (c3, u3, f3) = await asyncio.gather(
                _stream(s, base + "/v1/completions", comp), _stream(s, base + "/v1/chat/completions", chat),
                _stream(s, base + "/v1/completions", stop))
            assert c1 == ["h", "e", "l", "l", "o", "[DONE]"] and f1 == "stop"
            assert u1 == {"prompt_tokens": 2, "completion_tokens": 6, "total_tokens": 8}  # EOS counted
            assert c2 == ["b", "y", "e", "[DONE]"] and f2 == "stop" and u2["completion_tokens"] == 4
            assert "".join(c3[:-1]) == "abc" and f3 == "stop"  # the stop string ends it; the engine stops it
            async with s.post(base + "/v1/completions", json={**comp, "stream": False, "max_tokens": 3}) as r:
                body = await r.json()
                assert body["choices"][0]["text"] == "hel" and body["choices"][0]["finish_reason"] == "length"
                assert body["usage"]["completion_tokens"] == 3
            async with s.post(base + "/v1/completions", json={**comp, "prompt": "x" * 3000}) as r:
                assert r.status == 400  # longer than max_model_len
            async with s.get(base + "/v1/server_info") as r:
                got = await r.json()
            assert got["batching"] == "continuous (dynamic split-fuse)" and got["kv_capacity_tokens"] == 23_296
            assert got["max_num_seqs"] == 256 and got["dtype"] == "float32" and got["prefix_caching"] is True
            async with s.get(base + "/shim/stats") as r:
                stats = await r.json()
            assert stats["requests_added"] >= 4 and stats["steps_run"] >= 6 and stats["cache_usage"] == 12.5
        stopped = [h for h in pipe.handles if len(h.prompt) == 4]
        assert stopped and stopped[0].stopped  # the stop-string request was ended in the engine
        assert max(len(r) for r in pipe.steps) >= 2  # requests shared steps (continuous batching)
    finally:
        server.should_exit = True
        await task
        worker.stop()


def test_shim_modules_import_without_the_engine():
    """``ov_server`` / ``ov_export`` import with the standard library and the shared front-end
    only (OpenVINO, numpy, torch and transformers are imported when the server/exporter runs)."""
    code = (
        "import importlib.abc, sys\n"
        "BLOCK = {'torch', 'transformers', 'numpy', 'openvino', 'openvino_genai', 'optimum', 'harness'}\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in BLOCK:\n"
        "            raise ImportError('not here: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import adapters.shims.ov_server, adapters.shims.ov_export\n"
    )
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr


class GilHoldingPipeline(StubPipeline):
    """Each step busy-waits (holding the GIL, as OpenVINO's ``step()`` does) and records its start."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.step_starts: list[float] = []

    def step(self) -> None:
        self.step_starts.append(time.perf_counter())
        end = time.perf_counter() + 0.02
        while time.perf_counter() < end:
            pass
        super().step()


async def test_each_steps_tokens_are_delivered_before_the_next_step_starts(monkeypatch):
    """The worker waits for the event loop between steps: a token is in its stream's hands before
    the engine starts the next step (else a step that holds the GIL delays every chunk by a step)."""
    from adapters.shims import ov_server

    monkeypatch.setattr(ov_server, "FLUSH_TIMEOUT_S", 5.0)  # a loaded CI machine never times the wait out
    pipe = GilHoldingPipeline({2: [7, 4, 11, 14, 3, EOS]})
    worker = make_worker(pipe)
    loop = asyncio.get_running_loop()
    a = GenRequest([0, 1], max_tokens=10, loop=loop, out=asyncio.Queue())
    received: list[float] = []
    old = sys.getswitchinterval()
    sys.setswitchinterval(1.0)  # a busy step keeps the GIL, as a C++ step that does not release it
    try:
        worker.start()
        worker.submit(a)
        while True:
            kind, _ = await asyncio.wait_for(a.out.get(), 10)
            received.append(time.perf_counter())
            if kind != "token":
                break
    finally:
        sys.setswitchinterval(old)
        worker.stop()
    assert len(received) == 6 and len(pipe.step_starts) >= 6
    for got, next_step in zip(received, pipe.step_starts[1:]):
        assert got < next_step  # delivered between the step that made it and the next one
