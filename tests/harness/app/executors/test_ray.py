"""``bench run --executor ray`` on a single-node local Ray instance (nothing leaves this machine): trials as Ray tasks give
the run folder a local run gives; a trial whose worker dies is failed with its node and the
others complete; a SIGINT to the driver leaves no engine, Ray worker or Ray daemon behind.

Engines are real server processes (tests/fake_servers/paced_server.py: fixed 30 ms TTFT and
10 ms between tokens) started through the production launch path, so request and token counts
must match the local executor exactly and latencies within scheduling noise. One Ray instance
per module (ray.init costs ~10 s here); it must start: a Ray that cannot start fails the tests.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

import ray
from ray import cloudpickle

import adapters.registry as registry
import tests.fake_servers.ray_engines as ray_engines
import tests.fake_servers.tunable_engine as tunable_engine
from adapters.base import LaunchConfig, ProbeResult
from harness.app.cli import app
from harness.app.trial.plan import EnginePlan
from harness.app.settings.ray_options import RAY_MISSING, check_executor, parse_resources
from harness.app.executors.ray import trial_options

pytestmark = [pytest.mark.ray, pytest.mark.serial]  # a local Ray instance of 2 CPUs and ladders timed on it: run alone (make test)
cloudpickle.register_pickle_by_value(ray_engines)  # the workers cannot import the tests folder
cloudpickle.register_pickle_by_value(tunable_engine)

ARGS = ["--workload", "random", "--num-requests", "6", "--input-len", "8", "--output-len", "4", "--warmup", "1",
        "--no-calibration", "--no-equivalence", "--no-feature-probes", "--threads", "1",
        "--request-rate", "inf"]  # one load point per trial (no ladder)
DRIVER = Path(__file__).parents[3] / "fake_servers" / "ray_driver.py"
PIXEL = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")


@pytest.fixture(autouse=True)
def _plots_unrendered(monkeypatch):
    """No test here reads a report's plots: each is a 1-pixel PNG, not a matplotlib render
    (several seconds a run on a 2-core machine); the reports are still written."""
    import reports.frontier, reports.jobs, reports.plots, reports.series, reports.timeline, reports.winner_map

    for module in (reports.frontier, reports.jobs, reports.plots, reports.series, reports.timeline, reports.winner_map):
        monkeypatch.setattr(module, "_png", lambda fig: PIXEL)


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """One local Ray instance for the module: 2 CPUs, this machine only; its workers get a private bench
    state dir (set before the raylet starts, which they inherit). Fails when Ray cannot start."""
    saved = os.environ.get("BENCH_STATE_DIR")
    os.environ["BENCH_STATE_DIR"] = str(tmp_path_factory.mktemp("ray-bench-state"))
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        yield ray.get_runtime_context().get_node_id()
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("BENCH_STATE_DIR", None)
        else:
            os.environ["BENCH_STATE_DIR"] = saved


def _paced(monkeypatch, pid_dir: Path, **special) -> None:
    real_get = registry.get_adapter

    def get(name, hardware=None):
        if name in special:
            return special[name]
        if name in ("own", "transformers"):
            return ray_engines.PacedEngine(name, str(pid_dir))
        return real_get(name, hardware)

    monkeypatch.setattr(registry, "get_adapter", get)


def _run(out: Path, run_id: str, *extra: str, code: int = 0) -> tuple[dict, dict]:
    res = CliRunner().invoke(app, ["run", *ARGS, "-o", str(out), "--run-id", run_id, *extra])
    assert res.exit_code == code, res.output
    run = out / run_id
    return json.loads((run / "summary.json").read_text()), json.loads((run / "manifest.json").read_text())


def _records(run: Path) -> list[dict]:
    """The run's records as stored, their token recounts (kept beside them) merged in."""
    from results.store import read_records

    return [r.model_dump(mode="json") for r in read_records(run / "requests.jsonl")]


