"""Recipes that fail on purpose, for fault tests. They wrap the real GPT trainer."""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

from recipes.gpt.recipe import GPTTrainer


class _Faulty(GPTTrainer):
    mode = "raise"

    def train_step(self, batch: Any) -> Any:
        if batch.index >= 1:
            if self.mode == "raise":
                raise RuntimeError("planted failure in train_step")
            if self.mode == "segfault":
                ctypes.string_at(0)
            if self.mode == "hang":
                time.sleep(3600)
            if self.mode == "oom":
                raise RuntimeError("CUDA out of memory. Tried to allocate 1.00 GiB (planted)")
            if self.mode == "exit":
                os._exit(3)
        return super().train_step(batch)


def _make(mode: str) -> Any:
    def build(workload: Any, bucket: Any, device: str) -> GPTTrainer:
        t = _Faulty(workload, bucket, device)
        t.mode = mode
        return t

    return build


build_raise = _make("raise")
build_segfault = _make("segfault")
build_hang = _make("hang")
build_oom = _make("oom")
build_exit = _make("exit")
