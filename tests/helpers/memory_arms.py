"""A synthetic recipe whose arms allocate different amounts per step from a pretend device
allocator (``MEM``), for the per-arm peak test of paired processes: the test points the device
seam's peak reset and figures at :func:`reset` and :func:`figures`."""

from __future__ import annotations

from typing import Any

from recipes.base import host_only_recipe, switchable
from recipes.synthetic.recipe import SyntheticTrainer

MEM = {"allocated": 0, "peak": 0, "reserved": 0, "peak_reserved": 0}


def step_bytes(extra_work_fraction: float) -> int:
    return int((1.0 + extra_work_fraction) * 2**20)


def reset() -> None:
    MEM["peak"], MEM["peak_reserved"] = MEM["allocated"], MEM["reserved"]


def figures() -> dict[str, int]:
    return {"peak_mem_bytes": MEM["peak"], "reserved_mem_bytes": MEM["reserved"],
            "peak_reserved_mem_bytes": MEM["peak_reserved"]}


class _Allocating(SyntheticTrainer):
    def train_step(self, batch: int) -> float:
        n = step_bytes(self.workload.extra_work_fraction)
        MEM["allocated"] += n
        MEM["peak"] = max(MEM["peak"], MEM["allocated"])
        MEM["reserved"] = max(MEM["reserved"], MEM["allocated"])  # a caching allocator keeps it
        MEM["peak_reserved"] = max(MEM["peak_reserved"], MEM["reserved"])
        try:
            return super().train_step(batch)
        finally:
            MEM["allocated"] -= n


@host_only_recipe
@switchable("workload.extra_work_fraction")
def build(workload: Any, bucket: Any, device: str) -> SyntheticTrainer:
    return _Allocating(workload, bucket, device)
