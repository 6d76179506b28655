"""What the smaller commands are asked for, generated into their commands like ``bench run``'s
(:func:`harness.app.cli.options.command_from`): ``bench serve`` (:class:`ServeSettings`),
``bench import`` (:class:`ImportSettings`), ``bench model prepare|info`` and ``bench calibrate``,
``bench results list|show|export|rebuild``. ``--output-dir``, ``--run-id`` and ``--model`` are the
declarations :mod:`harness.app.settings.shared` holds for every command; a help text narrows to
what the option means here. Every check raises ``ValueError`` with the one line the CLI prints (exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

from pydantic import Field, field_validator

from workloads.options import WorkloadOptions

from harness.app.settings.fields import Cli, CliModel
from harness.app.settings.shared import MODEL, OUTPUT_DIR, RUNS_DIR, OutputDir
from harness.app.settings.workload import SHOW_OPTIONS, workload_from

_RUN = Cli("run", argument=True, help="Run id, run folder, or 'latest'.")
_STORED = RUNS_DIR.replace(help="Where the runs are stored.")


class ServeSettings(CliModel):
    """``bench serve RECIPE``: the ``recipe`` file, the ``host`` interface and TCP ``port`` to serve
    on, the ``model`` folder (None = the embedded model) and ``startup_timeout_s`` (s)."""

    recipe: Annotated[Path, Cli("RECIPE", argument=True, help="A recipe.json a run wrote (results/<run>/recipe.json).")]
    host: Annotated[str, Cli("--host", help="Interface to bind: 127.0.0.1 (this machine only) or 0.0.0.0 (every interface).")] = "127.0.0.1"
    port: Annotated[int, Cli("--port", help="TCP port to serve on.")] = 8000
    model: Annotated[Optional[str], MODEL.replace(flags=("--model",), help="Model folder (default: the embedded default model, as the run that wrote the recipe used unless it was given --model).")] = None
    startup_timeout_s: Annotated[float, Cli("--startup-timeout", help="Seconds to wait for the server to answer its health check.")] = 600.0

    @field_validator("port")
    @classmethod
    def _port(cls, port: int) -> int:
        if not 0 < port < 65536:
            raise ValueError(f"--port {port} is not a TCP port: give 1 to 65535")
        return port

    @field_validator("host")
    @classmethod
    def _host(cls, host: str) -> str:
        if not host.strip():
            raise ValueError("--host is empty: give 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)")
        return host


FROM_HELP = ("The tool that wrote FILE: vllm (vllm bench serve --save-result [--save-detailed]), sglang (bench_serving "
             "--output-file [--output-details]), aiperf (its artifact folder, profile_export.jsonl or "
             "profile_export_aiperf.json), guidellm (benchmarks.json).")


class ImportSettings(CliModel):
    """``bench import FILE --from TOOL``: the result ``file``, the ``tool`` that wrote it, the run
    folder (``run_id`` None = timestamp-import-TOOL under ``output_dir``), which ``entry`` of a file
    holding several (1-based; None = the last) and the shape the tool ran (``workload``,
    ``input_len`` and ``output_len`` in tokens; None = what the file names)."""

    file: Annotated[Path, Cli("file", argument=True, help="The tool's result file (AIPerf: also its artifact folder).")]
    tool: Annotated[str, Cli("--from", help=FROM_HELP)]
    run_id: Annotated[Optional[str], Cli("--run-id", help="Run folder name (default: timestamp-import-TOOL).")] = None
    output_dir: Annotated[OutputDir, OUTPUT_DIR.replace(help="Where the run folder is written.")] = Path("results")
    entry: Annotated[Optional[int], Cli("--entry", help="Which result of a file holding several (an appended vLLM/SGLang file, a GuideLLM sweep), 1-based; default: the last.")] = None
    workload: Annotated[Optional[str], Cli("--workload", "-w", help="The workload the tool ran, in our terms (e.g. random), so bench report ranks the import with native runs of the same shape; default: what the file names (SGLang's dataset), else 'imported' (compared with no native run).")] = None
    input_len: Annotated[Optional[int], Cli("--input-len", help="The prompt length (tokens) the tool was run with, e.g. vllm bench serve --random-input-len (vLLM's file omits it).")] = None
    output_len: Annotated[Optional[int], Cli("--output-len", help="The output length (tokens) the tool was run with, e.g. --random-output-len.")] = None


class ModelPrepareSettings(CliModel):
    """``bench model prepare``: ``force`` converts the embedded GGUF again."""

    force: Annotated[bool, Cli("--force", help="Convert again even if already prepared.")] = False


class ModelInfoSettings(CliModel):
    """``bench model info [MODEL]``: the ``model`` folder (None = the embedded model)."""

    model: Annotated[Optional[str], Cli("model", argument=True, help="Model folder (default: the embedded model).")] = None


class CalibrateSettings(CliModel):
    """``bench calibrate``: ``streams`` concurrent streams for the ITL timing error and ``burst``
    requests for the max rate (bounds: :mod:`harness.loadgen.calibrate`)."""

    streams: Annotated[int, Cli("--streams", help="Concurrent streams for the ITL timing-error measurement (1-1,000: each holds a connection).")] = 32
    burst: Annotated[int, Cli("--burst", help="Requests for the max-rate measurement (1-100,000; 300 measures the rate to a few per cent).")] = 300

    @field_validator("streams", "burst")
    @classmethod
    def _bounds(cls, value: int, info) -> int:  # type: ignore[no-untyped-def]
        from harness.loadgen.calibrate import MAX_BURST, MAX_STREAMS

        name, bound = {"streams": ("--streams", MAX_STREAMS), "burst": ("--burst", MAX_BURST)}[str(info.field_name)]
        if not 1 <= value <= bound:
            raise ValueError(f"{name} must be between 1 and {bound:,}, got {value:,}")
        return value


class RunsSettings(CliModel):
    """``bench results list``: the ``output_dir`` whose runs are listed."""

    output_dir: Annotated[OutputDir, _STORED] = Path("results")


class StoredRunSettings(CliModel):
    """``bench results export|rebuild RUN``: the ``run`` (id under ``output_dir``, folder or 'latest')."""

    run: Annotated[str, _RUN] = "latest"
    output_dir: Annotated[OutputDir, _STORED] = Path("results")


class ShowSettings(StoredRunSettings):
    """``bench results show RUN``: ``json_out`` prints summary.json as is."""

    json_out: Annotated[bool, Cli("--json", help="Print summary.json as is.")] = False


class RebuildSettings(StoredRunSettings):
    """``bench results rebuild RUN``: the ``run`` must be named (a killed run's id or folder)."""

    run: Annotated[str, _RUN.replace(help="Run id or run folder of a killed run.")]


class WorkloadShowSettings(CliModel):
    """``bench workloads show NAME``: the ``workload`` (its name and the options that shape it, as
    ``bench run`` takes them), the ``model`` folder whose tokenizer counts tokens (None = the
    embedded model) and ``json_out`` ({spec, stats} as JSON)."""

    workload: Annotated[WorkloadOptions, SHOW_OPTIONS] = Field(default_factory=WorkloadOptions)
    model: Annotated[Optional[str], MODEL.replace(help="Model folder whose tokenizer counts tokens (default: embedded SmolLM2).")] = None
    json_out: Annotated[bool, Cli("--json", help="Print {spec, stats} as JSON instead of tables.")] = False

    @field_validator("workload", mode="before")
    @classmethod
    def _workload(cls, value: object) -> object:
        return workload_from(SHOW_OPTIONS, value) if isinstance(value, dict) else value
