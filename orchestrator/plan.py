"""Planning (pure): which trial runs when.

Rounds are the outer loop; inside a round every bucket runs every arm once, arms interleaved
(A B C) and the order reversed every other round (C B A) so slow drift of the machine does not
favour whichever arm happens to run first.

Adaptive rounds: after the first ``repeats`` rounds the campaign asks
:func:`more_rounds_reason` about each variant and plans further rounds with
:func:`plan_rounds` (same interleaving and reversal, stable trial ids) for the baseline, the
A/A control and the variants still undecided, up to ``max_rounds``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.sweep import Arm


@dataclass(frozen=True)
class PlannedTrial:
    trial_id: str  # stable across re-plans: resume matches on it
    position: int  # execution order
    round: int
    bucket: str
    arm_id: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def trial_id(round_: int, bucket: str, arm_id: str) -> str:
    return f"r{round_:03d}-{_slug(bucket)}-{arm_id}"


def arm_order(arm_ids: Sequence[str], round_: int, reverse_every_other_round: bool) -> list[str]:
    order = list(arm_ids)
    if reverse_every_other_round and round_ % 2 == 1:
        order.reverse()
    return order


def plan_rounds(
    arm_ids: Sequence[str],
    buckets: Sequence[str],
    rounds: Sequence[int],
    *,
    reverse_every_other_round: bool = True,
    start_position: int = 0,
) -> list[PlannedTrial]:
    """Trials for the given round numbers, in execution order."""
    out: list[PlannedTrial] = []
    pos = start_position
    for r in rounds:
        for b in buckets:
            for a in arm_order(arm_ids, r, reverse_every_other_round):
                out.append(PlannedTrial(trial_id(r, b, a), pos, r, b, a))
                pos += 1
    return out


def plan(
    arm_ids: Sequence[str],
    buckets: Sequence[str],
    repeats: int,
    *,
    reverse_every_other_round: bool = True,
) -> list[PlannedTrial]:
    return plan_rounds(
        arm_ids, buckets, range(repeats), reverse_every_other_round=reverse_every_other_round
    )


# --------------------------------------------------------------------------- A/A control arm

AA_ARM_ID = "aa"


def control_arm(baseline: Arm) -> Arm:
    """The A/A control: the baseline's exact settings under its own arm id. It runs in every
    round like any arm and measures the noise floor; it is never a variant with a verdict."""
    return Arm(AA_ARM_ID, f"{baseline.label} (A/A control)", baseline.value, False,
               dict(baseline.overrides), dict(baseline.env))


# --------------------------------------------------------------------------- adaptive rounds


@dataclass(frozen=True)
class ArmProgress:
    """What the adaptive rule needs to know about one variant after the rounds run so far."""

    arm_id: str
    verdict: str  # retain | reject | inconclusive | invalid
    timing_based: bool  # False when a failure or a gate (not the timing) made the verdict
    # per bucket (and mixture): (speedup, low, high, threshold) of the timing comparison
    intervals: tuple[tuple[float, float, float, float], ...] = ()
    rounds_to_resolve: int | None = None  # total rounds estimated to resolve it, if known


def more_rounds_reason(p: ArmProgress, rounds_done: int, max_rounds: int, gain_below: float,
                       min_decisive_rounds: int = 0) -> str:
    """Why this variant needs more rounds ("" = it does not).

    - a failure- or gate-based verdict, or the round cap reached: no;
    - inconclusive with an interval straddling the retain threshold or 1: yes, unless no
      decisive verdict is in reach (the effect lies between 1 and the threshold with the
      interval below the threshold, or the rounds estimated to resolve it exceed the cap);
    - retain or reject on an observed effect under ``gain_below``, or after fewer than
      ``min_decisive_rounds`` rounds (too few for the interval to reach its confidence, see
      :func:`orchestrator.stats.rounds_for_median_interval`): yes, to confirm it.
    """
    if rounds_done >= max_rounds or not p.timing_based or p.verdict == "invalid":
        return ""
    if p.verdict in ("retain", "reject"):
        small = [s for s, _, _, _ in p.intervals if abs(s - 1) < gain_below]
        if small:
            return f"{p.verdict} on a gain under {gain_below:.0%} ({min(small):.3f}x): confirming"
        if rounds_done < min_decisive_rounds:
            return (f"{p.verdict} after {rounds_done} rounds, fewer than the {min_decisive_rounds} "
                    "an interval of a median needs at this confidence: confirming")
        return ""
    straddle = [(s, lo, hi, t) for s, lo, hi, t in p.intervals if lo <= t and hi >= 1]
    if not straddle:
        return ""
    reachable = [(s, lo, hi, t) for s, lo, hi, t in straddle if hi > t or s < 1]
    if not reachable:
        return ""
    if p.rounds_to_resolve is not None and p.rounds_to_resolve > max_rounds:
        return ""
    _, lo, hi, t = reachable[0]
    what = f"the retain threshold {t:.3f}" if lo <= t <= hi else "1"
    return f"interval [{lo:.3f}, {hi:.3f}] straddles {what}"


def next_rounds(rounds_done: int, max_rounds: int, step: int) -> list[int]:
    """Round numbers of the next adaptive extension (empty at the cap)."""
    return list(range(rounds_done, min(max_rounds, rounds_done + step)))
