"""In-process launcher: for tests and debugging. Same contract, no isolation.

It cannot survive a segfault, cannot enforce ``protocol.trial_timeout_s`` and cannot run a
distributed trial (those need a process of their own: use ``launcher=local``). The correctness
probes run in this process too (``run_jobs``); compiled code one of them cached is dropped
before the next job, so a probe never serves the trials a warm compile cache."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from orchestrator.worker.probe import run_probe
from orchestrator.core.envvars import env_overrides
from orchestrator.spec.jobs import ProbeSpec, TrialSpec, WorkerJob
from orchestrator.launch.base import (
    Launcher,
    OnDone,
    OnJobDone,
    OnStart,
    job_failure,
    record_or_failure,
    world_size,
)
from orchestrator.core.results import atomic_write_json
from orchestrator.worker.trial import run_trial
from orchestrator.core.trial_record import TrialRecordDict

if TYPE_CHECKING:  # start-up cost: the probe's comparisons import torch; only its record type is used here
    from orchestrator.analysis.correctness.compare import ProbeRecord


class InlineLauncher(Launcher):
    name = "inline"

    def run(
        self,
        specs: Sequence[TrialSpec],
        on_done: OnDone,
        timeout_s: float,
        on_start: Optional[OnStart] = None,
    ) -> None:
        for spec in specs:
            if on_start is not None:
                on_start(spec)
            if world_size(spec) > 1:
                record = record_or_failure(
                    spec, "unavailable",
                    f"world_size={world_size(spec)} needs processes; use launcher=local", "")
                atomic_write_json(Path(spec.trial_dir) / "trial.json", record)
                on_done(spec, record)
                continue
            with env_overrides(spec.env):
                record = run_trial(spec, launch_t0=time.time())
            on_done(spec, record)

    def run_jobs(self, jobs: Sequence[WorkerJob], on_done: OnJobDone, timeout_s: float) -> None:
        for job in jobs:
            if world_size(job) > 1:
                record = job_failure(job, "unavailable", f"world_size={world_size(job)} needs "
                                     "processes; use launcher=local", "")
                atomic_write_json(job.record_path, record)
            else:
                record = _run_in_process(job)
            on_done(job, record)


def _run_in_process(job: WorkerJob) -> TrialRecordDict | ProbeRecord:
    t0 = time.perf_counter()
    try:
        with env_overrides(job.env):
            if isinstance(job, TrialSpec):
                return run_trial(job, launch_t0=time.time())
            assert isinstance(job, ProbeSpec)
            record = run_probe(job)
            record["process_seconds"] = time.perf_counter() - t0
            return record
    finally:
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is not None:  # compiled code cached by a job must not serve later trials
            dynamo.reset()
