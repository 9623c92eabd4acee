"""A ``kind: custom`` recipe whose variant varies its own way: the calibrated synthetic load
(recipes/synthetic) plus a per-process offset of the arm's own.

``params.own_offset_sd`` (log SD; 0 = none): the first time a process runs this arm, it draws
one factor ``exp(N(0, own_offset_sd))`` from fresh OS entropy and scales the arm's work units
by it for the rest of the process, as a per-process autotune pick, code layout or allocator
state would (Mytkowicz et al. 2009). The baseline and the A/A control (sd 0) have none, so the
variant is a **null** variant (its log effect averages 0 over processes) that the baseline's
noise does not describe: the failure mode issue 28's per-variant intervals answer.

    python -m orchestrator workload=own_offset +sweep=own_offset protocol.pairing=steps
    python bench/planted_effects.py --workload own_offset --launcher local --pairing steps \\
        --effects 0 --campaigns 20

Host CPU only (numpy), no torch; switchable between steps (``workload.params.own_offset_sd``,
``workload.params.label``), so it pairs by steps.
"""

from __future__ import annotations

import math
import random
from typing import Any

from recipes.base import host_only_recipe, switchable, unprobeable
from recipes.synthetic.config import SyntheticWorkloadConfig
from recipes.synthetic.recipe import SyntheticTrainer


def _synthetic(params: dict[str, Any]) -> SyntheticWorkloadConfig:
    return SyntheticWorkloadConfig(
        name="own_offset", matrix_size=int(params.get("matrix_size", 32)),
        units_per_token=float(params.get("units_per_token", 1.0)))


class OwnOffsetTrainer(SyntheticTrainer):
    def __init__(self, workload: Any, bucket: Any, device: str) -> None:
        super().__init__(_synthetic(dict(workload.params)), bucket, device)
        self._factors: dict[float, float] = {}  # own_offset_sd -> this process's factor
        self._entropy = random.SystemRandom()  # not seeded: each process its own draw
        self._apply(workload)

    def _apply(self, workload: Any) -> None:
        sd = float(workload.params.get("own_offset_sd", 0.0) or 0.0)
        if sd > 0 and sd not in self._factors:
            self._factors[sd] = math.exp(self._entropy.gauss(0.0, sd))
        factor = self._factors.get(sd, 1.0) if sd > 0 else 1.0
        self.units = max(1, round(self._base * factor))
        self.planted_fraction = 0.0  # a null variant: no planted mean effect
        self.own_offset = factor

    def switch(self, workload: Any) -> None:  # type: ignore[override]
        self._apply(workload)  # self.workload stays the synthetic load's own config


@host_only_recipe
@unprobeable("a calibrated amount of host work per step: no model, optimizer or loss to compare")
@switchable("workload.params.own_offset_sd", "workload.params.label")
def build(workload: Any, bucket: Any, device: str) -> OwnOffsetTrainer:
    return OwnOffsetTrainer(workload, bucket, device)
