"""What every server-engine adapter shares: flag rendering, thread env, launch as a child.

A concrete adapter (``adapters/vllm.py`` ...) subclasses :class:`ServerAdapter` and supplies
``probe()`` and ``build_command(config, port) -> LaunchPlan``; :meth:`ServerAdapter.launch`
turns the plan into a :class:`adapters.runtime.process.ServerProcess` and yields an
:class:`adapters.base.Endpoint` whose ``effective_config`` holds the exact command line, the
environment variables we set (never secrets) and the engine options.

Engine-arg conventions (``--engine-arg NAME:key=value``), shared by all server adapters:

- ``key=value`` → ``--key value`` (underscores become dashes), replacing our default for that flag;
- ``key=true`` → ``--key``; ``key=false`` → ``--no-key`` (argparse/typer boolean style);
- ``env.VAR=value`` → environment variable ``VAR`` for the engine process;
- keys listed in an adapter's ``adapter_keys`` are consumed by the adapter itself (not flags).
"""

from __future__ import annotations

import os
import re
import shlex
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from adapters.base import Capabilities, Endpoint, EngineError, EngineTraits, LaunchConfig, ProbeResult, lowered_precision
from adapters.runtime.process import ServerProcess, find_free_port
from results.model_geometry import kv_bytes_per_token as geometry_kv_bytes_per_token
from results.model_geometry import read_model_summary

PROJECT_ROOT = Path(__file__).resolve().parents[2]
_SECRET_WORDS = {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIALS", "CREDENTIAL", "AUTH"}
_FLAG_KEY_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]*$")


