"""Planning (pure): which trial runs when.

Rounds are the outer loop; inside a round every bucket runs every arm once, arms interleaved,
each round and bucket in an order from a seeded Williams design
(:func:`orchestrator.core.blocks.balanced_order`, ``protocol.order=balanced``): over the rounds
every arm takes every position and follows every other arm equally often, the A/A control
placed like any variant, so neither a slow drift of the machine nor carry-over from the
previous process favours an arm, and no arm is always first after a look.
``protocol.order=reversed`` is the earlier design (A B C, C B A, ...).

Adaptive rounds: after the first ``repeats`` rounds the campaign asks
:func:`more_rounds_reason` about each variant and plans further rounds with
:func:`plan_rounds` (same interleaving and reversal, stable trial ids) for the baseline, the
A/A control and the variants still undecided, up to ``max_rounds``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TypedDict, cast

from orchestrator.core.records import VerdictKind
from orchestrator.core.blocks import ordered
from orchestrator.spec.sweep import Arm


class PlannedTrialDict(TypedDict):
    """A planned trial as plan.json's ``trials`` records it (PlannedTrial's fields)."""

    trial_id: str
    position: int
    round: int
    bucket: str
    arm_id: str
    measured_steps: int | None


@dataclass(frozen=True)
class PlannedTrial:
    trial_id: str  # stable across re-plans: resume matches on it
    position: int  # execution order
    round: int
    bucket: str
    arm_id: str
    # measured steps the planner chose for this trial (orchestrator.core.paired.optimal_steps);
    # None: the protocol's measured_steps / measured_min_s
    measured_steps: int | None = None

    def to_dict(self) -> PlannedTrialDict:
        return cast(PlannedTrialDict, asdict(self))


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def trial_id(round_: int, bucket: str, arm_id: str) -> str:
    return f"r{round_:03d}-{slug(bucket)}-{arm_id}"


def arm_order(arm_ids: Sequence[str], round_: int, reverse_every_other_round: bool,
              order: str = "reversed", seed: str = "") -> list[str]:
    """The arms' order in one round: ``balanced`` (a seeded Williams design, walked by round)
    or ``reversed`` (as given, reversed every other round when asked)."""
    if str(order) == "balanced" or reverse_every_other_round:
        return ordered(arm_ids, round_, order, seed)
    return list(arm_ids)


def plan_rounds(
    arm_ids: Sequence[str],
    buckets: Sequence[str],
    rounds: Sequence[int],
    *,
    reverse_every_other_round: bool = True,
    start_position: int = 0,
    steps: Mapping[str, int] | None = None,
    order: str = "reversed",
    seed: str = "",
) -> list[PlannedTrial]:
    """Trials for the given round numbers, in execution order (``steps``: measured steps per
    bucket chosen by the planner, for every arm alike; ``order``/``seed``: :func:`arm_order`,
    seeded per bucket)."""
    out: list[PlannedTrial] = []
    pos = start_position
    for r in rounds:
        for b in buckets:
            for a in arm_order(arm_ids, r, reverse_every_other_round, order, f"{seed}|{b}"):
                out.append(PlannedTrial(trial_id(r, b, a), pos, r, b, a,
                                        (steps or {}).get(b)))
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
    verdict: str  # retain | reject | equivalent | inconclusive | invalid
    timing_based: bool  # False when a failure or a gate (not the timing) made the verdict
    # total rounds estimated to resolve the objective at the observed effect and noise; None
    # when out of reach (orchestrator.analysis.decide.REACH x max_rounds) or unknown
    rounds_to_resolve: int | None = None
    # False: this look has too little power to call the variant hopeless (the early looks of
    # an alpha-spending plan): it goes on even without a projection
    futility_judged: bool = True


def more_rounds_reason(p: ArmProgress, rounds_done: int, max_rounds: int,
                       calibration: str = "") -> str:
    """Why this variant needs more rounds ("" = it does not). Sequential stopping: a variant
    decided at this look (retain, reject, equivalent: the error rate is spent per look, see
    orchestrator.core.paired.alpha_per_look) drops out; an inconclusive one goes on while a decision
    on the objective is within reach (futility is judged on the objective only); an A/A control
    that does not cover 1 (``calibration``, a reason) keeps every timing-based variant running
    to the cap, where the verdicts become invalid if it still does not."""
    if rounds_done >= max_rounds or not p.timing_based or p.verdict == VerdictKind.INVALID:
        return ""
    if calibration:
        return "the A/A control is not calibrated yet: more rounds"
    if p.verdict != VerdictKind.INCONCLUSIVE:
        return ""
    if p.rounds_to_resolve is None and not p.futility_judged:
        return "undecided at an early look with little power: more rounds before futility"
    if p.rounds_to_resolve is None:
        return ""  # futile: no decision on the objective within reach
    return f"undecided: ~{p.rounds_to_resolve} rounds in all may resolve it"


def next_rounds(rounds_done: int, max_rounds: int, step: int) -> list[int]:
    """Round numbers of the next adaptive extension (empty at the cap)."""
    return list(range(rounds_done, min(max_rounds, rounds_done + step)))
