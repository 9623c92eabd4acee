"""One Slurm allocation per campaign (``launcher.slurm.allocation=campaign``).

The default Slurm launcher (:mod:`orchestrator.launch.slurm`) submits each (round, bucket) as a
job of its own, so a campaign waits in the queue once per round. Here the campaign holds **one
allocation** of the nodes it needs (``salloc --no-shell`` with the settings
:func:`~orchestrator.launch.slurm.executor_parameters` gives a job: partition, time limit,
nodes, tasks per node, GPUs, CPUs, memory, account, node list, extra keys) and runs every trial
group inside it as a **job step** of its own (``srun --jobid=<id>``): the arms of one (round,
bucket) back to back, or the gate's probes in order, each a fresh process, exactly the body a
per-round job runs (:class:`~orchestrator.launch.slurm.GroupJob`, through
:class:`StepJob`), records written the same way. The buckets of a round run one after another
(``array_parallelism`` does not apply: one allocation).

The allocation is listed in the campaign's job ledger (``<run dir>/slurm/jobs.json``) from the
moment salloc names it, so a resume after a killed orchestrator cancels it
(:meth:`SlurmLauncher.recover`); it is cancelled when the campaign closes its launcher, and on
an interrupt or any exception while trials run.

``launcher.slurm.time_limit_min`` is the allocation's limit. When the allocation ends under a
step (time limit, preemption, node failure, a cancel), the step's unfinished trials get a record
with status ``infra_failed`` (not on the arm's account: re-run ``protocol.infra_retries`` times,
and again on a resume), and the next step asks for a new allocation.

The step's entry point is this module: ``python -m orchestrator.launch.slurm_alloc STEP.json``,
one task per rank (or per node for a command), the task's place read from Slurm's variables
(:class:`StepEnvironment`, not submitit's JobEnvironment: no submitit folder exists here).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Optional, Sequence, TypedDict, cast

from orchestrator.core.paths import package_root
from orchestrator.core.results import Status, atomic_write_json
from orchestrator.launch.base import (
    INFRA_STATUS,
    OnJobDone,
    OnStart,
    final_record,
    job_failure,
    job_record,
    stderr_tail,
    world_size,
)
from orchestrator.launch.forkserver import Starter
from orchestrator.launch.slurm import (
    ACTIVE_STATES,
    GroupJob,
    SlurmLauncher,
    TaskResult,
    executor_parameters,
    job_state,
    node_id,
    scancel,
    squeue_states,
    wait_gone,
)
from orchestrator.spec.config import SlurmLauncherConfig
from orchestrator.spec.jobs import JOB_KINDS, TrialSpec, WorkerJob, job_from_payload
from orchestrator.core.trial_record import TrialRecordDict

if TYPE_CHECKING:  # start-up cost: the probe's comparisons import torch; only its record type is used here
    from orchestrator.analysis.correctness.compare import ProbeRecord

log = logging.getLogger(__name__)

ALLOCATION_NAME = "orch-campaign"
PER_JOB, CAMPAIGN = "per_job", "campaign"
MODES = (PER_JOB, CAMPAIGN)
# how a campaign ran, in plan.json and decisions.md
PER_JOB_WORDS = "one job per round and bucket"
CAMPAIGN_WORDS = "one allocation per campaign"


class AllocationError(RuntimeError):
    """salloc gave no allocation (refused, or it ended before it ran)."""


# --------------------------------------------------------------------------- pure helpers


def allocation_mode(cfg: SlurmLauncherConfig) -> str:
    return str(getattr(cfg, "allocation", PER_JOB))


def salloc_command(cfg: SlurmLauncherConfig, ntasks: int, nodes: int = 1,
                   defaults: Optional[dict[str, int]] = None) -> list[str]:
    """``salloc --no-shell`` asking for what one job of the per-job launcher asks for
    (:func:`executor_parameters`), the campaign's job name, ``additional_parameters`` as
    ``--key=value`` (True: ``--key``)."""
    params = executor_parameters(cfg, ntasks, ALLOCATION_NAME, nodes, defaults)
    params.pop("array_parallelism", None)
    params.pop("setup", None)  # shell lines: run by each step before its tasks (srun_command)
    extra = params.pop("additional_parameters", {})
    cmd = ["salloc", "--no-shell"]
    for key, value in {**params, **extra}.items():
        flag = "--" + str(key).replace("_", "-")
        cmd.append(flag if value is True else f"{flag}={value}")
    return cmd


def srun_command(job_id: str, cfg: SlurmLauncherConfig, nodes: int, per_node: int,
                 argv: Sequence[str], defaults: Optional[dict[str, int]] = None) -> list[str]:
    """One job step of ``nodes`` x ``per_node`` tasks in allocation ``job_id`` running
    ``argv`` (after the setup lines, when there are any); ``defaults``: the gpus / cpus the
    allocation was given where the config leaves them unset (a step does not inherit them)."""
    cmd = ["srun", f"--jobid={job_id}", f"--nodes={nodes}", f"--ntasks={nodes * per_node}",
           f"--ntasks-per-node={per_node}", "--job-name=orch-step", "--label"]
    cpus = cfg.cpus_per_task or (defaults or {}).get("cpus_per_task")
    gpus = cfg.gpus_per_node or (defaults or {}).get("gpus_per_node")
    if cpus:
        cmd.append(f"--cpus-per-task={int(cpus)}")
    if gpus:
        cmd.append(f"--gpus-per-node={int(gpus)}")
    if cfg.setup:
        script = "\n".join([*cfg.setup, 'exec "$@"'])
        return [*cmd, "bash", "-c", script, "orch-step", *argv]
    return [*cmd, *argv]


_GRANTED = re.compile(r"job allocation (\d+)")


def parse_allocation_id(line: str) -> Optional[str]:
    """The job id in salloc's ``Pending job allocation 12`` / ``Granted job allocation 12``."""
    m = _GRANTED.search(line)
    return m.group(1) if m else None


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compressed host list (``node[1-3,7],gpu05``) as names, in order."""
    out: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text.strip()):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if not m:
            if part:
                out.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            if not hi:
                out.append(f"{prefix}{lo}{suffix}")
                continue
            width = len(lo)
            out += [f"{prefix}{i:0{width}d}{suffix}" for i in range(int(lo), int(hi) + 1)]
    return out


def client_env() -> dict[str, str]:
    """The environment for salloc and srun: this one less a surrounding job's SLURM_*
    variables (a campaign inside a Slurm job: srun would read them as options), the
    package importable in the step."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURM_") or k == "SLURM_CONF"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root(), env.get("PYTHONPATH")) if p)
    return env


