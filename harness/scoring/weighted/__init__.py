"""The weighted lens: survivors of the checks scored, ranked and explained (``bench recommend``).

:mod:`.weights` (criteria, presets, ``--weights``), :mod:`.cost`, :mod:`.ranking` (the soft
score), :mod:`.ties`, :mod:`.explanation`, :mod:`.sensitivity` and :mod:`.recommender` (the entry
point, re-exported as :func:`harness.scoring.recommend`). Reads :mod:`harness.scoring.measured`
and :mod:`harness.scoring.checks`.
"""
