"""``bench engines``: what engines can run here, installing them, and checking they agree.

- ``bench engines`` → a rich table of every engine: state (available / not installed /
  unsupported hardware / unavailable), version, hardware, features, and the reason with the fix.
- ``bench engines setup NAME|all-cpu|all-gpu [--force]`` → creates ``.engines/NAME/venv`` with the pinned
  packages: CUDA builds on an NVIDIA GPU after a driver check (``adapters.runtime.gpu_recipes``), CPU builds elsewhere.
- ``bench engines check [--engine own,transformers] [--model DIR]`` → greedy output-equivalence
  across engines on a few fixed prompts (token-level agreement; ``harness.loadgen.equivalence``).
- ``bench engines cleanup [--dry-run]`` → lists and removes engine servers that a dead bench run
  left behind (``adapters.runtime.leftovers``); ``check`` and every run do the same before they start.

Errors are one line on stderr with exit code 2 (bad input) or 1 (an engine failed).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from harness.app.cli.common import err_console, fail, make_console
from rich.markup import escape
from rich.table import Table

from adapters.base import EngineError, ProbeResult
from adapters.runtime.envs import engine_env_dir, select_recipe, setup_engine
from adapters.telemetry.hardware import detect_kind
from adapters import registry
from adapters.registry import get_adapter
from harness.app.cli.options import command_from
from harness.app.settings.checks import check_engine_args
from harness.app.settings.engines import EngineCheckSettings, EngineFidelitySettings

app = typer.Typer(help="Serving engines: availability, setup, output equivalence.", invoke_without_command=True,
                  pretty_exceptions_enable=False, add_completion=False)
console = make_console()


def engine_state(probe: ProbeResult, hardware: tuple[str, ...], here: str) -> str:
    """``available`` / ``unsupported hardware`` / ``not installed`` / ``unavailable`` for the table."""
    if probe.available:
        return "available"
    if here not in hardware or probe.cause == "hardware":
        return "unsupported hardware"
    if probe.cause == "not_installed":
        return "not installed"
    return "unavailable"


def engine_rows() -> list[dict]:
    """One dict per name ``--engine`` accepts (``adapters.registry.engine_names()``, in that
    order; ``openai`` included, which needs ``--base-url``): name, state, version, hardware,
    features, api, reason. What an adapter's ``notes()`` says is one more sentence of its row's
    reason (deepspeed: DeepSpeed-MII/FastGen, which ``--engine`` cannot run, has no row of its own)."""
    here = detect_kind()
    rows = []
    for name in registry.engine_names():
        adapter = get_adapter(name, here)
        probe = adapter.probe()
        caps = adapter.capabilities
        note = adapter.notes() if hasattr(adapter, "notes") else ""
        reason = f"{probe.reason}; {note}" if note else probe.reason
        rows.append({"engine": name, "state": engine_state(probe, caps.hardware, here),
                     "version": probe.version or "", "hardware": ",".join(caps.hardware),
                     "features": ",".join(caps.features), "api": caps.api, "reason": reason})
    return rows


@app.callback()
def engines(ctx: typer.Context,
            as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON instead of a table.")) -> None:
    """Show every engine: state, version, hardware, features and the reason with the fix."""
    if ctx.invoked_subcommand is not None:
        return
    rows = engine_rows()
    if as_json:
        console.print_json(json.dumps(rows))
        return
    table = Table(title=f"Serving engines on this machine ({detect_kind()})", show_lines=False)
    for col in ("engine", "state", "version", "hardware", "features", "reason"):
        table.add_column(col, overflow="fold")
    colors = {"available": "green", "not installed": "yellow", "unsupported hardware": "dim", "unavailable": "red"}
    for r in rows:
        c = colors[r["state"]]
        table.add_row(r["engine"], f"[{c}]{r['state']}[/{c}]", r["version"], r["hardware"], r["features"],
                      escape(r["reason"]))
    console.print(table)


@app.command("setup", help=(
    "Create .engines/NAME/venv with that engine's pinned packages (progress shown): the CUDA build on a machine "
    "with an NVIDIA GPU (driver checked first), the CPU build elsewhere. all-cpu installs the CPU builds "
    f"({', '.join(registry.setup_cpu())}), all-gpu the CUDA builds ({', '.join(registry.cuda_recipes())})."))
def setup(name: str = typer.Argument(..., help=f"engine to install ({', '.join(registry.setup_classes())}), all-cpu or all-gpu"),
          force: bool = typer.Option(False, "--force", help="replace a venv that holds the other build (CPU vs CUDA); "
                                     "llamacpp: build llama-server again")
          ) -> None:
    """Install one engine's environment, or all-cpu / all-gpu (the help, read off the registry, lists them)."""
    hardware, shared = None, registry.setup_shared()
    if name == "all-cpu":
        names, hardware = list(registry.setup_cpu()), "cpu"
    elif name == "all-gpu":
        names, hardware = list(registry.cuda_recipes()), "nvidia"
    elif name in registry.setup_classes():
        names = [name]
    elif name in shared:  # an engine another's setup installs (the same build, other weights)
        names = [shared[name]]
    elif name in registry.engine_names():
        fail(f"{name} needs no setup here: " + get_adapter(name).probe().reason)
    else:
        fail(f"unknown engine {name!r}: choose from {', '.join(registry.setup_classes())}, all-cpu or all-gpu")
    for n in names:
        try:
            recipe = select_recipe(n, hardware)  # the driver check comes first: nothing is installed on a mismatch
            build = f"the CUDA {recipe.cuda} build" if recipe.build == "cuda" else "the CPU build"
            console.print(f"[bold]{n}[/bold]: installing {build} ({recipe.approx}) into {engine_env_dir(n)}")
            setup_engine(n, console=console, recipe=recipe, force=force)
        except ValueError as exc:
            fail(str(exc))
        except EngineError as exc:
            err_console.print(escape(exc.log_tail))
            fail(str(exc), code=1)


