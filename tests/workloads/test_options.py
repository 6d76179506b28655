"""Workload options: values that would make a run meaningless are refused before anything starts."""

from __future__ import annotations

import pytest

from workloads.errors import WorkloadError
from workloads.options import parse_options


@pytest.mark.parametrize("start,end,needle", [(1e-300, 1e300, "--ramp-up-start-rps must be >= 0.001"),
                                               (1.0, 2e6, "--ramp-up-end-rps must be <= 1,000,000")])
def test_an_extreme_ramp_is_refused_before_anything_starts(start, end, needle) -> None:
    with pytest.raises(WorkloadError, match=needle):
        parse_options(name="random", ramp_up_strategy="exponential", ramp_up_start_rps=start, ramp_up_end_rps=end)
