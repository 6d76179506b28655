"""What differed between two stored runs, read from their manifests (``bench compare``, issue 41):
per engine its version, engine args, threads and launch command (ports and this checkout's paths
aside); the harness version and commit; the model (its content digest, else its name and
architecture); the hardware; the workload (its spec, field by field) and the SLOs. Each
difference is one line, ``what: A → B``; a fact one run did not record is not compared (an older
run), and says so once.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from .schema import Manifest

PORT = re.compile(r"(--port[ =])\d+")
SHOWN = 60  # characters of a value shown before it is cut


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def _line(what: str, a: Any, b: Any) -> str | None:
    if a is None or b is None or a == b:
        return None
    return f"{what}: {_short(a)} → {_short(b)}"


def launch_command(command: str | None) -> str | None:
    """The launch command without its port (each run picks a free one)."""
    return PORT.sub(r"\1PORT", command) if command else command


def engine_differences(a: Manifest, b: Manifest, engine: str) -> list[str]:
    """``engine``'s version, engine args, threads and launch command, where they differ."""
    fa, fb = a.engines.get(engine), b.engines.get(engine)
    if fa is None or fb is None:
        return []
    found = [_line(f"{engine} version", fa.version, fb.version),
             _line(f"{engine} engine args", fa.engine_args or {}, fb.engine_args or {}),
             _line(f"{engine} threads", fa.threads, fb.threads)]
    if not found[1]:  # the args are the same: a changed command line is another difference (a flag the harness set)
        found.append(_line(f"{engine} command", launch_command(fa.command), launch_command(fb.command)))
    return [f for f in found if f]


def _model(m: Manifest) -> tuple[str | None, str | None]:
    model = m.model
    if model is None:
        return None, None
    return model.digest, f"{model.name} ({model.architecture}, {model.dtype})"


def run_differences(a: Manifest, b: Manifest, engines: Iterable[str]) -> list[str]:
    """Every difference between runs A and B (module docstring), engines first."""
    out = [line for name in engines for line in engine_differences(a, b, name)]
    out += [f for f in (_line("harness version", a.harness_version, b.harness_version),
                        _line("harness commit", (a.git_sha or "")[:10] or None, (b.git_sha or "")[:10] or None)) if f]
    (da, na), (db, nb) = _model(a), _model(b)
    out += [f for f in (_line("model", na, nb), _line("model digest", (da or "")[:16] or None, (db or "")[:16] or None)) if f]
    ha, hb = a.hardware, b.hardware
    if ha is not None and hb is not None:
        out += [f for f in (_line("hardware", ha.name, hb.name), _line("CPU", ha.cpu_model, hb.cpu_model),
                            _line("devices", ha.num_devices, hb.num_devices)) if f]
    wa, wb = a.workload or {}, b.workload or {}
    out += [f for k in sorted(set(wa) | set(wb)) if k != "tokenizer" and (f := _line(f"workload {k}", wa.get(k), wb.get(k)))]
    if (line := _line("SLOs", a.slos or None, b.slos or None)) is not None:
        out.append(line)
    return out


def unrecorded(a: Manifest, b: Manifest) -> list[str]:
    """The facts one of the runs did not record (so not compared)."""
    out = []
    for what, va, vb in (("model digest", a.model and a.model.digest, b.model and b.model.digest),
                         ("harness commit", a.git_sha, b.git_sha)):
        if not va or not vb:
            out.append(what)
    return out


SOURCES = ("trace", "trajectories")  # the workload spec's fields naming the data its sessions come from


def workload_source(name: str, m: Manifest) -> str:
    """What a run replayed, as one comparable text: the workload's name, and the trace or
    trajectory set its sessions came from when one was given (``"agentic (trace runs/a.jsonl)"``):
    two runs of ``agentic`` on other traces measured other workloads."""
    wl = m.workload or {}
    given = [f"{k} {wl[k]}" for k in SOURCES if wl.get(k)]
    return f"{name} ({', '.join(given)})" if given else name


__all__ = ["SOURCES", "engine_differences", "launch_command", "run_differences", "unrecorded", "workload_source"]
