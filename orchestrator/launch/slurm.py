"""Slurm launcher through submitit.

A/B fairness on a cluster: **each (round, bucket) is one Slurm job** (one allocation), which
runs the arms of that round one after another, in plan order, each in a fresh process, on the
same node and the same devices. Arms compared with each other therefore never straddle nodes or
GPUs, without pinning a node for the whole campaign (which would wait on one node's queue).
Rounds are submitted one after another in plan order (a round's jobs form one job array); the
buckets of one round are independent and may run in parallel up to
``launcher.slurm.array_parallelism``.

A distributed trial (``workload.world_size = G``) runs as G tasks of its job (srun through
submitit), one rank per task with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT
set; rank 0 writes the record.

Faults: a trial that raises, segfaults, hangs or is killed is recorded by the in-job runner,
exactly as the local launcher does. A job that is preempted or reaches its time limit is
requeued through submitit's checkpointing, up to ``launcher.slurm.max_requeue`` times; the
requeued job skips trials already final on disk. A job that ends without a result (cancelled,
node failure, lost) turns each of its unfinished trials into a record with the job's state.

No accounting daemon is assumed: job state comes from ``squeue --states=all`` and from the job's
own result files, never from ``sacct``.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import subprocess
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from orchestrator.config import SlurmLauncherConfig
from orchestrator.launch.base import (
    Launcher,
    OnDone,
    OnStart,
    final_record,
    read_record,
    record_or_failure,
    stderr_tail,
    world_size,
)
from orchestrator.results import atomic_write_json, atomic_write_text
from orchestrator.trial import TrialSpec

log = logging.getLogger(__name__)

TERMINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                   "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED")


# --------------------------------------------------------------------------- pure helpers


def plan_waves(specs: Sequence[TrialSpec]) -> list[list[list[TrialSpec]]]:
    """Rounds in plan order; in each, one group per bucket holding its arms in plan order."""
    rounds: OrderedDict[int, OrderedDict[str, list[TrialSpec]]] = OrderedDict()
    for s in specs:
        rounds.setdefault(s.round, OrderedDict()).setdefault(s.bucket["name"], []).append(s)
    return [list(groups.values()) for groups in rounds.values()]


def executor_parameters(cfg: SlurmLauncherConfig, ntasks: int, job_name: str) -> dict[str, Any]:
    """submitit SlurmExecutor parameters for one (round, bucket) job."""
    params: dict[str, Any] = {
        "job_name": job_name,
        "time": int(cfg.time_limit_min),
        "nodes": 1,
        "ntasks_per_node": int(ntasks),
        "array_parallelism": int(cfg.array_parallelism),
    }
    if cfg.partition:
        params["partition"] = cfg.partition
    if cfg.gpus_per_node:
        params["gpus_per_node"] = int(cfg.gpus_per_node)
    if cfg.cpus_per_task:
        params["cpus_per_task"] = int(cfg.cpus_per_task)
    if cfg.mem_gb:
        params["mem"] = f"{int(round(cfg.mem_gb * 1024))}MB"
    if cfg.account:
        params["account"] = cfg.account
    if cfg.nodelist:
        params["nodelist"] = cfg.nodelist
    if cfg.setup:
        params["setup"] = list(cfg.setup)
    if cfg.additional_parameters:
        params["additional_parameters"] = dict(cfg.additional_parameters)
    return params


def parse_squeue(text: str) -> dict[str, str]:
    """``squeue -h -o "%i %T"`` output -> {job id: state}; a pending array range
    (``12_[3-5%1]``) is kept under its base id with the key ``12_[``."""
    states = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            jid, state = parts[0], parts[1].rstrip("+")
            if "_[" in jid:
                jid = jid.split("_[", 1)[0] + "_["
            states[jid] = state
    return states


def job_state(states: dict[str, str], job_id: str) -> Optional[str]:
    if job_id in states:
        return states[job_id]
    base = job_id.split("_", 1)[0]
    if "_" in job_id and base + "_[" in states:
        return states[base + "_["]
    return None


def node_id() -> str:
    """A stable, anonymous id of this node (hostnames stay out of artifacts)."""
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:12]


def master_port(job_id: str, index: int) -> int:
    digits = "".join(c for c in job_id if c.isdigit()) or "0"
    return 20000 + (int(digits) * 31 + index * 7) % 20000


# --------------------------------------------------------------------------- the job body


@dataclass
class GroupJob:
    """What one Slurm job runs: the arms of one (round, bucket), one after another.

    Checkpointable: on preemption or time-out submitit calls :meth:`checkpoint`, which hands
    back the same group with the attempt counted; the requeued job skips final trials."""

    specs: list[dict[str, Any]]
    timeout_s: float
    python: Optional[str]
    submitted_at: float
    max_requeue: int
    attempt: int = 0
    log_level: int = logging.INFO
    extra: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> dict[str, Any]:
        import submitit

        from orchestrator.launch.local import run_trial_process

        env = submitit.JobEnvironment()
        rank = env.global_rank
        python = self.python or sys.executable
        specs = [TrialSpec(**d) for d in self.specs]
        todo = [s for s in specs if final_record(s) is None]  # decided once, same on every task
        node = node_id()
        first = True
        for i, spec in enumerate(todo):
            ws = world_size(spec)
            if rank >= ws:
                continue
            annotate = {"launcher": "slurm", "slurm_job_id": env.job_id, "node_id": node,
                        "slurm_attempt": self.attempt,
                        "startup_measured_from": "slurm submission" if first and not self.attempt
                        else "process start"}
            t0 = self.submitted_at if first and not self.attempt else None
            first = False
            extra: dict[str, str] = {}
            if ws > 1:
                extra = {"RANK": str(rank), "WORLD_SIZE": str(ws), "LOCAL_RANK": str(rank),
                         "LOCAL_WORLD_SIZE": str(ws), "MASTER_ADDR": env.hostnames[0],
                         "MASTER_PORT": str(master_port(env.job_id, i))}
            run_trial_process(spec, self.timeout_s, python, extra_env=extra, launch_t0=t0,
                              nproc=1, log_suffix="" if rank == 0 else f".rank{rank}",
                              write_failure=rank == 0, annotate=annotate, ignore_sigterm=True)
        return {"node_id": node, "attempt": self.attempt, "rank": rank}

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        import submitit

        if self.attempt >= self.max_requeue:
            return None  # submitit then ends the job: its unfinished trials get a status
        nxt = GroupJob(self.specs, self.timeout_s, self.python, self.submitted_at,
                       self.max_requeue, self.attempt + 1, self.log_level, self.extra)
        return submitit.helpers.DelayedSubmission(nxt)


# --------------------------------------------------------------------------- the launcher


class SlurmLauncher(Launcher):
    name = "slurm"

    def __init__(self, cfg: SlurmLauncherConfig, folder: str, python: Optional[str] = None) -> None:
        self.cfg = cfg
        self.folder = Path(folder)
        self.python = python

    def executor(self, ntasks: int, job_name: str) -> Any:
        import submitit

        ex = submitit.SlurmExecutor(folder=str(self.folder / "%j"),
                                    max_num_timeout=self.cfg.max_requeue)
        ex.update_parameters(**executor_parameters(self.cfg, ntasks, job_name))
        return ex

    def run(
        self,
        specs: Sequence[TrialSpec],
        on_done: OnDone,
        timeout_s: float,
        on_start: Optional[OnStart] = None,
    ) -> None:
        for spec in specs:  # every task of a job reads spec.json; a stale record never counts
            tdir = Path(spec.trial_dir)
            tdir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(tdir / "spec.json", spec.to_json())
            for stale in [tdir / "trial.json", *tdir.glob("trial.rank*.json")]:
                stale.unlink(missing_ok=True)
        need_min = max((len(g) for w in plan_waves(specs) for g in w), default=0) * timeout_s / 60
        if need_min > self.cfg.time_limit_min:
            log.warning("launcher.slurm.time_limit_min=%d may be short: a job runs up to %.0f min "
                        "of trials (arms x protocol.trial_timeout_s)", self.cfg.time_limit_min,
                        need_min)
        for wave in plan_waves(specs):
            self._run_wave(wave, on_done, timeout_s, on_start)

    def _run_wave(self, groups: list[list[TrialSpec]], on_done: OnDone, timeout_s: float,
                  on_start: Optional[OnStart]) -> None:
        ntasks = max(world_size(s) for g in groups for s in g)
        r = groups[0][0].round
        ex = self.executor(ntasks, f"orch-r{r}")
        now = time.time()
        bodies = [GroupJob([s.__dict__ for s in g], timeout_s, self.python, now,
                           self.cfg.max_requeue) for g in groups]
        with ex.batch():
            jobs = [ex.submit(b) for b in bodies]
        log.info("round %d: submitted %d job(s) %s", r, len(jobs),
                 ", ".join(j.job_id for j in jobs))
        try:
            outcomes = self._wait(jobs, groups, ntasks, on_start)
        except BaseException:  # Ctrl-C: do not leave jobs writing into the run dir
            for j in jobs:
                j.cancel(check=False)
            raise
        for job, group in zip(jobs, groups):
            state, error = outcomes[job.job_id]
            for spec in group:
                on_done(spec, self._collect(spec, job, state, error))

    def _wait(self, jobs: list[Any], groups: list[list[TrialSpec]], ntasks: int,
              on_start: Optional[OnStart]) -> dict[str, tuple[str, str]]:
        pending = {j.job_id: (j, g) for j, g in zip(jobs, groups)}
        outcomes: dict[str, tuple[str, str]] = {}
        started: set[str] = set()
        missing_since: dict[str, float] = {}
        while pending:
            states = squeue_states()
            for jid, (job, group) in list(pending.items()):
                if states is None and not job.paths.result_pickle.exists():
                    continue  # squeue did not answer: judge nothing this time
                state = job_state(states or {}, jid)
                if state == "RUNNING" and jid not in started:
                    started.add(jid)
                    if on_start is not None:
                        on_start(group[0])
                if all(job.task(t).paths.result_pickle.exists() for t in range(ntasks)):
                    outcomes[jid] = _result(job)
                elif state in TERMINAL_STATES or state is None:
                    since = missing_since.setdefault(jid, time.time())
                    grace = 5.0 if state else self.cfg.lost_after_s
                    if time.time() - since < grace:
                        continue
                    outcomes[jid] = (state or "LOST", f"slurm job {jid} ended "
                                     f"{state or 'without trace in squeue'} with no result")
                else:
                    missing_since.pop(jid, None)
                    continue
                del pending[jid]
            if pending:
                time.sleep(self.cfg.poll_interval_s)
        return outcomes

    def _collect(self, spec: TrialSpec, job: Any, state: str, error: str) -> dict[str, Any]:
        rec = read_record(Path(spec.trial_dir) / "trial.json")
        if rec is not None and rec.get("trial_id") == spec.trial_id:
            return rec
        status = {"CANCELLED": "killed", "TIMEOUT": "timeout", "PREEMPTED": "killed",
                  "OUT_OF_MEMORY": "oom"}.get(state, "crashed")
        tail = stderr_tail(Path(spec.trial_dir) / "stderr.log") or stderr_tail(job.paths.stderr)
        record = record_or_failure(spec, status, f"{error} before this trial finished", tail)
        record.update({"launcher": "slurm", "slurm_job_id": job.job_id, "slurm_state": state})
        atomic_write_json(Path(spec.trial_dir) / "trial.json", record)
        return record


def _result(job: Any) -> tuple[str, str]:
    try:
        job.results()
        return "COMPLETED", ""
    except Exception as exc:  # submitit's FailedJobError / UncompletedJobError
        text = str(exc).strip().splitlines()
        why = text[-1] if text else type(exc).__name__
        return "FAILED", f"slurm job {job.job_id} failed: {why}"


def squeue_states() -> Optional[dict[str, str]]:
    try:
        out = subprocess.run(["squeue", "-h", "--states=all", "-o", "%i %T"], capture_output=True,
                             text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("squeue failed: %s", exc)
        return None
    return parse_squeue(out)
