"""The weighted lens's hard constraints and audits: what excludes an engine, first failure wins.

:mod:`.constraints` (the ordered constraints, each with a one-line reason), :mod:`.reliability`,
:mod:`.validity`, :mod:`.memory_fit` and :mod:`.features`, each one check; :mod:`.parity` (the
engines' effective settings side by side, flagged where unfair). Stage names are those of
:mod:`harness.scoring.gates`. Reads :mod:`harness.scoring.measured`; never the score.
"""
