"""Calibrated synthetic load: a step does a known number of real work units, and nothing else.

One work unit is ``x = tanh(x @ W)`` on (matrix_size x matrix_size) float64 matrices on the
host CPU (numpy; no torch is imported, so a trial process starts in a fraction of a second).
A bucket of T tokens does ``round(units_per_token * T)`` units per step;
``extra_work_fraction`` plants a known effect: the step does
``round(units_per_token * T * (1 + extra_work_fraction))`` units. The planted fraction actually
applied (after rounding to whole units) is exposed as :attr:`SyntheticTrainer.planted_fraction`.
Fixed per-step costs (the orchestrator's clock reads and bookkeeping, microseconds) are not
scaled, so the measured effect is slightly smaller than the planted one.

FLOP definition: 2 * matrix_size**3 per unit (the matmul; tanh not counted).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from orchestrator.spec.config import BucketConfig
from orchestrator.core.errors import BackendUnavailable
from recipes.base import TrainerHooks, host_only_recipe, switchable, unprobeable
from recipes.synthetic.config import SyntheticWorkloadConfig


class SyntheticTrainer(TrainerHooks):
    def __init__(self, workload: SyntheticWorkloadConfig, bucket: BucketConfig, device: str) -> None:
        if not device.startswith("cpu"):
            raise BackendUnavailable(
                f"the synthetic recipe runs on the host CPU only, not {device!r}; use device=cpu"
            )
        self.workload = workload
        self.tokens_per_step = bucket.seq_len * bucket.micro_batch
        self.samples_per_step = bucket.micro_batch
        base = workload.units_per_token * self.tokens_per_step
        self._base = base
        self.base_units = max(1, round(base))
        self._plant(workload.extra_work_fraction)
        rng = np.random.default_rng(workload.seed)
        m = workload.matrix_size
        self.w = rng.standard_normal((m, m)) / np.sqrt(m)
        self.x0 = rng.standard_normal((m, m))
        self._step = 0
        self._tags: list[str] = []

    def _plant(self, extra_work_fraction: float) -> None:
        self.units = max(1, round(self._base * (1 + extra_work_fraction)))
        self.planted_fraction = self.units / self.base_units - 1

    def switch(self, workload: SyntheticWorkloadConfig) -> None:
        """Another arm's planted effect and epoch length, between steps (protocol.pairing=steps)."""
        self.workload = workload
        self._plant(workload.extra_work_fraction)

    def batches(self) -> Iterator[int]:
        return itertools.count()

    def _work(self, units: int) -> float:
        x = self.x0
        for _ in range(units):
            x = np.tanh(x @ self.w)
        return float(x[0, 0])

    def train_step(self, batch: int) -> float:
        w = self.workload
        units = self.units
        self._tags = []
        if self._step < w.slow_first_steps:
            units = round(units * w.slow_factor)
        if w.epoch_steps and self._step > 0 and self._step % w.epoch_steps == 0:
            self._tags.append("epoch_boundary")
            units *= 2  # e.g. a loader restarting its workers
        self._step += 1
        return self._work(units)

    def step_tags(self) -> list[str]:
        """Tags of the step just run (the orchestrator excludes tagged steps)."""
        return list(self._tags)

    useful_flops_definition = "2 * matrix_size**3 per work unit (the matmul; tanh not counted)"

    def useful_flops_per_step(self) -> float:
        return float(self.units * 2 * self.workload.matrix_size**3)


@host_only_recipe  # runs on the host CPU; needs no torch device
@unprobeable("a calibrated amount of host work per step: no model, optimizer or loss to compare")
@switchable("workload.extra_work_fraction", "workload.epoch_steps")
def build(workload: SyntheticWorkloadConfig, bucket: BucketConfig, device: str) -> SyntheticTrainer:
    return SyntheticTrainer(workload, bucket, device)


