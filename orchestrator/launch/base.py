"""The launcher interface: one contract for inline, local processes and Slurm.

Contract (checked by ``tests/launch/test_launcher_contract.py`` against every implementation):

* ``run(specs, on_done, timeout_s, on_start)`` runs the trial specs and calls ``on_done(spec,
  record)`` exactly once per spec; a failure (raise, crash, kill, time-out, OOM, backend
  missing) is a record with a status and the tail of stderr, never a missing record;
* ``trial.json`` is on disk (written atomically) before ``on_done`` is called;
* trials of one round and bucket run in plan order on the same device(s) (and node);
* ``run_jobs(jobs, on_done, timeout_s)`` runs other worker jobs (the correctness gate's
  probes) the same way: one after another in the given order, on one device set (one node;
  on Slurm one job), each with exactly one record on disk (``probe.json``) before ``on_done``.
"""

from __future__ import annotations

import abc
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence, cast

from orchestrator.core.records import Status
from orchestrator.spec.jobs import ProbeSpec, TrialSpec, WorkerJob
from orchestrator.core.results import (  # noqa: F401 - FINAL_STATUSES: launchers read it here
    FINAL_STATUSES,
    INFRA_STATUS,
    SCHEMA_VERSION,
    read_json,
    trial_record,
)
from orchestrator.core.trial_record import TrialRecordDict

if TYPE_CHECKING:  # start-up cost: the probe's comparisons import torch; only its record type is used here
    from orchestrator.analysis.correctness.compare import ProbeRecord

OnDone = Callable[[TrialSpec, TrialRecordDict], None]
OnStart = Callable[[TrialSpec], None]
OnJobDone = Callable[[WorkerJob, "TrialRecordDict | ProbeRecord"], None]  # trial.json or probe.json

STDERR_TAIL_LINES = 30


def stderr_tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def read_record(path: Path, id_field: str = "trial_id") -> Optional[TrialRecordDict]:
    """A trial.json (probe.json: ``id_field="name"``) body, or None when it is missing,
    truncated or not a record."""
    try:
        rec = read_json(path)
    except (OSError, ValueError):
        return None
    # typed as a trial's: job_record hands a probe.json on as a job's record
    return cast("TrialRecordDict", rec) if isinstance(rec, dict) and id_field in rec and "status" in rec else None


def job_record(job: WorkerJob) -> Optional[TrialRecordDict | ProbeRecord]:
    """The record the job's worker wrote for this job, or None."""
    rec = read_record(job.record_path, job.id_field)
    return rec if rec is not None and rec.get(job.id_field) == job.job_id else None


def final_record(spec: WorkerJob) -> Optional[TrialRecordDict | ProbeRecord]:
    """The job's record when it is already final on disk (resume skips it), else None."""
    rec = job_record(spec)
    return rec if rec is not None and rec.get("status") in FINAL_STATUSES else None


def rank_failure(spec: TrialSpec) -> Optional[TrialRecordDict]:
    """The earliest failure written by a non-zero rank of a distributed trial
    (trial.rank<N>.json), or None."""
    fails = [rec for rec in (read_record(p) for p in Path(spec.trial_dir).glob("trial.rank*.json"))
             if rec is not None and rec.get("status") != Status.OK]
    return min(fails, key=lambda r: r.get("failed_at") or float("inf"), default=None)


def root_cause(own: TrialRecordDict, spec: TrialSpec) -> TrialRecordDict:
    """Rank 0's failure record, its status and error replaced by an earlier failure of another
    rank when there was one (rank 0 then only saw its peer go away)."""
    other = rank_failure(spec)
    if other is None or (other.get("failed_at") or 0) >= (own.get("failed_at") or float("inf")):
        return own
    own = cast("TrialRecordDict", dict(own))
    own["rank0_error"] = own.get("error")
    own["status"] = other["status"]
    own["error"] = f"rank {other.get('rank')}: {other.get('error')}"
    return own


