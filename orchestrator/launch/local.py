"""Local launcher: every trial in a fresh subprocess, in plan order, on its own device slot.

Fresh means forked from the campaign's fork server where that is sound (torch, the worker code
and the recipes imported once; ``launcher.start_method``, :mod:`orchestrator.launch.forkserver`),
else spawned (``python -m orchestrator.worker.trial``); every record says which.

Sequential by default (``launcher.max_parallel=1``) so that one trial's timing is never disturbed
by another. With ``max_parallel > 1`` the unit of parallelism is a (round, bucket) group: it
takes one device set and runs its arms on it one after another in plan order (A/B fairness);
distinct groups run side by side on disjoint devices. A distributed trial (``workload.world_size > 1``) starts through
``python -m torch.distributed.run --standalone --nproc-per-node G``. A trial that raises,
segfaults, is killed or hangs past its time limit becomes a record with a status and the tail of
its stderr; the campaign goes on. If the orchestrator itself dies, its trial process is taken
down with it (parent-death signal), so a resumed campaign never races an orphan. The gate's
probes (``run_jobs``) run the same way, one after another on one device set. Every process
starts through :func:`orchestrator.launch.process.run_worker_process`.
"""

from __future__ import annotations

import logging
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Optional, Sequence, cast

from orchestrator.spec.jobs import TrialSpec, WorkerJob
from orchestrator.launch.base import (
    Launcher,
    OnDone,
    OnJobDone,
    OnStart,
    job_failure,
    record_or_failure,
    world_size,
)
from orchestrator.launch.forkserver import Starter
from orchestrator.launch.process import run_worker_process, trial_command  # noqa: F401
from orchestrator.launch.slots import DeviceSlots, Inventory, inventory
from orchestrator.core.results import atomic_write_json
from orchestrator.core.trial_record import TrialRecordDict

log = logging.getLogger(__name__)


class LocalLauncher(Launcher):
    name = "local"

    def __init__(
        self,
        python: Optional[str] = None,
        device: str = "auto",
        devices: Optional[list[int]] = None,
        max_parallel: int = 1,
        inv: Optional[Inventory] = None,
        start_method: str = "auto",
    ) -> None:
        self.python = python or sys.executable
        self.device = device
        self.devices = devices
        self.max_parallel = max_parallel
        self._inv = inv
        # launcher.start_method: forks each trial from one fork server where sound, else spawns
        self.starter = Starter(start_method, self.python)

    def close(self) -> None:
        """Stop the fork server (it also stops when this process exits)."""
        self.starter.close()

    def run_one(self, spec: TrialSpec, timeout_s: float) -> TrialRecordDict:
        """One trial in a fresh process, outside the slot bookkeeping (benchmarks, tools)."""
        self.starter.prepare([spec])
        return cast("TrialRecordDict", run_worker_process(  # a trial spec's: trial.json
            spec, timeout_s, self.python, annotate={"launcher": "local"}, starter=self.starter))

    def slots(self) -> DeviceSlots:
        inv = self._inv or inventory(self.device, self.devices)
        return DeviceSlots(inv, self.max_parallel)

    def run(
        self,
        specs: Sequence[TrialSpec],
        on_done: OnDone,
        timeout_s: float,
        on_start: Optional[OnStart] = None,
    ) -> None:
        """Sequential (``max_parallel=1``): every trial in plan order on the same devices.
        In parallel: one device set per (round, bucket) group, whose arms run on it one after
        another in plan order; only distinct groups run at the same time, on disjoint devices
        (A/B fairness: the arms compared in a round never straddle devices)."""
        slots = self.slots()
        lock = threading.Lock()
        self.starter.prepare(specs)

        def group(members: Sequence[TrialSpec]) -> None:
            taken: Optional[list[int]] = None
            try:
                for spec in members:
                    n = world_size(spec)
                    if not slots.fits(n):
                        record = record_or_failure(
                            spec, "unavailable",
                            f"needs {n} devices, the launcher has {len(slots.inv.devices)}", "")
                        atomic_write_json(Path(spec.trial_dir) / "trial.json", record)
                        with lock:
                            on_done(spec, record)
                        continue
                    if taken is None:  # the group's device set: enough for its widest arm
                        taken = slots.acquire(max(world_size(s) for s in members
                                                  if slots.fits(world_size(s))))
                    mine = taken[:n] if slots.inv.devices else taken
                    if on_start is not None:
                        with lock:
                            on_start(spec)
                    record = cast("TrialRecordDict", run_worker_process(  # a trial's: trial.json
                        spec, timeout_s, self.python, slots.env(mine),
                        annotate={"launcher": "local", "devices": mine}, starter=self.starter))
                    with lock:
                        on_done(spec, record)
            finally:
                if taken is not None:
                    slots.release(taken)

        if self.max_parallel <= 1:
            for spec in specs:  # plan order; the free devices are the same ones every time
                group([spec])
            return
        _run_parallel(consecutive_runs(specs), group, self.max_parallel)

    def run_jobs(self, jobs: Sequence[WorkerJob], on_done: OnJobDone, timeout_s: float) -> None:
        """One after another, in order, on one device set (enough for the widest job)."""
        if not jobs:
            return
        slots = self.slots()
        self.starter.prepare(jobs)
        fitting = [world_size(j) for j in jobs if slots.fits(world_size(j))]
        taken = slots.acquire(max(fitting)) if fitting else None
        try:
            for job in jobs:
                n = world_size(job)
                if taken is None or not slots.fits(n):
                    record = job_failure(job, "unavailable", f"needs {n} devices, the launcher "
                                         f"has {len(slots.inv.devices)}", "")
                    atomic_write_json(job.record_path, record)
                else:
                    mine = taken[:n] if slots.inv.devices else taken
                    record = run_worker_process(job, timeout_s, self.python, slots.env(mine),
                                                annotate={"launcher": "local"},
                                                starter=self.starter)
                on_done(job, record)
        finally:
            if taken is not None:
                slots.release(taken)


def consecutive_runs(specs: Sequence[TrialSpec]) -> list[list[TrialSpec]]:
    """Runs of consecutive specs of one (round, bucket), in plan order: the unit of A/B
    fairness (unlike spec.jobs.round_groups, a (round, bucket) split by other specs gives one
    group per run)."""
    groups: list[list[TrialSpec]] = []
    for s in specs:
        if groups and (groups[-1][0].round, groups[-1][0].bucket["name"]) == (
                s.round, s.bucket["name"]):
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def _run_parallel(groups: Sequence[Sequence[TrialSpec]],
                  one: Callable[[Sequence[TrialSpec]], None], n: int) -> None:
    """Start groups in plan order, up to ``n`` at once (device slots permitting)."""
    with ThreadPoolExecutor(max_workers=n) as pool:
        for fut in [pool.submit(one, g) for g in groups]:
            fut.result()
