"""Distributed trials: process-group setup before the recipe is built, and per-rank timing.

A trial with ``workload.world_size > 1`` runs as that many processes, started by torchrun
locally or as the tasks of one Slurm job; either way rank, world size, local rank and the
master address arrive in the standard variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT). Every rank times its own steps (the device synchronised at step boundaries, or,
for a GPU's measured steps, at the end of each block timed by device events); rank 0 gathers
them, the step time of a step is the slowest rank's, and the skew between ranks is
kept. Only rank 0 writes trial.json and steps.csv.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Any, Optional, TypedDict

from orchestrator.platform import device as devmod


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    threads_per_rank: Optional[int]  # CPU only: torch threads each rank was given

    @property
    def is_writer(self) -> bool:
        return self.rank == 0


def env_rank() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from the standard variables; (0, 1, 0) when unset."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    rank = int(os.environ.get("RANK", "0") or 0)
    local = int(os.environ.get("LOCAL_RANK", str(rank)) or 0)
    return rank, world, local


def threads_for(world_size: int, cores: Optional[int] = None) -> int:
    """A fair share of the cores per rank, at least one."""
    cores = cores if cores is not None else len(os.sched_getaffinity(0)) if hasattr(
        os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, world_size))


def setup(dev_kind: str) -> Optional[DistContext]:
    """Initialise the default process group when this process is one of several ranks."""
    rank, world, local = env_rank()
    if world <= 1:
        return None
    import torch
    import torch.distributed as dist

    threads = None
    if dev_kind == "cpu":
        threads = threads_for(world)
        torch.set_num_threads(threads)
    backend = devmod.dist_backend(dev_kind)
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, rank=rank, world_size=world)
    return DistContext(rank, world, local, backend, threads)


def gather_step_times(ctx: DistContext, times_s: list[float]) -> Optional[list[list[float]]]:
    """Every rank's per-step times, on rank 0 (None elsewhere). A collective: all ranks call."""
    import torch.distributed as dist

    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, list(times_s))
    return [list(map(float, t)) for t in out] if ctx.is_writer else None


# the tags a step can carry, one slot each in the per-step agreement (an unknown tag takes the
# last slot): a step any rank tags is excluded on every rank
AGREED_TAGS = ("compile", "autotune", "epoch_boundary", "checkpoint", "validation", "profiler",
               "other")


class StepAgreement:
    """Every decision that changes how many steps a rank runs (the end of the warm-up, which
    steps are excluded, the measured window's time floor) is taken on numbers all ranks share:
    after each step (or each block of steps timed by device events: :meth:`many`), one
    all-reduce (MAX) of [this rank's step time, one flag per tag] per step. Every rank then
    sees the slowest rank's step time (the time the analysis uses) and the union of the tags,
    and decides the same. Called after the step's clock stops: its cost is outside the timed
    window (``bench/overhead.py --world-size 2`` measures it)."""

    def __init__(self, device: Any) -> None:
        import torch
        import torch.distributed as dist

        self._torch, self._dist = torch, dist
        self._buf = torch.zeros(1 + len(AGREED_TAGS), dtype=torch.float64, device=device)
        self.cost_s: list[float] = []  # wall time of each agreement (outside the timed window)

    def __call__(self, step_time_s: float, tags: list[str]) -> tuple[float, list[str]]:
        """(the slowest rank's time of this step, the union of the ranks' tags)."""
        return self.many([step_time_s], [tags])[0]

    def many(self, step_times_s: list[float],
             tags: list[list[str]]) -> list[tuple[float, list[str]]]:
        """:meth:`__call__` for several steps in one all-reduce: a block of steps timed by
        device events is agreed on after its end synchronisation, never inside it."""
        t0 = time.perf_counter()
        width = 1 + len(AGREED_TAGS)
        vals = [0.0] * (width * len(step_times_s))
        for i, (t, step_tags) in enumerate(zip(step_times_s, tags)):
            vals[i * width] = float(t)
            for tag in step_tags:
                slot = AGREED_TAGS.index(tag) if tag in AGREED_TAGS else len(AGREED_TAGS) - 1
                vals[i * width + 1 + slot] = 1.0
        if len(vals) == self._buf.numel():
            buf = self._buf
            buf.copy_(self._torch.tensor(vals, dtype=self._torch.float64))
        else:
            buf = self._torch.tensor(vals, dtype=self._torch.float64, device=self._buf.device)
        self._dist.all_reduce(buf, op=self._dist.ReduceOp.MAX)
        got = buf.tolist()
        out = []
        for i, step_tags in enumerate(tags):
            agreed = list(step_tags)
            for slot, name in enumerate(AGREED_TAGS):
                at = i * width + 1 + slot
                if got[at] > 0 and vals[at] == 0:  # another rank's tag
                    agreed.append(name)
            out.append((float(got[i * width]), agreed))
        self.cost_s.append(time.perf_counter() - t0)
        return out


