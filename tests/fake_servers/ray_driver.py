"""``python tests/fake_servers/ray_driver.py PID_DIR BENCH_ARGS...``: ``bench`` with the engines
``own`` and ``transformers`` served by paced fake servers (tests/fake_servers/ray_engines.py),
for the Ray executor tests that need the driver in a process of its own (SIGINT)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: tests.fake_servers.*

from ray import cloudpickle  # noqa: E402

import adapters.registry as registry  # noqa: E402
import tests.fake_servers.ray_engines as ray_engines  # noqa: E402
from harness.app.cli import entrypoint  # noqa: E402

cloudpickle.register_pickle_by_value(ray_engines)
pid_dir = sys.argv.pop(1)
real_get = registry.get_adapter
registry.get_adapter = lambda n, hardware=None: (ray_engines.PacedEngine(n, pid_dir) if n in ("own", "transformers")
                                                  else real_get(n, hardware))
entrypoint()
