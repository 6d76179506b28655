"""Workload-side cases of the field's known benchmark bugs (issue 16, "Metric correctness"):

- (9) ``--burstiness inf`` is vLLM's constant spacing: gaps of exactly ``1/rate``;
- (7) a multi-turn session's history carries the previous reply's answer, never its
  reasoning, and the turns a failure aborts are counted;
- (10) a per-run prompt salt keeps an endpoint's prefix cache from serving an earlier run's
  prompts (sharing within the run kept), and a repeated identical run against the same
  endpoint is warned about.
"""

from __future__ import annotations

import asyncio
import json
import math
import re

import pytest
from typer.testing import CliRunner

from harness.app.model import resolve_model
from workloads.arrivals import arrival_offsets
from workloads.errors import WorkloadError
from workloads.options import parse_options
from workloads.registry import build_workload
from workloads.stats import schedule_rate
from workloads.tokens import TokenKit

pytestmark = pytest.mark.slow  # needs the prepared default model folder (tokenizer only)


@pytest.fixture(scope="module")
def kit():
    from transformers import AutoTokenizer

    return TokenKit(AutoTokenizer.from_pretrained(str(resolve_model(None))))


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


# --- (9) burstiness inf: constant spacing ---------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 17])
def test_burstiness_inf_gives_exactly_constant_gaps(seed):
    assert arrival_offsets(5, rate=4.0, burstiness=math.inf, seed=seed) == [0.25, 0.5, 0.75, 1.0, 1.25]
    off = arrival_offsets(4, rate=3.0, burstiness=math.inf, seed=seed)
    assert off == [1 / 3.0, 2 / 3.0, 3 / 3.0, 4 / 3.0]  # the "constant" process, never rescaled
    assert off == arrival_offsets(4, rate=3.0, seed=seed, process="constant")
    with pytest.raises(ValueError, match="burstiness must be a number > 0"):
        arrival_offsets(3, rate=1.0, burstiness=math.nan, seed=seed)


@pytest.mark.parametrize("spelling", ["inf", "Infinity", "+INF", " inf ", "∞", math.inf])
def test_burstiness_inf_is_accepted_however_it_is_spelled(spelling, kit):
    opts = parse_options(name="random", burstiness=spelling, request_rate=8.0, num_requests=6, input_len=8, output_len=2)
    assert opts.burstiness == math.inf
    w = build_workload(opts, kit, with_stats=False)
    assert [s.start_offset_s for s in w.sessions] == [k / 8.0 for k in range(1, 7)]
    assert w.offered_rate == 8.0 and schedule_rate([s.start_offset_s for s in w.sessions]) == pytest.approx(8.0, rel=1e-12)
    assert w.spec["burstiness"] == "inf"  # JSON-safe in the manifest


def test_bench_workloads_stats_takes_burstiness_inf():
    from harness.app.cli import app

    res = CliRunner().invoke(app, ["workloads", "show", "random", "-n", "4", "--input-len", "8", "--output-len", "2",
                                   "--request-rate", "2", "--burstiness", "inf"])
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
