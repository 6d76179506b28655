"""Chaos trial: inject the faults of issue 16 into real `bench` runs and count what survives.

    python benchmarks/chaos.py [--only NAME,...] [--list]

Every case runs the real `bench` command line in a child process (loopback only: the reference
engine on the embedded model, or `--engine openai` against an evil server this script serves on
127.0.0.1), injects one fault at one phase, and then checks, with bounded waits:

- the harness exited within its deadline (never hung);
- **no orphan**: 10 s after it exited, no process carrying the case's tag is alive (every child
  of `bench` inherits a ``CHAOS_TAG`` environment variable, read back from /proc, so an engine
  server reparented to init is still found);
- nothing measured was lost: every request record on disk at the moment of the fault is still
  in ``requests.jsonl``, and the run folder can be read (``bench results show`` exits 0,
  summarising a killed run from its records);
- no traceback on the console;
- the case's own expectation (the engine failed with the right reason, an evil server's
  failures are counted with their class, a mostly failing engine is never ranked).

It prints one line per case and ``survived S / T, orphans O``. Bounded: each case has a hard
deadline (the child is SIGKILLed and the case counts as failed when it passes). About 6-8
minutes on the 2-core reference machine; run it alone (it measures nothing, but engines are
started).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
BENCH = [str(Path(sys.executable).parent / "bench")]
OWN_ARGS = ["--engine", "own", "--workload", "random", "--num-requests", "24", "--input-len", "32",
            "--output-len", "24", "--warmup", "0", "--no-equivalence", "--no-calibration", "--sequential-start"]
CASE_DEADLINE_S = 120.0


# ------------------------------------------------------------------------------------------
# an evil OpenAI-compatible server: /<mode>/v1/... misbehaves in one way per mode


def _sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _chunk(text: str | None, finish: str | None = None) -> bytes:
    return _sse({"id": "x", "object": "text_completion", "model": "evil",
                 "choices": [{"index": 0, "text": text or "", "finish_reason": finish}]})


def evil_app():
    from aiohttp import web

    seen = {"n": 0}

    async def models(request):
        return web.json_response({"object": "list", "data": [{"id": "evil", "object": "model"}]})

    async def complete(request):
        mode = request.match_info["mode"]
        seen["n"] += 1
        if mode == "http500":
            return web.json_response({"error": {"message": "internal error: worker died"}}, status=500)
        if mode == "http429":
            return web.json_response({"error": {"message": "rate limited: slow down"}}, status=429)
        if mode == "halfdead" and seen["n"] % 10 != 1:
            return web.json_response({"object": "error", "message": "EngineCore encountered an issue."}, status=500)
        if mode == "stall":
            await asyncio.sleep(3600)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if mode == "garbage":
            await resp.write(b"data: {not json at all\n\n")
            await resp.write(_chunk(None, "stop") + b"data: [DONE]\n\n")
        elif mode == "cut":
            await resp.write(_chunk("Hello"))
            await resp.write(_chunk(" wor"))
            request.transport.close()  # the connection drops mid-stream
            return resp
        elif mode == "nofinish":
            for word in ("a", " b", " c"):
                await resp.write(_chunk(word))
        elif mode == "notoken":
            await resp.write(_chunk("", "stop") + b"data: [DONE]\n\n")
        else:  # ok / halfdead's healthy request
            for word in ("a", " b", " c"):
                await resp.write(_chunk(word))
            await resp.write(_chunk(None, "length") + b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/{mode}/v1/models", models)
    app.router.add_post("/{mode}/v1/completions", complete)
    app.router.add_post("/{mode}/v1/chat/completions", complete)
    return app


class EvilServer:
    """The evil app on 127.0.0.1 in a background thread; ``url(mode)`` is a --base-url."""

    def __init__(self) -> None:
        from aiohttp import web

        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(evil_app())
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.port}/{mode}"


# ------------------------------------------------------------------------------------------
# processes and phases


def tagged(tag: str) -> list[int]:
    """Pids of live processes whose environment carries ``CHAOS_TAG=tag`` (zombies excluded)."""
    needle = f"CHAOS_TAG={tag}".encode()
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    out.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return out


def measured_lines(run_dir: Path) -> int:
    try:
        return sum(1 for line in (run_dir / "requests.jsonl").read_text().splitlines() if '"measured"' in line)
    except OSError:
        return 0


def wait_for(cond: Callable[[], bool], timeout_s: float, poll_s: float = 0.05) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(poll_s)
    return False


def own_server_pids(tag: str) -> list[int]:
    """The reference engine's server processes of a case (``own_engine`` in the command line)."""
    pids = []
    for pid in tagged(tag):
        try:
            if b"own_engine" in Path(f"/proc/{pid}/cmdline").read_bytes():
                pids.append(pid)
        except OSError:
            continue
    return pids


