"""Verdicts (pure). One function, thresholds from the protocol config, every verdict with reasons.

Rule (speedup = baseline time / variant time, interval from the paired bootstrap; per bucket
the threshold is T = 1 + max(min_effect, noise floor), the noise floor being the effect the A/A
control shows in that bucket, |A/A speedup - 1|):
- ``invalid``: the comparison cannot be made: the baseline has no measurement in a bucket, the
  variant's backend is unavailable here, a gate could not be evaluated, or a trial failed in
  the harness (ranks out of step, a lost peer) and again when re-run;
- ``reject``: the variant failed (crash, OOM, timeout) in any trial, a gate failed, or its
  interval lies wholly below 1 in any bucket or in the mixture (a regression anywhere blocks
  it, whatever the mixture says), with the rank test agreeing;
- ``retain``: the interval's lower end clears T in every bucket and in the mixture, the rank
  test (Mann-Whitney U at 1 - confidence) agrees in every bucket, and every gate passed;
- ``inconclusive``: anything else, with the rounds estimated to resolve it.

Gates (correctness, memory budget, ...) are evaluated elsewhere and passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator import stats
from orchestrator.analyze import MIXTURE, Analysis, Comparison

VERDICTS = ("retain", "reject", "inconclusive", "invalid")
FAILED = ("failed", "oom", "timeout", "crashed", "killed")
INFRA = "infra_failed"  # a multi-rank trial that failed in the harness (launch.base)


@dataclass(frozen=True)
class Gate:
    """The outcome of one check that can block a variant, whatever its speed."""

    name: str  # e.g. "correctness", "memory"
    status: str  # pass | fail | error (error = could not be evaluated)
    detail: str = ""


@dataclass
class Verdict:
    arm_id: str
    label: str
    verdict: str
    reasons: list[str] = field(default_factory=list)
    # total rounds estimated to reach a decisive verdict at the observed effect (inconclusive)
    rounds_to_resolve: int | None = None
    timing_based: bool = True  # False when a failure or a gate decided it

    def to_dict(self) -> dict[str, Any]:
        return {"arm_id": self.arm_id, "label": self.label, "verdict": self.verdict,
                "reasons": self.reasons, "rounds_to_resolve": self.rounds_to_resolve}


def _fmt(e: Any) -> str:
    return f"{e.speedup:.3f}x [{e.low:.3f}, {e.high:.3f}]"


def threshold(c: Comparison, min_effect: float) -> float:
    return 1 + max(min_effect, c.noise_floor or 0.0)


def _floor_note(c: Comparison, min_effect: float) -> str:
    if c.noise_floor is None:
        return f"min_effect {min_effect:g}; no A/A noise floor"
    return f"max(min_effect {min_effect:g}, noise floor {c.noise_floor:.3f})"


def rounds_needed(e: stats.SpeedupEstimate, t: float) -> int | None:
    """Total rounds for a decisive verdict if the observed effect and spread hold: to clear T
    when the speedup is above it, to fall below 1 when under 1; None between 1 and T."""
    if e.round_log_sd is None:
        return None
    boundary = t if e.speedup > t else 1.0 if e.speedup < 1 else None
    if boundary is None:
        return None
    return stats.rounds_to_resolve(e.speedup, max(e.round_log_sd, 1e-9), boundary, e.confidence)


def _judge(c: Comparison, min_effect: float, alpha: float) -> tuple[str, str, int | None]:
    """(good | bad | unsure, reason, rounds to resolve) for one bucket's timing comparison."""
    e = c.estimate
    name = c.bucket
    if e is None:
        return "unsure", f"{name}: no interval ({c.note})", None
    t = threshold(c, min_effect)
    rank = c.rank
    rank_ok = rank is None or rank.p_value < alpha
    rank_txt = f"; rank test p={rank.p_value:.2g}" if rank else ""
    need = stats.rounds_for_median_interval(e.confidence)
    if e.rounds < need:  # decisive here is provisional: the interval cannot reach its confidence
        rank_txt += (f"; provisional: {e.rounds} rounds, an interval of a median needs {need} "
                     f"for {e.confidence:.0%}")
    if e.high < 1 and rank_ok:
        return "bad", f"{name}: slower, speedup {_fmt(e)} lies below 1{rank_txt}", None
    if e.low > t and rank_ok:
        return "good", (f"{name}: faster, speedup {_fmt(e)} clears {t:.3f} "
                        f"({_floor_note(c, min_effect)}){rank_txt}"), None
    n = rounds_needed(e, t)
    if (e.high < 1 or e.low > t) and not rank_ok:
        why = f"the interval is decisive but the rank test does not confirm it{rank_txt}"
    elif 1 <= e.speedup <= t:
        why = (f"the observed effect is under the threshold {t:.3f} "
               f"({_floor_note(c, min_effect)}): no number of rounds makes it a retain at this "
               "effect")
    else:
        more = f"~{n} rounds in all (have {e.rounds}) may resolve it" if n else (
            "more rounds may resolve it")
        why = f"does not clear {t:.3f} ({_floor_note(c, min_effect)}) nor lie below 1; {more}"
    return "unsure", f"{name}: speedup {_fmt(e)} {why}", n


