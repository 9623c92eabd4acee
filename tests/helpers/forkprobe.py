"""Recipes for the fork-server tests: the real GPT trainer, reporting what its process saw."""

from __future__ import annotations

import os
import random
from typing import Any

import torch

from recipes.gpt.recipe import GPTTrainer


class _Seeing(GPTTrainer):
    def extra_record(self) -> dict[str, Any]:
        return {**super().extra_record(),
                "seen_switch": os.environ.get("ORCH_TEST_SWITCH"),
                "seen_threads": torch.get_num_threads(),
                "seen_cwd": os.getcwd(),
                "seen_random": random.random()}


def build(workload: Any, bucket: Any, device: str) -> GPTTrainer:
    return _Seeing(workload, bucket, device)
