"""SamplingParams rejects values that would poison a batched sampler step."""

import math

import pytest

from own_engine.sampling_params import SamplingParams


@pytest.mark.parametrize("field,value", [("temperature", math.nan), ("temperature", math.inf), ("temperature", -1.0),
                                         ("top_p", math.nan), ("top_p", 0.0), ("top_p", 1.5)])
def test_non_finite_or_out_of_range_values_are_rejected(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_valid_values_pass():
    p = SamplingParams(temperature=0.0, top_p=1.0, max_tokens=3)
    assert p.temperature == 0.0 and p.max_tokens == 3