class AllocationFields(TypedDict):
    """The allocation a job step ran in, added to its trial.json or probe.json."""

    slurm_allocation: str
    slurm_allocation_id: str


class _LauncherEntry(TypedDict):
    name: str


class LauncherEntry(_LauncherEntry, total=False):
    """plan.json's ``launcher``: the launcher's name and, for Slurm, how its jobs run."""

    slurm_allocation: str
    how: str


def plan_entry(lc: Any) -> LauncherEntry:
    """plan.json's ``launcher``: the launcher's name and, for Slurm, how its jobs run."""
    doc: LauncherEntry = {"name": str(lc.name)}
    if str(lc.name) == "slurm":
        mode = allocation_mode(lc.slurm)
        doc["slurm_allocation"] = mode
        doc["how"] = (f"slurm: {CAMPAIGN_WORDS} (salloc; every trial group and the gate's probes "
                      "a job step in it)" if mode == CAMPAIGN else f"slurm: {PER_JOB_WORDS}")
    return doc


def slurm_line(records: Sequence[TrialRecordDict]) -> str:
    """decisions.md: how the Slurm trials ran (``slurm: one allocation per campaign, job 12``
    or ``slurm: one job per round and bucket (4 jobs)``); "" without Slurm trials."""
    ran = [r for r in records if r.get("launcher") == "slurm"]
    if not ran:
        return ""
    allocs: list[str] = []
    for r in ran:
        a = r.get("slurm_allocation_id")
        if r.get("slurm_allocation") == CAMPAIGN and isinstance(a, str) and a not in allocs:
            allocs.append(a)
    if allocs:
        n = len(allocs)
        more = (f" (a new allocation after each ended: {n} in all)" if n > 1 else "")
        return (f"slurm: {CAMPAIGN_WORDS}, job{'s' if n > 1 else ''} {', '.join(allocs)}"
                f"{more}; each round and bucket a job step in it")
    jobs = {j for r in ran if isinstance(j := r.get("slurm_job_id"), str) and j}
    return f"slurm: {PER_JOB_WORDS} ({len(jobs)} job{'s' if len(jobs) != 1 else ''})"


