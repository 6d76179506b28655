"""The report's output-fidelity table: each engine's outputs against the ground-truth reference
(``fidelity.json``, :class:`results.schema.FidelityCheck`), as stored; nothing is computed here
but formatting."""

from __future__ import annotations

import statistics
from typing import Any

from results.schema import AccuracyCheck, FidelityCheck, FidelityResult, LadderSummary


def _pct(iv: Any) -> str:
    return f"[{iv.low:.1%}, {iv.high:.1%}]" if iv is not None else ""


def _gate(r: FidelityResult, allow_unchecked: bool) -> str:
    """The gate's cell: ``pass``; ``excluded (floor 0.99)``; a check that does not vouch for the
    engine (an error, too few prompts answered): ``excluded: fidelity not checked (…)``, or with
    ``--allow-unchecked`` ``competes (--allow-unchecked): fidelity not checked (…)``."""
    if r.passed is False:
        return f"excluded (floor {r.floor:.2f})"
    if why := r.unchecked():
        return (f"competes (--allow-unchecked): {why}" if allow_unchecked else f"excluded: {why}")[:160]
    return "pass" if r.passed else "—"


def _row(name: str, r: FidelityResult, allow_unchecked: bool = False) -> dict[str, str]:
    if r.error is not None or r.agreement_outside_near_ties is None:
        return {"engine": name, "agreement": "—", "interval": "", "positions": "—", "divergences": "—",
                "exact": "—", "first": "—", "logprobs": "—", "numerics": r.numerics,
                "gate": _gate(r, allow_unchecked)}
    firsts = [d for d in r.first_divergence if d is not None]
    lp = "no logprobs"
    if r.logprobs and r.logprob_error_max is not None:
        lp = f"max |Δ| {r.logprob_error_max:.2g} nats, top-k TV {r.topk_tv_mean or 0:.2g}"
    return {"engine": name, "agreement": f"{r.agreement_outside_near_ties:.1%}", "interval": _pct(r.agreement_interval),
            "positions": f"{r.positions:,}", "divergences": f"{r.divergences} ({r.near_tie_divergences} at near-ties)",
            "exact": f"{r.exact_matches}/{r.prompts} {_pct(r.exact_match_interval)}"
                     + (f" ({r.prompts_answered} answered)" if r.prompts_answered is not None
                        and r.prompts_answered < r.prompts else ""),
            "first": f"{statistics.median(firsts):g}" if firsts else "never", "logprobs": lp,
            "numerics": r.numerics, "gate": _gate(r, allow_unchecked)}


def no_rows(ladder: LadderSummary | None) -> str:
    """Why a fidelity check holds no engine: on a ladder run it checks only the production engines
    the verdict rests on (the leader, and the runner-up while not separated from it), so a run
    whose only measured engines are the reference engine (a yardstick, never the verdict's) or
    that reached no verdict has none; a run of load points checks every measured engine."""
    if ladder is None:  # load points: every measured engine is checked, so none was measured
        return "No engine's outputs were checked: no engine was measured (each one's reason is in the summary)."
    ok = [n for n, e in ladder.engines.items() if e.status.value == "ok" and e.points]
    yardsticks = [n for n in ok if ladder.engines[n].reference]
    rule = ("No engine's outputs were checked: the check runs on the production engines the verdict rests on (the "
            "leader, and the runner-up while not separated from it)")
    if ok and len(yardsticks) == len(ok):
        return (f"{rule}, and this run measured none: {', '.join(yardsticks)} is the reference engine, a yardstick "
                "the verdict never rests on. Measure a production engine beside it (--engine) to check one.")
    return f"{rule}, and this run reached no verdict that rests on one."


def fidelity_context(check: FidelityCheck | None, ladder: LadderSummary | None = None) -> dict[str, Any] | None:
    """The table's rows and its caption's facts (None when the run has no fidelity check);
    ``empty``: why it has no row (:func:`no_rows`; "" when it has)."""
    if check is None:
        return None
    return {"rows": [_row(n, r, check.allow_unchecked) for n, r in check.engines.items()],
            "empty": "" if check.engines else no_rows(ladder), "prompts": check.prompts,
            "max_tokens": check.max_tokens, "source": check.source, "epsilon": f"{check.epsilon:g}",
            "strict": f"{check.strict_floor:.2f}", "other": f"{check.other_floor:.2f}"}


def accuracy_context(check: AccuracyCheck | None) -> dict[str, Any] | None:
    """The task-accuracy table (None when no set was given)."""
    if check is None:
        return None
    rows = [{"engine": n, "accuracy": f"{r.accuracy:.1%}" if r.accuracy is not None else "—",
             "interval": _pct(r.interval), "correct": f"{r.correct}/{r.total}", "failed": str(r.failed)}
            for n, r in check.engines.items()]
    return {"rows": rows, "source": check.source, "items": check.items}
