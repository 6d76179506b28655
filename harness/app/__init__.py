"""The application, one subpackage per job; arrows only point down this list.

- ``cli/``: the ``bench`` typer commands (one module per command group); each builds its
  settings and hands them to one job below;
- ``run/``: ``bench run`` — every engine measured over interleaved repeats, summarised,
  scored and reported; ``rebuild`` summarises a run whose harness was killed;
- ``search/``: ``bench search`` — each engine's capacity under SLOs (bracket, bisect);
- ``importers/``: ``bench import`` — other tools' result files read into a run folder;
- ``executors/``: where trials run: ``ray`` (each trial a Ray task on a cluster node);
- ``core/``: what every job shares — engine plans and start-up, the model, signals,
  progress, the manifest, the parity audit, feature probes.
"""