# --------------------------------------------------------------------------- inside the step


class StepEnvironment:
    """What :class:`GroupJob` reads of submitit's JobEnvironment (``job_id``, ``global_rank``,
    ``local_rank``, ``node``, ``hostnames``), from the variables srun gives a task. The job id
    is the step's, ``<allocation>.<step>``: its digits make each step's MASTER_PORT its own."""

    def __init__(self, environ: Optional[dict[str, str]] = None) -> None:
        env = dict(os.environ if environ is None else environ)
        job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or "0"
        step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
        self.job_id = f"{job}.{step}" if step else job
        self.global_rank = int(env.get("SLURM_PROCID", "0"))
        self.local_rank = int(env.get("SLURM_LOCALID", "0"))
        self.node = int(env.get("SLURM_NODEID", "0"))
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
        self.hostnames = expand_nodelist(nodes) or [socket.gethostname()]


@dataclass
class StepJob(GroupJob):
    """:class:`GroupJob`'s body in a job step of the campaign's allocation: the task's place
    from :class:`StepEnvironment`. No requeue: an ended allocation's trials are re-run by the
    campaign in a new one."""

    def __call__(self) -> TaskResult:
        env = StepEnvironment()
        rank = env.global_rank
        python = self.python or sys.executable
        specs = [job_from_payload(d) for d in self.specs]
        todo = [s for s in specs if final_record(s) is None]
        starter = Starter(self.start_method, python, ignore_job_signals=True)
        starter.prepare(todo)
        try:
            self._run_all(env, rank, python, todo, starter)
        finally:
            starter.close()
        return {"node_id": node_id(), "rank": rank, "step": env.job_id,
                "hostname": socket.gethostname()}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """One task of a job step: ``python -m orchestrator.launch.slurm_alloc STEP.json``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m orchestrator.launch.slurm_alloc STEP.json", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    path = Path(args[0])
    doc = json.loads(path.read_text(encoding="utf-8"))
    payloads = [{"job": j["job"], "spec": json.loads(Path(j["spec"]).read_text(encoding="utf-8"))}
                for j in doc["jobs"]]
    body = StepJob(payloads, float(doc["timeout_s"]), doc.get("python"),
                   float(doc["submitted_at"]), max_requeue=0,
                   start_method=str(doc.get("start_method") or "spawn"))
    out = body()
    # the host name goes to the launcher (for the sanitizer), which deletes the file once read
    atomic_write_json(path.parent / f"task{out['rank']}.json", out)
    return 0


# --------------------------------------------------------------------------- the launcher


@dataclass
class Allocation:
    job_id: str
    nodes: int
    per_node: int
    steps: int = 0


def _cancel_left(live: list[str], owner: int) -> None:
    """At exit or collection: an allocation the launcher never released (a caller that did not
    close it) is cancelled, not left to its time limit; only by the process that holds it (a
    forked child's exit leaves it alone)."""
    if live and os.getpid() == owner:
        scancel(list(live))
        live.clear()


class SlurmAllocationLauncher(SlurmLauncher):
    """``launcher.slurm.allocation=campaign``: one allocation, one job step per trial group."""

    name = "slurm"

    def __init__(self, cfg: SlurmLauncherConfig, folder: str, python: Optional[str] = None,
                 ledger: Optional[Path] = None, start_method: str = "spawn") -> None:
        super().__init__(cfg, folder, python=python, ledger=ledger, start_method=start_method)
        self.alloc: Optional[Allocation] = None
        self._wave_defaults: dict[str, int] = {}  # gpus/cpus the config leaves unset
        self.history: list[str] = []  # every allocation this launcher held, in order
        self._live: list[str] = []
        weakref.finalize(self, _cancel_left, self._live, os.getpid())

    # ------------------------------------------------------------------ the campaign's hooks

    def close(self) -> None:
        """The campaign is done: the allocation goes."""
        self.release("the campaign closed its launcher")
        super().close()

    def _run_wave(self, groups: Sequence[Sequence[WorkerJob]], on_done: OnJobDone,
                  timeout_s: float, on_start: Optional[OnStart], name: str, what: str) -> None:
        ntasks = max(world_size(s) for g in groups for s in g)
        nodes = max(s.nodes() for g in groups for s in g)
        per_node = max(1, ntasks // max(1, nodes))
        self._wave_defaults = self.defaults_for(groups)
        try:
            for group in groups:
                alloc = self.ensure(nodes, per_node)
                records = self._run_step(alloc, group, timeout_s, on_start, what)
                for spec in group:
                    on_done(spec, records[spec.job_id])
        except BaseException:  # Ctrl-C, or a caller's error: nothing goes on in the allocation
            self.release("interrupted")
            raise

    # ------------------------------------------------------------------ the allocation

    def ensure(self, nodes: int, per_node: int) -> Allocation:
        """The allocation the next step runs in: the one held while it runs and is big enough,
        else a new one (the old one, if any, cancelled)."""
        a = self.alloc
        if a is not None:
            state = self._state(a.job_id)
            if state == "RUNNING" and a.nodes >= nodes and a.per_node >= per_node:
                return a
            self.release(f"it is {state or 'gone from squeue'}" if state != "RUNNING" else
                         f"the next step needs {nodes} node(s) x {per_node} task(s)")
        self.alloc = self._allocate(nodes, per_node)
        return self.alloc

    def release(self, why: str) -> None:
        """Cancel the allocation held (processes killed at once), wait until Slurm lists it
        inactive, and drop it from the ledger."""
        a, self.alloc = self.alloc, None
        if a is None:
            return
        log.info("slurm: releasing allocation %s (%s)", a.job_id, why)
        scancel([a.job_id])
        wait_gone([a.job_id], self.cfg.poll_interval_s, self.cfg.lost_after_s)
        self.ledger.remove([a.job_id])
        if a.job_id in self._live:
            self._live.remove(a.job_id)

    def _state(self, job_id: str) -> Optional[str]:
        """The allocation's state ("RUNNING" when squeue does not answer: the step will tell)."""
        states = squeue_states()
        return "RUNNING" if states is None else job_state(states, job_id)

    def _ended(self, job_id: str, settle_s: float = 10.0) -> Optional[str]:
        """None while the allocation runs, else how it ended: its final state once Slurm
        says (a COMPLETING allocation is waited for up to ``settle_s``)."""
        end = time.time() + settle_s
        state = self._state(job_id)
        while state != "RUNNING" and state in ACTIVE_STATES and time.time() < end:
            time.sleep(0.5)
            state = self._state(job_id)
        return None if state == "RUNNING" else (state or "LOST")

    def _allocate(self, nodes: int, per_node: int) -> Allocation:
        for tool in ("salloc", "srun"):
            if shutil.which(tool) is None:
                raise AllocationError(f"launcher.slurm.allocation=campaign needs {tool} on PATH; "
                                      "use launcher.slurm.allocation=per_job")
        cmd = salloc_command(self.cfg, nodes * per_node, nodes, self._wave_defaults)
        log.info("slurm: asking for one allocation for the campaign: %s", " ".join(cmd[1:]))
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=client_env(),
                                start_new_session=True)
        lines: queue.Queue[Optional[str]] = queue.Queue()
        threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
        job_id: Optional[str] = None
        said: list[str] = []
        try:
            done = False
            while not done:
                try:
                    line = lines.get(timeout=1.0)
                except queue.Empty:
                    continue
                if line is None:
                    done = True
                    continue
                said.append(line.rstrip())
                found = parse_allocation_id(line)
                if found and job_id is None:
                    job_id = found
                    # listed before it is granted: a killed orchestrator's resume cancels it
                    self.ledger.add({job_id: []})
                    self._live.append(job_id)
            rc = proc.wait()
            if rc != 0 or job_id is None:
                why = next((s for s in reversed(said) if "error" in s.lower()), said[-1] if said
                           else f"exit code {rc}")
                raise AllocationError(f"salloc gave no allocation ({why}); check "
                                      "launcher.slurm (partition, nodes, time limit, account)")
            self._wait_running(job_id)
        except BaseException:
            if proc.poll() is None:  # still pending: salloc revokes its request on SIGTERM
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
            if job_id is not None:
                scancel([job_id])
                self.ledger.remove([job_id])
                if job_id in self._live:
                    self._live.remove(job_id)
            raise
        self.history.append(job_id)
        self.seen_hostnames |= set(_allocation_hosts(job_id))
        log.info("slurm: campaign allocation %s: %d node(s) x %d task(s), time limit %d min; "
                 "every trial group runs in it as a job step", job_id, nodes, per_node,
                 self.cfg.time_limit_min)
        return Allocation(job_id, nodes, per_node)

    def _wait_running(self, job_id: str) -> None:
        """Until squeue says RUNNING (configuring nodes may take a while); an allocation that
        ends first, or stays unlisted for ``lost_after_s``, is an error."""
        missing_since: Optional[float] = None
        while True:
            states = squeue_states()
            state = None if states is None else job_state(states, job_id)
            if state == "RUNNING":
                return
            if states is not None and state is None:
                missing_since = missing_since or time.time()
                if time.time() - missing_since > self.cfg.lost_after_s:
                    raise AllocationError(f"slurm allocation {job_id} is not in squeue")
            elif state is not None and state not in ACTIVE_STATES:
                raise AllocationError(f"slurm allocation {job_id} ended {state} before it ran")
            time.sleep(min(self.cfg.poll_interval_s, 1.0))

    # ------------------------------------------------------------------ one job step

    def _run_step(self, alloc: Allocation, group: Sequence[WorkerJob], timeout_s: float,
                  on_start: Optional[OnStart], what: str) -> dict[str, TrialRecordDict | ProbeRecord]:
        n = alloc.steps
        alloc.steps += 1
        step_dir = self.folder / alloc.job_id / f"step{n:04d}"
        step_dir.mkdir(parents=True, exist_ok=True)
        step_file = step_dir / "step.json"
        # the specs are on disk already (spec.json, written by _prepare): the step names them
        atomic_write_json(step_file, {
            "jobs": [{"job": JOB_KINDS[type(s)], "spec": str(s.job_dir / "spec.json")}
                     for s in group],
            "timeout_s": timeout_s, "python": self.python, "submitted_at": time.time(),
            "start_method": self.start_method})
        ntasks = max(world_size(s) for s in group)
        nodes = max(s.nodes() for s in group)
        per_node = max(1, ntasks // max(1, nodes))
        argv = [sys.executable, "-m", "orchestrator.launch.slurm_alloc", str(step_file)]
        cmd = srun_command(alloc.job_id, self.cfg, nodes, per_node, argv, self._wave_defaults)
        log.info("%s: job step %d of allocation %s (%s)", what, n, alloc.job_id,
                 ", ".join(s.job_id for s in group))
        if on_start is not None:
            on_start(group[0])  # type: ignore[arg-type]
        limit = len(group) * (timeout_s + 60.0) + self.cfg.lost_after_s
        with open(step_dir / "stdout.log", "wb") as out, open(step_dir / "stderr.log", "wb") as err:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    env=client_env(), start_new_session=True)
            try:
                ended = self._wait_step(proc, alloc, limit)
            except BaseException:  # the step dies with its allocation (released by the caller)
                scancel([alloc.job_id])
                _stop(proc)
                raise
        rc = proc.returncode
        if ended is None:  # the step ended; did its allocation?
            ended = self._ended(alloc.job_id)
        for res in step_dir.glob("task*.json"):  # host names: to the sanitizer, not on disk
            try:
                host = json.loads(res.read_text(encoding="utf-8")).get("hostname")
            except (OSError, ValueError):
                host = None
            if host:
                self.seen_hostnames.add(str(host))
            res.unlink(missing_ok=True)
        records = {s.job_id: self._collect_step(s, alloc, n, ended, rc, step_dir) for s in group}
        if ended is not None:
            log.warning("slurm: allocation %s ended (%s) under job step %d; the next step asks "
                        "for a new one", alloc.job_id, ended, n)
            self.release(f"it ended {ended}")
        return records

    def _wait_step(self, proc: subprocess.Popen[bytes], alloc: Allocation,
                   limit_s: float) -> Optional[str]:
        """Until srun exits: None. The allocation's state when it ended under the step (srun
        is then stopped), or ``STEP_HUNG`` past ``limit_s`` (the allocation is cancelled)."""
        start = time.time()
        next_look = start + max(5.0, self.cfg.poll_interval_s)
        gone_since: Optional[float] = None
        while True:
            try:
                proc.wait(timeout=min(self.cfg.poll_interval_s, 1.0))
                return None
            except subprocess.TimeoutExpired:
                pass
            now = time.time()
            if now - start > limit_s:
                log.warning("slurm: job step in allocation %s outlived %.0f s; cancelling the "
                            "allocation", alloc.job_id, limit_s)
                scancel([alloc.job_id])
                _stop(proc)
                return "STEP_HUNG"
            if now < next_look:
                continue
            next_look = now + max(5.0, self.cfg.poll_interval_s)
            state = self._state(alloc.job_id)
            if state == "RUNNING":
                gone_since = None
                continue
            gone_since = gone_since or now
            if now - gone_since > 5.0:  # srun normally exits by itself by then
                _stop(proc)
                return state or "LOST"

    def _collect_step(self, spec: WorkerJob, alloc: Allocation, step: int,
                      ended: Optional[str], rc: Optional[int], step_dir: Path) -> TrialRecordDict | ProbeRecord:
        """The job's own record, annotated with the allocation; a record saying why where it
        has none, or where the allocation's end killed it: ``infra_failed`` for a trial (not on
        its arm's account, re-run), ``killed`` / ``crashed`` for a probe."""
        where: AllocationFields = {"slurm_allocation": CAMPAIGN, "slurm_allocation_id": alloc.job_id}
        rec = job_record(spec)
        if rec is not None and not (ended and rec.get("status") == Status.KILLED):
            step_id = rec.get("slurm_job_id")
            rec.update(where, slurm_job_id=alloc.job_id,  # type: ignore[call-arg]  # mypy: no keywords in a TypedDict's update()
                       **({"slurm_step_id": step_id} if step_id else {}))
            atomic_write_json(spec.record_path, rec)
            return rec
        kind = JOB_KINDS[type(spec)]
        if ended is not None:
            error = (f"the slurm allocation {alloc.job_id} ended ({ended}) before this {kind} "
                     "finished")
            status = "killed"
        else:
            error = (f"job step {step} of slurm allocation {alloc.job_id} ended (srun exit code "
                     f"{rc}) before this {kind} finished")
            status = "crashed"
        tail = stderr_tail(spec.job_dir / "stderr.log") or stderr_tail(step_dir / "stderr.log")
        record = job_failure(spec, status, error, tail)
        if isinstance(spec, TrialSpec):  # the harness failed, not the arm: re-run it
            record = cast("TrialRecordDict", {  # a trial spec's: trial.json
                **record, "raw_status": record.get("status"), "status": INFRA_STATUS,
                "failure_kind": "infrastructure", "infra_reason": error})
        record.update({"launcher": "slurm", "slurm_job_id": alloc.job_id,
                       "slurm_state": ended or "RUNNING", **where})
        atomic_write_json(spec.record_path, record)
        return record


def _pump(stream: Optional[IO[str]], lines: queue.Queue[Optional[str]]) -> None:
    if stream is not None:
        for line in stream:
            lines.put(line)
    lines.put(None)


def _stop(proc: subprocess.Popen[Any]) -> None:
    """srun (or salloc) asked to stop, then killed; the allocation's cancel does the rest."""
    if proc.poll() is not None:
        return
    # srun: two SIGINTs within a second end the step
    for sig, wait_s in ((signal.SIGINT, 0.2), (signal.SIGINT, 5.0), (signal.SIGKILL, 5.0)):
        try:
            proc.send_signal(sig)
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
        except OSError:
            return


def _allocation_hosts(job_id: str) -> list[str]:
    """The allocation's node names (for the sanitizer), from squeue; [] when it does not say."""
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%N"], capture_output=True,
                             text=True, timeout=60, check=False, env=client_env()).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return expand_nodelist(out.strip())


if __name__ == "__main__":
    sys.exit(main())