@dataclass
class Phase:
    """When to inject: ``ready(run_dir, tag)`` becomes true at the phase."""

    name: str
    ready: Callable[[Path, str], bool]


STARTUP = Phase("start-up", lambda d, tag: bool(own_server_pids(tag)) and measured_lines(d) == 0
                and (d / "logs" / "own.log").exists())
MEASURING = Phase("measurement", lambda d, tag: measured_lines(d) >= 3)
CALIBRATING = Phase("calibration", lambda d, tag: d.exists() and not (d / "logs" / "own.log").exists()
                    and bool(tagged(tag)))


@dataclass
class Case:
    name: str
    args: list[str]
    phase: Phase | None = None
    fault: Callable[[subprocess.Popen, str], None] | None = None
    expect: Callable[[Path, "Outcome"], str | None] = lambda d, o: None  # None = as expected, else why not
    exit_codes: tuple[int, ...] = (0, 1, 130, 143, 129, -9)


@dataclass
class Outcome:
    rc: int | None = None
    output: str = ""
    orphans: list[int] = field(default_factory=list)
    lost: int = 0
    readable: bool = False
    injected: bool = False
    problems: list[str] = field(default_factory=list)


def send(sig: int, twice: bool = False) -> Callable[[subprocess.Popen, str], None]:
    def fault(proc: subprocess.Popen, tag: str) -> None:
        proc.send_signal(sig)
        if twice:
            time.sleep(0.3)
            if proc.poll() is None:
                proc.send_signal(sig)
    return fault


def kill_engine(sig: int, then: int | None = None) -> Callable[[subprocess.Popen, str], None]:
    def fault(proc: subprocess.Popen, tag: str) -> None:
        for pid in own_server_pids(tag):
            try:
                os.killpg(os.getpgid(pid), sig)
            except OSError:
                pass
        if then is not None:
            time.sleep(0.5)
            proc.send_signal(then)
    return fault


def summary_engine(run_dir: Path, name: str) -> dict:
    try:
        return json.loads((run_dir / "summary.json").read_text())["engines"].get(name, {})
    except (OSError, ValueError, KeyError):
        return {}


def expect_failed_with(engine: str, *words: str) -> Callable[[Path, Outcome], str | None]:
    def check(run_dir: Path, outcome: Outcome) -> str | None:
        entry = summary_engine(run_dir, engine)
        text = json.dumps(entry)
        if entry.get("status") == "ok" and not (entry.get("metrics") or {}).get("requests_failed"):
            return f"{engine} recorded as healthy"
        missing = [w for w in words if w not in text]
        return f"{engine}'s entry lacks {missing}" if missing else None
    return check


def expect_not_ranked(engine: str) -> Callable[[Path, Outcome], str | None]:
    def check(run_dir: Path, outcome: Outcome) -> str | None:
        try:
            rec = json.loads((run_dir / "recommendation.json").read_text())
        except (OSError, ValueError):
            return None  # no recommendation written: nothing was ranked
        if any(row.get("engine") == engine for row in rec.get("ranking", [])):
            return f"{engine} was ranked"
        return None
    return check


