"""Verdicts (pure). One function, thresholds from the protocol config, every verdict with reasons.

Rule (speedup = baseline time / variant time, interval from the paired bootstrap):
- ``invalid``: the comparison cannot be made: the baseline has no measurement in a bucket, or
  the variant's backend is unavailable here;
- ``reject``: the variant failed (crash, OOM, timeout) in any trial, or its interval lies wholly
  below 1 in any bucket (a regression anywhere blocks it, whatever the mixture says);
- ``retain``: the interval's lower end clears 1 + min_effect in every bucket;
- ``inconclusive``: anything else, e.g. an interval that straddles the threshold.

Gates (correctness, memory budget, ...) are evaluated elsewhere and passed in: a failed gate
makes the verdict ``reject``, a gate that could not be evaluated makes it ``invalid``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.analyze import Analysis

VERDICTS = ("retain", "reject", "inconclusive", "invalid")
FAILED = ("failed", "oom", "timeout", "crashed", "killed")


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

    def to_dict(self) -> dict[str, Any]:
        return {"arm_id": self.arm_id, "label": self.label, "verdict": self.verdict,
                "reasons": self.reasons}


def _fmt(e: Any) -> str:
    return f"{e.speedup:.3f}x [{e.low:.3f}, {e.high:.3f}]"


def decide(
    analysis: Analysis, min_effect: float, gates: dict[str, list[Gate]] | None = None
) -> list[Verdict]:
    """One verdict per variant. ``gates`` maps arm_id to the gates evaluated for that arm."""
    out = []
    gates = gates or {}
    base = analysis.arms[0]
    threshold = 1 + min_effect
    for arm in analysis.arms[1:]:
        invalid, reject, unsure, good = [], [], [], []
        for bucket in analysis.buckets:
            bs = analysis.summaries[(bucket, base.arm_id)]
            vs = analysis.summaries[(bucket, arm.arm_id)]
            if bs.ok == 0:
                invalid.append(f"{bucket}: the baseline produced no measurement ({_errs(bs)})")
                continue
            failed = {k: v for k, v in vs.statuses.items() if k in FAILED}
            if vs.statuses.get("unavailable") and vs.ok == 0:
                invalid.append(f"{bucket}: unavailable here: {'; '.join(vs.errors) or 'no reason'}")
                continue
            if failed:
                what = ", ".join(f"{n} {k}" for k, n in sorted(failed.items()))
                reject.append(f"{bucket}: {what} of {vs.trials} trials ({_errs(vs)})")
                continue
            c = analysis.comparisons[(bucket, arm.arm_id)]
            e = c.estimate
            if e is None:
                unsure.append(f"{bucket}: no interval ({c.note})")
            elif e.high < 1:
                reject.append(f"{bucket}: slower, speedup {_fmt(e)} lies below 1")
            elif e.low > threshold:
                good.append(f"{bucket}: faster, speedup {_fmt(e)} clears {threshold:.3f}")
            else:
                unsure.append(
                    f"{bucket}: speedup {_fmt(e)} does not clear {threshold:.3f} "
                    f"(min_effect {min_effect:g}); more rounds may resolve it"
                )
        for g in gates.get(arm.arm_id, []):
            if g.status == "fail":
                reject.append(f"{g.name} gate failed: {g.detail}")
            elif g.status == "error":
                invalid.append(f"{g.name} gate could not be evaluated: {g.detail}")
            else:
                good.append(f"{g.name} gate passed" + (f": {g.detail}" if g.detail else ""))
        mix = analysis.comparisons.get(("mixture", arm.arm_id))
        mix_note = [f"mixture: speedup {_fmt(mix.estimate)}"] if mix and mix.estimate else []
        if invalid:
            v = Verdict(arm.arm_id, arm.label, "invalid", invalid + reject + unsure)
        elif reject:
            v = Verdict(arm.arm_id, arm.label, "reject", reject + unsure + good + mix_note)
        elif unsure:
            v = Verdict(arm.arm_id, arm.label, "inconclusive", unsure + good + mix_note)
        else:
            v = Verdict(arm.arm_id, arm.label, "retain", good + mix_note)
        out.append(v)
    return out


def _errs(s: Any) -> str:
    return "; ".join(s.errors[:2]) if s.errors else "no error text"
