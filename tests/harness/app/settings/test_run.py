"""One settings model (issue 25): ``bench run`` and ``bench search`` are generated from
:class:`RunSettings` / :class:`SearchSettings`, so an option is declared once, shows the same
text in both commands (but for the documented per-command overrides) and a field added to
the model is an option of both. Fast: nothing is measured."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer
from pydantic import Field, ValidationError
from typer.testing import CliRunner

from harness.app.cli import app
from harness.app.cli.options import cli_params, command_from
from harness.app.settings.fields import Cli, error_line
from harness.app.settings.run import (DeploymentSettings, EngineSettings, LadderSettings, MeasureSettings,
                                      OutputSettings, RunSettings)
from harness.app.settings.tune_options import TuneSettings
from harness.app.search.config import SearchMeasure, SearchSettings
from harness.metrics import SLO
from workloads.options import WorkloadOptions

# Where a search truly means something else, SearchSettings redeclares the field (see its comments).
SEARCH_OWN_TEXT = {"--seed", "--slo", "--repeats"}
SEARCH_OWN_DEFAULT = {"--workload"}  # random, not agentic


def help_options(argv: list[str], command: Any = app) -> dict[str, tuple[str, str | None]]:
    """``--option → (help text, default)`` from the rich ``--help`` of a command, 250 columns wide."""
    res = CliRunner().invoke(command, [*argv, "--help"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    options: dict[str, list[str]] = {}
    current = None
    for line in res.output.splitlines():
        if not line.startswith("│"):  # outside the panels (the usage, the epilog)
            current = None
            continue
        inner = line.strip().strip("│").rstrip()
        if not inner.strip() or line.strip()[:1] in "╭╰":
            continue
        if re.match(r"^ ?--", inner):  # an option's first line (its help may wrap onto lines starting with --)
            cells = re.split(r"\s{2,}", inner.strip())
            current = cells[0]
            start = 1 + (len(cells) > 1 and cells[1].startswith("-"))  # a short name
            if len(cells) > start and re.fullmatch(r"(TEXT|INT|NUM|PATH|\w+(\|\w+)+)( \[.*\])?", cells[start]):
                start += 1  # what it takes (a flag takes nothing)
            options[current] = cells[start:]
        elif current is not None:
            options[current].append(inner.strip())
    out = {}
    for name, parts in options.items():
        text = " ".join(" ".join(parts).split())
        m = re.search(r"\s*\[default: ([^\]]*)\]$", text)
        out[name] = (text[: m.start()] if m else text, m.group(1) if m else None)
    return out


def test_run_and_search_show_one_text_for_every_shared_option() -> None:
    run, search = help_options(["run"]), help_options(["search"])
    shared = (set(run) & set(search)) - {"--help"}
    assert {"--engine", "--model", "--seed", "--slo", "--warmup", "--output-dir", "--run-id", "--base-url", "--engine-arg",
            "--threads", "--request-timeout", "--startup-timeout", "--sequential-start", "--max-failure-rate",
            "--no-ignore-eos", "--num-requests", "--workload-spec", "--repeats"} <= shared
    texts = {name for name in shared if run[name][0] != search[name][0]}
    defaults = {name for name in shared if run[name][1] != search[name][1]}
    assert texts == SEARCH_OWN_TEXT, {n: (run[n][0], search[n][0]) for n in texts ^ SEARCH_OWN_TEXT}
    assert defaults == SEARCH_OWN_DEFAULT, {n: (run[n][1], search[n][1]) for n in defaults ^ SEARCH_OWN_DEFAULT}
    assert run["--workload"][1] == "agentic" and search["--workload"][1] == "random"


def test_the_generated_options_keep_bench_runs_order_and_leave_out_run_only_options_in_search() -> None:
    run, search = list(help_options(["run"])), list(help_options(["search"]))
    assert run[:4] == ["--engine", "--model", "--engine-arg", "--engine-config"] and run[-3:] == ["--output-dir", "--run-id", "--help"]
    for settings in (RunSettings, SearchSettings):
        params = cli_params(settings)
        flags = [p.cli.flag for p in params]
        # the listed options in the listed order; an option listed nowhere (a new field) is still shown
        assert [f for f in flags if f in settings.cli_order] == list(settings.cli_order)
        assert all(p.panel in settings.cli_panels for p in params)  # every option under one of the panels
        panels = [p.panel for p in params]
        assert panels == sorted(panels, key=list(settings.cli_panels).index)  # grouped panel by panel
    # a search shows exactly the options it lists (it reads them), each of them one of bench run's or its own
    assert search == [*SearchSettings.cli_order, "--help"] and set(run) - set(search) and SearchSettings.cli_only_listed


def test_run_help_is_in_panels_fits_80_columns_and_shows_flags_as_flags() -> None:
    res = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "80", "TERM": "dumb"})
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in res.output and "<bool>" not in res.output
    titles = [line.strip("╭─╮ ") for line in lines if line.startswith("╭─")]
    assert titles == list(RunSettings.cli_panels)  # one panel per heading, --help in the last
    assert "'ttft_p90=500,tpot_p90=50'" in res.output  # the --slo example whole
    tune = next(i for i, line in enumerate(lines) if line.startswith("│ --tune "))
    assert next(i for i, line in enumerate(lines) if line.startswith("│ --tune-configs")) - tune <= 10
    assert "--tune's search spaces" in res.output and len(lines) < 520
    flags = [line.split()[1] for line in lines if re.match(r"│ --(no-|sequential|setup|allow|tune-lower)", line)]
    assert {"--no-equivalence", "--sequential-start", "--setup-engines", "--allow-unchecked"} <= set(flags)
    for line in lines:  # a flag's help starts right after its name: no value shown
        if re.match(r"│ --(no-equivalence|sequential-start|setup-engines) ", line):
            assert not re.search(r"--\S+\s+(TEXT|INT|NUM|PATH)\s", line), line


def test_search_help_fits_80_columns_and_says_the_default_slos_in_words() -> None:
    from harness.scoring.verdict.decision import DEFAULT_SLOS

    for command in ("search", "run"):
        res = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "80", "TERM": "dumb"})
        assert res.exit_code == 0, res.output
        assert max(len(line) for line in res.output.splitlines()) <= 80 and "…" not in res.output
        assert "harness." not in res.output and "DEFAULT_SLOS" not in res.output  # no Python path in a help text
    slo = " ".join(help_options(["search"])["--slo"][0].split())
    # the defaults read off the one table: a change there changes the help
    assert f"on a CPU {DEFAULT_SLOS['cpu', '']} (agentic ttft_p90=4000), on a GPU {DEFAULT_SLOS['gpu', '']}" in slo


class RunPlus(RunSettings):
    # a new setting: one field, its option and its --help panel declared on it
    extra_knob: Annotated[int, Cli("--extra-knob", panel="Tuning", help="A knob declared once, on the model.")] = 3


class SearchPlus(SearchSettings, RunPlus):
    pass


class SearchReadingPlus(SearchSettings, RunPlus):
    # a search that reads the new knob lists it among its options (it shows only what it reads)
    cli_panels = {**SearchSettings.cli_panels, "Measuring": (*SearchSettings.cli_panels["Measuring"], "--extra-knob")}
    cli_order = tuple(flag for flags in cli_panels.values() for flag in flags)


def test_a_field_added_to_the_settings_is_an_option_of_bench_run_and_of_a_search_that_reads_it(tmp_path: Path) -> None:
    seen: list[Any] = []
    plus = typer.Typer()
    plus.command("run")(command_from(RunPlus, seen.append))
    plus.command("search")(command_from(SearchPlus, seen.append))
    plus.command("reading")(command_from(SearchReadingPlus, seen.append))
    for name in ("run", "reading"):
        assert help_options([name], plus)["--extra-knob"] == ("A knob declared once, on the model.", "3")
        res = CliRunner().invoke(plus, [name, "--engine", "own", "--extra-knob", "7", "--threads", "1", "-o", str(tmp_path)])
        assert res.exit_code == 0, res.output
    assert "--extra-knob" not in help_options(["search"], plus)  # not offered where nothing reads it
    res = CliRunner().invoke(plus, ["search", "--engine", "own", "--extra-knob", "7"])
    assert res.exit_code == 2 and "No such option: --extra-knob" in res.output
    lines = CliRunner().invoke(plus, ["run", "--help"], env={"COLUMNS": "100"}).output.splitlines()
    panel = next(i for i, line in enumerate(lines) if line.startswith("╭─ Tuning "))
    knob = next(i for i, line in enumerate(lines) if line.startswith("│ --extra-knob "))
    assert panel < knob < next(i for i, line in enumerate(lines) if i > panel and line.startswith("╰"))  # under its panel
    run, search = seen
    assert isinstance(run, RunPlus) and isinstance(search, SearchReadingPlus)
    assert run.extra_knob == search.extra_knob == 7 and run.engine.threads == search.engine.threads == 1
    assert run.workload.name == "agentic" and search.workload.name == "random" and search.workload.num_requests == 24


class MeasurePlus(MeasureSettings):
    # a new setting of a group: one field, nothing listed anywhere (no cli_panels, no cli_exclude)
    new_knob: Annotated[int, Cli("--new-knob", help="A measuring knob declared once, in its group.")] = 5


class RunMeasurePlus(RunSettings):
    measure: MeasurePlus = Field(default_factory=lambda: MeasurePlus())


class SearchMeasureGroupPlus(SearchMeasure, MeasurePlus):
    pass  # search's measuring group is bench run's subclassed (--repeats): the new field reaches it too


class SearchMeasurePlus(SearchSettings, RunMeasurePlus):
    measure: SearchMeasureGroupPlus = Field(default_factory=lambda: SearchMeasureGroupPlus())


def test_a_field_added_to_a_group_shows_under_its_groups_panel_with_no_list_edited(tmp_path: Path) -> None:
    assert "--new-knob" not in RunSettings.cli_order
    seen: list[Any] = []
    plus = typer.Typer()
    plus.command("run")(command_from(RunMeasurePlus, seen.append))
    plus.command("search")(command_from(SearchMeasurePlus, seen.append))
    params = {p.cli.flag: p for p in cli_params(RunMeasurePlus)}
    assert params["--new-knob"].panel == "Measuring"
    measuring = [f for f, p in params.items() if p.panel == "Measuring"]
    assert measuring[-1] == "--new-knob"  # after the panel's listed options
    lines = CliRunner().invoke(plus, ["run", "--help"], env={"COLUMNS": "100"}).output.splitlines()
    panel = next(i for i, line in enumerate(lines) if line.startswith("╭─ Measuring "))
    knob = next(i for i, line in enumerate(lines) if line.startswith("│ --new-knob "))
    assert panel < knob < next(i for i, line in enumerate(lines) if i > panel and line.startswith("╰"))
    res = CliRunner().invoke(plus, ["run", "--engine", "own", "--new-knob", "9", "--threads", "1", "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert [s.measure.new_knob for s in seen] == [9]
    # bench search shows only the options it reads: the new knob is not offered there, nothing to edit
    assert "--new-knob" not in {p.cli.flag for p in cli_params(SearchMeasurePlus)}


def test_an_option_of_a_group_of_options_no_command_lists_shows_under_its_groups_panel() -> None:
    """A workload or energy option no command lists (a new field of WorkloadOptions, declared in
    WORKLOAD_OPTIONS) shows under its group's panel, not the last one ("Output")."""
    from harness.app.settings.energy import ENERGY_OPTIONS
    from harness.app.settings.workload import WORKLOAD_OPTIONS

    shown = {p.cli.flag: p.panel for p in cli_params(RunSettings)}
    for group in (WORKLOAD_OPTIONS, ENERGY_OPTIONS):
        assert group.panel in RunSettings.cli_panels and group.replace().panel == group.panel
        assert all(shown[cli.flag] in RunSettings.cli_panels for cli in group.options.values())

    class Unlisted(RunSettings):
        cli_panels = {k: tuple(f for f in v if f != "--time-scale") for k, v in RunSettings.cli_panels.items()}
        cli_order = tuple(flag for flags in cli_panels.values() for flag in flags)

    assert {p.cli.flag: p.panel for p in cli_params(Unlisted)}["--time-scale"] == "Workload"


