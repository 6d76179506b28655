"""The scorer on hand-built result sets whose right answer is known."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness.metrics import parse_slos
from harness.scoring import (
    PRESETS,
    ScorerError,
    max_in_flight,
    parse_weights,
    recommend,
)
from results.hardware import GiB, HardwareProfile, named_profile

from tests.helpers import CPU_ONLY, OWN_CAPS, TRT_CAPS, make_records, ok_entry, skipped, write_run

CPU = HardwareProfile("CPU", "cpu", 64 * GiB)
TRT_SKIP = skipped("tensorrt_llm: needs an NVIDIA GPU, none found")


def two_engine_run(tmp_path, *, sgl=(100.0, 20.0, 10), tf=(130.0, 20.0, 10), slos=None, run_id="r1", **kw):
    """sglang and transformers measured (ttft_ms, tpot_ms, out_tokens), tensorrt_llm skipped."""
    r_sgl = make_records("sglang", 12, ttft_ms=sgl[0], tpot_ms=sgl[1], out_tokens=sgl[2])
    r_tf = make_records("transformers", 12, ttft_ms=tf[0], tpot_ms=tf[1], out_tokens=tf[2])
    engines = {
        "sglang": ok_entry(r_sgl, OWN_CAPS),
        "transformers": ok_entry(r_tf, CPU_ONLY),
        "tensorrt_llm": TRT_SKIP,
    }
    return write_run(tmp_path, run_id, engines, r_sgl + r_tf, slos=slos, **kw)


def test_slo_elimination_names_the_deciding_constraint(tmp_path: Path) -> None:
    run = two_engine_run(tmp_path)
    rec = recommend([run], hardware=CPU, slos=parse_slos("ttft_p99=120"))
    assert rec.winner == "sglang"
    assert rec.elimination_stage == {"tensorrt_llm": "not measured", "transformers": "slo"}
    assert "p99 TTFT 130 ms > 120 ms" in rec.eliminated["transformers"]
    assert rec.deciding_constraint == (
        "sglang: the only engine meeting p99 TTFT ≤ 120 ms on chat at 4.00 req/s requested, 4.00 achieved; transformers 2nd, 1.3× the TTFT; "
        "not measured (skipped; reasons in the not-measured list): tensorrt_llm"
    )
    assert "needs an NVIDIA GPU" in rec.eliminated["tensorrt_llm"]  # the reason itself stays in the table
    # SLO sensitivity: below sglang's 100 ms nobody is left; at transformers' 130 ms it is readmitted
    assert "tightening p99 TTFT from 120 ms to below 100 ms leaves no engine" in rec.sensitivity
    loosened = recommend([run], hardware=CPU, slos=parse_slos("ttft_p99=130"))
    assert {r.engine for r in loosened.ranking} == {"sglang", "transformers"}
    expect = (
        "no loosening of p99 TTFT changes the winner"
        if loosened.winner == "sglang"
        else f"loosening p99 TTFT from 120 ms to 130 ms makes {loosened.winner} the winner"
    )
    assert expect in rec.sensitivity


def test_slo_from_summary_is_used_when_none_given(tmp_path: Path) -> None:
    run = two_engine_run(tmp_path, slos={"ttft_p99": 120.0})
    rec = recommend([run], hardware=CPU)
    assert rec.slos == {"ttft_p99": 120.0}
    assert rec.elimination_stage["transformers"] == "slo"


def test_failed_requests_make_the_percentile_infinite(tmp_path: Path) -> None:
    r_own = make_records("own", 10, ttft_ms=50.0, tpot_ms=10.0, fail=1)
    r_tf = make_records("transformers", 10, ttft_ms=90.0, tpot_ms=10.0)
    run = write_run(tmp_path, "r", {"own": ok_entry(r_own, OWN_CAPS), "transformers": ok_entry(r_tf, CPU_ONLY)},
                    r_own + r_tf)
    # 1 of 10 failed: above the default 5 % reliability bound, so allow 20 % to test the percentile
    rec = recommend([run], hardware=CPU, slos=parse_slos("ttft_p99=500"), max_failure_rate=0.2)
    assert rec.winner == "transformers"
    assert "∞ (failed requests)" in rec.eliminated["own"]
    strict = recommend([run], hardware=CPU, slos=parse_slos("ttft_p99=500"))
    assert strict.elimination_stage["own"] == "reliability"
    assert strict.eliminated["own"].startswith("1 of 10 requests failed (10%, above the 5% bound): http_500 ×1 at chat")


def test_memory_fit_arithmetic_is_exact(tmp_path: Path) -> None:
    # seq: one request at a time; burst: 8 at once. context = 1000 in + 24 out = 1024 tokens.
    r_seq = make_records("seq", 8, ttft_ms=10.0, tpot_ms=1.0, out_tokens=24, in_tokens=1000, interval_s=1.0)
    r_burst = make_records("burst", 8, ttft_ms=10.0, tpot_ms=1.0, out_tokens=24, in_tokens=1000, interval_s=0.0)
    assert max_in_flight(r_seq) == 1 and max_in_flight(r_burst) == 8
    run = write_run(tmp_path, "r", {"seq": ok_entry(r_seq, CPU_ONLY, offered_rate=1.0), "burst": ok_entry(r_burst, CPU_ONLY)},
                    r_seq + r_burst)
    kv_per_token = 2 * 30 * 3 * 64 * 4
    weights = 134_515_008 * 4
    hw = HardwareProfile("small", "cpu", int(0.75 * GiB))
    usable = int(0.75 * GiB * 1 * 0.9)
    assert weights + kv_per_token * 1024 <= usable < weights + kv_per_token * 8 * 1024
    rec = recommend([run], hardware=hw)
    seq, burst = rec.memory_fit["seq"], rec.memory_fit["burst"]
    assert kv_per_token == 46_080 and seq.kv_bytes_per_token == 46_080
    assert (seq.concurrency, seq.context_tokens, seq.kv_tokens) == (1, 1024, 1024)
    assert (burst.concurrency, burst.kv_tokens) == (8, 8192)
    assert burst.kv_bytes == 46_080 * 8192 == 377_487_360
    assert burst.total_bytes == weights + 377_487_360 == 915_547_392
    assert burst.usable_bytes == usable and burst.fits is False and seq.fits is True
    assert rec.winner == "seq"
    assert rec.elimination_stage == {"burst": "memory"}
    assert "2 × 30 layers × 3 KV heads × 64 head dim × 4 B = 46,080 B/token" in rec.eliminated["burst"]
    assert "(8 in flight × 1,024 tokens context = 8,192 tokens) = 377,487,360 B" in rec.eliminated["burst"]
    assert "total 915,547,392 B" in rec.eliminated["burst"]
    # bf16 halves both weights and KV: now both fit
    assert recommend([run], hardware=hw, dtype_bytes=2).memory_fit["burst"].total_bytes == 915_547_392 // 2


def test_memory_uses_one_device_without_tensor_parallelism(tmp_path: Path) -> None:
    recs = make_records("own", 4, ttft_ms=10.0, tpot_ms=1.0)
    run = write_run(tmp_path, "r", {"own": ok_entry(recs, OWN_CAPS)}, recs)
    rec = recommend([run], hardware=named_profile("L4-24GB", num_devices=4))
    assert rec.memory_fit["own"].devices_used == 1  # OWN_CAPS lacks tensor_parallel
    assert rec.memory_fit["own"].usable_bytes == int(24 * GiB * 0.9)


def test_hardware_elimination(tmp_path: Path) -> None:
    run = two_engine_run(tmp_path)
    rec = recommend([run], hardware=named_profile("H100-80GB"))
    assert rec.winner == "sglang"
    assert rec.elimination_stage["transformers"] == "hardware"
    assert rec.eliminated["transformers"] == "its adapter declares a CPU only; target H100-80GB is nvidia"
    assert [r.engine for r in rec.ranking] == ["sglang"]
    assert any("measured on cpu" in n for n in rec.notes)
    assert any(n.startswith("the hardware and required-feature constraints use what each adapter declares")
               for n in rec.notes)


def test_fp8_needs_hopper_or_ada(tmp_path: Path) -> None:
    r_own = make_records("own", 4, ttft_ms=10.0, tpot_ms=1.0)
    r_trt = make_records("tensorrt_llm", 4, ttft_ms=10.0, tpot_ms=1.0)
    run = write_run(tmp_path, "r", {"own": ok_entry(r_own, OWN_CAPS), "tensorrt_llm": ok_entry(r_trt, TRT_CAPS)},
                    r_own + r_trt)
    a100 = recommend([run], hardware=named_profile("A100-80GB"), required_features=["fp8"])
    assert a100.winner is None and a100.exit_code == 1
    assert a100.eliminated["tensorrt_llm"] == (
        "FP8 needs compute capability ≥ 8.9 (Ada/Hopper or newer); A100-80GB has compute capability 8.0"
    )
    h100 = recommend([run], hardware=named_profile("H100-80GB"), required_features=["fp8"])
    assert h100.winner == "tensorrt_llm"
    assert h100.eliminated["own"] == "does not declare fp8, which the workload needs"


def test_a_weights_change_flips_the_winner(tmp_path: Path) -> None:
    # fast: 2× the output throughput (20 tokens/request), slow TTFT; snappy: half the TTFT.
    r_fast = make_records("fast", 12, ttft_ms=200.0, tpot_ms=10.0, out_tokens=20)
    r_snap = make_records("snappy", 12, ttft_ms=100.0, tpot_ms=10.0, out_tokens=10)
    run = write_run(tmp_path, "r", {"fast": ok_entry(r_fast, CPU_ONLY), "snappy": ok_entry(r_snap, CPU_ONLY)},
                    r_fast + r_snap)
    thr = recommend([run], hardware=CPU, preset="throughput")
    lat = recommend([run], hardware=CPU, preset="latency")
    assert thr.winner == "fast" and lat.winner == "snappy"
    assert "decided by throughput" in thr.deciding_constraint
    assert "decided by latency" in lat.deciding_constraint
    assert thr.weights == PRESETS["throughput"]
    # the reported smallest flip is exact: just past it flips, just before it does not
    flip = next(f for f in thr.weight_flips if f.criterion == "latency")
    assert flip.new_winner == "snappy" and flip.to_weight > flip.from_weight
    assert recommend([run], hardware=CPU, preset="throughput",
                     weights={"latency": flip.to_weight * 1.001}).winner == "snappy"
    assert recommend([run], hardware=CPU, preset="throughput",
                     weights={"latency": flip.to_weight * 0.999}).winner == "fast"
    # scores are the weighted mean of the components
    top = thr.ranking[0]
    w = thr.weights
    assert math.isclose(top.score, sum(w[c] * top.components[c] for c in w) / sum(w.values()), abs_tol=1e-5)
    # throughput is normalized higher-better (x / max), latency lower-better (min / x)
    m_fast = run.summary["engines"]["fast"]["metrics"]
    m_snap = run.summary["engines"]["snappy"]["metrics"]
    second = thr.ranking[1]
    assert top.components["throughput"] == 1.0
    assert second.components["throughput"] == round(m_snap["output_throughput"] / m_fast["output_throughput"], 6)
    assert second.components["latency"] == 1.0
    assert top.components["latency"] == round((100.0 / 200.0 + 10.0 / 10.0) / 2, 6)  # TTFT p99, TPOT p99


def test_ties_are_broken_deterministically(tmp_path: Path) -> None:
    ra = make_records("beta", 8, ttft_ms=50.0, tpot_ms=5.0)
    rb = make_records("alpha", 8, ttft_ms=50.0, tpot_ms=5.0)
    run = write_run(tmp_path, "r", {"beta": ok_entry(ra, CPU_ONLY), "alpha": ok_entry(rb, CPU_ONLY)}, ra + rb)
    rec = recommend([run], hardware=CPU)
    assert rec.ranking[0].score == rec.ranking[1].score
    assert [r.engine for r in rec.ranking] == ["alpha", "beta"]  # by name as the last resort
    assert rec.deciding_constraint.startswith("alpha: tied with beta on score")
    # same score, different throughput (throughput and hardware-fit weights 0): higher throughput first
    rc = make_records("zeta", 8, ttft_ms=50.0, tpot_ms=5.0, out_tokens=20)
    rd = make_records("alpha", 8, ttft_ms=50.0, tpot_ms=5.0, out_tokens=10)
    run2 = write_run(tmp_path, "r2", {"alpha": ok_entry(rd, CPU_ONLY), "zeta": ok_entry(rc, CPU_ONLY)}, rc + rd)
    rec2 = recommend([run2], hardware=CPU, slos=None, weights={"throughput": 0, "latency": 0, "hardware_fit": 0})
    assert rec2.ranking[0].score == rec2.ranking[1].score
    assert rec2.winner == "zeta"


def test_single_available_engine(tmp_path: Path) -> None:
    recs = make_records("sglang", 6, ttft_ms=80.0, tpot_ms=8.0)
    engines = {"sglang": ok_entry(recs, OWN_CAPS), "tensorrt_llm": TRT_SKIP,
               "vllm": skipped("server exited with code 1 during startup", "failed", log_tail="ImportError: x")}
    run = write_run(tmp_path, "r", engines, recs)
    rec = recommend([run], hardware=CPU)
    assert rec.winner == "sglang" and rec.exit_code == 0
    assert rec.deciding_constraint.startswith("sglang: the only engine left after the hard constraints (chat at 4.00 req/s requested, 4.00 achieved)")
    assert "vllm excluded: not measured (failed): server exited with code 1 during startup" in rec.deciding_constraint
    assert rec.sensitivity[0] == "no weight change can change the winner: only one engine survives the hard constraints"


def test_no_available_engine(tmp_path: Path) -> None:
    run = write_run(tmp_path, "r", {"tensorrt_llm": TRT_SKIP, "vllm": skipped("not installed")}, [])
    rec = recommend([run], hardware=CPU)
    assert rec.winner is None and rec.exit_code == 1 and rec.ranking == []
    assert rec.deciding_constraint.startswith("no engine survives the hard constraints: tensorrt_llm: not measured")
    assert "loosen an SLO" in rec.message


def test_skipped_engines_never_get_numbers(tmp_path: Path) -> None:
    recs = make_records("own", 6, ttft_ms=80.0, tpot_ms=8.0)
    bogus = make_records("vllm", 6, ttft_ms=1.0, tpot_ms=1.0)
    engines = {
        "own": ok_entry(recs, OWN_CAPS),  # the reference engine alone: ranked, never recommended
        # a failed engine whose partial metrics and records must still be ignored
        "vllm": {**ok_entry(bogus, OWN_CAPS), "status": "failed", "reason": "crashed mid-run"},
        "tensorrt_llm": TRT_SKIP,
    }
    run = write_run(tmp_path, "r", engines, recs + bogus)
    rec = recommend([run], hardware=CPU)
    assert [r.engine for r in rec.ranking] == ["own"]
    assert set(rec.memory_fit) == {"own"}
    assert rec.eliminated["vllm"] == "not measured (failed): crashed mid-run"
    dumped = json.loads(rec.model_dump_json())
    assert all(row["engine"] == "own" for row in dumped["ranking"])


def test_repeats_noise_can_or_cannot_flip(tmp_path: Path) -> None:
    def runs(spread_b: list[float]) -> list:
        out = []
        for i, tb in enumerate(spread_b):
            ra = make_records("a", 8, ttft_ms=100.0 + 5 * i, tpot_ms=10.0)
            rb = make_records("b", 8, ttft_ms=tb, tpot_ms=10.0)
            out.append(write_run(tmp_path / str(spread_b), f"r{i}", {"a": ok_entry(ra, CPU_ONLY), "b": ok_entry(rb, CPU_ONLY)},
                                 ra + rb))
        return out

    close = recommend(runs([108.0, 112.0, 90.0]), hardware=CPU, preset="latency")
    assert close.winner == "a" and close.ranking[0].repeats == 3
    assert any(s.startswith("in the unpaired worst case") and "the winner changes: b with every metric at its best repeat" in s for s in close.sensitivity)
    far = recommend(runs([300.0, 310.0, 320.0]), hardware=CPU, preset="latency")
    assert far.winner == "a"
    assert any(s.startswith("the spread over repeats cannot flip a vs b") for s in far.sensitivity)


def test_load_sweep_scores_the_highest_load_meeting_the_slo(tmp_path: Path) -> None:
    lo = make_records("vllm", 8, ttft_ms=100.0, tpot_ms=10.0)
    hi = make_records("vllm", 8, ttft_ms=900.0, tpot_ms=10.0, interval_s=0.125)
    r1 = write_run(tmp_path, "lo", {"vllm": ok_entry(lo, CPU_ONLY, offered_rate=4.0)}, lo)
    r2 = write_run(tmp_path, "hi", {"vllm": ok_entry(hi, CPU_ONLY, offered_rate=8.0)}, hi)
    rec = recommend([r1, r2], hardware=CPU, slos=parse_slos("ttft_p99=500"))
    assert rec.winner == "vllm" and rec.ranking[0].condition == "chat at 4.00 req/s requested, 4.00 achieved"
    rec_all = recommend([r1, r2], hardware=CPU, slos=parse_slos("ttft_p99=1000"))
    assert rec_all.ranking[0].condition == "chat at 8.00 req/s requested, 8.00 achieved"


def test_missing_manifest_fields_say_not_recorded(tmp_path: Path) -> None:
    recs = make_records("vllm", 4, ttft_ms=10.0, tpot_ms=1.0)
    run = write_run(tmp_path, "r", {"vllm": ok_entry(recs, None)}, recs, manifest={})
    rec = recommend([run], hardware=CPU)
    assert rec.winner == "vllm"
    assert rec.memory_fit["vllm"].fits is None
    assert "model num_params, model dtype, num_layers, num_kv_heads, head_dim not recorded" in rec.memory_fit["vllm"].arithmetic
    assert "capabilities not recorded" in rec.ranking[0].notes[0]


@pytest.mark.parametrize(
    "text, message",
    [
        ("throughput", "weight 'throughput' has no value"),
        ("speed=2", "unknown weight 'speed': use throughput, latency, hardware_fit, features, complexity"),
        ("latency=-1", "weight latency must be a finite number ≥ 0"),
        ("latency=abc", "weight latency needs a number, got 'abc'"),
        ("", "--weights is empty"),
    ],
)
def test_parse_weights_rejects_bad_input(text: str, message: str) -> None:
    with pytest.raises(ScorerError, match="^" + message.replace("(", r"\(")):
        parse_weights(text)


def test_parse_weights_and_bad_options(tmp_path: Path) -> None:
    assert parse_weights("throughput=2, latency=1") == {"throughput": 2.0, "latency": 1.0}
    run = two_engine_run(tmp_path)
    with pytest.raises(ScorerError, match="unknown preset 'fast': use one of latency, throughput, balanced, agentic"):
        recommend([run], hardware=CPU, preset="fast")
    with pytest.raises(ScorerError, match="unknown feature 'warp_drive'"):
        recommend([run], hardware=CPU, required_features=["warp_drive"])
    with pytest.raises(ScorerError, match="all weights are 0"):
        recommend([run], hardware=CPU, weights={c: 0.0 for c in PRESETS["balanced"]})
    with pytest.raises(ScorerError, match="no runs given"):
        recommend([], hardware=CPU)


def test_a_flip_that_needs_an_absurd_weight_is_not_offered_as_a_lever(tmp_path: Path) -> None:
    # fast: 2x the throughput; snappy: a TTFT better by 0.01 % only - a near-tie on latency
    r_fast = make_records("fast", 12, ttft_ms=100.01, tpot_ms=10.0, out_tokens=20)
    r_snap = make_records("snappy", 12, ttft_ms=100.0, tpot_ms=10.0, out_tokens=10)
    run = write_run(tmp_path, "r", {"fast": ok_entry(r_fast, CPU_ONLY), "snappy": ok_entry(r_snap, CPU_ONLY)},
                    r_fast + r_snap)
    rec = recommend([run], hardware=CPU, preset="throughput")
    assert rec.winner == "fast"
    flip = next(f for f in rec.weight_flips if f.criterion == "latency")  # still recorded, exactly
    assert flip.to_weight > 10 * sum(rec.weights.values())
    line = next(s for s in rec.sensitivity if "latency weight" in s)
    assert line.startswith("no realistic change of the latency weight alone changes the winner")
    assert not any(s.startswith("smallest weight change") and "latency" in s for s in rec.sensitivity)


def test_an_engine_below_the_fidelity_floor_is_eliminated_before_the_slos(tmp_path: Path) -> None:
    """One load point (the weighted score): the faster engine's outputs fail the fidelity gate
    (fidelity.json), so the slower one wins and the table says why."""
    from results.schema import FIDELITY_FILE, FidelityCheck, FidelityResult, Interval
    from results.store import load_run

    run = two_engine_run(tmp_path, sgl=(150.0, 30.0, 10), tf=(100.0, 20.0, 10))
    assert recommend([run], hardware=CPU).winner == "transformers"
    bad = FidelityResult(prompts=8, positions=256, divergences=40, agreement_outside_near_ties=0.84,
                         agreement_interval=Interval(point=0.84, low=0.79, high=0.88, n=250), first_divergence=[3] * 8,
                         passed=False)
    good = FidelityResult(prompts=8, positions=256, agreement_outside_near_ties=1.0, passed=True,
                          agreement_interval=Interval(point=1.0, low=0.985, high=1.0, n=250))
    check = FidelityCheck(reference_key="k", prompts=8, max_tokens=32, engines={"transformers": bad, "sglang": good})
    (run.run_dir / FIDELITY_FILE).write_text(check.model_dump_json())
    rec = recommend([load_run(run.run_dir)], hardware=CPU)
    assert rec.winner == "sglang" and rec.elimination_stage["transformers"] == "fidelity"
    assert rec.eliminated["transformers"].startswith("fidelity 0.840 [0.790, 0.880] top-1 agreement outside near-ties")


def test_an_engine_whose_fidelity_check_could_not_run_is_eliminated_unless_allowed(tmp_path: Path) -> None:
    """One load point: the faster engine's fidelity check could not run (its endpoint answered
    the check's requests with a stream), so it is eliminated with that line, as the ladder's gate
    does; with --allow-unchecked (fidelity.json's ``allow_unchecked``) it competes, and wins."""
    from results.schema import FIDELITY_FILE, FidelityCheck, FidelityResult, Interval
    from results.store import load_run

    run = two_engine_run(tmp_path, sgl=(150.0, 30.0, 10), tf=(100.0, 20.0, 10))
    errored = FidelityResult(prompts=8, error="ContentTypeError: unexpected mimetype: text/event-stream",
                             prompts_answered=0)
    good = FidelityResult(prompts=8, positions=256, agreement_outside_near_ties=1.0, passed=True, prompts_answered=8,
                          agreement_interval=Interval(point=1.0, low=0.985, high=1.0, n=8))
    for allow, winner in ((False, "sglang"), (True, "transformers")):
        check = FidelityCheck(reference_key="k", prompts=8, max_tokens=32, allow_unchecked=allow,
                              engines={"transformers": errored, "sglang": good})
        (run.run_dir / FIDELITY_FILE).write_text(check.model_dump_json())
        rec = recommend([load_run(run.run_dir)], hardware=CPU)
        assert rec.winner == winner
        if not allow:
            assert rec.elimination_stage["transformers"] == "fidelity"
            assert rec.eliminated["transformers"] == ("fidelity not checked (ContentTypeError: unexpected mimetype: "
                                                      "text/event…); --allow-unchecked lets it compete")
        else:
            assert "transformers" not in rec.eliminated