def decide(
    analysis: Analysis, min_effect: float, gates: dict[str, list[Gate]] | None = None
) -> list[Verdict]:
    """One verdict per variant (the A/A control gets none). ``gates`` maps arm_id to the gates
    evaluated for that arm."""
    out = []
    gates = gates or {}
    base = analysis.arms[0]
    for arm in analysis.arms[1:]:
        invalid, reject, unsure, good, notes = [], [], [], [], []
        timing_reject = False
        needed: list[int | None] = []
        for bucket in analysis.buckets:
            bs = analysis.summaries[(bucket, base.arm_id)]
            vs = analysis.summaries[(bucket, arm.arm_id)]
            if bs.ok == 0:
                invalid.append(f"{bucket}: the baseline produced no measurement ({_errs(bs)})")
                continue
            harness = [f"{who} {n} of {s.trials}" for who, s in (("baseline", bs), ("variant", vs))
                       if (n := s.statuses.get(INFRA, 0))]
            if harness:  # says nothing of the variant: never a reject
                invalid.append(f"{bucket}: trials failed in the harness, not on the variant's "
                               f"account, and again when re-run ({', '.join(harness)}: "
                               f"{_errs(vs if vs.statuses.get(INFRA) else bs)}); re-run the "
                               "campaign (resume=RUN_DIR re-runs them) or raise "
                               "protocol.infra_retries")
            failed = {k: v for k, v in vs.statuses.items() if k in FAILED}
            if vs.statuses.get("unavailable") and vs.ok == 0:
                invalid.append(f"{bucket}: unavailable here: {'; '.join(vs.errors) or 'no reason'}")
                continue
            if failed:
                what = ", ".join(f"{n} {k}" for k, n in sorted(failed.items()))
                reject.append(f"{bucket}: {what} of {vs.trials} trials ({_errs(vs)})")
                continue
        keys = list(analysis.buckets)
        if (MIXTURE, arm.arm_id) in analysis.comparisons:
            keys.append(MIXTURE)
        for key in keys:
            c = analysis.comparisons.get((key, arm.arm_id))
            if c is None:
                continue
            conf = c.estimate.confidence if c.estimate else 0.95
            kind, reason, n = _judge(c, min_effect, 1 - conf)
            if kind == "bad":
                reject.append(reason)
                timing_reject = True
            elif kind == "good":
                good.append(reason)
            else:
                unsure.append(reason)
                needed.append(n)
            for w in (analysis.summaries[(key, arm.arm_id)].warnings
                      if (key, arm.arm_id) in analysis.summaries else []):
                notes.append(f"{key}: warning: {w}")
        gate_bad = False
        for g in gates.get(arm.arm_id, []):
            if g.status == "fail":
                reject.append(f"{g.name} gate failed: {g.detail}")
                gate_bad = True
            elif g.status == "error":
                invalid.append(f"{g.name} gate could not be evaluated: {g.detail}")
                gate_bad = True
            else:
                good.append(f"{g.name} gate passed" + (f": {g.detail}" if g.detail else ""))
        timing_based = not gate_bad and not invalid and (timing_reject or not reject)
        resolve = None
        if unsure and needed and all(n is not None for n in needed):
            resolve = max(n for n in needed if n is not None)
        if invalid:
            v = Verdict(arm.arm_id, arm.label, "invalid", invalid + reject + unsure, None, False)
        elif reject:
            v = Verdict(arm.arm_id, arm.label, "reject", reject + unsure + good + notes, None,
                        timing_based)
        elif unsure:
            v = Verdict(arm.arm_id, arm.label, "inconclusive", unsure + good + notes, resolve)
        else:
            v = Verdict(arm.arm_id, arm.label, "retain", good + notes)
        out.append(v)
    return out


def _errs(s: Any) -> str:
    return "; ".join(s.errors[:2]) if s.errors else "no error text"


__all__ = ["VERDICTS", "Gate", "Verdict", "decide", "rounds_needed", "threshold"]
