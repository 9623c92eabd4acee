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
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.core.records import Status
from orchestrator.core.trial_record import TrialRecordDict
from orchestrator.platform import device as devmod
from orchestrator.platform.children import die_with_parent
from orchestrator.platform import distributed as distmod
from orchestrator.spec.config import BucketConfig, WorkloadConfig
from orchestrator.spec.sweep import Bucket
from orchestrator.core.convert import from_dict
from orchestrator.core.errors import BackendUnavailable
from recipes.base import Recipe
from recipes.registry import builder_path, workload_from_dict

if TYPE_CHECKING:  # for its type only: the module imports torch, a host-only worker never does
    from orchestrator.analysis.correctness.compare import ProbeRecord


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

    def trainer(self, bucket: BucketConfig | Bucket) -> Any:
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


def worker_main(argv: list[str] | None, module: str, run: Callable[[str], TrialRecordDict | ProbeRecord],
                what: str, id_field: str, fine: tuple[str, ...],
                distributed_fails: bool = False) -> int:
    """The ``main()`` of every worker process (``python -m MODULE SPEC.json``): die with a
    torchrun agent, log warnings (and the recipes' one-off facts) to stderr, run the spec, say
    a failure on stderr (its traceback too) and exit 0 for the statuses in ``fine``, else 1.
    ``distributed_fails``: a failed rank of several exits 1 at once, so that torchrun takes
    the others down (they would wait in a collective)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(f"usage: python -m {module} SPEC.json", file=sys.stderr)
        return 2
    if "TORCHELASTIC_RUN_ID" in os.environ:  # a torchrun worker: die with the agent
        die_with_parent()
    # warnings from anything, and the recipes' one-off INFO facts (e.g. muon_tp's "tp_mode
    # auto:" choice per shape, rank 0) reach the process's stderr.log
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("recipes").setLevel(logging.INFO)
    record = run(argv[0])
    if record["status"] == Status.OK:
        return 0
    print(f"{what} {record.get(id_field)}: {record['status']}: {record.get('error')}",
          file=sys.stderr)
    if distributed_fails and record.get("world_size", 1) > 1:
        return 1
    if record.get("traceback"):
        print(record["traceback"], file=sys.stderr)
    return 0 if record["status"] in fine else 1