def test_the_command_line_values_arrive_parsed_in_the_settings(tmp_path: Path) -> None:
    seen: list[Any] = []
    plus = typer.Typer()
    plus.command("run")(command_from(RunSettings, seen.append))
    plus.command("other")(lambda: None)
    res = CliRunner().invoke(plus, ["run", "-e", "own,vllm", "-w", "random", "-n", "5", "--request-rate", "inf",
                                    "--slo", "ttft_p99=500", "--engine-arg", "vllm:max_num_seqs=8", "--sequential-start",
                                    "--no-ignore-eos", "--parity", "strict", "--duration", "1m", "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    (s,) = seen
    assert s.engine.names == ["own", "vllm"] and s.decision.slos == [SLO("ttft", 500.0)] and s.engine.args == {"vllm": {"max_num_seqs": "8"}}
    assert s.workload == WorkloadOptions(name="random", num_requests=5, request_rate=float("inf"), duration_s=60.0)
    assert (s.engine.parallel_start, s.measure.ignore_eos, s.check.equivalence, s.engine.parity) == (False, False, True, "strict")


def test_a_bad_value_is_the_validators_own_line_in_code_as_on_the_command_line() -> None:
    own = {"names": ["own"]}
    cases = [({"engine": {"names": "own,own"}}, "--engine lists 'own' twice: name each engine once"),
             ({"engine": own, "measure": {"warmup": -1}}, "--warmup must be >= 0, got -1"),
             ({"engine": own, "decision": {"slos": "ttft_p99"}}, "--slo: SLO 'ttft_p99' has no value: write it as e.g. ttft_p99=500 (ms)"),
             ({"engine": {**own, "threads": "many"}}, "--threads takes a whole number, got 'many': e.g. --threads 4"),
             ({"engine": own, "workload": {"name": "random", "seed": -1}}, "--seed must be >= 0, got -1")]
    for values, line in cases:
        with pytest.raises(ValidationError) as err:
            RunSettings.model_validate(values)
        assert error_line(err.value, RunSettings) == line
    with pytest.raises(ValidationError) as err:
        SearchSettings.model_validate({"engine": own, "measure": {"repeats": 11}})
    assert error_line(err.value, SearchSettings) == "--repeats must be between 1 and 10, got 11"
    res = CliRunner().invoke(app, ["search", "--engine", "own", "--repeats", "11"])
    assert res.exit_code == 2 and res.output == "error: --repeats must be between 1 and 10, got 11\n"


def test_settings_built_in_code_check_values_only_and_a_search_copies_its_run_settings(tmp_path: Path) -> None:
    # no machine checks in code: a missing spec file is the builder's to report, no output folder is made
    s = RunSettings(engine=EngineSettings(names=["openai"], model="served"),
                    deployments=DeploymentSettings(base_url="http://h:1"), output=OutputSettings(output_dir=tmp_path / "new"),
                    workload=WorkloadOptions(spec_file=tmp_path / "missing.yaml"))
    assert s.engine.model == "served" and s.deployments.served_model_name is None and not (tmp_path / "new").exists()
    search = SearchSettings(engine=EngineSettings(names=["own"], threads=1), measure={"repeats": 3})
    run = search.run_config(WorkloadOptions(name="random", seed=4), [SLO("ttft", 9.0)])
    assert (run.measure.repeats, run.check.equivalence, run.measure.calibrate, run.output.report, run.engine.threads) == \
        (1, False, False, False, 1)
    assert run.workload.seed == 4 and search.measure.repeats == 3 and search.workload.name == "random"


def test_one_reader_of_key_value_lists() -> None:
    from results.pairs import parse_pairs, split_list

    def no_value(item: str) -> ValueError:
        return ValueError(f"no value: {item!r}")

    assert list(parse_pairs(" a=1, ,b = 2=3,", no_value)) == [("a", "1"), ("b ", " 2=3")]  # as written around the first =
    assert list(parse_pairs(["x:k=1,2"], no_value)) == [("x:k", "1,2")]  # a repeatable option's value keeps its commas
    assert list(parse_pairs(None, no_value)) == [] and split_list(" own, ,vllm ") == ["own", "vllm"]
    pairs = parse_pairs("a=1,b,c=3", no_value)
    assert next(pairs) == ("a", "1")  # lazily: the first bad item is reported when reached
    with pytest.raises(ValueError, match="no value: 'b'"):
        next(pairs)


def test_a_request_count_or_rate_asks_for_that_load_point_from_the_command_line_or_a_spec_file(tmp_path: Path) -> None:
    """Issue 39: `--num-requests 8` ran an 11-minute ladder and a spec file with `request_rate: 200`
    and `num_requests: 20` a 192-request one; whoever gives a count or a rate wants that load point."""
    spec = tmp_path / "chat.yaml"
    spec.write_text("kind: chat\nrequest_rate: 200\nnum_requests: 20\n")
    assert RunSettings(workload=WorkloadOptions(name="chat")).ladder
    assert not RunSettings(workload=WorkloadOptions(name="chat", num_requests=8)).ladder
    assert not RunSettings(workload=WorkloadOptions(name="chat", spec_file=spec)).ladder
    (tmp_path / "lengths.yaml").write_text("kind: random\ninput_len: 64\n")  # lengths only: still a ladder
    assert RunSettings(workload=WorkloadOptions(name="random", spec_file=tmp_path / "lengths.yaml")).ladder


def test_a_ladder_option_is_refused_with_one_load_point_when_given_at_whatever_value() -> None:
    """Issue 39's review: `--max-load 64 -n 8` (64 the default) passed while `--max-load 32 -n 8` was
    refused: whether it was given is what was typed (from_cli's ``given``) or set in code, never its value."""
    point = {"engine": {"names": "own"}, "workload": {"name": "chat", "num_requests": "8"}}
    with pytest.raises(ValueError, match="--max-load applies to load ladders, and this run measures one load point"):
        RunSettings.from_cli({**point, "load": {"max_load": 64}}, given={"engine", "workload", "load", "load.max_load"})
    assert RunSettings.from_cli({**point, "load": {"max_load": 64}}, given={"engine", "workload"}).load.max_load == 64  # its default
    with pytest.raises(ValidationError, match="--ladder-budget applies to load ladders"):
        RunSettings(workload=WorkloadOptions(name="chat", num_requests=8), load=LadderSettings(ladder_budget_s=150))
    with pytest.raises(ValidationError, match="--tune-configs sets how many configurations --tune tries"):
        RunSettings(tune=TuneSettings(configs=4))


def test_the_time_budget_reads_the_units_people_write() -> None:
    from harness.app.settings.checks import parse_duration

    assert [parse_duration(t) for t in ("900", "900s", "15m", "1.5h", "1h30m")] == [900, 900, 900, 5400, 5400]
    assert RunSettings.from_cli({"load": {"time_budget_s": "15m"}}).load.time_budget_s == 900


def test_every_budget_reads_one_duration_vocabulary() -> None:
    """--time-budget, --ladder-budget and --tune read the same durations; --tune 0 is no search."""
    cfg = RunSettings.from_cli({"load": {"ladder_budget_s": "2m30s", "time_budget_s": "1h"}, "tune": {"seconds": "3m"}})
    assert (cfg.load.time_budget_s, cfg.load.ladder_budget_s, cfg.tune.seconds) == (3600, 150, 180)
    assert RunSettings.from_cli({"tune": {"seconds": "0"}}).tune.seconds == 0
    with pytest.raises(ValueError, match="--ladder-budget '2x' is not a duration"):
        RunSettings.from_cli({"load": {"ladder_budget_s": "2x"}})
    with pytest.raises(ValueError, match="--ladder-budget must be above 0 s"):
        RunSettings.from_cli({"load": {"ladder_budget_s": "0"}})
    for option, values in (("--ladder-budget", {"load": {"ladder_budget_s": "inf"}}), ("--tune", {"tune": {"seconds": "inf"}})):
        with pytest.raises(ValueError, match=f"{option} needs a finite duration"):  # only the job may be unbounded
            RunSettings.from_cli(values)
    with pytest.raises(ValueError, match="--tune must be 0 or more, got '-5'"):  # a negative duration is one, refused as such
        RunSettings.from_cli({"tune": {"seconds": "-5"}})
    with pytest.raises(ValueError, match="--time-budget must be above 0 s, got '-1m'"):
        RunSettings.from_cli({"load": {"time_budget_s": "-1m"}})


def test_an_endpoint_run_is_salted_unless_the_user_says_none(tmp_path: Path) -> None:
    """--endpoint salts the prompts by default (a deployment's warm cache must serve none of them);
    --prompt-salt none, typed, sends none (an endpoint just started, e.g. by bench serve)."""
    seen: list[Any] = []
    cli = typer.Typer()
    cli.command("run")(command_from(RunSettings, seen.append))
    base = ["--endpoint", "prod=http://127.0.0.1:9", "--model", "m", "--threads", "1", "-o", str(tmp_path)]
    for extra in ([], ["--prompt-salt", "none"]):
        res = CliRunner().invoke(cli, base + extra)
        assert res.exit_code == 0, res.output
    assert seen[0].workload.prompt_salt == "auto" and seen[1].workload.prompt_salt == "none"
    from workloads.salt import resolve_salt
    from workloads.spec import WorkloadSpec

    assert WorkloadSpec(kind="agentic", prompt_salt="none").prompt_salt is None and resolve_salt("none") is None


def test_a_value_of_the_wrong_type_or_out_of_bounds_names_the_option_and_what_it_takes() -> None:
    """No pydantic wording ("Input should be ...") reaches the user: the option, what it takes, an example."""
    from harness.app.settings.fields import plain_error

    cases = [({"engine": {"threads": "many"}}, "--threads takes a whole number, got 'many': e.g. --threads 4"),
             ({"check": {"fidelity_floor": 2.0}}, "--fidelity-floor must be <= 1.0, got 2.0"),
             ({"load": {"max_load": 0}}, "--max-load must be >= 1, got 0"),
             ({"engine": {"parity": "fair"}}, "--parity takes one of 'report' or 'strict', got 'fair'"),
             ({"measure": {"warmup": 1.5}}, "--warmup takes a whole number, got 1.5: e.g. --warmup 4")]
    for values, line in cases:
        with pytest.raises(ValidationError) as err:
            RunSettings.model_validate(values)
        assert error_line(err.value, RunSettings) == line
    assert plain_error({"type": "missing", "loc": ("engine",)}, "engine") == "engine is required: give it"
    assert plain_error({"type": "extra_forbidden", "input": 1}, "speed") == "speed is not a setting here: drop it"


def test_a_setting_added_to_a_group_is_an_option_under_its_panel_read_on_the_group(tmp_path: Path) -> None:
    """Issue 42: a setting is declared once, on its group; the command line, --help's panel and
    the reads (``settings.measure.extra``) follow."""
    from harness.app.settings.groups import MeasureSettings

    class Measure(MeasureSettings):
        extra: Annotated[int, Cli("--extra-measure", help="A measuring knob declared on its group.")] = 2

    class Run(RunSettings):
        measure: Measure = Measure()

    seen: list[Any] = []
    cli = typer.Typer()
    cli.command("run")(command_from(Run, seen.append))
    cli.command("other")(lambda: None)
    res = CliRunner().invoke(cli, ["run", "--engine", "own", "--extra-measure", "5", "--warmup", "3", "--threads", "1",
                                   "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert seen[0].measure.extra == 5 and seen[0].measure.warmup == 3 and seen[0].engine.threads == 1
    lines = CliRunner().invoke(cli, ["run", "--help"], env={"COLUMNS": "100"}).output.splitlines()
    panel = next(i for i, line in enumerate(lines) if line.startswith("╭─ Measuring "))
    knob = next(i for i, line in enumerate(lines) if line.startswith("│ --extra-measure "))
    assert panel < knob < next(i for i, line in enumerate(lines) if i > panel and line.startswith("╰"))