def _gone(pids: list[int], within_s: float) -> list[int]:
    """The pids still alive (and not zombies) after waiting up to ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while True:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def _server_pids(pid_dir: Path) -> list[int]:
    return [int(p.read_text()) for p in pid_dir.glob("*.pid") if p.read_text().strip()]


# -- options, no Ray instance ----------------------------------------------------------------
def test_resources_parse_and_bad_items_say_the_form():
    assert parse_resources("num_gpus=1, num_cpus=8,h100_node=0.5") == {"num_gpus": 1.0, "num_cpus": 8.0, "h100_node": 0.5}
    assert parse_resources(None) == {}
    for bad in ("num_gpus", "num_gpus=-1", "=1", "gpu=lots", "a b=1", "x=inf"):
        with pytest.raises(ValueError, match=r"--ray-resources: .* is not NAME=NUMBER"):
            parse_resources(bad)
    with pytest.raises(ValueError, match="need --executor ray"):
        check_executor("local", "head:6379", None)
    with pytest.raises(ValueError, match="unknown --executor 'k8s'"):
        check_executor("k8s", None, None)


def test_trial_resources_hold_the_engine_threads_and_the_client():
    def plan(kind: str, hardware: tuple[str, ...], process: bool = True) -> EnginePlan:
        adapter = type("A", (), {"starts_process": process})()
        return EnginePlan("e", adapter, {"hardware": hardware}, ProbeResult(True, ""), LaunchConfig(Path("."), Path(".")), kind)

    assert trial_options(plan("cpu", ("cpu",)), 3, {}) == {"num_cpus": 4, "num_gpus": 0}
    assert trial_options(plan("nvidia", ("cpu", "nvidia")), 3, {}) == {"num_cpus": 4, "num_gpus": 1}
    assert trial_options(plan("cpu", ("nvidia",)), 1, {}) == {"num_cpus": 2, "num_gpus": 1}  # cannot run on a CPU
    assert trial_options(plan("cpu", ("cpu",), process=False), 3, {}) == {"num_cpus": 1, "num_gpus": 0}
    assert trial_options(plan("nvidia", ("nvidia",)), 7, {"num_gpus": 2, "h100_node": 1}) == \
        {"num_cpus": 8, "num_gpus": 2, "resources": {"h100_node": 1}}


def test_executor_ray_without_ray_is_one_line_exit_2(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray → ImportError, as without the extra
    res = CliRunner().invoke(app, ["run", "--engine", "own", "--executor", "ray", *ARGS, "-o", str(tmp_path)])
    assert res.exit_code == 2
    assert res.output.strip() == f"error: {RAY_MISSING}"
    assert "pip install 'llm-serve-bench[ray]'" in RAY_MISSING


def test_an_unreachable_cluster_is_one_line_exit_2(monkeypatch, tmp_path):
    def refuse(address=None, **kwargs):
        raise ConnectionError(f"Failed to connect to Ray cluster at {address}\nsecond line")

    monkeypatch.setattr(ray, "init", refuse)
    res = CliRunner().invoke(app, ["run", "--engine", "own", "--executor", "ray", "--ray-address", "10.0.0.9:6379", *ARGS,
                                   "-o", str(tmp_path)])
    assert res.exit_code == 2
    error = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and error[0].startswith("error: --ray-address 10.0.0.9:6379: cannot connect to a Ray cluster there (ConnectionError: "
                                 "Failed to connect to Ray cluster at 10.0.0.9:6379); is `ray start --head` running")
    assert error[0].endswith("also needs RAY_AUTH_MODE=token and its token here (~/.ray/auth_token)")


def test_nothing_but_the_ray_executor_imports_ray():
    code = ("import sys, harness.app.cli, harness.app.run.orchestrator, harness.app.executors.ray, harness.app.executors.ray_trial; "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


# -- on the module's Ray instance ------------------------------------------------------------
def test_four_trials_on_ray_equal_the_local_run(local_ray, monkeypatch, tmp_path):
    _paced(monkeypatch, tmp_path)
    engines = ["--engine", "own,transformers", "--repeats", "2"]
    local_s, local_m = _run(tmp_path, "local", *engines)
    ray_s, ray_m = _run(tmp_path, "ray", *engines, "--executor", "ray")
    assert sorted(p.name for p in (tmp_path / "ray").iterdir()) == sorted(p.name for p in (tmp_path / "local").iterdir())
    assert ray_s.keys() == local_s.keys() and ray_m.keys() == local_m.keys()
    for name in ("own", "transformers"):
        a, b = local_s["engines"][name], ray_s["engines"][name]
        assert a.keys() == b.keys() and a["status"] == b["status"] == "ok"
        assert len(a["repeats"]) == len(b["repeats"]) == 2
        for key in ("requests_sent", "requests_completed", "requests_failed", "total_input_tokens", "total_output_tokens"):
            assert a["metrics"][key] == b["metrics"][key], key
        assert b["metrics"]["requests_completed"] == 12 and b["metrics"]["total_output_tokens"] == 48
        for lat in ("ttft_ms", "e2el_ms"):  # 30 ms TTFT, 60 ms E2E by the server's pacing
            assert abs(a["metrics"][lat]["p50"] - b["metrics"][lat]["p50"]) < 25, (lat, a["metrics"][lat], b["metrics"][lat])
        entry = ray_m["engines"][name]
        assert set(local_m["engines"][name]) | {"ray_trials"} == set(entry)
        assert [t["repeat"] for t in entry["ray_trials"]] == [0, 1]
        assert {t["node_id"] for t in entry["ray_trials"]} == {local_ray}
        node_ip = ray.nodes()[0]["NodeManagerAddress"]
        assert all(t["hostname"] == socket.gethostname() and t["ip"] == node_ip and t["pid"] != os.getpid()
                   for t in entry["ray_trials"])
        assert "repeat 2, Ray node" in (tmp_path / "ray" / "logs" / f"{name}.log").read_text()
    local_r, ray_r = _records(tmp_path / "local"), _records(tmp_path / "ray")
    count = lambda recs: sorted((r["engine"], r["repeat"], r["phase"], r["request_id"], r["output_tokens_server"],
                                 r["input_tokens_retok"]) for r in recs)
    assert count(ray_r) == count(local_r) and len(ray_r) == 2 * 2 * (6 + 1)
    assert all(r["input_tokens_retok"] for r in ray_r if r["phase"] == "measured")  # recounts streamed back too
    assert {k for r in ray_r for k in r} == {k for r in local_r for k in r}
    assert _gone(_server_pids(tmp_path), 10) == []


def test_run_search_and_ray_measure_through_one_path(local_ray, monkeypatch, tmp_path):
    """The same paced engine measured by ``bench run``, by one ``bench search`` probe at the same
    load and by the Ray executor: the same per-request fields, the same summary fields, the
    same counts and latencies within the server's pacing noise (30 ms TTFT, 10 ms per token)."""
    _paced(monkeypatch, tmp_path)
    slo = ["--slo", "ttft_p99=2000,tpot_p99=200"]  # the same SLOs judged on every path
    load = ["--engine", "own", "--num-requests", "8", "--max-concurrency", "2", "--request-rate", "inf", *slo]
    run_s, _ = _run(tmp_path, "run", *load)
    ray_s, _ = _run(tmp_path, "ray", *load, "--executor", "ray")
    res = CliRunner().invoke(app, ["search", "--engine", "own", "--workload", "random", "--num-requests", "8",
                                   "--input-len", "8", "--output-len", "4", "--warmup", "1", "--threads", "1",
                                   "--search-var", "concurrency", "--low", "2", "--high", "2", "--budget", "120", *slo,
                                   "-o", str(tmp_path), "--run-id", "search"])
    assert res.exit_code == 0, res.output
    search_s = json.loads((tmp_path / "search" / "summary.json").read_text())
    results = {"run": run_s["engines"]["own"], "ray": ray_s["engines"]["own"], "search": search_s["engines"]["own"]}
    records = {k: [r for r in _records(tmp_path / k) if r["phase"] == "measured"] for k in results}

    def filled(r: dict) -> set[str]:  # the fields a record carries; a search probe's also names its probe
        return {k for k, v in r.items() if v is not None and k != "probe"}

    ids = sorted(r["request_id"] for r in records["run"])
    assert len(ids) == 8
    for path in ("ray", "search"):
        assert sorted(r["request_id"] for r in records[path]) == ids, path  # the same prompts (seed 0, probe 0)
        assert {frozenset(filled(r)) for r in records[path]} == {frozenset(filled(r)) for r in records["run"]}, path
        assert sorted((r["request_id"], r["input_tokens_server"], r["output_tokens_server"], r["input_tokens_retok"],
                       r["output_tokens_retok"]) for r in records[path]) == \
            sorted((r["request_id"], r["input_tokens_server"], r["output_tokens_server"], r["input_tokens_retok"],
                    r["output_tokens_retok"]) for r in records["run"]), path
    assert all(r["probe"] == 0 for r in records["search"]) and all(r["probe"] is None for r in records["run"])
    base = results["run"]
    for path in ("ray", "search"):
        other = results[path]
        assert {k for k, v in other["metrics"].items() if v is not None} == \
            {k for k, v in base["metrics"].items() if v is not None}, path
        assert set(other["intervals"]) == set(base["intervals"]), path
        assert (other["resources"] is None) == (base["resources"] is None) and base["resources"] is not None, path
        for key in ("requests_sent", "requests_completed", "requests_failed", "total_input_tokens", "total_output_tokens"):
            assert other["metrics"][key] == base["metrics"][key], (path, key)
        for lat, within in (("ttft_ms", 25), ("tpot_ms", 8), ("e2el_ms", 30)):
            assert abs(other["metrics"][lat]["p50"] - base["metrics"][lat]["p50"]) < within, (path, lat)
    assert _gone(_server_pids(tmp_path), 10) == []


