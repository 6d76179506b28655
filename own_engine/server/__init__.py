"""The reference engine's OpenAI-compatible server (``python -m own_engine``).

- :mod:`~own_engine.server.cli`: the command line (flags → ``EngineConfig``, uvicorn, signals);
- :mod:`~own_engine.server.options`: its options, generated from the settings' declarations.
- :mod:`~own_engine.server.app`: the FastAPI app (``create_app``) and the engine-side request
  handling (``OpenAIServing``).
- :mod:`~own_engine.server.worker`: the engine thread (``EngineWorker``).
- :mod:`~own_engine.server.metrics`: Prometheus ``/metrics`` (``own:*`` names).

Shared with the shims (``adapters/shims/openai_shim.py``), which import them inside other
engines' venvs, so they import no torch and nothing from the modules above:

- :mod:`~own_engine.server.protocol`: OpenAI request models, errors, response and SSE chunks.
- :mod:`~own_engine.server.validation`: request checks → prompt ids, ``max_tokens``, sampling params.
- :mod:`~own_engine.server.text`: incremental detokenization and stop strings.
- :mod:`~own_engine.server.frontend`: error handlers, SSE / JSON responses over a choice stream.

This package's ``__init__`` imports nothing, so importing one module does not pull in the others.
"""
