"""Capacity at the SLO, from one engine's ladder records: the highest load every SLO holds at.

The decision core's measuring side (issue 38): :mod:`.samples` (a measurement's requests as arrays,
its steady window, the failure bound), :mod:`.frontier` (the one judge of a point and the one
capacity estimator, with a bootstrap interval), :mod:`.race` (each engine's ``[floor, ceiling]``
so far) and :mod:`.jobs` (an agentic point's jobs per hour). Imports nothing else of
``harness.scoring`` but its shared modules; :mod:`harness.scoring.verdict` decides on what it reads.
"""
