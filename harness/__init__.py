"""The benchmark harness: CLI, run orchestration, load generation, streaming client, metrics."""

__version__ = "0.1.0"
