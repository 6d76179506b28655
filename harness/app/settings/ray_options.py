"""``--executor``, ``--ray-address`` and ``--ray-resources``: what the settings check before a
run, without importing the executor (Ray is an optional extra, imported lazily, only here and in
:mod:`harness.app.executors.ray`)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Optional

from pydantic import Field, field_validator, model_validator

from results.pairs import parse_pairs

from harness.app.settings.fields import Cli, CliModel

RAY_MISSING = "--executor ray needs Ray, which is not installed: pip install 'llm-serve-bench[ray]'"
RESOURCE_KEYS = ("num_cpus", "num_gpus", "memory")  # Ray's own; any other name is a custom resource


def import_ray() -> Any:
    """The ``ray`` module. Raises RuntimeError(:data:`RAY_MISSING`) when it is not installed."""
    try:
        import ray
    except ImportError as exc:
        raise RuntimeError(RAY_MISSING) from exc
    return ray


def check_executor(executor: str, address: str | None, resources: str | None) -> dict[str, float]:
    """``bench run``'s ``--executor``, ``--ray-address`` and ``--ray-resources``: the parsed
    resources. Raises ValueError with a one-line message (an unknown executor, Ray options
    without ``--executor ray``, a bad resource item, Ray not installed)."""
    if executor not in ("local", "ray"):
        raise ValueError(f"unknown --executor {executor!r}: choose 'local' or 'ray'")
    if executor == "local" and (address or resources):
        raise ValueError("--ray-address and --ray-resources need --executor ray")
    parsed = parse_resources(resources)
    if executor == "ray":
        try:
            import_ray()
        except RuntimeError as exc:
            raise ValueError(str(exc)) from None
    return parsed


def parse_resources(text: str | None) -> dict[str, float]:
    """``--ray-resources "num_gpus=1,h100_node=1"`` → ``{"num_gpus": 1.0, "h100_node": 1.0}``.

    Keys are Ray's ``num_cpus``, ``num_gpus``, ``memory`` (bytes) or a custom resource name
    (``ray start --resources '{"h100_node": 1}'``); values are numbers >= 0. Raises ValueError
    with a one-line message naming the bad item and the expected form.
    """
    def bad(item: str) -> ValueError:
        return ValueError(f"--ray-resources: {item!r} is not NAME=NUMBER (a number >= 0), "
                          "e.g. num_gpus=1,num_cpus=8,h100_node=1")

    out: dict[str, float] = {}
    for raw_key, value in parse_pairs(text, bad):
        key = raw_key.strip()
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not key or not key.replace("_", "").replace("-", "").isalnum() or not number >= 0 or number == float("inf"):
            raise bad(f"{raw_key}={value}")
        out[key] = number
    return out


class ExecutorSettings(CliModel):
    """``--executor``'s group of ``bench run``: ``kind`` 'local' (here, one trial after another) or
    'ray' (each trial a Ray task); ``address`` of the Ray cluster (None = a local instance);
    ``resources`` each trial requests, {name: amount}. The Ray options need ``kind`` 'ray'."""

    cli_panel: ClassVar[str | None] = "Executor"

    kind: Annotated[str, Cli("--executor", help="Where trials run: 'local' (here, one after another) or 'ray' (each engine x repeat a Ray task on a node of a cluster, records streamed back here; needs pip install 'llm-serve-bench\\[ray]').")] = "local"
    address: Annotated[Optional[str], Cli("--ray-address", help="--executor ray: the cluster, e.g. HEAD:6379 (after `ray start --head`), ray://HEAD:10001 or auto. Default: a local Ray instance, started and stopped by this run.")] = None
    resources: Annotated[dict[str, float], Cli("--ray-resources", type=str, parse=parse_resources, help="--executor ray: what each trial requests, NAME=N comma-separated: num_cpus (default threads + 1), num_gpus (default 1 for GPU engines), or a custom resource from `ray start --resources`, e.g. num_gpus=1,h100_node=1.")] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _ray_options(cls, data: Any) -> Any:
        """``--ray-address`` and ``--ray-resources`` as given (any text, even one naming no
        resource) only with ``--executor ray``."""
        if isinstance(data, dict) and data.get("kind", "local") == "local" and \
                (data.get("address") or data.get("resources")):
            raise ValueError("--ray-address and --ray-resources need --executor ray")
        return data

    @field_validator("kind")
    @classmethod
    def _kind(cls, kind: str) -> str:
        if kind not in ("local", "ray"):
            raise ValueError(f"unknown --executor {kind!r}: choose 'local' or 'ray'")
        return kind
