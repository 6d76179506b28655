"""``bench run --tune`` and ``--engine-config``: the options' help (every engine's search space)
and checks, and how a stored recipe becomes run settings (:mod:`harness.app.run.tune` runs the search)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar, Optional

from pydantic import Field

from harness.app.settings import checks
from harness.app.settings.fields import Cli, CliModel

if TYPE_CHECKING:
    from results.schema import Recipe


def check_recipe_file(text: Optional[str]) -> Optional[str]:
    """``--engine-config FILE``: the path, once the file reads as a recipe (else its one-line error)."""
    if text is None:
        return None
    if not str(text).strip():
        raise ValueError("--engine-config is empty: give the recipe.json a run wrote (results/<run>/recipe.json)")
    from pydantic import ValidationError

    from results.schema import Recipe

    try:
        recipe = Recipe.model_validate_json(Path(text).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"--engine-config {text} is not a recipe (not UTF-8 text): give the recipe.json a run "
                         "wrote") from None
    except OSError as exc:
        raise ValueError(f"--engine-config {text}: cannot read it ({exc.strerror or exc}): give the recipe.json a run "
                         "wrote (results/<run>/recipe.json)") from None
    except ValidationError as exc:
        from harness.app.settings.fields import plain_error

        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "file"
        raise ValueError(f"--engine-config {text} is not a recipe ({plain_error(first, where)}): give the recipe.json "
                         "a run wrote") from None
    _check_recipe(recipe, text)
    return str(text)


def _check_recipe(recipe: Recipe, path: str) -> None:
    """The recipe's engine is one this harness starts, its args pass ``--engine-arg``'s checks
    and its threads are positive. Raises ValueError (one line)."""
    from adapters.registry import ENGINE_NAMES, parse_engine_args

    if recipe.engine not in ENGINE_NAMES or recipe.engine == "openai":
        raise ValueError(f"--engine-config {path} is a recipe for {recipe.engine!r}, not an engine this harness starts "
                         f"(choose from {', '.join(n for n in ENGINE_NAMES if n != 'openai')})")
    try:
        parse_engine_args([f"{recipe.engine}:{k}={v}" for k, v in recipe.engine_args.items()])
    except ValueError as exc:
        raise ValueError(f"--engine-config {path}: engine_args: {exc}") from None
    bad = next((f"{k}={v!r}" for k, v in recipe.engine_args.items() if "\n" in str(v) or "\r" in str(v)), None)
    if bad:
        raise ValueError(f"--engine-config {path}: engine_args {bad} holds a line break: one value per flag")
    if recipe.threads is not None and recipe.threads < 1:
        raise ValueError(f"--engine-config {path}: threads {recipe.threads} is not a thread count (1 or more)")


TUNE_HELP = ("Seconds of measuring per engine for a search of its configurations before the main job (180, "
             "180s, 3m; 0 = none; within --time-budget); the verdict then compares tuned against tuned. Search "
             "spaces: below; details: README.")
"""``--tune``'s help: short; the search spaces are :func:`tune_help`, the end of ``bench run --help``."""


class TuneSettings(CliModel):
    """``--tune``'s group of ``bench run``: ``seconds`` of measuring per engine for the search (0 =
    none; finite, >= 0; under 1 s refused with a ladder), at most ``configs`` configurations per
    engine (2-64), ``lower_precision``: may try the engines' lower-precision settings."""

    cli_panel: ClassVar[str | None] = "Tuning"

    seconds: Annotated[float, Field(ge=0, allow_inf_nan=False), Cli("--tune", type=str, parse=checks.duration_of("--tune", zero=True), help=TUNE_HELP)] = 0.0
    configs: Annotated[int, Field(ge=2, le=64), Cli("--tune-configs", range=True, help="Most configurations --tune tries per engine, its defaults included (the budget is split among them by successive halving).")] = 4
    lower_precision: Annotated[bool, Cli("--tune-lower-precision", help="Let --tune try the engines' lower-precision settings too (a bf16 dtype, an fp8 KV cache, q8_0 or int8 weights: each engine's in --tune's help). A configuration that lowers precision answers the output-fidelity check on its first start, before it is measured, and is dropped below --fidelity-floor (reported with its figures, never chosen); the main job holds the chosen configuration to the same floor, and its recipe says its numerics. Needs the fidelity check (not --fidelity-prompts 0).")] = False


def tune_help() -> str:
    """Every engine's ``--tune`` search space here and on a GPU (``bench run --help``'s epilog)."""
    from adapters.base import search_space_of
    from adapters.registry import ENGINE_NAMES, get_adapter

    def spaces(kind: str, precision: bool = False) -> str:
        out = []
        for name in ENGINE_NAMES:
            knobs = [k for k in search_space_of(get_adapter(name, "cpu"), kind, lower_precision=precision)
                     if k.precision == precision]
            if knobs:
                out.append(f"{name}: " + ", ".join(f"{k.key} {'|'.join(k.values)}" for k in knobs))
        return "; ".join(out) or "none"

    return ("--tune's search spaces (values tried instead of the engine's defaults; the defaults are kept unless a "
            "configuration beats them by more than 5 %) on a CPU: " + spaces("cpu") + ". On a GPU: "
            + spaces("nvidia") + ". With --tune-lower-precision also, each gated by the output-fidelity check: on a "
            "CPU " + spaces("cpu", True) + "; on a GPU " + spaces("nvidia", True) + ". Engines the harness does not "
            "start (--endpoint) are not searched.")


def recipe_climb_to(path: str) -> int:
    """The load a recipe's ladder reached to read its capacity (``Recipe.climb_to``; 1 when the
    recipe predates it): a re-run climbs at least that far."""
    from results.schema import Recipe

    recipe = Recipe.model_validate_json(Path(str(path)).read_text(encoding="utf-8"))
    return max(1, recipe.climb_to or 1)


EngineArgs = dict[str, dict[str, str]]
"""Engine args by engine: {engine: {key: value}} (``--engine-arg NAME:key=value``)."""


def apply_recipe(path: str, engines: list[str], engine_args: EngineArgs,
                 threads: int | None) -> tuple[list[str], EngineArgs, int | None]:
    """``--engine-config path`` over a run's ``engines``, ``engine_args`` and ``threads``: the
    recipe's engine (when --engine named none, ``["all"]``), its args under the user's
    --engine-arg, its threads (when --threads was not given, None); returns the three. Raises
    ValueError when --engine names other engines."""
    from results.schema import Recipe

    recipe = Recipe.model_validate_json(Path(str(path)).read_text(encoding="utf-8"))
    if engines == ["all"]:
        engines = [recipe.engine]
    elif recipe.engine not in engines:
        raise ValueError(f"--engine-config {path} is a recipe for {recipe.engine}, and --engine names "
                         f"{','.join(engines)}: add {recipe.engine} to --engine or leave --engine out")
    engine_args = {**engine_args, recipe.engine: {**recipe.engine_args, **engine_args.get(recipe.engine, {})}}
    return engines, engine_args, threads if threads is not None or not recipe.threads else recipe.threads
