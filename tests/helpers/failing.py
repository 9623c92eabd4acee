"""The synthetic recipe with a variant that fails on purpose (the pairing contract's tests): a
trainer whose ``extra_work_fraction`` is 1.0 or more raises at its third step."""

from __future__ import annotations

from typing import Any

from recipes.base import host_only_recipe, switchable, unprobeable
from recipes.synthetic.recipe import SyntheticTrainer


class FailingTrainer(SyntheticTrainer):
    def train_step(self, batch: int) -> float:
        self._steps_run = getattr(self, "_steps_run", 0) + 1
        if self.workload.extra_work_fraction >= 1.0 and self._steps_run >= 3:
            raise RuntimeError("planted failure of the variant")
        return super().train_step(batch)


@host_only_recipe
@unprobeable("a calibrated amount of host work per step: no model, optimizer or loss to compare")
@switchable("workload.extra_work_fraction")
def build(workload: Any, bucket: Any, device: str) -> FailingTrainer:
    return FailingTrainer(workload, bucket, device)