def check(settings: EngineCheckSettings) -> None:
    """Greedy output-equivalence across engines on fixed prompts (token-level agreement)."""
    from harness.app.trial.equivalence_check import check_equivalence
    from harness.loadgen.equivalence import DEFAULT_PROMPTS
    from harness.app.core.model import ModelError, resolve_model
    from harness.app.trial.startup import remove_leftovers

    from results.pairs import split_list

    o = settings
    model, max_tokens, threads, eargs, run_dir, as_json = o.model, o.max_tokens, o.threads, o.engine_args, o.run_dir, o.json_out
    names = split_list(o.engines)
    if not names:
        fail("--engine is empty: name at least one engine, e.g. --engine own,transformers")
    try:
        adapters = [get_adapter(n) for n in names]
        check_engine_args(names, eargs, option="--engine")  # an argument for an engine not checked: refused
        model_dir = resolve_model(model)
    except (ValueError, ModelError) as exc:
        fail(str(exc))
    out = run_dir or Path("results") / f"check-{time.strftime('%Y%m%d-%H%M%S')}"
    remove_leftovers(console)
    res = check_equivalence(adapters, model_dir, out, DEFAULT_PROMPTS, max_tokens, threads=threads,
                            engine_args=eargs, console=console)
    out.mkdir(parents=True, exist_ok=True)
    (out / "equivalence.json").write_text(json.dumps(res, indent=2))
    if as_json:
        console.print_json(json.dumps(res))
    else:
        table = Table(title=f"Greedy equivalence vs {res['reference'] or '-'} ({len(res['prompts'])} prompts, "
                            f"{max_tokens} tokens)")
        for col in ("engine", "status", "token agreement", "exact", "reason / display name"):
            table.add_column(col, overflow="fold")
        for name, e in res["engines"].items():
            agree = f"{e['token_agreement']:.1%}" if e["token_agreement"] is not None else "-"
            exact = f"{e['exact_matches']}/{len(res['prompts'])}" if e["exact_matches"] is not None else "-"
            table.add_row(name, e["status"], agree, exact, escape(e["reason"] or e["display_name"] or ""))
        console.print(table)
        console.print(f"details: {out / 'equivalence.json'}")
    if any(e["status"] == "failed" for e in res["engines"].values()):
        raise typer.Exit(1)