def gather_nodes(ctx: DistContext) -> Optional[list[int]]:
    """Which machine each rank runs on, on rank 0 (None elsewhere): machines numbered 0, 1, ...
    in the order of their first rank (host names stay out of the record). A collective."""
    import hashlib
    import socket

    import torch.distributed as dist

    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, hashlib.sha256(socket.gethostname().encode()).hexdigest())
    if not ctx.is_writer:
        return None
    index: dict[str, int] = {}
    return [index.setdefault(h, len(index)) for h in out]


def node_skew(per_rank: list[list[float]], nodes: list[int]) -> list[float]:
    """Per step, the slowest rank of the slowest machine minus that of the fastest one (0 on
    one machine): how much one machine holds the others up."""
    steps = min(len(t) for t in per_rank)
    out = []
    for i in range(steps):
        per_node: dict[int, float] = {}
        for times, n in zip(per_rank, nodes):
            per_node[n] = max(per_node.get(n, 0.0), times[i])
        out.append(max(per_node.values()) - min(per_node.values()))
    return out


def combine(per_rank: list[list[float]]) -> tuple[list[float], list[float], list[int]]:
    """(slowest rank's time, max - min across ranks, index of the slowest rank) per step."""
    steps = min(len(t) for t in per_rank)
    slowest, skew, who = [], [], []
    for i in range(steps):
        col = [t[i] for t in per_rank]
        hi = max(col)
        slowest.append(hi)
        skew.append(hi - min(col))
        who.append(col.index(hi))
    return slowest, skew, who


class _DistSummary(TypedDict, total=False):
    step_agreement_median_s: float | None
    world_size: int
    dist_backend: str
    step_time_definition: str
    rank_skew_median_s: float | None
    rank_skew_max_s: float | None
    slowest_rank_counts: dict[int, int]  # rank -> measured steps it was the slowest in
    threads_per_rank: int | None


class DistNodes(TypedDict, total=False):
    """The node fields of :class:`DistSummary` (only with ``nodes``)."""

    nodes: int
    rank_nodes: list[int]
    node_skew_median_s: float | None
    slowest_node_counts: dict[int, int]  # node -> measured steps its slowest rank was on it


class DistSummary(_DistSummary, DistNodes, total=False):
    """The distributed fields of trial.json (:func:`summary`; none for a one-process trial)."""


def summary(ctx: DistContext, skew_measured_s: list[float],
            who_measured: list[int], agree_cost_s: list[float] | None = None,
            nodes: list[int] | None = None,
            node_skew_measured_s: list[float] | None = None) -> DistSummary:
    """The distributed fields of trial.json (``nodes``: each rank's machine, gather_nodes)."""
    counts = {r: who_measured.count(r) for r in range(ctx.world_size)}
    spans: DistNodes = {} if not nodes else {
        "nodes": len(set(nodes)), "rank_nodes": nodes,
        "node_skew_median_s": (statistics.median(node_skew_measured_s)
                               if node_skew_measured_s else None),
        "slowest_node_counts": {n: sum(1 for r in who_measured if nodes[r] == n)
                                for n in sorted(set(nodes))}}
    return {**spans,
        "step_agreement_median_s": statistics.median(agree_cost_s) if agree_cost_s else None,
        "world_size": ctx.world_size,
        "dist_backend": ctx.backend,
        "step_time_definition": "per step, the slowest rank's time (ranks synchronised at step "
                                "boundaries, or at the end of a block of measured steps timed "
                                "by device events, by the device sync and one small all-reduce, "
                                "outside the timed window, that makes every rank take the same "
                                "warm-up, exclusion and stopping decisions)",
        "rank_skew_median_s": statistics.median(skew_measured_s) if skew_measured_s else None,
        "rank_skew_max_s": max(skew_measured_s) if skew_measured_s else None,
        "slowest_rank_counts": counts,
        "threads_per_rank": ctx.threads_per_rank,
    }


# How long shutdown() leaves the GIL free after destroying the process group (see there).
BACKEND_DRAIN_S = 0.1


def shutdown() -> None:
    """Destroy the process group, then leave the GIL free for a moment before the process goes
    on to exit.

    destroy_process_group does not always free the group: torch keeps references to the
    default group elsewhere (the first optimizer built in a process takes ten, through
    torch._dynamo's import), and gloo's worker threads then live on. Each drops the last
    collective it ran only after the caller has seen that collective complete, and dropping
    it releases Python tensors, so the thread needs the GIL. If the interpreter has begun to
    finalize by then, that thread exits inside a C++ destructor and the process aborts
    (SIGABRT, "terminate called without an active exception": 4 of 38 runs of the two-rank
    Muon test here, 0 of 40 with this sleep): a rank that measured and wrote its record would
    be counted as crashed. Sleeping hands the GIL to those threads while the interpreter is
    whole."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        time.sleep(BACKEND_DRAIN_S)
