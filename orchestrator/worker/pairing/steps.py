"""Paired steps (protocol.pairing=steps): the part a round's paired trial carries, and its
planner.

One trial process measures every arm of a round and bucket, block by block, the blocks in the
cycles' order (orchestrator.core.blocks). Which mode runs it is the worker's choice, from the
workload: an embedded recipe's arms switched in the process (:mod:`.inprocess`), a command
whose trainer switches them through orchestrator.client (:mod:`.client`), or a plain
command's arms taking turns as processes of their own (:mod:`.alternation`, planned here under
its own tag: its arms keep their own env switches and the trial process has none).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.spec.config import Config
from orchestrator.spec.jobs import PairedArm, PairingPart, TrialSpec, paired_arms, round_groups
from orchestrator.spec.sweep import alternates

TAG = "steps"  # the arms switched inside one program: in-process or through the client
ALTERNATION_TAG = "alternation"  # the arms their own processes, taking turns


@dataclass(frozen=True)
class StepsPart:
    """The settings a paired-steps trial measures by (the protocol's, and its round's seed)."""

    block_steps: int  # measured steps of an arm's block
    switch_warmup_steps: int  # unmeasured steps after each switch
    # the cycles' block order: balanced (orchestrator.core.blocks.balanced_order, seeded by
    # order_seed) | reversed (every other cycle)
    order: str
    order_seed: str

    @classmethod
    def of(cls, spec: TrialSpec) -> StepsPart:
        """The part of a spec this module planned (a clear error for any other)."""
        part = spec.paired
        if part is None or part.mode not in (TAG, ALTERNATION_TAG):
            raise ValueError(f"trial {spec.trial_id}: not a paired-steps trial "
                             f"(its part: {part.mode if part else None})")
        return cls(**part.settings)


def part(arms: Sequence[PairedArm], settings: StepsPart, alternate: bool = False) -> PairingPart:
    """A paired-steps trial's part: its arms in block order, measured by ``settings``
    (``alternate``: a plain command's arms taking turns as their own processes)."""
    return PairingPart(ALTERNATION_TAG if alternate else TAG, list(arms),
                       dataclasses.asdict(settings), own_processes=alternate)


def join(specs: Sequence[TrialSpec], settings: Callable[[TrialSpec], StepsPart], paired_min_s: float = 0.0,
         alternate: bool = False) -> list[TrialSpec]:
    """One spec per round and bucket, the first planned arm's, that runs every arm of that
    round and bucket in the plan's order, each arm for at least ``paired_min_s`` of measured
    step time (protocol.paired_min_s). ``settings(head)``: the head's :class:`StepsPart`.
    ``alternate``: a plain command's arms, each its own process with its own env switches (the
    trial process none)."""
    out = []
    for members in round_groups(specs):
        head = copy.copy(members[0])
        head.paired = part(paired_arms(members), settings(head), alternate)
        if alternate:
            head.env = {}
        head.measured_min_s = max(head.measured_min_s, paired_min_s)
        if head.timeout_s is not None:  # every arm's trial in one process
            head.timeout_s *= len(members)
        out.append(head)
    return out


def facts(cfg: Config, n_arms: int) -> dict[str, Any]:
    """plan.json's word on paired steps: the block settings."""
    return {"block_steps": cfg.protocol.block_steps,
            "switch_warmup_steps": cfg.protocol.switch_warmup_steps}


def plan(cfg: Config, specs: Sequence[TrialSpec], arms: Sequence[Any]) -> list[TrialSpec]:
    """protocol.pairing=steps: a round's one-arm specs joined, by bucket, into one trial."""
    p = cfg.protocol

    def settings(head: TrialSpec) -> StepsPart:
        return StepsPart(p.block_steps, p.switch_warmup_steps, str(p.order),
                         f"{p.seed}|r{head.round}|{head.bucket['name']}")

    return join(specs, settings, p.paired_min_s, alternate=alternates(arms))
