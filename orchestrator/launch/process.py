"""One worker process: its command, environment, logs and record (the local and Slurm
launchers both start every worker job through :func:`run_worker_process`).

``python -m <worker> <job dir>/spec.json``, or ``python -m torch.distributed.run
--standalone --nproc-per-node G -m <worker> ...`` for a distributed job run by one launcher
process (the local launcher; inside a Slurm job each rank is a task of its own). The child is
started and stopped through :mod:`orchestrator.platform.children` (its own session; a time-out or an
interrupt takes down its whole process group; it dies with its parent). A worker that raises,
segfaults, is killed or hangs past its time limit becomes a record with a status and the tail
of its stderr.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional, TypedDict

from orchestrator.spec.jobs import LAUNCH_T0_VAR, WorkerJob
from orchestrator.launch.base import job_outcome, stderr_tail
from orchestrator.launch.forkserver import (
    FORK_SERVER,
    SPAWN,
    ForkServer,
    ForkServerError,
    ForkServerLost,
    Starter,
)
from orchestrator.core.paths import package_root
from orchestrator.platform.children import die_with_parent, ignore_job_signals, run_child
from orchestrator.core.results import atomic_write_json, atomic_write_text
from orchestrator.core.trial_record import TrialRecordDict

if TYPE_CHECKING:  # start-up cost: the probe's comparisons import torch; only its record type is used here
    from orchestrator.analysis.correctness.compare import ProbeRecord


class LaunchFields(TypedDict, total=False):
    """What a launcher adds to a worker's record (:func:`run_worker_process`'s ``annotate``;
    trial.json's and probe.json's launcher fields)."""

    launcher: str
    devices: list[int] | str | None
    slurm_job_id: str
    node_id: str
    slurm_attempt: int
    slurm_node_rank: int
    startup_measured_from: str


def worker_command(python: str, worker: str, spec_path: Path, nproc: int) -> list[str]:
    if nproc <= 1:
        return [python, "-m", worker, str(spec_path)]
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", worker, str(spec_path)]


def trial_command(python: str, spec_path: Path, nproc: int) -> list[str]:
    return worker_command(python, "orchestrator.worker.trial", spec_path, nproc)


def run_worker_process(
    job: WorkerJob,
    timeout_s: float,
    python: str,
    extra_env: Optional[dict[str, str]] = None,
    launch_t0: Optional[float] = None,
    nproc: Optional[int] = None,
    log_suffix: str = "",
    write_record: bool = True,
    annotate: Optional[LaunchFields] = None,
    ignore_sigterm: bool = False,
    starter: Optional[Starter] = None,
) -> TrialRecordDict | ProbeRecord:
    """Run one worker job (or one rank of it, with ``extra_env`` carrying RANK etc.) as a
    process and return its record; writes it (the worker's own, or a failure record, with
    ``annotate`` added) into the job directory unless ``write_record`` is False.

    ``ignore_sigterm``: inside a Slurm job, preemption and scancel send SIGTERM to every process
    of the job; the worker ignores it (and submitit's SIGUSR2) so that the job (submitit)
    decides: requeue on preemption (the worker is then killed and re-run), or SIGKILL after the
    cancel's grace period.

    ``starter``: forks the job from the launcher's fork server where that is sound
    (:mod:`orchestrator.launch.forkserver`), else it spawns; None always spawns. The record
    says which (``start_method``, and ``start_method_why`` for a spawn)."""
    jdir = job.job_dir
    jdir.mkdir(parents=True, exist_ok=True)
    spec_path = jdir / "spec.json"
    if not log_suffix:
        atomic_write_text(spec_path, job.to_json())
        stem = Path(job.record_file).stem
        for stale in [job.record_path, *jdir.glob(f"{stem}.rank*.json")]:
            stale.unlink(missing_ok=True)  # an interrupted attempt: never mix its record in
    nproc = job.nproc() if nproc is None else nproc
    env = dict(os.environ)
    env.update(job.env)
    env.update(extra_env or {})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root(), env.get("PYTHONPATH")) if p)
    server: Optional[ForkServer] = None
    if starter is None:
        why = "this launcher spawns every job"
    elif nproc > 1:
        why = f"multi-rank ({nproc} ranks): torch.distributed.run starts each rank afresh"
    else:  # before the clock starts: the first job may start the fork server
        server, why = starter.choose(job, env)
    env[LAUNCH_T0_VAR] = repr(launch_t0 if launch_t0 is not None else time.time())
    err_path = jdir / f"stderr{log_suffix}.log"
    t0 = time.perf_counter()
    rc: Optional[int] = None
    with open(jdir / f"stdout{log_suffix}.log", "wb") as out, open(err_path, "wb") as err:
        forked = False
        if server is not None and starter is not None:
            try:
                rc = server.run(job.worker, [str(spec_path)], env, out, err, timeout_s,
                                ignore_job_signals=ignore_sigterm)
                forked = True
            except ForkServerError as exc:  # nothing ran, or the server died under the job
                why = starter.lost(exc)
                if isinstance(exc, ForkServerLost):
                    why += "; the job ran again, spawned"
                    job.record_path.unlink(missing_ok=True)
                out.seek(0)
                out.truncate()
                err.seek(0)
                err.truncate()
                env[LAUNCH_T0_VAR] = repr(time.time())
                t0 = time.perf_counter()
        if not forked:
            cmd = worker_command(python, job.worker, spec_path, nproc)
            # Ctrl-C or SIGTERM while it runs: the child goes down with us, nothing else is lost
            rc = run_child(cmd, stdout=out, stderr=err, env=env, timeout_s=timeout_s,
                           preexec_fn=ignore_job_signals if ignore_sigterm else die_with_parent)
    record = job_outcome(job, rc, timeout_s, stderr_tail(err_path), time.perf_counter() - t0)
    record["returncode"] = rc
    record["start_method"] = FORK_SERVER if forked else SPAWN
    record["start_method_why"] = None if forked else why
    record.update(annotate or {})
    if write_record:
        atomic_write_json(job.record_path, record)
    return record