app.command("check")(command_from(EngineCheckSettings, check))  # the options: harness/app/settings/engines.py


@app.command("cleanup")
def cleanup(dry_run: bool = typer.Option(False, "--dry-run", help="only list the leftovers; stop nothing")) -> None:
    """Stop the engine servers a dead bench run left behind (killed with its watchdog), one line each.

    Reads the registry of live engine groups ($BENCH_STATE_DIR, default
    ~/.local/state/llm-serve-bench/live); groups of a bench that still runs are never touched.
    """
    from adapters.runtime.leftovers import find_leftovers, state_dir
    from harness.app.trial.startup import remove_leftovers

    where = state_dir()
    if dry_run:
        try:
            found = find_leftovers(where)
        except OSError as exc:
            fail(f"cannot read {where}: {exc.strerror or exc}; set BENCH_STATE_DIR to the registry folder", code=1)
        for lo in found:
            console.print(escape(lo.describe()), soft_wrap=True, highlight=False)
        console.print(f"{len(found)} leftover engine server(s) of dead bench runs in {escape(str(where))}"
                      + ("; run without --dry-run to stop them" if found else ""), highlight=False)
        return
    done = remove_leftovers(console)
    console.print(f"{len(done)} leftover engine server(s) of dead bench runs removed ({escape(str(where))})",
                  highlight=False)


def fidelity(settings: EngineFidelitySettings) -> None:
    """Output fidelity of each engine against Hugging Face transformers at fp32 on the same weights,
    the check `bench run` gates on (see README "Output fidelity"), without a benchmark."""
    from harness.app.trial.fidelity_check import check_fidelity_of
    from harness.app.trial.fidelity_reference import fidelity_workload, reference_for, workload_prompts
    from harness.app.core.model import ModelError, resolve_model
    from harness.app.trial.startup import remove_leftovers
    from harness.app.trial.steps import fidelity_line
    from results.pairs import split_list
    from workloads.errors import WorkloadError
    from workloads.options import WorkloadOptions

    o = settings
    model, workload, prompts, tokens, floor, threads = o.model, o.workload, o.prompts, o.tokens, o.fidelity_floor, o.threads
    eargs, run_dir = o.engine_args, o.run_dir
    names = split_list(o.engines)
    try:
        check_engine_args(names, eargs, option="--engine")  # an argument for an engine not checked: refused
        kind = detect_kind()
        from adapters.registry import all_adapters

        adapters = all_adapters(kind) if names == ["all"] else [get_adapter(n, kind) for n in names]
        model_dir = resolve_model(model)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        chosen = workload_prompts(fidelity_workload(WorkloadOptions(name=workload), tokenizer, prompts), tokenizer, prompts)
        reference = reference_for(model_dir, chosen, max_tokens=tokens, console=console)
    except (ValueError, ModelError, WorkloadError) as exc:
        fail(str(exc))
    out = run_dir or Path("results") / f"fidelity-{time.strftime('%Y%m%d-%H%M%S')}"
    remove_leftovers(console)
    check, missing = check_fidelity_of(adapters, model_dir, out, reference, other_floor=floor, threads=threads,
                                       engine_args=eargs, console=console, hardware_kind=kind)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fidelity.json").write_text(check.model_dump_json(indent=2))
    table = Table(title=f"Output fidelity vs {check.source} ({check.prompts} {workload} prompts × {check.max_tokens} tokens)")
    for col in ("engine", "result"):
        table.add_column(col, overflow="fold")
    for name, r in check.engines.items():
        table.add_row(name, escape(fidelity_line(r)))
    for name, why in missing.items():
        table.add_row(name, escape(why))
    console.print(table)
    console.print(f"details: {out / 'fidelity.json'}")
    if any(r.passed is False for r in check.engines.values()):
        raise typer.Exit(1)


app.command("fidelity")(command_from(EngineFidelitySettings, fidelity))
