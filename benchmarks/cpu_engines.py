"""The CPU engines side by side (issue 28): own, vLLM-CPU, SGLang-CPU, llama.cpp f32, OpenVINO f32
and llama.cpp q8_0 (other numerics, flagged), one client, one workload, one model, driven by
``bench run`` exactly as a user runs it, read back from the stored results (``summary.json``,
``ladder.json``; never the printed text).

Two workloads:

- **chat, saturated**: ShareGPT prompts, ``--requests`` (48) sent at once with ``--concurrency``
  (16) in flight, ``--repeats`` (2) interleaved runs of every engine (A B C, C B A), each engine
  freshly started; per engine output tok/s, TTFT p99 and TPOT p99 with their intervals over the
  repeats (the harness's own: bootstrap over repeats, then requests within each).
- **agentic, the main job**: the capacity at the default SLO with its 95 % interval, and the
  metrics at that capacity point, from a ``make bench`` run folder given with ``--agentic-run``
  (its engines are the ones ``make bench`` measures: llama.cpp q8_0 is not among them).

Run (about 20 minutes on the 2-core reference machine for the chat runs; let nothing else run):

    .venv/bin/python benchmarks/cpu_engines.py --agentic-run results/<make bench run> [--out DIR]
    .venv/bin/python benchmarks/cpu_engines.py --chat-run DIR/cpu-chat --agentic-run ...   # print only
    .venv/bin/python benchmarks/cpu_engines.py --dry-run

Exit status 0 when the table was printed, 1 when the chat run failed, 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

ENGINES = ("own", "vllm", "sglang", "llamacpp", "openvino", "llamacpp_q8_0")
OTHER_NUMERICS = {"llamacpp_q8_0": "q8_0 weights: other numerics"}


def chat_command(out: Path, engines: str, requests: int, concurrency: int, repeats: int) -> list[str]:
    """The one ``bench run`` of the chat table."""
    bench = str(Path(sys.executable).with_name("bench"))
    return [bench, "run", "--engine", engines, "--workload", "chat", "--num-requests", str(requests), "--request-rate",
            "inf", "--max-concurrency", str(concurrency), "--repeats", str(repeats), "--threads", "1",
            "--no-feature-probes", "--no-calibration", "--no-equivalence", "--fidelity-prompts", "0", "-o", str(out),
            "--run-id", "cpu-chat"]


def _cell(engine: dict[str, Any], key: str, digits: int = 1) -> str:
    """``123.4 [120.1–126.0]`` from an engine's ``intervals`` (the metric's point and bounds)."""
    iv = (engine.get("intervals") or {}).get(key)
    if not iv:
        return "–"
    return f"{iv['point']:,.{digits}f} [{iv['low']:,.{digits}f}–{iv['high']:,.{digits}f}]"


def chat_rows(run: Path) -> dict[str, dict[str, str]]:
    """Per engine of the chat run: output tok/s, TTFT p99, TPOT p99 (with intervals), status."""
    summary = json.loads((run / "summary.json").read_text())
    out = {}
    for name, e in summary["engines"].items():
        ok = e.get("status") == "ok"
        out[name] = {"chat_tps": _cell(e, "output_throughput") if ok else e.get("status", "?"),
                     "chat_ttft": _cell(e, "ttft_ms.p99", 0) if ok else "–",
                     "chat_tpot": _cell(e, "tpot_ms.p99") if ok else "–"}
    return out


def agentic_rows(run: Path) -> dict[str, dict[str, str]]:
    """Per engine of a main-job run: capacity at the SLO with its interval, TTFT p99 and TPOT p99
    at its capacity point (``summary.json``'s entry holds that point's metrics)."""
    ladder = json.loads((run / "ladder.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    out = {}
    for name, e in ladder["engines"].items():
        cap = e.get("capacity")
        if not cap or cap.get("never_met"):
            continue
        ge = "≥ " if cap.get("open") else ""
        lo, hi = cap.get("interval") or (None, None)
        shown = f"{ge}{cap['output_tps']:,.1f}" + (f" [{lo:,.1f}–{hi:,.1f}]" if lo is not None else "")
        entry = summary["engines"].get(name, {})
        out[name] = {"agentic_cap": shown, "agentic_ttft": _cell(entry, "ttft_ms.p99", 0),
                     "agentic_tpot": _cell(entry, "tpot_ms.p99")}
    return out


def table(chat: dict[str, dict[str, str]], agentic: dict[str, dict[str, str]], slos: str) -> str:
    head = ("| engine | chat: output tok/s | chat: TTFT p99 ms | chat: TPOT p99 ms | agentic: capacity at the SLO, "
            f"output tok/s ({slos}) | agentic: TTFT p99 ms at capacity | agentic: TPOT p99 ms at capacity |\n"
            "|---|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for name in [n for n in ENGINES if n in chat or n in agentic]:
        c, a = chat.get(name, {}), agentic.get(name, {})
        label = name + (f" ({OTHER_NUMERICS[name]})" if name in OTHER_NUMERICS else "")
        lines.append(f"| {label} | {c.get('chat_tps', '–')} | {c.get('chat_ttft', '–')} | {c.get('chat_tpot', '–')} | "
                     f"{a.get('agentic_cap', '– (not in make bench)')} | {a.get('agentic_ttft', '–')} | "
                     f"{a.get('agentic_tpot', '–')} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agentic-run", type=Path, help="a make bench run folder (ladder.json) for the agentic columns")
    ap.add_argument("--chat-run", type=Path, help="an existing chat run folder: print only")
    ap.add_argument("--out", type=Path, default=Path("results/cpu-engines"), help="where the chat run is written")
    ap.add_argument("--engines", default=",".join(ENGINES), help="engines of the chat run, comma-separated")
    ap.add_argument("--requests", type=int, default=48, help="chat requests per repeat (sent at once)")
    ap.add_argument("--concurrency", type=int, default=16, help="chat requests in flight")
    ap.add_argument("--repeats", type=int, default=2, help="interleaved repeats of every engine")
    ap.add_argument("--dry-run", action="store_true", help="print the command and exit")
    args = ap.parse_args()
    if min(args.requests, args.concurrency, args.repeats) < 1:
        print("error: --requests, --concurrency and --repeats must be 1 or more", file=sys.stderr)
        return 2
    if args.agentic_run is not None and not all((args.agentic_run / f).is_file() for f in ("ladder.json", "summary.json")):
        print(f"error: {args.agentic_run} has no ladder.json and summary.json: give a make bench (bench run) run folder",
              file=sys.stderr)
        return 2
    if args.chat_run is not None and not (args.chat_run / "summary.json").is_file():
        print(f"error: {args.chat_run} has no summary.json: give the chat run's folder (DIR/cpu-chat)", file=sys.stderr)
        return 2
    cmd = chat_command(args.out, args.engines, args.requests, args.concurrency, args.repeats)
    if args.dry_run:
        print(shlex.join(cmd))
        return 0
    run = args.chat_run
    if run is None:
        print("+", shlex.join(cmd), flush=True)
        log = args.out / "cpu-chat.console.log"
        args.out.mkdir(parents=True, exist_ok=True)
        with log.open("w") as f:
            rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
        run = args.out / "cpu-chat"
        if rc != 0 or not (run / "summary.json").is_file():
            print(f"error: the chat run failed (exit {rc}); its console: {log}", file=sys.stderr)
            return 1
    try:
        chat = chat_rows(run)
        agentic, slos = {}, "no agentic run given"
        if args.agentic_run is not None:
            agentic = agentic_rows(args.agentic_run)
            slos = ", ".join(f"{k} ≤ {v:g} ms"
                             for k, v in json.loads((args.agentic_run / "ladder.json").read_text())["slos"].items())
    except (ValueError, KeyError, TypeError) as exc:
        print(f"error: a run folder's summary.json or ladder.json is not one bench run wrote ({exc!r})", file=sys.stderr)
        return 2
    print(f"chat run {run} (its manifest holds the workload); [brackets]: the harness's intervals over the repeats")
    print(table(chat, agentic, slos))
    return 0


if __name__ == "__main__":
    sys.exit(main())
