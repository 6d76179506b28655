"""Every per-request metric, one module each: its formula over a request record and its
:class:`results.schema.metric_registry.Metric` declaration (unit, label, direction, SLO
percentiles, failure rule, where it shows).

Importing this package registers them, in this order, which is the order every table shows
them in. Adding a metric: a module here declaring ``METRIC = Metric(...)``, and its line below.
"""

from results.schema.metric_registry import register

from . import connect, e2el, e2el_from_scheduled, itl, tpot, ttfat, ttft, ttft_from_scheduled

for _module in (ttft, tpot, itl, e2el, ttft_from_scheduled, e2el_from_scheduled, ttfat, connect):
    register(_module.METRIC)
