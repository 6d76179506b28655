"""The main job's decision: capacities at the SLO → gates → verdict, and what is built on it.

:mod:`.verdict` (separated / equivalent / undecided, from the capacities' intervals),
:mod:`.decision` (stored ``ladder.json`` and records → the verdict and its sentence),
:mod:`.allocation` (where the next measurement goes), :mod:`.winner_map` (the verdict over a grid
of SLOs), :mod:`.compare` (one engine across two runs), :mod:`.tuning` (``--tune``'s successive
halving) and :mod:`.capacity_ranking` (``bench search``'s ranking). Reads
:mod:`harness.scoring.capacity`; never the weighted lens.
"""
