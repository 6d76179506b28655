"""A tiny stand-in for the harness, to be SIGKILLed by tests/adapters/runtime/test_orphans.py.

``python tests/fake_servers/orphan_harness.py INFO SCENARIO`` starts fake engine servers
(tests/fake_servers/lifecycle_server.py) through :class:`adapters.runtime.process.ServerProcess`, each
from a short-lived worker thread as ``harness/app/trial/startup.py`` does, writes ``INFO`` (JSON:
``pgids``, ``pids`` of every group member, ``watchdogs``, ``records``) once the scenario's
state is reached, and then waits to be killed:

- ``startup``: one server still starting (``--delay 600``: never healthy), with 2 grandchildren;
- ``frozen``: two healthy servers frozen with ``pause()``: one with 2 grandchildren, one that
  ignores SIGTERM (``--mode ignore_sigterm``);
- ``serving``: one healthy server with a grandchild, answering requests in a loop (INFO is
  written after the first answer, from the main thread once the starting thread has exited);
- ``idle``: one healthy server with a grandchild, doing nothing.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from adapters.runtime.process import ServerProcess, find_free_port, group_members  # noqa: E402

FAKE = Path(__file__).with_name("lifecycle_server.py")


def server(log_dir: Path, name: str, *extra: str) -> ServerProcess:
    port = find_free_port()
    return ServerProcess([sys.executable, str(FAKE), "--port", str(port), *extra], log_path=log_dir / f"{name}.log",
                         port=port, startup_timeout_s=600, stop_grace_s=1.0, name=name)


def members(sp: ServerProcess, want: int) -> list[int]:
    """Pids of the group once it has ``want`` live members (10 s at most)."""
    deadline = time.monotonic() + 10
    while True:
        pids = [p.pid for p in group_members(sp.pgid)]
        if len(pids) >= want or time.monotonic() > deadline:
            return pids
        time.sleep(0.05)


def in_thread(fn) -> None:
    """Run ``fn`` in a worker thread that exits before we go on (as the engine-start pool's do)."""
    t = threading.Thread(target=fn)
    t.start()
    t.join()


def main() -> None:
    info_path, scenario = Path(sys.argv[1]), sys.argv[2]
    log_dir = info_path.parent / "logs"
    servers: list[tuple[ServerProcess, int]] = []
    if scenario == "startup":
        sp = server(log_dir, "starting", "--delay", "600", "--children", "2")
        threading.Thread(target=lambda: sp.__enter__(), daemon=True).start()
        deadline = time.monotonic() + 10
        while sp.watchdog is None or sp.record_path is None:
            if time.monotonic() > deadline:
                sys.exit("the server did not start")
            time.sleep(0.02)
        servers.append((sp, 3))
    elif scenario == "frozen":
        for sp, want in ((server(log_dir, "frozen", "--children", "2"), 3),
                         (server(log_dir, "stubborn", "--mode", "ignore_sigterm", "--children", "1"), 2)):
            in_thread(sp.__enter__)
            members(sp, want)
            sp.pause()
            servers.append((sp, want))
    elif scenario in ("serving", "idle"):
        sp = server(log_dir, scenario, "--children", "1")
        in_thread(sp.__enter__)
        servers.append((sp, 2))
    else:
        sys.exit(f"unknown scenario {scenario!r}")
    info = {"pgids": [sp.pgid for sp, _ in servers],
            "pids": [pid for sp, want in servers for pid in members(sp, want)],
            "watchdogs": [sp.watchdog.pid for sp, _ in servers],
            "records": [str(sp.record_path) for sp, _ in servers]}
    written = False
    while True:
        if scenario == "serving":
            sp = servers[0][0]
            req = urllib.request.Request(sp.base_url + "/v1/completions", data=b'{"model": "fake-model"}',
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=5) as resp:
                json.loads(resp.read())
        if not written:
            tmp = info_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(info))
            os.replace(tmp, info_path)
            written = True
        time.sleep(0.05)


if __name__ == "__main__":
    main()
