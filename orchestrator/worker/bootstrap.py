"""One bootstrap for every worker process: timed trials, profiled trials, correctness probes.

A worker starts from plain data (a spec's ``workload`` dict and requested ``device``) and needs,
in this order: the workload's dataclass and its recipe; the device it trains on (one per rank,
made current; the host CPU for a host-only recipe, which then never imports torch; none for an
external recipe, whose own program picks it); and the default process group when it is one of
several ranks, set up before the recipe builds anything (a recipe just uses the group).
:func:`start_worker` does exactly that, once, for all three kinds of worker; each then builds
its trainers with :meth:`Worker.trainer` and runs its own loop.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from orchestrator.platform import device as devmod
from orchestrator.platform import distributed as distmod
from orchestrator.spec.config import BucketConfig, WorkloadConfig
from orchestrator.core.convert import from_dict
from orchestrator.core.errors import BackendUnavailable
from recipes.base import Recipe
from recipes.registry import builder_path, workload_from_dict


@dataclass
class Worker:
    """What a worker process stands on: built once by :func:`start_worker`."""

    workload: WorkloadConfig
    recipe: Recipe  # the typed recipe API (recipes.base): its builder and what it declares
    requested_device: str  # the spec's device= (auto, cpu, cuda, musa)
    device: devmod.DeviceInfo | None  # None: an external recipe (its program picks the device)
    group: distmod.DistContext | None  # the default process group; None on one rank
    rank: int = 0
    world_size: int = 1

    @property
    def external(self) -> bool:
        """The recipe runs another program; the orchestrator reads its log."""
        return self.recipe.external

    @property
    def host_only(self) -> bool:
        """The recipe runs on the host CPU and needs no torch device (no torch import)."""
        return self.recipe.host_only

    def trainer(self, bucket: BucketConfig | dict[str, Any]) -> Any:
        """The recipe's trainer for one bucket, on this worker's device, with every optional
        hook of :class:`recipes.base.TrainerHooks` (its own, or the declared default)."""
        if isinstance(bucket, dict):
            bucket = from_dict(BucketConfig, bucket)
        where = self.requested_device if self.device is None else self.device.torch_device
        return self.recipe.trainer(self.workload, bucket, where)


def load_recipe(name: str) -> Recipe:
    """The recipe a workload names (a registry name or an import path ``pkg.module:build``),
    imported here: building one recipe never imports another."""
    module, _, attr = builder_path(name).partition(":")
    return Recipe.of(name, getattr(importlib.import_module(module), attr))


def start_worker(workload: dict[str, Any], device: str) -> Worker:
    """The workload, its recipe, the device (one per rank) and the process group, in that
    order. Raises BackendUnavailable when the device is missing here."""
    w = workload_from_dict(workload)
    rank, world, local_rank = distmod.env_rank()
    try:  # the recipe's module is where a worker imports torch first
        recipe = load_recipe(w.recipe)
    except RuntimeError as exc:  # an autoloaded backend extension (torch_musa) that raises
        why = devmod.autoload_failure(exc)
        if why is None:
            raise
        raise BackendUnavailable(why) from None
    worker = Worker(w, recipe, device, None, None, rank, world)
    if worker.external:  # another program trains: no device, no process group in this one
        return worker
    if worker.host_only:
        worker.device = devmod.host_cpu(device)
    else:
        worker.device = devmod.resolve(device, index=local_rank if world > 1 else None)
        devmod.set_current(worker.device)
    worker.group = distmod.setup(worker.device.kind)  # before the recipe builds anything
    return worker
