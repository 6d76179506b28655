"""Runs read into the weighted lens's own measurements (``bench recommend``, one-point runs).

:mod:`.gather` (the only reader of ``summary.json``/``manifest.json``), :mod:`.operational`
(the recorded facts behind the complexity criterion) and :mod:`.repeats` (repeats of a condition
combined by their median). :mod:`harness.scoring.checks` and :mod:`harness.scoring.weighted` read them.
"""