def status_from_returncode(rc: Optional[int], timeout_s: float,
                           wrote_record: bool) -> tuple[str, str]:
    """(status, error) of a finished trial process; ("", "") when its own record stands."""
    if rc is None:
        return "timeout", f"exceeded the trial time limit of {timeout_s:g} s"
    if rc < 0 or rc > 128 and rc - 128 in signal.valid_signals():
        sig = -rc if rc < 0 else rc - 128
        name = signal.Signals(sig).name if sig in signal.valid_signals() else str(sig)
        status = "killed" if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT) else "crashed"
        error = f"process died from signal {name}"
        if sig == signal.SIGKILL:
            error += " (the kernel's OOM killer sends this too)"
        return status, error
    if not wrote_record:
        return "crashed", f"process exited with code {rc} without writing trial.json"
    return "", ""


def record_or_failure(spec: TrialSpec, status: str, error: str, tail: str) -> TrialRecordDict:
    """The trial's own record when it wrote one, else a failure record with the reason."""
    path = Path(spec.trial_dir) / "trial.json"
    own = read_record(path)
    if own is not None and status in ("", Status.OK):
        if own.get("status") != Status.OK:
            own = root_cause(own, spec)
            if tail:
                own.setdefault("stderr_tail", tail)
        return own
    ranked = rank_failure(spec) if status == Status.CRASHED else None
    if ranked is not None:  # a non-zero rank said why it failed: keep its status (oom, failed)
        status, error = ranked["status"], f"rank {ranked.get('rank')}: {ranked.get('error')}"
    return trial_record(
        trial_id=spec.trial_id,
        kind=spec.kind,
        bucket=spec.bucket["name"],
        seq_len=spec.bucket["seq_len"],
        micro_batch=spec.bucket["micro_batch"],
        bucket_weight=spec.bucket.get("weight", 1.0),
        arm_id=spec.arm_id,
        arm_label=spec.arm_label,
        is_baseline=spec.is_baseline,
        round=spec.round,
        position=spec.position,
        status=status,
        error=error,
        stderr_tail=tail,
        **({"code": spec.code} if spec.code else {}),
    )


# What a distributed trial's log shows when it died in the harness rather than on the variant's
# account: the ranks fell out of step (a collective mismatch), or a peer was lost (its
# connection reset, or the launcher's signal took the rank down after another rank failed).
# Such a trial is re-run (protocol.infra_retries) and, still failing, makes the verdict invalid.
INFRA_PATTERNS = (
    ("gloo::EnforceNotMet", "collective mismatch between ranks (gloo)"),
    ("collective mismatch", "collective mismatch between ranks"),
    ("Received data size doesn't match expected size", "collective mismatch between ranks"),
    ("Connection reset by peer", "a peer rank's connection was reset"),
    ("Connection closed by peer", "a peer rank's connection closed"),
    ("DistNetworkError", "the process group's network failed"),
    ("NCCL WARN", "a NCCL communication error"),
    ("ncclRemoteError", "a NCCL peer failed"),
    ("Watchdog caught collective operation timeout", "a collective timed out (ranks out of step)"),
    ("SignalException", "a rank was taken down by the launcher's signal"),
)


def infrastructure_failure(text: str) -> Optional[str]:
    """Why a failed distributed trial's log (stderr) points at the harness, or None."""
    for needle, why in INFRA_PATTERNS:
        if needle in text:
            return why
    return None


def mark_infrastructure(spec: TrialSpec, record: TrialRecordDict) -> TrialRecordDict:
    """A failed multi-rank trial whose whole log (every rank's stderr.log, torchrun's report)
    shows a harness failure gets status ``infra_failed`` (the status it would have had is kept
    in ``raw_status``); anything else is returned unchanged."""
    if record.get("status") in (Status.OK, Status.UNAVAILABLE, Status.OOM, INFRA_STATUS) or world_size(spec) <= 1:
        return record
    texts = [str(record.get("error") or ""), str(record.get("rank0_error") or "")]
    for path in sorted(Path(spec.trial_dir).glob("stderr*.log")):
        try:
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            pass
    why = infrastructure_failure("\n".join(texts))
    if why is None:
        return record
    return {**record, "raw_status": record.get("status"), "status": INFRA_STATUS,
            "failure_kind": "infrastructure", "infra_reason": why}


