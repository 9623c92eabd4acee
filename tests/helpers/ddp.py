"""A data-parallel GPT for distributed-trial tests: the real trainer wrapped in DDP (gloo on CPU),
so every step all-reduces gradients across the ranks of the default process group."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch
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


class _CountingDDP(DDPTrainer):
    """Writes how many training steps this rank ran to $DDP_TEST_COUNT_DIR/steps.rank<R>."""

    def train_step(self, batch: Any) -> Any:
        loss = super().train_step(batch)
        self._steps = getattr(self, "_steps", 0) + 1
        out = os.environ.get("DDP_TEST_COUNT_DIR")
        if out:
            Path(out, f"steps.rank{self.rank}").write_text(str(self._steps))
        return loss


class _SlowWarmupRank1(_CountingDDP):
    """Rank 1 pays an extra 0.2 s after its steps 4 and 5, outside DDP's all-reduce. Rank 0 sees
    that time one step later (waiting in the next step's all-reduce), so with the auto warm-up
    each rank's own times would end its warm-up at a different step (rank 1 at 8, rank 0 at 9):
    the ranks must decide on shared numbers or they fall out of step."""

    def train_step(self, batch: Any) -> Any:
        loss = super().train_step(batch)
        if self.rank == 1 and self._steps in (5, 6):
            time.sleep(0.2)
        return loss


def build_slow_warmup_rank1(workload: Any, bucket: Any, device: str) -> DDPTrainer:
    return _SlowWarmupRank1(workload, bucket, device)


class _TagOnRank1(_CountingDDP):
    """Rank 1 alone tags its step 2 as a validation step (excluded): without agreement it would
    run one step more than rank 0."""

    def step_tags(self) -> list[str]:
        self._tagged = getattr(self, "_tagged", 0) + 1
        return ["validation"] if self.rank == 1 and self._tagged == 3 else []


def build_tag_rank1(workload: Any, bucket: Any, device: str) -> DDPTrainer:
    return _TagOnRank1(workload, bucket, device)


class _MismatchedCollective(DDPTrainer):
    """At step 2 the ranks all-reduce tensors of different sizes: gloo aborts rank 0
    (EnforceNotMet) and resets rank 1's connection, a real harness-level failure. The eager
    attention arm does it on its first attempt only ($DDP_TEST_MISMATCH_DIR/eager.once marks
    it), the tiled arm on every attempt; other arms never."""

    def train_step(self, batch: Any) -> Any:
        self._n = getattr(self, "_n", 0) + 1
        backend = self.workload.model.attention.backend
        marker = Path(os.environ.get("DDP_TEST_MISMATCH_DIR", "."), f"{backend}.once")
        if self._n == 3 and (backend == "tiled" or (backend == "eager" and not marker.exists())):
            dist.barrier()
            if self.rank == 0:
                marker.write_text("mismatched once")
            dist.barrier()
            dist.all_reduce(torch.ones(1 if self.rank == 0 else 24576))
        return super().train_step(batch)


def build_mismatch(workload: Any, bucket: Any, device: str) -> DDPTrainer:
    return _MismatchedCollective(workload, bucket, device)


class _SlowLastRank(DDPTrainer):
    """The last rank (on the last node of a multi-node trial) sleeps 150 ms in every step,
    outside DDP's all-reduce: the others wait for it in the next all-reduce, so a step's time is
    its slowest rank's. A planted slowdown of a known size on one machine only: 150 ms, about 8x
    the step on this 2-core host (four ranks of two nodes on its two cores), so that a round
    whose baseline the host slows 3.5x (seen in CI: 19 ms, then 67 ms) does not hide it."""

    def train_step(self, batch: Any) -> Any:
        loss = super().train_step(batch)
        if self.rank == dist.get_world_size() - 1:
            time.sleep(0.150)
        return loss


def build_slow_last_rank(workload: Any, bucket: Any, device: str) -> DDPTrainer:
    return _SlowLastRank(workload, bucket, device)
