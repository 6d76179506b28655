"""``bench serve RECIPE``: start the engine a recipe describes, as the run measured it, outside a
benchmark (issue 41), on a host and port of the user's choosing, until Ctrl-C or SIGTERM; then it
stops the server's whole process group (:meth:`adapters.runtime.server.ServerAdapter.launch`).

Exit codes: 0 = served and stopped by the user or a supervisor (130 / 143 as the shell counts a
signal), 1 = the engine did not start, 2 = bad input (one line).
"""

from __future__ import annotations

import threading
from pathlib import Path

import typer
from rich.markup import escape

from harness.app.cli.common import fail, make_console
from harness.app.cli.options import command_from
from harness.app.settings.commands import ServeSettings


def _recipe(path: Path):  # type: ignore[no-untyped-def]
    from harness.app.settings.tune_options import check_recipe_file
    from results.schema import Recipe

    try:
        check_recipe_file(str(path))
    except ValueError as exc:
        fail(str(exc).replace("--engine-config", "RECIPE"))
    return Recipe.model_validate_json(path.read_text(encoding="utf-8"))


def serve(settings: ServeSettings) -> None:
    """Serve the engine of RECIPE with its engine args and threads, as the run measured it, at
    http://HOST:PORT/v1 (OpenAI-compatible), until Ctrl-C; measure it again with
    bench run --endpoint NAME=http://HOST:PORT --model MODEL."""
    from adapters.base import EngineError, LaunchConfig
    from adapters.registry import get_adapter
    from harness.app.core.model import ModelError, cache_dir, model_summary, resolve_model

    recipe_file, host, port, model = settings.recipe, settings.host, settings.port, settings.model
    recipe = _recipe(recipe_file)
    try:
        model_dir = resolve_model(model)
    except ModelError as exc:
        fail(str(exc))
    console = make_console()
    want = recipe.model.get("digest")
    if want and (have := model_summary(model_dir).get("digest")) and have != want:
        console.print(f"note: {model_dir} is not the model the recipe measured (digest {str(have)[:12]}… against "
                      f"{want[:12]}…): its capacity does not carry over", markup=False, highlight=False, soft_wrap=True)
    adapter = get_adapter(recipe.engine)
    probe = adapter.probe()
    if not probe.available:
        fail(f"{recipe.engine} cannot start here: {probe.reason}", code=1)
    logs = cache_dir() / "serve" / f"{recipe.engine}-{port}"
    config = LaunchConfig(model_dir=model_dir, run_dir=logs, threads=recipe.threads or 1, engine_args=dict(recipe.engine_args),
                          startup_timeout_s=settings.startup_timeout_s, probe=probe, port=port, host=host)
    console.print(f"Starting {escape(recipe.engine)} from {escape(str(recipe_file))} (log: {logs / 'logs'}) …", highlight=False)
    try:
        with adapter.launch(config) as endpoint:
            _said(console, recipe, endpoint, host, port, model_dir)
            threading.Event().wait()  # until Ctrl-C or SIGTERM (raised here as KeyboardInterrupt)
    except EngineError as exc:
        fail(f"{recipe.engine} did not start: {exc}", code=1)
    except KeyboardInterrupt as exc:
        from harness.app.core.signals import exit_code, interrupt_cause

        console.print(f"Stopped {escape(recipe.engine)} ({escape(interrupt_cause(exc))})", highlight=False)
        raise typer.Exit(exit_code(interrupt_cause(exc))) from None


serve_cmd = command_from(ServeSettings, serve)  # the options: harness/app/settings/commands.py


def _said(console, recipe, endpoint, host: str, port: int, model_dir: Path) -> None:  # type: ignore[no-untyped-def]
    """What serves where, what it was measured at, and what it is."""
    shown = host if host not in ("0.0.0.0", "::") else "127.0.0.1"
    console.print(f"Serving {escape(recipe.engine)} ({escape(endpoint.display_name)}) at http://{shown}:{port}/v1 as model "
                  f"{escape(endpoint.model_name)}; Ctrl-C stops it.", highlight=False, soft_wrap=True)
    if recipe.capacity_tps is not None:
        lo, hi = recipe.capacity_interval or (float("nan"), float("nan"))
        slos = ", ".join(f"{k} ≤ {v:g} ms" for k, v in recipe.slos.items())
        console.print(f"Measured in run {escape(recipe.run_id)}: {'≥ ' if recipe.capacity_open else ''}"
                      f"{recipe.capacity_tps:,.1f} output tok/s per device [{lo:,.1f}–{hi:,.1f}] at {slos}; measure it "
                      f"here with: bench run --endpoint {recipe.engine}-served=http://{shown}:{port} --model {endpoint.model_name} "
                      f"--tokenizer {model_dir} --slo {','.join(f'{k}={v:g}' for k, v in recipe.slos.items())}",
                      markup=False, highlight=False, soft_wrap=True)
    shim = recipe.shim or str(endpoint.effective_config.get("shim") or "")
    if shim:
        server = recipe.production_server or str(endpoint.effective_config.get("production_server") or "")
        console.print(f"{recipe.engine} runs behind this repository's server {shim} (a shim around the engine's library); "
                      f"the nearest production server: {server}", markup=False, highlight=False, soft_wrap=True)
