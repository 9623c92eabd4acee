"""A recipe whose speed-up does not repeat: the synthetic load at a quarter of the work units while
the file named by ORCH_TEST_FICKLE_MARKER does not exist, and at the full units once it does
(as a change whose first result was a fluke of the moment). tests/campaign/test_baseline.py."""

from __future__ import annotations

import dataclasses
import os

from orchestrator.spec.config import BucketConfig
from recipes.base import host_only_recipe
from recipes.synthetic.config import SyntheticWorkloadConfig
from recipes.synthetic.recipe import SyntheticTrainer


@host_only_recipe
def build(workload: SyntheticWorkloadConfig, bucket: BucketConfig, device: str) -> SyntheticTrainer:
    marker = os.environ.get("ORCH_TEST_FICKLE_MARKER", "")
    if marker and os.path.exists(marker):  # the effect is gone
        return SyntheticTrainer(workload, bucket, device)
    quarter = dataclasses.replace(workload, units_per_token=workload.units_per_token / 4)
    return SyntheticTrainer(quarter, bucket, device)
