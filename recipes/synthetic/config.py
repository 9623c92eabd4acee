"""The ``synthetic`` workload's schema (kind ``synthetic``): the calibrated host-CPU load of
:mod:`recipes.synthetic.recipe`, and its checks. The schema registers itself under its kind.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.spec.config import WorkloadConfig, workload_schema
from orchestrator.core.errors import ConfigError, check_positive


@workload_schema
@dataclass
class SyntheticWorkloadConfig(WorkloadConfig):
    """Calibrated load (recipes/synthetic): each step does a known number of real work units
    (matmuls of matrix_size x matrix_size on the host CPU) for the sensitivity calibration."""

    kind: str = "synthetic"
    recipe: str = "synthetic"
    matrix_size: int = 32  # one work unit = a (matrix_size x matrix_size) matmul + tanh
    units_per_token: float = 1.0  # work units per token of the bucket (seq_len * micro_batch)
    # planted effect: the step does (1 + extra_work_fraction) times the work (rounded to units)
    extra_work_fraction: float = 0.0
    slow_first_steps: int = 0  # simulated warm-up: the first N steps do slow_factor times the work
    slow_factor: float = 3.0
    epoch_steps: int = 0  # > 0: every N-th step is an epoch boundary (tagged, extra work)

    def validate(self) -> None:
        check_positive("workload.matrix_size", self.matrix_size)
        check_positive("workload.units_per_token", self.units_per_token)
        if not -0.9 <= self.extra_work_fraction <= 10:
            raise ConfigError("workload.extra_work_fraction",
                              f"must be in [-0.9, 10], got {self.extra_work_fraction}")
        check_positive("workload.slow_first_steps", self.slow_first_steps, allow_zero=True)
        check_positive("workload.slow_factor", self.slow_factor)
        check_positive("workload.epoch_steps", self.epoch_steps, allow_zero=True)
