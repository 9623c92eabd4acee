"""Slurm launcher through submitit.

A/B fairness on a cluster: **each (round, bucket) is one Slurm job** (one allocation), which
runs the arms of that round one after another, in plan order, each in a fresh process, on the
same node and the same devices. Arms compared with each other therefore never straddle nodes or
GPUs, without pinning a node for the whole campaign (which would wait on one node's queue).
Rounds are submitted one after another in plan order (a round's jobs form one job array); the
buckets of one round are independent and may run in parallel up to
``launcher.slurm.array_parallelism``.

Inside a job, each worker process is spawned: the launcher factory passes
``start_method="spawn"``. The job's own fork server (:mod:`orchestrator.launch.forkserver`,
ignoring the job's SIGTERM/SIGUSR2 as the workers do) is wired in but off: with it, a
preempted and requeued job's trial timed out in the local Slurm test.

A distributed trial (``workload.world_size = G``) runs as G tasks of its job (srun through
submitit), one rank per task with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT
set; rank 0 writes the record.

The correctness gate's probes (``run_jobs``) run the same way: one Slurm job runs every probe
of the campaign in order (the baseline, the variants, the baseline again) on one node, so they
run where the trials run, not on the submitting host.

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
import json
import logging
import re
import socket
import subprocess
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence, TypedDict

from orchestrator.spec.config import SlurmLauncherConfig
from orchestrator.spec.jobs import JOB_KINDS, TrialSpec, WorkerJob, job_from_payload
from orchestrator.launch.base import (
    INFRA_STATUS,
    Launcher,
    OnDone,
    OnJobDone,
    OnStart,
    final_record,
    job_failure,
    job_record,
    stderr_tail,
    world_size,
)
from orchestrator.launch.forkserver import Starter
from orchestrator.launch.process import LaunchFields, run_worker_process
from orchestrator.core.results import atomic_write_json, atomic_write_text
from orchestrator.core.trial_record import TrialRecordDict

if TYPE_CHECKING:  # start-up cost: the probe's comparisons import torch; only its record type is used here
    from orchestrator.analysis.correctness.compare import ProbeRecord

log = logging.getLogger(__name__)

# a job that ended by the machines' fault (a node failed or never booted, the job vanished):
# its unfinished trials are infra_failed, run again (protocol.infra_retries, then a resume)
INFRA_STATES = ("NODE_FAIL", "BOOT_FAIL", "LOST")
TERMINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                   "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED")


# --------------------------------------------------------------------------- pure helpers


def plan_waves(specs: Sequence[TrialSpec]) -> list[list[list[TrialSpec]]]:
    """Rounds in plan order; in each, one group per bucket holding its arms in plan order."""
    rounds: OrderedDict[int, OrderedDict[str, list[TrialSpec]]] = OrderedDict()
    for s in specs:
        rounds.setdefault(s.round, OrderedDict()).setdefault(s.bucket["name"], []).append(s)
    return [list(groups.values()) for groups in rounds.values()]


def executor_parameters(cfg: SlurmLauncherConfig, ntasks: int, job_name: str,
                        nodes: int = 1, defaults: Optional[dict[str, int]] = None,
                        ) -> dict[str, Any]:
    """submitit SlurmExecutor parameters for one (round, bucket) job: ``ntasks`` processes in
    all (one per rank, or per node for a command), over ``nodes`` machines. ``defaults``:
    gpus_per_node / cpus_per_task where the config leaves them unset (:func:`node_defaults`)."""
    params: dict[str, Any] = {
        "job_name": job_name,
        "time": int(cfg.time_limit_min),
        "nodes": int(nodes),
        "ntasks_per_node": int(ntasks) // max(1, int(nodes)),
        "array_parallelism": int(cfg.array_parallelism),
    }
    if cfg.partition:
        params["partition"] = cfg.partition
    if cfg.gpus_per_node:
        params["gpus_per_node"] = int(cfg.gpus_per_node)
    elif defaults and defaults.get("gpus_per_node"):
        params["gpus_per_node"] = int(defaults["gpus_per_node"])
    if cfg.cpus_per_task:
        params["cpus_per_task"] = int(cfg.cpus_per_task)
    elif defaults and defaults.get("cpus_per_task"):
        params["cpus_per_task"] = int(defaults["cpus_per_task"])
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


ACCELERATORS = ("cuda", "musa")


def node_defaults(cfg: SlurmLauncherConfig, procs_per_node: int, tasks_per_node: int,
                  device_kind: str, node_cpus: Optional[int]) -> tuple[dict[str, int], list[str]]:
    """What a cluster user expects where the config leaves it unset: on an accelerator, a GPU
    per process of a node (``gpus_per_node`` = the workload's processes per node); CPUs per
    task, each task's share of a node's cores (``node_cpus``: the partition's CPUs per node,
    None where sinfo could not say: then the cluster's default stands). (defaults, what each
    says, for plan.json)."""
    out: dict[str, int] = {}
    notes: list[str] = []
    if not cfg.gpus_per_node and device_kind in ACCELERATORS:
        out["gpus_per_node"] = max(1, int(procs_per_node))
        notes.append(f"gpus_per_node={out['gpus_per_node']}: one {device_kind} device per "
                     "process of a node (launcher.slurm.gpus_per_node unset)")
    if not cfg.cpus_per_task and node_cpus:
        out["cpus_per_task"] = max(1, int(node_cpus) // max(1, int(tasks_per_node)))
        notes.append(f"cpus_per_task={out['cpus_per_task']}: each of {tasks_per_node} task(s) "
                     f"per node its share of the partition's {node_cpus} CPUs per node "
                     "(launcher.slurm.cpus_per_task unset)")
    return out, notes


def partition_cpus(partition: Optional[str]) -> Optional[int]:
    """The fewest CPUs a node of ``partition`` (the default one when None) has, from sinfo;
    None when sinfo cannot say."""
    cmd = ["sinfo", "-h", "-o", "%c"] + (["-p", partition] if partition else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30,
                             check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    counts = [int(x.rstrip("+")) for x in out.split() if x.rstrip("+").isdigit()]
    return min(counts) if counts else None


def parse_gres_gpus(text: str) -> int:
    """The most GPUs a node offers in sinfo's ``%G`` lines (``gpu:8``, ``gpu:a100:4(S:0-1)``,
    ``(null)``): 0 where none."""
    best = 0
    for item in re.split(r"[,\s]+", text):
        m = re.match(r"gpu(?::[^:(]+)?:(\d+)", item)
        if m:
            best = max(best, int(m.group(1)))
    return best


def partition_gpus(partition: Optional[str]) -> int:
    """GPUs per node of ``partition`` (sinfo's generic resources); 0 where none or unknown."""
    cmd = ["sinfo", "-h", "-o", "%G"] + (["-p", partition] if partition else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30,
                             check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return parse_gres_gpus(out)


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


def rank_env(spec: WorkerJob, env: Any, rank: int, port: int) -> dict[str, str]:
    """The variables a task of the job gives its worker process. An embedded recipe's rank:
    torch.distributed's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
    MASTER_PORT (the first node of the job). A command's node (one task per node, its ranks
    its own): NNODES, NODE_RANK and the first node's MASTER_ADDR and MASTER_PORT, which the
    command's placeholders ({nnodes}, {node_rank}, {master_addr}, {master_port},
    {rdzv_endpoint}) and environment carry on."""
    ws, nodes = world_size(spec), spec.nodes()
    if ws <= 1 and nodes <= 1:
        return {}
    where = {"MASTER_ADDR": str(env.hostnames[0]), "MASTER_PORT": str(port)}
    if spec.workload.get("kind") == "command":
        return {**where, "NNODES": str(nodes), "NODE_RANK": str(env.node)}
    return {**where, "RANK": str(rank), "WORLD_SIZE": str(ws),
            "LOCAL_RANK": str(env.local_rank), "LOCAL_WORLD_SIZE": str(ws // nodes)}


# --------------------------------------------------------------------------- the job body


class _TaskResult(TypedDict):
    node_id: str
    rank: int
    hostname: str


class TaskResult(_TaskResult, total=False):
    """What one task of a group job returns (submitit's result pickle, deleted once read):
    its anonymous node id and the host name for the sanitizer."""

    attempt: int
    step: str  # a job step's id (launcher.slurm.allocation=campaign)


@dataclass
class GroupJob:
    """What one Slurm job runs: the arms of one (round, bucket), one after another (or the
    gate's probes, in order).

    Checkpointable: on preemption or time-out submitit calls :meth:`checkpoint`, which hands
    back the same group with the attempt counted; the requeued job skips final trials."""

    specs: list[dict[str, Any]]  # WorkerJob.payload() of each job, in order
    timeout_s: float
    python: Optional[str]
    submitted_at: float
    max_requeue: int
    attempt: int = 0
    log_level: int = logging.INFO
    extra: dict[str, Any] = field(default_factory=dict)
    start_method: str = "spawn"  # "auto": the job's own fork server where sound (off: see above)

    def __call__(self) -> TaskResult:
        import submitit  # start-up cost: only a Slurm job (or launcher=slurm) imports submitit

        env = submitit.JobEnvironment()
        rank = env.global_rank
        python = self.python or sys.executable
        specs = [job_from_payload(d) for d in self.specs]
        todo = [s for s in specs if final_record(s) is None]  # decided once, same on every task
        # one fork server per task that runs a single-rank job (started at its first one), as
        # the local launcher's; it ignores the job's SIGTERM/SIGUSR2 like the workers do
        starter = Starter(self.start_method, python, ignore_job_signals=True)
        starter.prepare(todo)
        try:
            self._run_all(env, rank, python, todo, starter)
        finally:
            starter.close()
        # the host name travels only in the result pickle (deleted once read): the launcher hands
        # it to the sanitizer, so the job's logs never show the compute node's name
        return {"node_id": node_id(), "attempt": self.attempt, "rank": rank,
                "hostname": socket.gethostname()}

    def _run_all(self, env: Any, rank: int, python: str, todo: list[WorkerJob],
                 starter: Starter) -> None:
        node = node_id()
        first = True
        for i, spec in enumerate(todo):
            ws = world_size(spec)
            if rank >= ws:
                continue
            extra = rank_env(spec, env, rank, master_port(env.job_id, i))
            annotate: LaunchFields = {"launcher": "slurm", "slurm_job_id": env.job_id, "node_id": node,
                        "slurm_attempt": self.attempt,
                        "startup_measured_from": "slurm submission" if first and not self.attempt
                        else "process start"}
            t0 = self.submitted_at if first and not self.attempt else None
            first = False
            if spec.nodes() > 1:
                annotate["slurm_node_rank"] = env.node
            run_worker_process(spec, self.timeout_s, python, extra_env=extra, launch_t0=t0,
                               nproc=1, log_suffix="" if rank == 0 else f".rank{rank}",
                               write_record=rank == 0, annotate=annotate, ignore_sigterm=True,
                               starter=starter)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        import submitit  # start-up cost: only a Slurm job (or launcher=slurm) imports submitit

        if self.attempt >= self.max_requeue:
            return None  # submitit then ends the job: its unfinished trials get a status
        nxt = GroupJob(self.specs, self.timeout_s, self.python, self.submitted_at,
                       self.max_requeue, self.attempt + 1, self.log_level, self.extra,
                       self.start_method)
        return submitit.helpers.DelayedSubmission(nxt)


# --------------------------------------------------------------------------- the launcher


class SlurmLauncher(Launcher):
    name = "slurm"

    def __init__(self, cfg: SlurmLauncherConfig, folder: str, python: Optional[str] = None,
                 ledger: Optional[Path] = None, start_method: str = "spawn") -> None:
        self.cfg = cfg
        self.start_method = start_method
        self.folder = Path(folder)
        self.python = python
        # the jobs this campaign submitted and has not collected yet (one file per run dir)
        self.ledger = JobLedger(ledger or self.folder / JOBS_FILE)
        self.seen_hostnames: set[str] = set()
        # the device kind the trials train on (a resolved device=auto: the campaign sets it)
        self.device_kind = ""
        self._node_cpus: Optional[int] = None
        self.notes: list[str] = []  # the defaults it applied (plan.json's launcher entry)

    def recover(self) -> None:
        """Before a (resumed) campaign plans what is left: jobs of an earlier invocation that
        never collected them (the orchestrator was killed) may still run and write into the run
        dir. Cancel them, wait until they are gone, and drop their pickles."""
        live = self.ledger.jobs()
        if not live:
            return
        states = squeue_states()  # None: squeue did not answer; cancel them all to be safe
        running = [j for j in live if states is None or job_state(states, j) in ACTIVE_STATES]
        if running:
            log.warning("resume: cancelling %d job(s) of an earlier run still in Slurm: %s",
                        len(running), ", ".join(running))
            scancel(running)
            wait_gone(running, self.cfg.poll_interval_s, self.cfg.lost_after_s)
        for jid in live:
            drop_pickles(self.folder / jid)
        self.ledger.remove(live)

    def executor(self, ntasks: int, job_name: str, nodes: int = 1,
                 defaults: Optional[dict[str, int]] = None) -> Any:
        import submitit  # start-up cost: only a Slurm job (or launcher=slurm) imports submitit

        ex = submitit.SlurmExecutor(folder=str(self.folder / "%j"),
                                    max_num_timeout=self.cfg.max_requeue)
        ex.update_parameters(**executor_parameters(self.cfg, ntasks, job_name, nodes, defaults))
        return ex

    def defaults_for(self, groups: Sequence[Sequence[WorkerJob]]) -> dict[str, int]:
        """gpus_per_node / cpus_per_task for a wave's jobs where the config leaves them unset
        (:func:`node_defaults`); what they say is logged once and kept in ``self.notes``."""
        specs = [s for g in groups for s in g]
        nodes = max(s.nodes() for s in specs)
        procs = max(max(1, int(s.workload.get("world_size", 1) or 1)) // nodes for s in specs)
        tasks = max(world_size(s) for s in specs) // nodes
        kind = self.device_kind or str(getattr(specs[0], "device", "auto")).split(":", 1)[0]
        if self._node_cpus is None and not self.cfg.cpus_per_task:
            self._node_cpus = partition_cpus(self.cfg.partition) or 0
        out, notes = node_defaults(self.cfg, procs, tasks, kind, self._node_cpus or None)
        for n in notes:
            if n not in self.notes:
                self.notes.append(n)
                log.info("launcher.slurm: %s", n)
        return out

    def run(
        self,
        specs: Sequence[TrialSpec],
        on_done: OnDone,
        timeout_s: float,
        on_start: Optional[OnStart] = None,
    ) -> None:
        _prepare(specs)
        need_min = max((len(g) for w in plan_waves(specs) for g in w), default=0) * timeout_s / 60
        if need_min > self.cfg.time_limit_min:
            log.warning("launcher.slurm.time_limit_min=%d may be short: a job runs up to %.0f min "
                        "of trials (arms x protocol.trial_timeout_s)", self.cfg.time_limit_min,
                        need_min)
        for wave in plan_waves(specs):
            self._run_wave(wave, on_done, timeout_s, on_start,  # type: ignore[arg-type]
                           f"orch-r{wave[0][0].round}", f"round {wave[0][0].round}")

    def run_jobs(self, jobs: Sequence[WorkerJob], on_done: OnJobDone, timeout_s: float) -> None:
        """One Slurm job runs them all, in order, on one node (the gate's probes)."""
        if not jobs:
            return
        _prepare(jobs)
        self._run_wave([list(jobs)], on_done, timeout_s, None, "orch-gate", "correctness gate")

    def _run_wave(self, groups: Sequence[Sequence[WorkerJob]], on_done: OnJobDone,
                  timeout_s: float, on_start: Optional[OnStart], name: str, what: str) -> None:
        ntasks = max(world_size(s) for g in groups for s in g)
        nodes = max(s.nodes() for g in groups for s in g)
        ex = self.executor(ntasks, name, nodes, self.defaults_for(groups))
        now = time.time()
        bodies = [GroupJob([s.payload() for s in g], timeout_s, self.python, now,
                           self.cfg.max_requeue, start_method=self.start_method) for g in groups]
        with ex.batch():
            jobs = [ex.submit(b) for b in bodies]
        self.ledger.add({j.job_id: [s.job_id for s in g] for j, g in zip(jobs, groups)})
        log.info("%s: submitted %d job(s) %s", what, len(jobs), ", ".join(j.job_id for j in jobs))
        try:
            outcomes = self._wait(jobs, groups, ntasks, on_start)
        except BaseException:  # Ctrl-C: do not leave jobs writing into the run dir
            for j in jobs:
                j.cancel(check=False)
            for j in jobs:
                drop_pickles(Path(j.paths.folder))
            self.ledger.remove([j.job_id for j in jobs])
            raise
        for job, group in zip(jobs, groups):
            state, error, hosts = outcomes[job.job_id]
            self.seen_hostnames |= hosts | log_hostnames(job, ntasks)
            for spec in group:
                on_done(spec, self._collect(spec, job, state, error))
            # the pickles hold the specs (arm env.* values: secrets) and the job's host name
            drop_pickles(Path(job.paths.folder))
        self.ledger.remove([j.job_id for j in jobs])

    def _wait(self, jobs: list[Any], groups: Sequence[Sequence[WorkerJob]], ntasks: int,
              on_start: Optional[OnStart]) -> dict[str, tuple[str, str, set[str]]]:
        pending = {j.job_id: (j, g) for j, g in zip(jobs, groups)}
        outcomes: dict[str, tuple[str, str, set[str]]] = {}
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
                        on_start(group[0])  # type: ignore[arg-type]
                if all(job.task(t).paths.result_pickle.exists() for t in range(ntasks)):
                    outcomes[jid] = _result(job)
                elif state in TERMINAL_STATES or state is None:
                    since = missing_since.setdefault(jid, time.time())
                    grace = 5.0 if state else self.cfg.lost_after_s
                    if time.time() - since < grace:
                        continue
                    outcomes[jid] = (state or "LOST", f"slurm job {jid} ended "
                                     f"{state or 'without trace in squeue'} with no result", set())
                else:
                    missing_since.pop(jid, None)
                    continue
                del pending[jid]
            if pending:
                time.sleep(self.cfg.poll_interval_s)
        return outcomes

    def _collect(self, spec: WorkerJob, job: Any, state: str, error: str) -> TrialRecordDict | ProbeRecord:
        rec = job_record(spec)
        if rec is not None:
            return rec
        status = {"CANCELLED": "killed", "TIMEOUT": "timeout", "PREEMPTED": "killed",
                  "OUT_OF_MEMORY": "oom"}.get(state, "crashed")
        if state in INFRA_STATES:  # the machine's failure, not the arm's: run again
            status = INFRA_STATUS
        tail = stderr_tail(spec.job_dir / "stderr.log") or stderr_tail(job.paths.stderr)
        record = job_failure(spec, status, f"{error} before this {JOB_KINDS[type(spec)]} "
                             "finished", tail)
        record.update({"launcher": "slurm", "slurm_job_id": job.job_id, "slurm_state": state})
        if status == INFRA_STATUS:
            record["infra_reason"] = (f"slurm job {job.job_id} ended {state}: a node failed "
                                      "or the job was lost (the trial runs again)")
        atomic_write_json(spec.record_path, record)
        return record


def _prepare(specs: Sequence[WorkerJob]) -> None:
    """Every task of a job reads spec.json; a stale record never counts."""
    for spec in specs:
        jdir = spec.job_dir
        jdir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(jdir / "spec.json", spec.to_json())
        stem = Path(spec.record_file).stem
        # a command's other nodes' reports (orchestrator.worker.nodes) too
        for stale in [spec.record_path, *jdir.glob(f"{stem}.rank*.json"),
                      *jdir.glob("node[0-9]*.json")]:
            stale.unlink(missing_ok=True)


def _result(job: Any) -> tuple[str, str, set[str]]:
    """(state, error, host names the job's tasks reported)."""
    try:
        results = job.results()
    except Exception as exc:  # submitit's FailedJobError / UncompletedJobError
        text = str(exc).strip().splitlines()
        why = text[-1] if text else type(exc).__name__
        return "FAILED", f"slurm job {job.job_id} failed: {why}", set()
    hosts = {str(r["hostname"]) for r in results if isinstance(r, dict) and r.get("hostname")}
    return "COMPLETED", "", hosts


_LOG_HOST = re.compile(r"JobEnvironment\([^)]*\bhostname=([^,)\s]+)")


def log_hostnames(job: Any, ntasks: int) -> set[str]:
    """The host names submitit's own log lines name (``Starting with JobEnvironment(...,
    hostname=...)``): known even for a job that failed before returning a result."""
    hosts = set()
    for t in range(ntasks):
        try:
            paths = job.task(t).paths
            texts = [Path(paths.stdout).read_text(errors="replace")[:20000],
                     Path(paths.stderr).read_text(errors="replace")[:20000]]
        except (OSError, ValueError):
            continue
        for text in texts:
            hosts |= set(_LOG_HOST.findall(text))
    return hosts


def drop_pickles(folder: Path) -> None:
    """Delete submitit's pickles of a collected or cancelled job (specs with arm env.* values,
    the result with the node's host name); its logs and submission script stay (text, sealed
    by the sanitizer)."""
    if folder.is_dir():
        for p in folder.glob("*.pkl"):
            p.unlink(missing_ok=True)


JOBS_FILE = "jobs.json"
ACTIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING",
                 "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "REQUEUE_HOLD",
                 "REQUEUE_FED", "RESV_DEL_HOLD", "PREEMPTED")


class LiveJob(TypedDict):
    """One entry of ``slurm/jobs.json``'s ``live`` map (job id -> this)."""

    trials: list[str]
    submitted_at: float


class JobLedger:
    """``<run dir>/slurm/jobs.json``: the job ids this campaign submitted and has not collected,
    with their trials. A killed orchestrator leaves its live jobs here; the resume cancels them
    before it plans what is left (otherwise they would go on writing into the run dir while the
    same trials run again)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _read(self) -> dict[str, LiveJob]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data.get("live", {}) if isinstance(data, dict) else {}

    def jobs(self) -> list[str]:
        return list(self._read())

    def add(self, jobs: dict[str, list[str]]) -> None:
        live = self._read()
        live.update({j: {"trials": t, "submitted_at": time.time()} for j, t in jobs.items()})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path, {"live": live})

    def remove(self, job_ids: Sequence[str]) -> None:
        live = self._read()
        if not live and not self.path.exists():
            return
        for j in job_ids:
            live.pop(j, None)
        atomic_write_json(self.path, {"live": live})


def scancel(job_ids: Sequence[str]) -> None:
    """Kill every process of the jobs at once (their trials ignore SIGTERM: a plain cancel
    would wait for Slurm's KillWait), then cancel them."""
    for args in (["--full", "--signal=KILL"], []):
        try:
            subprocess.run(["scancel", *args, *job_ids], capture_output=True, text=True,
                           timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("scancel failed: %s", exc)


def wait_gone(job_ids: Sequence[str], poll_s: float, limit_s: float) -> None:
    """Until none of the jobs is active in squeue (or ``limit_s`` passed: then say so)."""
    end = time.time() + max(limit_s, 30.0)
    while time.time() < end:
        states = squeue_states()
        if states is not None and not any(job_state(states, j) in ACTIVE_STATES
                                          for j in job_ids):
            return
        time.sleep(poll_s)
    log.warning("jobs %s still listed as active after cancelling them", ", ".join(job_ids))


def squeue_states() -> Optional[dict[str, str]]:
    try:
        out = subprocess.run(["squeue", "-h", "--states=all", "-o", "%i %T"], capture_output=True,
                             text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("squeue failed: %s", exc)
        return None
    return parse_squeue(out)