def both(*checks: Callable[[Path, Outcome], str | None]) -> Callable[[Path, Outcome], str | None]:
    def check(run_dir: Path, outcome: Outcome) -> str | None:
        for c in checks:
            if (why := c(run_dir, outcome)) is not None:
                return why
        return None
    return check


def cases(evil: EvilServer) -> list[Case]:
    openai = lambda mode, *extra: ["--engine", "openai", "--base-url", evil.url(mode), "--model", "evil",  # noqa: E731
                                   "--workload", "random", "--num-requests", "10", "--input-len", "8",
                                   "--output-len", "3", "--warmup", "0", "--no-equivalence", "--no-calibration",
                                   *extra]
    calib = [a for a in OWN_ARGS if a != "--no-calibration"]
    interrupted = expect_failed_with("own", "interrupted")
    return [
        Case("SIGINT at start-up", OWN_ARGS, STARTUP, send(signal.SIGINT)),
        Case("SIGINT while measuring", OWN_ARGS, MEASURING, send(signal.SIGINT), interrupted),
        Case("double SIGINT while measuring", OWN_ARGS, MEASURING, send(signal.SIGINT, twice=True)),
        Case("SIGTERM at start-up", OWN_ARGS, STARTUP, send(signal.SIGTERM)),
        Case("SIGTERM while measuring", OWN_ARGS, MEASURING, send(signal.SIGTERM),
             expect_failed_with("own", "interrupted by SIGTERM")),
        Case("SIGHUP while measuring", OWN_ARGS, MEASURING, send(signal.SIGHUP),
             expect_failed_with("own", "interrupted by SIGHUP")),
        Case("SIGKILL at start-up", OWN_ARGS, STARTUP, send(signal.SIGKILL)),
        Case("SIGKILL while measuring", OWN_ARGS, MEASURING, send(signal.SIGKILL),
             expect_failed_with("own", "killed")),
        Case("SIGINT during calibration", calib, CALIBRATING, send(signal.SIGINT)),
        Case("SIGKILL during calibration", calib, CALIBRATING, send(signal.SIGKILL)),
        Case("engine SIGKILLed while measuring", OWN_ARGS, MEASURING, kill_engine(signal.SIGKILL),
             expect_failed_with("own", "exited")),
        Case("engine SIGKILLed at start-up", OWN_ARGS, STARTUP, kill_engine(signal.SIGKILL),
             expect_failed_with("own")),
        Case("engine frozen while measuring", [*OWN_ARGS, "--request-timeout", "4"], MEASURING,
             kill_engine(signal.SIGSTOP), expect_failed_with("own")),
        Case("engine killed, then harness SIGKILLed", OWN_ARGS, MEASURING,
             kill_engine(signal.SIGKILL, then=signal.SIGKILL)),
        Case("engine frozen, then harness SIGKILLed", OWN_ARGS, MEASURING,
             kill_engine(signal.SIGSTOP, then=signal.SIGKILL)),
        Case("endpoint answers 500", openai("http500"), expect=expect_failed_with("openai", "http_500", "worker died")),
        Case("endpoint answers 429", openai("http429"), expect=expect_failed_with("openai", "http_429", "rate limited")),
        Case("endpoint cuts streams", openai("cut"), expect=expect_failed_with("openai")),
        Case("endpoint sends garbage SSE", openai("garbage"), expect=expect_failed_with("openai")),
        Case("endpoint never finishes a stream", openai("nofinish"), expect=expect_failed_with("openai", "incomplete")),
        Case("endpoint sends no token", openai("notoken"), expect=expect_failed_with("openai")),
        Case("endpoint fails 90% of requests", openai("halfdead"),
             expect=both(expect_failed_with("openai", "http_500"), expect_not_ranked("openai"))),
        Case("endpoint stalls", openai("stall", "--request-timeout", "3"),
             expect=expect_failed_with("openai", "timeout")),
        Case("endpoint refuses connections", ["--engine", "openai", "--base-url", "http://127.0.0.1:9", "--model", "x",
                                              "--workload", "random", "--num-requests", "4", "--no-calibration"],
             expect=lambda d, o: None if o.rc in (1, 2) and "Traceback" not in o.output else f"exit {o.rc}"),
    ]


