"""Recipes that report on how they were launched, for launcher tests."""

from __future__ import annotations

import os
import time
from typing import Any

from recipes.gpt.recipe import GPTTrainer


def build_env_probe(workload: Any, bucket: Any, device: str) -> GPTTrainer:
    """Fails at once, saying which devices it was pinned to (cheap: no model is built)."""
    seen = {k: os.environ.get(k) for k in ("MUSA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")}
    time.sleep(1.0)  # long enough for concurrent trials to overlap
    raise RuntimeError(f"probe {seen}")


class _HangFirstAttempt(GPTTrainer):
    def train_step(self, batch: Any) -> Any:
        # Slurm counts requeues in SLURM_RESTART_COUNT: hang until preempted, then run normally
        if batch.index >= 1 and int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0) == 0:
            time.sleep(3600)
        return super().train_step(batch)


def build_hang_first_attempt(workload: Any, bucket: Any, device: str) -> GPTTrainer:
    return _HangFirstAttempt(workload, bucket, device)
