"""The decision test bed's tables: how the main job's decision behaves on scripted engines whose
truth is known (harness/loadgen/simulated.py), over seeded trials on a simulated clock.

Each trial climbs the engines' ladders exactly as ``bench run`` does (harness/app/run/ladder.py:
doubling, bisection, two more measurements of the bracketing points; each point judged on its
steady state, failures against the bound with an interval) and decides
(harness/scoring/verdict/verdict.py: separated, equivalent, not separated or undecided; every engine's
bootstrap on its own random stream, sessions resampled as clusters).

1. Pairs whose capacities differ by a known factor: how often the better engine is named
   *separated*, the two *equivalent*, *not separated*, or the worse one named (wrong).
2. The allocation (harness/scoring/verdict/allocation.py, the rule bench run follows after the
   engines' low ends) beside today's equal budgets (every engine's full ladder, bisected, its bracket points
   measured twice more), on the same pairs and seeds: right winner, wrong separated claims, and
   the measuring time on the simulated clock.
3. The truths of issue 38, each against the analytic model: engines 20 % apart with wide noise;
   two engines with identical completion order (coverage of the analytic ratio, shared against
   independent bootstrap streams); an open third engine that is truly best; an open leader near
   a tie that starts slower; an engine with a true 1 % failure rate; an engine worse only on
   the synchronised first requests; and each capacity's 95 % interval against the truth.
4. Between measurements: every measurement of an engine runs on a machine a lognormal factor
   faster or slower (``--drift``, 0.08 by default: about what one engine's throughput at one
   load showed over nine runs on the 2-core reference machine), which resampling one
   measurement's requests cannot see. Each interval's coverage of the truth with the spread
   between measurements (harness/scoring/capacity/spread.py) and without it, and the
   allocation's accuracy and time either way.

    python benchmarks/decision_bed.py [--trials 40] [--jitter 0.08] [--drift 0.08] [--only drift]

tests/harness/scoring/verdict/test_decision_bed.py asserts the thresholds on the same model; this script
prints the numbers a closing note and the README quote.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.app.run import testbed  # noqa: E402
from harness.app.run.testbed import faster  # noqa: E402
from harness.loadgen.simulated import SimEngine, true_capacity  # noqa: E402
from harness.metrics import parse_slos  # noqa: E402
from harness.scoring.capacity.frontier import engine_stream  # noqa: E402
from harness.scoring.capacity.samples import too_many_failures  # noqa: E402
from harness.scoring.capacity.spread import NO_SPREAD  # noqa: E402
from harness.scoring.verdict.verdict import Candidate, decide, ratio_interval  # noqa: E402

SLOS = parse_slos("ttft_p90=1000,tpot_p90=60")
OUTPUT_TOKENS = 32


def candidate(engine: SimEngine, trial: int, **kw: object) -> Candidate:
    return testbed.candidate(engine, trial, SLOS, OUTPUT_TOKENS, **kw)  # type: ignore[arg-type]


def truth(engine: SimEngine) -> float:
    return true_capacity(engine, OUTPUT_TOKENS, 1000, 60)


def pct(k: int, n: int) -> str:
    return f"{k / n:.0%} ({k})"


def pairs(base: SimEngine, trials: int) -> None:
    print("| better by | better separated | equivalent | not separated | undecided | worse named (wrong) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for p in (0, 3, 8, 10, 15, 20, 30):
        better = faster(base, "better", 1 + p / 100)
        counts = {"sep": 0, "eq": 0, "ns": 0, "und": 0, "wrong": 0}
        for t in range(trials):
            v = decide([candidate(better, 2 * t), candidate(base, 2 * t + 1)])
            if v.winner == "base" and (p > 0 or v.outcome == "separated"):
                counts["wrong"] += 1
            elif v.outcome == "separated":
                counts["sep"] += v.winner == "better"
                counts["wrong"] += v.winner == "base"
            elif v.outcome == "equivalent":
                counts["eq"] += 1
            elif v.outcome == "undecided":
                counts["und"] += 1
            else:
                counts["ns"] += 1
        print(f"| {p} % | {pct(counts['sep'], trials)} | {pct(counts['eq'], trials)} | {pct(counts['ns'], trials)} | "
              f"{pct(counts['und'], trials)} | {pct(counts['wrong'], trials)} |")


def allocation(base: SimEngine, trials: int) -> None:
    """Today's equal budgets (every engine's full ladder, bisected, and its bracket points measured
    twice more) beside the allocation (harness/scoring/verdict/allocation.py: each engine's low end, the
    first point brief; then the leader's climb, the others' while they could still lead, aimed and
    stopped once out of the race or once a point's SLO has failed; then bisections and repeats
    where the verdict is uncertain), on the same pairs and seeds; measuring
    time on the simulated clock (the sum of the measurements' durations): on a machine's first run
    (the leader's bracket repeated once on a fresh start: its interval's spread between starts),
    and on a machine whose earlier runs settled the spread between measurements (six earlier runs
    of the slower engine taken in, testbed.history: 12 degrees of freedom, at least SETTLED_DF, so
    the leader is not repeated)."""
    print("| better by | equal budgets: right winner / separated and wrong | time (s, median) | allocation, a machine's "
          "first run: right winner / separated and wrong | time (s, median) | time ratio (median [min..max]) | a machine "
          "whose spread is settled: right winner / separated and wrong | time ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    settled = testbed.history(base, range(1000, 1006), SLOS, OUTPUT_TOKENS)
    for p in (0, 3, 8, 10, 15, 20, 30, 50):
        better = faster(base, "better", 1 + p / 100)
        right, wrong = [0, 0, 0], [0, 0, 0]
        times: list[list[float]] = [[], [], []]
        for t in range(trials):
            clock = [0.0]
            v0 = decide([testbed.candidate(better, 2 * t, SLOS, OUTPUT_TOKENS, clock=clock),
                         testbed.candidate(base, 2 * t + 1, SLOS, OUTPUT_TOKENS, clock=clock)])
            times[0].append(clock[0])
            verdicts = [v0]
            for k, prior in ((1, []), (2, settled)):
                clock = [0.0]
                v, _ = testbed.race([better, base], [2 * t, 2 * t + 1], SLOS, OUTPUT_TOKENS, clock=clock, prior=prior)
                times[k].append(clock[0])
                verdicts.append(v)
            for k, v in enumerate(verdicts):
                right[k] += p > 0 and v.winner == "better"
                wrong[k] += v.outcome == "separated" and (p == 0 or v.winner == "base")
        ratios = [[b / a for a, b in zip(times[0], times[k])] for k in (1, 2)]
        cells = [f"{pct(right[k], trials) if p else '–'} / {pct(wrong[k], trials)}" for k in (0, 1, 2)]
        spread = [f"{statistics.median(r):.3f} [{min(r):.2f}..{max(r):.2f}]" for r in ratios]
        print(f"| {p} % | {cells[0]} | {statistics.median(times[0]):,.0f} | {cells[1]} | {statistics.median(times[1]):,.0f} "
              f"| {spread[0]} | {cells[2]} | {spread[1]} |")


def truths(base: SimEngine, trials: int) -> None:
    print("| truth | what the decision did | today's rule |")
    print("|---|---|---|")
    # 1. 20 % apart, wide noise
    wide = dataclasses.replace(base, jitter=0.25)
    better = faster(wide, "better", 1.2)
    eq = slower = sep = 0
    for t in range(trials):
        v = decide([candidate(better, 2 * t), candidate(wide, 2 * t + 1)])
        eq += v.outcome == "equivalent"
        slower += v.winner == "base"
        sep += v.outcome == "separated" and v.winner == "better"
    print(f"| 20 % apart, jitter 0.25 | equivalent {pct(eq, trials)}, slower chosen {pct(slower, trials)}, "
          f"better separated {pct(sep, trials)} | a tie whenever the interval's lower end ≤ 1.05, then start-up time "
          "decides |")
    # 2. identical completion order: coverage of the analytic ratio
    a = faster(base, "a", 1.06)
    analytic = truth(a) / truth(base)
    shared = own = 0
    for t in range(trials):
        la = testbed.climb(a, t, SLOS, OUTPUT_TOKENS)
        lb = testbed.climb(base, t, SLOS, OUTPUT_TOKENS)  # the same trial: the same noise, the same order
        ca_s, cb_s = la.capacity(seed=t), lb.capacity(seed=t)
        ca_o, cb_o = la.capacity(seed=engine_stream(t, "a")), lb.capacity(seed=engine_stream(t, "base"))
        assert ca_s is not None and cb_s is not None and ca_o is not None and cb_o is not None
        lo, hi = ratio_interval(ca_s, cb_s) or (0.0, 0.0)
        shared += lo <= analytic <= hi
        lo, hi = ratio_interval(ca_o, cb_o) or (0.0, 0.0)
        own += lo <= analytic <= hi
    print(f"| 6 % apart, identical completion order: 95 % ratio interval covers the analytic {analytic:.3f} | "
          f"{pct(own, trials)} (a stream per engine) | {pct(shared, trials)} (one shared seed) |")
    # 3. an open third engine that is truly best
    second, third = faster(base, "second", 1.1), faster(base, "third", 1.3)
    confident = und = 0
    for t in range(trials):
        v = decide([candidate(base, 3 * t), candidate(second, 3 * t + 1), candidate(third, 3 * t + 2, max_points=3)])
        confident += bool(v.winner) and v.winner != "third"
        und += v.outcome == "undecided" and "third" in v.unsettled
    print(f"| a third engine 30 % better, its ladder cut open at 4 in flight | a confident wrong winner "
          f"{pct(confident, trials)}; undecided naming it {pct(und, trials)} | only the runner-up's open capacity "
          "counted: a winner named whenever the top two separate |")
    # 4. an open leader near a tie, starting slower
    leader = dataclasses.replace(faster(base, "leader", 1.03), startup_s=30.0)
    lost = eq = 0
    for t in range(trials):
        c = candidate(leader, 2 * t)
        assert c.capacity is not None
        c.capacity.open = True
        v = decide([c, candidate(base, 2 * t + 1)])
        if v.leader == "leader":
            lost += v.winner == "base"
            eq += v.outcome == "equivalent"
    print(f"| an open leader 3 % ahead that starts 3× slower | lost on a tie-breaker {pct(lost, trials)} "
          f"(equivalent {pct(eq, trials)}) | a tie, decided by start-up time: the lower bound loses |")
    # 5. a true 1 % failure rate
    flaky = dataclasses.replace(base, name="flaky", fail_rate=0.01)
    excluded = raw = 0
    for t in range(trials):
        v = decide([candidate(flaky, 2 * t), candidate(base, 2 * t + 1)])
        excluded += "flaky" in v.excluded
        lowest = testbed.climb(flaky, 2 * t, SLOS, OUTPUT_TOKENS, max_points=1).rungs[0].measurements[0]
        raw += (~lowest.ok).mean() > 0.05  # the raw fraction against the bound, as before
    print(f"| a true 1 % failure rate (bound 5 %) | excluded in {pct(excluded, trials)} | the raw fraction over the "
          f"lowest point's 16 requests above 5 %: excluded in {pct(raw, trials)} |")
    # 5b. a true 20 % failure rate: points sized for the error bound
    failing = dataclasses.replace(base, name="failing", fail_rate=0.20)
    caught = once = 0
    for t in range(trials):
        v = decide([candidate(failing, 2 * t), candidate(base, 2 * t + 1)])
        caught += "failing" in v.excluded
        first = testbed.climb(failing, 2 * t, SLOS, OUTPUT_TOKENS, 0, max_points=1).rungs[0].measurements[0]
        once += too_many_failures(int((~first.ok).sum()), first.n, 0.05)  # one measurement, Wilson-judged
    print(f"| a true 20 % failure rate (bound 5 %) | excluded in {pct(caught, trials)} (a point whose failures leave "
          f"the bound undecided measured again, twice at most) | one measurement a point: excluded in "
          f"{pct(once, trials)} |")
    # 6. worse only on the synchronised start
    bursty = dataclasses.replace(base, name="bursty", burst_ms=1500.0)
    sep_either = eq = 0
    for t in range(trials):
        v = decide([candidate(bursty, t), candidate(base, t)])  # the same noise: identical steady states
        sep_either += v.outcome == "separated"
        eq += v.outcome == "equivalent"
    old = [c.output_tps / d.output_tps for t in range(trials)
           if (c := testbed.climb(bursty, t, SLOS, OUTPUT_TOKENS, steady=False).capacity(resamples=0))
           and (d := testbed.climb(base, t, SLOS, OUTPUT_TOKENS, steady=False).capacity(resamples=0)) and d.output_tps]
    print(f"| worse only on the synchronised first requests (+1.5 s TTFT), steady state identical | separated either "
          f"way {pct(sep_either, trials)}, equivalent {pct(eq, trials)} | whole measurements judged: its capacity "
          f"{statistics.median(old):.2f}× its twin's (median; [{min(old):.2f}–{max(old):.2f}]) |")


def coverage(base: SimEngine, jitter: float, trials: int) -> None:
    print("| engine | truth (output tok/s) | measured median | relative error median [min..max] | 95 % interval covers "
          "the truth | median half-width |")
    print("|---|---:|---:|---:|---:|---:|")
    profiles = [base, SimEngine("tpot_bound", slots=64, prefill_ms=60, tpot_ms=20, batch_slowdown=0.1, jitter=jitter),
                SimEngine("few_slots", slots=4, prefill_ms=40, tpot_ms=15, batch_slowdown=0.05, jitter=jitter)]
    for engine in profiles:
        true = truth(engine)
        caps = [c for t in range(trials)
                if (c := testbed.climb(engine, t, SLOS, OUTPUT_TOKENS).capacity(seed=engine_stream(t, engine.name)))]
        errors = [(c.output_tps - true) / true for c in caps]
        covered = sum(c.interval is not None and c.interval[0] <= true <= c.interval[1] for c in caps)
        half = statistics.median((c.interval[1] - c.interval[0]) / 2 / c.output_tps for c in caps if c.interval)
        print(f"| {engine.name} | {true:,.1f} | {statistics.median(c.output_tps for c in caps):,.1f} | "
              f"{statistics.median(errors):+.1%} [{min(errors):+.1%}..{max(errors):+.1%}] | "
              f"{pct(covered, len(caps))} | ±{half:.1%} |")


def drift_rows(base: SimEngine, drift: float, trials: int) -> None:
    """Section 4 (module docstring): coverage of each profile's capacity (bracket points measured
    three times) with and without the spread, then the allocation's pairs with and without it."""
    print(f"Between measurements (drift {drift:g}): each capacity's bracket points measured 3 times, its 95 % interval "
          "with the spread between measurements and without it")
    print()
    print("| engine | truth (output tok/s) | covers the truth: with the spread / without | median half-width: with / without |")
    print("|---|---:|---:|---:|")
    profiles = [base, SimEngine("tpot_bound", slots=64, prefill_ms=60, tpot_ms=20, batch_slowdown=0.1, jitter=base.jitter),
                SimEngine("few_slots", slots=4, prefill_ms=40, tpot_ms=15, batch_slowdown=0.05, jitter=base.jitter)]
    for engine in (dataclasses.replace(e, drift=drift) for e in profiles):
        true = truth(engine)
        covered, half = [0, 0], [[], []]
        for t in range(trials):
            ladder = testbed.climb(engine, t, SLOS, OUTPUT_TOKENS)
            for k, spread in enumerate((None, NO_SPREAD)):
                c = ladder.capacity(seed=engine_stream(t, engine.name), spread=spread)
                if c is not None and c.interval is not None:
                    covered[k] += c.interval[0] <= true <= c.interval[1]
                    half[k].append((c.interval[1] - c.interval[0]) / 2 / c.output_tps)
        print(f"| {engine.name} | {true:,.1f} | {pct(covered[0], trials)} / {pct(covered[1], trials)} | "
              f"±{statistics.median(half[0]):.1%} / ±{statistics.median(half[1]):.1%} |")
    print()
    print("| better by | with the spread and 3 earlier runs: right winner / separated and wrong / time (s, median) | "
          "with this run's spread alone | without it (before) |")
    print("|---:|---:|---:|---:|")
    drifting = dataclasses.replace(base, drift=drift)
    for p in (0, 10, 20, 30):
        better = faster(drifting, "better", 1 + p / 100)
        cells = []
        for widen, earlier in ((True, 3), (True, 0), (False, 0)):
            right = wrong = 0
            times = []
            for t in range(trials):
                clock = [0.0]
                prior = testbed.history(drifting, [10_000 + 7 * t + j for j in range(earlier)], SLOS, OUTPUT_TOKENS)
                v, _ = testbed.race([better, drifting], [2 * t, 2 * t + 1], SLOS, OUTPUT_TOKENS, clock=clock, widen=widen,
                                    prior=prior)
                times.append(clock[0])
                right += p > 0 and v.winner == "better"
                wrong += v.outcome == "separated" and (p == 0 or v.winner == "base")
            cells.append(f"{pct(right, trials) if p else '–'} / {pct(wrong, trials)} / {statistics.median(times):,.0f}")
        print(f"| {p} % | {cells[0]} | {cells[1]} | {cells[2]} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--jitter", type=float, default=0.08, help="lognormal sigma of each request's times")
    ap.add_argument("--drift", type=float, default=0.08,
                    help="lognormal sigma of each measurement's times alike (section 4: the machine's state)")
    ap.add_argument("--only", choices=["drift"], help="print only that section")
    args = ap.parse_args()
    if args.trials < 1 or args.jitter < 0 or args.drift < 0:
        sys.exit("error: --trials must be ≥ 1, --jitter and --drift ≥ 0")
    base = SimEngine("base", slots=16, prefill_ms=80, tpot_ms=25, batch_slowdown=0.08, jitter=args.jitter)
    t0 = time.monotonic()
    print(f"Decision test bed: {args.trials} seeded trials per row, jitter {args.jitter:g}, "
          f"SLOs p90 TTFT <= 1 s, p90 TPOT <= 60 ms\n")
    if args.only == "drift":
        drift_rows(base, args.drift, args.trials)
        print(f"\n({time.monotonic() - t0:.0f} s)")
        return
    pairs(base, args.trials)
    print()
    allocation(base, args.trials)
    print()
    truths(base, args.trials)
    print()
    coverage(base, args.jitter, args.trials)
    print()
    drift_rows(base, args.drift, args.trials)
    print(f"\n({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
