"""What a recipe needs to be deployed away from the run that measured it (issue 41): the engine's
version and install commands, the launch command with this machine's paths, host and port made
parameters, the model's digest and source, the hardware and the harness's version
(:func:`deployable`, called on the winner's :class:`results.schema.Recipe`).

The template's parameters: ``{python}`` (the interpreter of the engine's environment), ``{project}``
(this repository's folder: a shim and the reference engine run from it), ``{model}`` (the model
folder), ``{host}`` and ``{port}``. ``bench serve RECIPE`` fills them on this machine.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from adapters import registry
from adapters.runtime.envs import engines_root
from adapters.runtime.server import PROJECT_ROOT
from results.schema import Manifest, Recipe

HARNESS_INSTALL = "pip install -e {project}  # this repository: the harness, the reference engine and the shims"


def _template(argv: list[str], model: str | None, port: int | None) -> list[str]:
    """``argv`` with this machine's paths, host and port as ``{…}`` parameters (module docstring)."""
    out = []
    for i, arg in enumerate(argv):
        prev = argv[i - 1] if i else ""
        if i == 0 and (arg == sys.executable or arg.startswith(str(engines_root()))):
            arg = "{python}" if Path(arg).name.startswith("python") else arg.replace(str(engines_root()), "{engines}")
        elif prev == "--host":
            arg = "{host}"
        elif prev == "--port" and port is not None and arg == str(port):
            arg = "{port}"
        elif model and arg.startswith(model):
            arg = "{model}" + arg[len(model):]
        out.append(arg.replace(str(PROJECT_ROOT), "{project}"))
    return out


def _join(argv: list[str]) -> str:
    """A shell line, the ``{…}`` parameters left bare (shlex would quote the braces)."""
    return " ".join(a if re.fullmatch(r"[\w@%+=:,./{}-]+", a) else shlex.quote(a) for a in argv)


def install_commands(engine: str, version: str | None) -> list[str]:
    """How to build ``engine``'s environment: this harness's own setup (the packages its recipe
    pins, ``recipe`` on the engine's adapter class), the engine's distribution at the measured version, and
    this repository where the engine runs from it (an engine with no recipe that runs from the
    harness's environment declares the distribution: ``harness_dist`` on its adapter class)."""
    out = []
    recipe = registry.cpu_recipes().get(engine)
    harness_dist = registry.declared(engine, "harness_dist")
    if recipe is not None:
        out.append(f"bench engines setup {engine}  # {recipe.approx or 'its own virtual environment'}")
        if version and recipe.version_dist and not recipe.version_dist.startswith("llama-server"):
            out.append(f"pip install '{recipe.version_dist}=={version}'  # the version measured, into that environment")
    elif harness_dist and version:
        out.append(f"pip install '{harness_dist}=={version}'  # into the harness's own environment")
    out.append(HARNESS_INSTALL)
    return out


def deployable(recipe: Recipe, manifest: Manifest) -> Recipe:
    """``recipe`` with the deployment fields filled from the run's ``manifest`` (module docstring)."""
    facts = manifest.engines.get(recipe.engine)
    if facts is None:
        return recipe
    model_path = manifest.model.path if manifest.model is not None else None
    argv = _template(list(facts.argv or shlex.split(facts.command or "")), model_path, facts.port)
    env = {k: str(v).replace(str(PROJECT_ROOT), "{project}") for k, v in (facts.env or {}).items()}
    extra = facts.model_extra or {}
    model = manifest.model
    hw = manifest.hardware
    from harness.app.core.model import cache_dir

    source = ("the harness's model cache (bench model prepare: the embedded default)" if model_path
              and str(model_path).startswith(str(cache_dir())) else "a local model folder (--model)")
    return recipe.model_copy(update={
        "engine_version": facts.version, "display_name": facts.display_name or recipe.engine,
        "shim": str(extra.get("shim") or ""), "production_server": str(extra.get("production_server") or ""),
        "install": install_commands(recipe.engine, facts.version),
        "serve": "bench serve recipe.json --host 127.0.0.1 --port 8000",
        "command_template": _join(argv), "env_template": env,
        "model": {"name": model.name if model else None, "digest": model.digest if model else None, "source": source},
        "hardware": {"name": hw.name, "kind": hw.kind, "cpu_model": hw.cpu_model, "num_devices": hw.num_devices}
        if hw is not None else {},
        "harness_version": manifest.harness_version, "git_sha": manifest.git_sha})


__all__ = ["deployable", "install_commands"]
