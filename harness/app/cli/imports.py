"""``bench import FILE --from vllm|sglang|aiperf|guidellm``: another tool's result file as a run
folder, so ``bench report RUN_A RUN_B`` puts it next to a native run (the main app registers
:func:`import_cmd`).

Exit codes: 0 = imported; 2 = bad input (unknown ``--from``, a file of another tool's format, a
truncated or damaged file, a bad ``--run-id`` / ``--workload``), reported as one line on stderr.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Optional

from rich.markup import escape
from rich.table import Table

from harness.app.cli.common import err_console, fail, make_console
from harness.app.cli.options import command_from
from harness.app.settings.commands import ImportSettings




def _check_run_dir(output_dir: Path, run_id: str) -> Path:
    """The run folder to write, checked before anything is read (one line and exit 2 otherwise):
    a plain folder name, a writable ``--output-dir``, and no existing folder that holds results."""
    from results.store import blocked_run_id

    if not run_id.strip() or run_id in (".", "..") or "/" in run_id or "\\" in run_id:
        fail(f"--run-id {run_id!r} must be a plain folder name (no '/', not empty)")
    if output_dir.exists() and not output_dir.is_dir():
        fail(f"--output-dir {output_dir} is a file: pass a directory")
    run_dir = output_dir / run_id
    if run_dir.exists():
        why = blocked_run_id(run_dir)
        if why:
            fail(why)
        shutil.rmtree(run_dir)
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"cannot create --output-dir {output_dir} ({exc.strerror or exc}): pass a writable directory")
    return run_dir


def workload_spec(parsed: Any, workload: Optional[str], input_len: Optional[int],
                  output_len: Optional[int]) -> tuple[str, dict[str, Any]]:
    """The imported run's workload name and spec, which ``bench report`` compares with other
    runs' (``harness.app.run.reporting.unlike_runs``): the name given, else the one the file names
    (SGLang's dataset), else ``imported``; the shape the file records (lengths, API, tokenizer)
    with ``--input-len`` / ``--output-len`` added. A length contradicting the file fails."""
    from workloads.registry import list_workloads

    names = [n for n, _ in list_workloads()]
    if workload is not None and workload not in names:
        fail(f"unknown --workload {workload!r}: choose from {', '.join(names)} (the workload the tool ran, in our terms)")
    name = workload or parsed.workload or "imported"
    own = parsed.shape if name == (parsed.workload or name) else {k: v for k, v in parsed.shape.items()
                                                                    if k in ("api", "tokenizer")}
    spec: dict[str, Any] = {"kind": name, **own}
    for flag, key, value in (("--input-len", "input_len", input_len), ("--output-len", "output_len", output_len)):
        if value is None:
            continue
        if value < 1:
            fail(f"{flag} must be >= 1, got {value}")
        if key in spec and spec[key] != value:
            fail(f"{flag} {value} contradicts {parsed.file.name}, which records {key} {spec[key]}: leave {flag} out")
        spec[key] = value
    return name, spec


def _length_note(parsed: Any, output_len: Optional[int]) -> str | None:
    """A line when successful requests generated other than ``--output-len`` tokens (the shape
    given may not be the one the tool ran, or the server ignored ignore_eos)."""
    if output_len is None:
        return None
    counts = [r.output_tokens for r in parsed.records if r.success and r.output_tokens is not None]
    off = [c for c in counts if c != output_len]
    if not off:
        return None
    return (f"note: {len(off)} of {len(counts)} successful requests have {min(off)}-{max(off)} output tokens, not "
            f"--output-len {output_len} (was --ignore-eos passed to the tool?)")


def import_run(settings: ImportSettings) -> None:
    """Read another benchmark tool's result file into a run folder: metrics recomputed under our
    definitions from its per-request data where the file has them, else copied from its summary
    under its own definitions (each one says which, and how the definitions differ)."""
    from harness.app.importers import ImportFormatError, read_import, write_import
    from reports.imported import caveat_lines
    from results.store import ResultsError, load_run, new_run_id

    file, tool, entry, workload, output_len = settings.file, settings.tool, settings.entry, settings.workload, settings.output_len
    try:
        parsed = read_import(file, tool.strip().lower(), entry)
    except ImportFormatError as exc:
        fail(str(exc))
    name, spec = workload_spec(parsed, workload, settings.input_len, output_len)
    run_id = settings.run_id or new_run_id(f"import-{parsed.tool}")
    run_dir = _check_run_dir(settings.output_dir, run_id)
    try:
        result = write_import(parsed, run_dir, run_id, name, spec)
        run = load_run(run_dir)
    except (OSError, ResultsError) as exc:
        fail(f"cannot write the imported run to {run_dir}: {getattr(exc, 'strerror', None) or exc}")
    except Exception as exc:  # the last line of defence: one line for the user, the traceback in a file
        import tempfile
        import traceback

        log = Path(tempfile.gettempdir()) / "bench-error.log"
        log.write_text(traceback.format_exc())
        fail(f"internal error while importing {file}: {type(exc).__name__}: {exc} (traceback in {log}; please "
             "report it)", code=1)
    console = make_console()
    m = result.metrics
    n_ok, n_fail = (m.requests_completed, m.requests_failed) if m is not None else (0, 0)
    console.print(f"Imported {parsed.label} result {parsed.file} ({n_ok} ok, {n_fail} failed; "
                  f"{len(parsed.records)} per-request records) as run {run_id} (workload {name})",
                  markup=False, highlight=False, soft_wrap=True)
    for line in parsed.notes + [n for n in [_length_note(parsed, output_len)] if n]:
        err_console.print(f"[yellow]note:[/] {escape(line)}", highlight=False, soft_wrap=True)
    table = Table(title="How each metric was obtained")
    table.add_column("metric")
    table.add_column("how", overflow="fold")
    prov = run.manifest.imported_from
    for metric, how in (prov.metrics.items() if prov is not None else []):
        table.add_row(metric, escape(how))
    console.print(table)
    for line in caveat_lines([run])[1:]:
        if line.startswith("  note: "):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    if name == "imported":
        console.print("To rank it with a native run, import again with the shape the tool ran, e.g. --workload random "
                      "--input-len 64 --output-len 32", markup=False, highlight=False)
    console.print(f"\nResults: {run_dir}\nCompare: bench report {run_dir} <a native run>", markup=False,
                  highlight=False, soft_wrap=True)


import_cmd = command_from(ImportSettings, import_run)  # the options: harness/app/settings/commands.py