def world_size(spec: WorkerJob) -> int:
    """Processes the launcher starts for the job (:meth:`WorkerJob.nproc`)."""
    return spec.nproc()


def dumps_spec(spec: WorkerJob) -> str:
    return spec.to_json()


def probe_failure(spec: ProbeSpec, status: str, error: str, tail: str) -> ProbeRecord:
    """probe.json for a probe process that left none (the gate then says why)."""
    return {"schema_version": SCHEMA_VERSION, "name": spec.name, "arm_id": spec.arm_id,
            "arm_label": spec.arm_label, "role": spec.role, "status": status, "error": error,
            "stderr_tail": tail}


def job_failure(job: WorkerJob, status: str, error: str, tail: str) -> TrialRecordDict | ProbeRecord:
    """The job's record when it wrote one and ``status`` lets it stand, else a failure record
    of its kind with the reason (a launcher's own failure: no devices, a lost Slurm job)."""
    if isinstance(job, TrialSpec):
        return record_or_failure(job, status, error, tail)
    assert isinstance(job, ProbeSpec)
    own = job_record(job)
    return own if own is not None and status in ("", Status.OK) else probe_failure(job, status, error,
                                                                             tail)


def job_outcome(job: WorkerJob, rc: Optional[int], timeout_s: float, tail: str,
                wall_s: float) -> TrialRecordDict | ProbeRecord:
    """The record of a finished worker process: its own, or one that says why there is none.
    A trial that failed in the harness is marked ``infra_failed``; a probe records its wall
    time, start-up included (``process_seconds``: what the gate costs per arm)."""
    if isinstance(job, TrialSpec):
        status, error = status_from_returncode(rc, timeout_s, job.record_path.exists())
        return mark_infrastructure(job, record_or_failure(job, status, error, tail))
    assert isinstance(job, ProbeSpec)
    own = job_record(job) if rc is not None and rc >= 0 else None
    if own is not None:
        rec = own
    elif rc is None:
        rec = probe_failure(job, "timeout", f"exceeded protocol.correctness.timeout_s="
                            f"{timeout_s:g}", tail)
    elif rc < 0:
        rec = probe_failure(job, "crashed", f"process died from signal {signal.Signals(-rc).name}",
                            tail)
    else:
        rec = probe_failure(job, "crashed", f"process exited with code {rc} without writing "
                            "probe.json", tail)
    rec["process_seconds"] = wall_s
    return rec


class Launcher(abc.ABC):
    name: str = "launcher"
    # host names of the machines that ran trials when they are not this one (Slurm compute
    # nodes): a private channel to the sanitizer, never written anywhere
    seen_hostnames: set[str] | frozenset[str] = frozenset()

    def close(self) -> None:
        """Release what the launcher holds between runs (the local launcher's fork server);
        the campaign calls it at its end. A launcher stays usable: the next run starts anew."""

    def recover(self) -> None:
        """Called once before a campaign plans what is left to run: a launcher whose trials of
        an earlier, killed invocation may still be running stops them (Slurm jobs)."""

    @abc.abstractmethod
    def run(
        self,
        specs: Sequence[TrialSpec],
        on_done: OnDone,
        timeout_s: float,
        on_start: Optional[OnStart] = None,
    ) -> None:
        """Run the specs in the given order; call ``on_done(spec, record)`` as each finishes.

        Every spec gets exactly one record (a failure is a record with a status); trial.json is
        on disk before ``on_done`` is called."""

    @abc.abstractmethod
    def run_jobs(self, jobs: Sequence[WorkerJob], on_done: OnJobDone, timeout_s: float) -> None:
        """Run worker jobs (the correctness probes) one after another in the given order, on one
        device set (one node): a later job may read what an earlier one wrote. Each gets exactly
        one record, on disk in its job directory before ``on_done(job, record)``."""
