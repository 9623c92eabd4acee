"""A synthetic recipe whose arms switch between steps and fail on purpose, for the
pairing=steps fault tests: a planted extra_work_fraction of 9 raises in train_step, one of 7
kills the process (segfault)."""

from __future__ import annotations

import ctypes
from typing import Any

from recipes.base import host_only_recipe, switchable
from recipes.synthetic.recipe import SyntheticTrainer


class _Switchy(SyntheticTrainer):
    def train_step(self, batch: int) -> float:
        if self.workload.extra_work_fraction == 9.0:
            raise RuntimeError("planted failure of this arm")
        if self.workload.extra_work_fraction == 7.0:
            ctypes.string_at(0)
        return super().train_step(batch)


@host_only_recipe
@switchable("workload.extra_work_fraction")
def build(workload: Any, bucket: Any, device: str) -> SyntheticTrainer:
    return _Switchy(workload, bucket, device)