# ------------------------------------------------------------------------------------------


def run_case(index: int, case: Case, work: Path) -> Outcome:
    tag = f"chaos-{os.getpid()}-{index}"
    run_dir = work / f"case{index}"
    env = {**os.environ, "CHAOS_TAG": tag, "BENCH_STATE_DIR": str(work / "state"), "COLUMNS": "200"}
    cmd = [*BENCH, "run", *case.args, "-o", str(work), "--run-id", run_dir.name]
    out = Outcome()
    log = (work / f"case{index}.out").open("w+")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    t0 = time.monotonic()
    kept = 0
    if case.phase is not None and case.fault is not None:
        reached = wait_for(lambda: proc.poll() is not None or case.phase.ready(run_dir, tag), CASE_DEADLINE_S / 2)
        if reached and proc.poll() is None:
            kept = measured_lines(run_dir)
            case.fault(proc, tag)
            out.injected = True
        else:
            out.problems.append(f"phase {case.phase.name} not reached")
    else:
        out.injected = True
    try:
        proc.wait(timeout=max(1.0, CASE_DEADLINE_S - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        out.problems.append(f"harness still running after {CASE_DEADLINE_S:.0f} s: killed")
        proc.kill()
        proc.wait()
    out.rc = proc.returncode
    wait_for(lambda: not tagged(tag), 10.0, 0.2)
    out.orphans = tagged(tag)
    for pid in out.orphans:  # leave nothing behind for the next case
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    log.seek(0)
    out.output = log.read()
    log.close()
    if out.orphans:
        out.problems.append(f"{len(out.orphans)} orphan process(es)")
    if "Traceback" in out.output:
        out.problems.append("traceback on the console")
    if out.rc not in case.exit_codes:
        out.problems.append(f"exit code {out.rc}")
    if run_dir.exists() and ((run_dir / "requests.jsonl").exists() or (run_dir / "summary.json").exists()):
        shown = subprocess.run([*BENCH, "results", "show", str(run_dir)], capture_output=True, text=True, env=env,
                               timeout=120, cwd=ROOT)
        out.readable = shown.returncode == 0
        if not out.readable:
            out.problems.append(f"results show exit {shown.returncode}: {(shown.stdout + shown.stderr).strip()[-160:]}")
        out.lost = max(0, kept - measured_lines(run_dir))
        if out.lost:
            out.problems.append(f"{out.lost} measured record(s) lost")
        if (why := case.expect(run_dir, out)) is not None:
            out.problems.append(why)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated case numbers (1-based) to run")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (run folders and console logs)")
    args = ap.parse_args()
    evil = EvilServer()
    all_cases = cases(evil)
    if args.list:
        for i, case in enumerate(all_cases, 1):
            print(f"{i:2d}. {case.name}")
        return 0
    chosen = range(1, len(all_cases) + 1)
    if args.only:
        chosen = [int(x) for x in args.only.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-chaos-"))
    survived = orphans = 0
    t_all = time.monotonic()
    for i in chosen:
        case = all_cases[i - 1]
        t0 = time.monotonic()
        out = run_case(i, case, work)
        ok = not out.problems
        survived += ok
        orphans += len(out.orphans)
        verdict = "survived" if ok else "FAILED: " + "; ".join(out.problems)
        print(f"{i:2d}. {case.name:<40} exit {out.rc!s:>4}  {time.monotonic() - t0:5.1f} s  {verdict}", flush=True)
    print(f"\nsurvived {survived} / {len(chosen)}, orphans {orphans}  ({time.monotonic() - t_all:.0f} s; "
          f"work folder {work}{'' if args.keep else ', removed'})")
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0 if survived == len(chosen) and not orphans else 1


if __name__ == "__main__":
    sys.exit(main())