def test_a_trial_whose_worker_dies_is_failed_and_the_others_complete(local_ray, monkeypatch, tmp_path):
    _paced(monkeypatch, tmp_path, own=ray_engines.DyingWorkerEngine("own", str(tmp_path), stall_after=4))
    s, m = _run(tmp_path, "die", "--engine", "own,transformers", "--num-requests", "8", "--max-concurrency", "1",
                "--executor", "ray")
    own, other = s["engines"]["own"], s["engines"]["transformers"]
    assert own["status"] == "failed"
    assert own["reason"].startswith("the Ray worker on node ") and " died: " in own["reason"], own["reason"]
    assert m["engines"]["own"]["ray_trials"][0]["node_id"][:12] in own["reason"]
    # the warm-up request and 3 measured ones were served before the stall; the streamed records are kept
    measured = [r for r in _records(tmp_path / "die") if r["engine"] == "own" and r["phase"] == "measured"]
    assert len(measured) == 3 and own["metrics"]["requests_completed"] == 3
    assert other["status"] == "ok" and other["metrics"]["requests_completed"] == 8
    assert _gone(_server_pids(tmp_path), 15) == []  # the dead worker's engine: ended by its watchdog


def test_sigint_on_the_driver_leaves_no_process_behind(tmp_path):
    """A driver in its own process starts its own local Ray instance; SIGINT mid-trial."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    env = {**os.environ, "BENCH_STATE_DIR": str(tmp_path / "state"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(DRIVER), str(pid_dir), "run", *ARGS, "--engine", "own,transformers",
           "--num-requests", "1000", "--max-concurrency", "1", "--executor", "ray", "-o", str(tmp_path),
           "--run-id", "sigint"]
    driver = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not _server_pids(pid_dir) or not (tmp_path / "sigint" / "requests.jsonl").exists() \
                or not (tmp_path / "sigint" / "requests.jsonl").read_text():
            assert driver.poll() is None and time.monotonic() < deadline, driver.stdout.read() if driver.poll() is not None else "timeout"
            time.sleep(0.2)
        ours = [p.pid for p in psutil.Process(driver.pid).children(recursive=True)]  # Ray daemons, workers, engines
        servers = _server_pids(pid_dir)
        assert servers and set(servers) <= set(ours)
        driver.send_signal(signal.SIGINT)
        output, _ = driver.communicate(timeout=90)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 130, output
    assert _gone(ours + servers, 30) == [], [psutil.Process(p).cmdline() for p in _gone(ours, 0)]
    s = json.loads((tmp_path / "sigint" / "summary.json").read_text())
    assert s["engines"]["own"]["status"] == "interrupted" and "interrupted by the user (Ctrl-C)" in s["engines"]["own"]["reason"]
    assert s["engines"]["transformers"]["status"] == "not_measured"


def test_a_trial_no_node_can_hold_fails_at_once_with_what_it_needs(local_ray, monkeypatch, tmp_path):
    _paced(monkeypatch, tmp_path)
    s, _ = _run(tmp_path, "gpu", "--engine", "own", "--executor", "ray", "--ray-resources", "num_gpus=1,h100_node=1", code=1)
    own = s["engines"]["own"]
    assert own["status"] == "failed"
    assert own["reason"] == ("no node of the Ray cluster can hold this trial: it needs CPU 2, GPU 1, h100_node 1, the "
                             "largest node offers CPU 2, GPU 0, h100_node 0; lower --threads or --ray-resources, or "
                             "add such a node (custom resources: ray start --resources)")
    assert _server_pids(tmp_path) == []  # nothing was started


def test_ctrl_c_cancels_the_trials_at_once_and_leaves_the_cluster_up(local_ray, monkeypatch, tmp_path):
    """Ctrl-C while a trial measures: its Ray worker and engine are ended before the driver
    exits (a driver that only exited would leave them running until then), and a Ray
    instance the run joined rather than started keeps running."""
    import harness.app.executors.ray as ray_executor

    _paced(monkeypatch, tmp_path)
    real_drain = ray_executor.RayExecutor._drain
    state = {"raised": False}

    def drain_then_interrupt(self, writer):
        real_drain(self, writer)
        measured = (Path(writer.run_dir) / "requests.jsonl").read_text().count('"phase":"measured"')
        if measured >= 3 and not state["raised"]:
            state["raised"] = True
            state["trials"] = [t.model_dump() for t in writer.manifest.engines["own"].ray_trials]
            raise KeyboardInterrupt

    monkeypatch.setattr(ray_executor.RayExecutor, "_drain", drain_then_interrupt)
    res = CliRunner().invoke(app, ["run", *ARGS, "--engine", "own,transformers", "--num-requests", "1000",
                                   "--max-concurrency", "1", "--executor", "ray", "-o", str(tmp_path), "--run-id", "cc"])
    assert res.exit_code == 130, res.output
    worker = state["trials"][0]["pid"]
    assert _gone([worker, *_server_pids(tmp_path)], 10) == []  # this driver process is still alive
    s = json.loads((tmp_path / "cc" / "summary.json").read_text())
    assert s["engines"]["own"]["status"] == "interrupted" and s["engines"]["own"]["metrics"]["requests_completed"] >= 3
    assert s["engines"]["transformers"]["status"] == "not_measured"
    assert ray.is_initialized() and ray.get(ray.remote(lambda: 7).remote(), timeout=60) == 7


def test_ladders_on_ray_give_the_local_ladders(local_ray, monkeypatch, tmp_path):
    """The main job (load ladders) with --executor ray: each engine's climb a Ray trial, the
    decisive repeats trials too; the same ladder.json a local run writes (same loads climbed,
    capacities within the pacing noise)."""
    _paced(monkeypatch, tmp_path)
    ladder = [a for a in ARGS if a not in ("--request-rate", "inf", "--num-requests", "6")] + [
        "--engine", "own,transformers", "--ladder-budget", "30", "--max-load", "4", "--slo", "ttft_p90=2000,tpot_p90=200"]
    res = CliRunner().invoke(app, ["run", *ladder, "-o", str(tmp_path), "--run-id", "local-ladder"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["run", *ladder, "--executor", "ray", "-o", str(tmp_path), "--run-id", "ray-ladder"])
    assert res.exit_code == 0, res.output
    local, remote = (json.loads((tmp_path / r / "ladder.json").read_text()) for r in ("local-ladder", "ray-ladder"))
    assert set(local["engines"]) == set(remote["engines"]) == {"own", "transformers"}
    for name in ("own", "transformers"):
        a, b = local["engines"][name], remote["engines"][name]
        assert [p["load"] for p in a["points"]] == [p["load"] for p in b["points"]] == [1, 2, 4]
        assert a["stopped"] == b["stopped"] == "max_load" and a["capacity"]["open"] and b["capacity"]["open"]
        assert abs(a["capacity"]["output_tps"] - b["capacity"]["output_tps"]) < 0.2 * a["capacity"]["output_tps"]
    assert remote["decision"]["winner"] == local["decision"]["winner"] == "transformers"  # own is the yardstick
    manifest = json.loads((tmp_path / "ray-ladder" / "manifest.json").read_text())
    assert {t["node_id"] for t in manifest["engines"]["own"]["ray_trials"]} == {local_ray}
    assert _gone(_server_pids(tmp_path), 10) == []


def test_a_configuration_search_on_ray_finds_the_best_setting_and_reports_the_refused_one(local_ray, monkeypatch, tmp_path):
    """``--tune`` with ``--executor ray`` (issue 27): every configuration's rung a Ray trial on the
    scripted tunable engine (tests/fake_servers/tunable_engine.py: best at 8 slots, refuses 64);
    the search finds 8 slots, the refusal comes back from the worker as the engine's line and is
    not retried, and the main job climbs at 8 slots, as tests/e2e/test_tune.py shows locally."""
    real = registry.get_adapter
    monkeypatch.setattr(registry, "get_adapter", lambda name, hardware=None: tunable_engine.TunableEngine("vllm")
                        if name == "vllm" else real(name, hardware))
    args = ["--workload", "random", "--input-len", "8", "--output-len", "8", "--warmup", "1", "--no-calibration",
            "--no-equivalence", "--no-feature-probes", "--threads", "1", "--max-load", "8", "--ladder-budget", "3",
            "--slo", "ttft_p90=150,tpot_p90=25"]
    res = CliRunner().invoke(app, ["run", "--engine", "vllm", *args, "--tune", "8", "--tune-configs", "4",
                                   "--executor", "ray", "-o", str(tmp_path), "--run-id", "tuned"])
    assert res.exit_code == 0, res.output
    run = tmp_path / "tuned"
    tuning = json.loads((run / "ladder.json").read_text())["tuning"]["vllm"]
    by_args = {json.dumps(c["engine_args"]): c for c in tuning["configs"]}
    assert set(by_args) == {"{}", '{"slots": "2"}', '{"slots": "8"}', '{"slots": "64"}'}
    refused = by_args['{"slots": "64"}']
    assert refused["status"] == "rejected" and "at most 16" in refused["reason"] and refused["rungs"] == 0
    assert res.output.count("--slots 64 is more than this engine accepts") >= 1
    chosen = next(c for c in tuning["configs"] if c["id"] == tuning["chosen"])
    assert chosen["engine_args"] == {"slots": "8"} and "--slots 8" in chosen["command"]
    manifest = json.loads((run / "manifest.json").read_text())
    assert "--slots 8" in manifest["engines"]["vllm"]["command"]
    measured = [c["id"] for c in tuning["configs"] if c["status"] != "rejected"]
    for name in [*measured, "vllm#defaults", "vllm"]:  # the search's rungs, the defaults' and the main climb: Ray trials
        assert {t["node_id"] for t in manifest["engines"][name]["ray_trials"]} == {local_ray}, name
    recipe = json.loads((run / "recipe.json").read_text())
    assert recipe["engine"] == "vllm" and recipe["engine_args"] == {"slots": "8"}
