"""A data-parallel GPT for distributed-trial tests: the real trainer wrapped in DDP (gloo on CPU),
so every step all-reduces gradients across the ranks of the default process group."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from recipes.gpt.recipe import GPTTrainer


class DDPTrainer(GPTTrainer):
    def __init__(self, workload: Any, bucket: Any, device: str) -> None:
        if not dist.is_initialized():
            raise RuntimeError("the orchestrator must initialise torch.distributed before build()")
        super().__init__(workload, bucket, device)
        self.model = DistributedDataParallel(self.model)  # type: ignore[assignment]
        self.tokens_per_step *= dist.get_world_size()  # global tokens per step
        self.samples_per_step *= dist.get_world_size()
        self.rank = dist.get_rank()

    def batches(self) -> Any:
        # a different shard of the stream per rank: batch k of rank r is stream batch k*W + r
        world = dist.get_world_size()
        stream = super().batches()
        for i, batch in enumerate(stream):
            if i % world == self.rank:
                yield batch

    def useful_flops_per_step(self) -> None:
        return None  # the GPT formula reads the bare module; not needed by these tests


def build(workload: Any, bucket: Any, device: str) -> DDPTrainer:
    return DDPTrainer(workload, bucket, device)


class _FailOnRank1(DDPTrainer):
    def train_step(self, batch: Any) -> Any:
        if self.rank == 1 and batch.index >= 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (planted, rank 1)")
        return super().train_step(batch)


def build_oom_rank1(workload: Any, bucket: Any, device: str) -> DDPTrainer:
    return _FailOnRank1(workload, bucket, device)