def thread_env(threads: int) -> dict[str, str]:
    """Environment variables that pin a torch/OpenMP engine to ``threads`` intra-op threads.

    On a small shared CPU, OpenMP spin-waiting under load made torch ~5x slower with 2 threads
    than with 1 (DESIGN.md, "Measuring on a small shared CPU"), so every engine gets an explicit
    count. Raises ValueError for ``threads < 1``.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1 (got {threads}): pass --threads 1 or more")
    n = str(threads)
    return {
        "OMP_NUM_THREADS": n,
        "MKL_NUM_THREADS": n,
        "OPENBLAS_NUM_THREADS": n,
        "TORCH_NUM_THREADS": n,
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
    }


# One KV-cache budget for every engine on CPU, so a comparison is not decided by who reserved
# more memory (vLLM-CPU's own default is 4 GiB, SGLang's a RAM fraction, transformers serve
# sizes its paged cache from free memory). Override per engine with --engine-arg.
CPU_KV_CACHE_BYTES = 1 << 30


def kv_bytes_per_token(model_dir: Path, dtype_bytes: int = 4) -> int:
    """KV-cache bytes per token of the model in ``model_dir`` (``results.model_geometry``'s one
    formula over its one ``config.json`` reader); raises ValueError when the sizes are missing."""
    geometry = read_model_summary(model_dir)
    if None in (geometry.num_layers, geometry.num_kv_heads, geometry.head_dim):
        raise ValueError(f"{model_dir}/config.json lacks the attention sizes needed for the KV budget")
    return geometry_kv_bytes_per_token(geometry.num_layers, geometry.num_kv_heads, geometry.head_dim, dtype_bytes)


def cpu_kv_tokens(model_dir: Path, budget_bytes: int = CPU_KV_CACHE_BYTES) -> int:
    """How many tokens of KV cache fit in ``budget_bytes`` for this model (fp32 on CPU)."""
    return max(1, budget_bytes // kv_bytes_per_token(model_dir))


def render_flags(options: dict[str, str]) -> list[str]:
    """``{"max_num_seqs": "64", "enforce_eager": "true", "prefix_caching": "false"}`` →
    ``["--max-num-seqs", "64", "--enforce-eager", "--no-prefix-caching"]`` (insertion order).

    Raises ValueError for a key that cannot be a flag name.
    """
    out: list[str] = []
    for key, value in options.items():
        if not _FLAG_KEY_RE.match(key):
            raise ValueError(f"engine arg {key!r} is not a valid option name: use letters, digits, '_' or '-'")
        flag = "--" + key.replace("_", "-")
        low = str(value).strip().lower()
        if low == "true":
            out.append(flag)
        elif low == "false":
            out.append("--no-" + key.replace("_", "-"))
        else:
            out.extend([flag, str(value)])
    return out


def split_engine_args(engine_args: dict[str, str], adapter_keys: tuple[str, ...] = ()) -> tuple[dict, dict, dict]:
    """Split pass-through engine args into ``(flags, env, adapter_options)``.

    ``env.VAR=value`` entries go to ``env``; keys in ``adapter_keys`` to ``adapter_options``;
    everything else becomes a command-line flag (with ``-`` normalised to ``_`` in the key so
    ``max-num-seqs`` and ``max_num_seqs`` override the same default).
    """
    flags: dict[str, str] = {}
    env: dict[str, str] = {}
    own: dict[str, str] = {}
    for key, value in engine_args.items():
        if key.startswith("env."):
            var = key[4:]
            if not var:
                raise ValueError("engine arg 'env.' needs a variable name: use env.NAME=value")
            env[var] = value
        elif key in adapter_keys or key.replace("-", "_") in adapter_keys:
            own[key.replace("-", "_")] = value
        else:
            flags[key.replace("-", "_")] = value
    return flags, env, own


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """Copy of ``env`` with the values of secret-looking variables hidden: any ``_``-separated
    word of the name is KEY, TOKEN, SECRET, PASSWORD... (``OPENAI_API_KEY``, ``HF_TOKEN``; not
    ``TOKENIZERS_PARALLELISM``)."""
    return {k: ("<redacted>" if _SECRET_WORDS & set(k.upper().split("_")) else v) for k, v in env.items()}


@dataclass
class LaunchPlan:
    """How to start one engine: argv, the env vars we set on top of the inherited ones, and
    what the endpoint should say about itself."""

    cmd: list[str]
    env: dict[str, str]
    model_name: str
    display_name: str
    health_paths: tuple[str, ...] = ("/health", "/v1/models")
    supports_ignore_eos: bool = True
    metrics_path: str | None = None
    cwd: Path | None = None
    extra_config: dict = field(default_factory=dict)

    def command_line(self) -> str:
        """The argv as one shell-quoted line (recorded in the manifest)."""
        return shlex.join(self.cmd)


class ServerAdapter(EngineTraits):
    """Base class of every adapter whose engine runs as an OpenAI-compatible server process.

    Subclasses set ``name``, ``display_name``, ``capabilities`` and what they declare of
    :class:`~adapters.base.EngineTraits`, and implement :meth:`probe` and :meth:`build_command`. ``stop_grace_s``: SIGTERM → SIGKILL delay for this engine.
    """

    name: str = "?"
    display_name: str = "?"
    capabilities: Capabilities = Capabilities(hardware=("cpu",))
    adapter_keys: tuple[str, ...] = ()
    flag_source: Path | None = None  # this repository's server source, whose flags are read (adapters.flags)
    # A server of this repository around the engine's library (a shim): its module, and the
    # production server nearest to what was measured (said beside a verdict and in a recipe).
    shim: str = ""
    production_server: str = ""
    stop_grace_s: float = 15.0
    starts_process = True  # the harness starts (and may pause) this engine's server process

    def probe(self) -> ProbeResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def build_command(self, config: LaunchConfig, port: int) -> LaunchPlan:  # pragma: no cover
        raise NotImplementedError

    def unknown_args(self, engine_args: dict[str, str]) -> list[str]:
        """The ``key=value`` engine args whose flag this engine's server does not declare, read from
        :attr:`flag_source` (a server of this repository) or else from the installed engine's own
        help (:meth:`help_argvs`, :func:`adapters.flags.help_flags`); [] when every one is declared,
        or when there is no list to check against (not installed, no usable help: the engine
        checks its flags when it starts)."""
        known, from_help = self.known_flags()
        if not known:
            return []
        from adapters.flags import unknown_flag

        flags, _, _ = split_engine_args(engine_args, self.adapter_keys)
        # an engine's own parser may take a dotted key into a JSON option (vLLM's --compilation-config.mode)
        return [f"{k}={v}" for k, v in flags.items() if unknown_flag(k.split(".")[0] if from_help else k, v, known)]

    def refused_args(self, engine_args: dict[str, str]) -> str | None:
        """Why these engine args cannot start this engine, found before anything starts (a key the
        harness sets itself, a value the server's own parser refuses), as one line; None when
        nothing is known against them (the default: only :meth:`unknown_args` checks names)."""
        return None

    def flags_hint(self) -> str:
        """The command that lists this engine's flags, for a refusal's line."""
        return self.known_flags()[1] or f"python -m {self.shim or 'own_engine'} --help"

    def known_flags(self) -> tuple[frozenset[str], str]:
        """(every ``--flag`` this engine's server accepts, the help command they were read from: ""
        for a server of this repository); an empty set when there is no list."""
        from adapters.flags import declared_flags, help_flags

        if self.flag_source is not None:
            return declared_flags(self.flag_source), ""
        return help_flags(self.name, self.help_argvs())

    def help_argvs(self) -> tuple[tuple[str, ...], ...]:
        """Commands that print the installed engine server's flags, tried in order (``()``: none, the
        default; a third-party engine's adapter returns its own when it is installed)."""
        return ()

    def probe_for_launch(self, config: LaunchConfig) -> ProbeResult:
        """The probe :meth:`launch` checks first (an adapter may consult ``config.engine_args``)."""
        return self.probe()

    def served_name(self, config: LaunchConfig) -> str:
        """The model name requests must carry: ``config.model_name`` or the folder's name."""
        return config.model_name or Path(config.model_dir).name

    def log_path(self, config: LaunchConfig) -> Path:
        """``run_dir/logs/<engine>.log`` (``<config.log_name>.log`` when set: a tuning configuration)."""
        return Path(config.run_dir) / "logs" / f"{config.log_name or self.name}.log"

    @contextmanager
    def launch(self, config: LaunchConfig) -> Iterator[Endpoint]:
        """Start the engine, wait for health, yield its :class:`Endpoint`, always stop it.

        Raises :class:`EngineError` when the engine is unavailable, fails to start, or crashed
        during the with-block.
        """
        probe = config.probe or self.probe_for_launch(config)
        if not probe.available:
            raise EngineError(f"{self.name}: {probe.reason}")
        port = config.port or find_free_port()
        try:
            plan = self.build_command(config, port)
        except ValueError as exc:
            raise EngineError(f"{self.name}: {exc}") from exc
        health_host = "127.0.0.1"
        if config.host:  # bench serve: bind where the user asked (every server here takes --host)
            plan.cmd = [config.host if i and plan.cmd[i - 1] == "--host" else a for i, a in enumerate(plan.cmd)]
            health_host = "127.0.0.1" if config.host in ("0.0.0.0", "::") else config.host
        env = {**os.environ, **plan.env}
        log_path = self.log_path(config)
        server = ServerProcess(
            plan.cmd, log_path=log_path, port=port, env=env, cwd=plan.cwd, host=health_host,
            health_paths=plan.health_paths, startup_timeout_s=config.startup_timeout_s,
            stop_grace_s=self.stop_grace_s, name=self.name, cancel=config.cancel,
        )
        with server:
            base = server.base_url
            effective = {
                "engine": self.name,
                "display_name": plan.display_name,
                "version": probe.version,
                "command": plan.command_line(),
                "argv": list(plan.cmd),
                "env": redact_env(plan.env),
                "threads": config.threads,
                "engine_args": dict(config.engine_args),
                "port": port,
                **({"shim": self.shim, "production_server": self.production_server} if self.shim else {}),
                "startup_s": round(server.startup_s or 0.0, 3),
                "processes": server.processes,  # live processes in the server's group once healthy
                **plan.extra_config,
            }
            lowered = lowered_precision(self, config.engine_args)
            if lowered and str(effective.get("numerics") or "reference") == "reference":
                effective["numerics"] = f"lower precision ({lowered})"  # the fidelity gate's floor for other numerics
            yield Endpoint(
                base_url=base,
                model_name=plan.model_name,
                display_name=plan.display_name,
                effective_config=effective,
                supports_ignore_eos=plan.supports_ignore_eos,
                metrics_url=(base + plan.metrics_path) if plan.metrics_path else None,
                log_path=log_path,
                pause=server.pause,
                resume=server.resume,
                pgid=server.pgid,
                series_parser=self.series_parser,
            )


def python_for_harness() -> str:
    """The interpreter that runs the harness (own engine and the transformers shim use it)."""
    import sys

    return sys.executable


def project_pythonpath(extra: str | None = None) -> str:
    """``PYTHONPATH`` that makes this project's packages importable from any venv."""
    parts = [str(PROJECT_ROOT)]
    if extra:
        parts.append(extra)
    elif os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(parts)


def require_dir(path: Path, what: str) -> Path:
    """Return ``path`` when it is a folder, else raise ValueError naming ``what`` and the fix."""
    p = Path(path)
    if not p.is_dir():
        raise ValueError(f"{what} {p} is not a folder: pass a Hugging Face model folder (--model DIR)")
    return p


__all__ = [
    "EngineError", "LaunchPlan", "ServerAdapter", "render_flags", "split_engine_args", "thread_env",
    "redact_env", "project_pythonpath", "python_for_harness", "require_dir",
]
