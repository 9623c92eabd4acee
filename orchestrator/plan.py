"""Planning (pure): which trial runs when.

Rounds are the outer loop; inside a round every bucket runs every arm once, arms interleaved
(A B C) and the order reversed every other round (C B A) so slow drift of the machine does not
favour whichever arm happens to run first.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Sequence


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
