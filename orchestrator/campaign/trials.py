"""One pass over a plan's trials through the launcher (:class:`TrialPass`): in waves, a
round's baseline first (:func:`waves`), its variants skipped where the baseline measured
nothing (:func:`skip_without_baseline`), each arm's record after a paired process
(:func:`paired_records`), and the re-runs of what a harness failure, interference or
contamination spoiled.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from orchestrator.core.records import Pairing, TrialKind, joint_rounds
from orchestrator.analysis import contamination
from orchestrator.campaign import provenance
from orchestrator.campaign.attempts import first_attempt_stands, keep_attempt, with_attempts
from orchestrator.campaign.load import interfered, interference_of, last_infra, persistent_load
from orchestrator.campaign.resume import completed_on_disk, sigterm_as_interrupt
from orchestrator.core.results import Status, atomic_write_json, read_json, trial_record
from orchestrator.core.trial_record import AttemptSummary, TrialRecordDict
from orchestrator.launch.base import INFRA_STATUS, Launcher, OnDone, record_or_failure
from orchestrator.spec.config import Config
from orchestrator.spec.jobs import TrialSpec, make_specs, paired_members
from orchestrator.spec.plan import PlannedTrial
from orchestrator.spec.sweep import ResolvedArm
from orchestrator.worker.pairing import plan_specs

# the campaign's one logger, as campaign/progress's: these lines are the run's (campaign.log,
# and the tests that listen to "orchestrator.campaign.run")
log = logging.getLogger("orchestrator.campaign.run")


def completed_trials(run_dir: Path) -> dict[str, TrialRecordDict]:
    return completed_on_disk(run_dir)


class TrialPass:
    """One pass over trials through the launcher: each record sanitized and shown as it
    comes; a trial spoiled by a harness failure (ranks out of step, a lost peer: nothing of
    the variant's) or measured under interference runs again after the others, its earlier
    attempts kept beside it, up to protocol.infra_retries / interference_retries times."""

    def __init__(self, cfg: Config, run_dir: Path, launcher: Launcher,
                 session: provenance.Session, progress: Any) -> None:
        self.cfg, self.run_dir, self.p = cfg, run_dir, cfg.protocol
        self.launcher, self.session, self.progress = launcher, session, progress
        self.retry: list[TrialSpec] = []
        self.attempts: dict[str, int] = {}
        self.earlier: dict[str, list[AttemptSummary]] = {}
        self.interfered_now: list[float | None] = []  # other processes' cores, each trial
        self.finished: dict[str, TrialRecordDict] = completed_trials(run_dir)  # to rely on
        self.why: dict[str, str] = {}  # trial id -> why it is re-run, where not its record's

    def run(self, specs: list[TrialSpec], planned: list[PlannedTrial],
            running: list[ResolvedArm]) -> None:
        if specs:  # the first trial of each invocation also writes the full environment report
            specs[0].env_report = True
        # the specs' own limit (pairing.steps.join gives a paired process the per-trial limit
        # times its arms)
        self.timeout_s = max((s.timeout_s or self.p.trial_timeout_s for s in specs),
                             default=self.p.trial_timeout_s)
        with sigterm_as_interrupt():
            for wave in waves(self.cfg, specs):  # a round's baseline first: it may stop the rest
                if not joint_rounds(self.p.pairing):  # a paired process stops with its baseline
                    wave = skip_without_baseline(planned, running, wave, self.finished,
                                                 self.on_done)
                if wave:
                    self.launcher.run(wave, self.on_first_done, self.timeout_s,
                                      on_start=self.progress.on_start)
            self.retry_spoiled()
            # contamination is suspected interference, so interference_retries=0 turns its
            # re-runs off too; a paired round (steps, duet) is re-run whole
            if self.p.interference_retries > 0:
                again = self.contaminated(planned, running)
                self.retry.extend(again)
                self.retry_spoiled()
                self.first_stands(planned, again)

    def retry_spoiled(self) -> None:
        while self.retry:
            if persistent_load(self.cfg, self.run_dir, self.retry, self.interfered_now):
                # the load was there before, during and after: a re-run meets it again
                self.retry[:] = [r for r in self.retry if last_infra(r)
                                 or r.trial_id in self.why]
                if not self.retry:
                    break
            self.rerun()

    def contaminated(self, planned: list[PlannedTrial],
                     running: list[ResolvedArm]) -> list[TrialSpec]:
        """The trials of the plan so far whose median sits far outside their arm's others
        (orchestrator.analysis.contamination), each re-run once: their specs."""
        ids = {t.trial_id for t in planned}
        records = {tid: r for tid, r in completed_trials(self.run_dir).items() if tid in ids}
        flags, notes = contamination.screen_any(records.values(), self.p.min_effect)
        for note in notes:
            log.warning("contamination check: %s", note)
        flags = [f for f in flags
                 if not any(a.get("reason") == "contamination"  # once per trial
                            for a in records[f.trial_id].get("earlier_attempts") or [])]
        if not flags:
            return []
        for f in flags:
            self.why[f.trial_id] = f.why()
            log.warning("%s (%s, %s): %s: re-running it once", f.trial_id, f.arm_id, f.bucket,
                        f.why())
        again = {f.trial_id for f in flags}
        if joint_rounds(self.p.pairing):  # its round's arms were measured together: all again
            rounds = {(t.round, t.bucket): self.why[t.trial_id] for t in planned
                      if t.trial_id in again}
            for t in planned:
                if (t.round, t.bucket) in rounds and t.trial_id not in again:
                    self.why[t.trial_id] = (f"re-run with its round (another arm's trial: "
                                            f"{rounds[(t.round, t.bucket)]})")
                    again.add(t.trial_id)
        return plan_specs(self.cfg, make_specs(self.cfg, self.run_dir, running,
                                               [t for t in planned if t.trial_id in again]),
                          running)

    def first_stands(self, planned: list[PlannedTrial], again: list[TrialSpec]) -> None:
        """A contaminated trial (a paired round) is left out only where its re-run is clean:
        where the screen flags the re-run too, the flagged trial was no accident of the
        host, so the first attempt stands again and the re-run is kept aside in its place."""
        if not again:
            return
        ids = {t.trial_id for t in planned}
        records = {tid: r for tid, r in completed_trials(self.run_dir).items() if tid in ids}
        flags, _ = contamination.screen_any(records.values(), self.p.min_effect)
        off = {f.trial_id: f.why() for f in flags}
        for spec in again:
            group = [m.trial_id for m in paired_members(spec)]
            why = next((off[t] for t in group if t in off), None)
            if why is None:
                continue
            log.warning("%s: its re-run was off too (%s): the first attempt stands",
                        ", ".join(group), why)
            for tid in group:
                first_attempt_stands(self.run_dir / "trials" / tid, why)

    def on_first_done(self, spec: TrialSpec, record: TrialRecordDict) -> None:
        self.finished[spec.trial_id] = record
        self.on_done_retrying(spec, record)

    def on_done(self, spec: TrialSpec, record: TrialRecordDict) -> None:
        # a compute node's host name (Slurm) is replaced like this machine's own
        self.session.sanitizer.add_hostnames(self.launcher.seen_hostnames)
        for member, rec in paired_records(spec, record):
            self.session.sanitize_trial(Path(member.trial_dir))  # stderr tails sanitized
            self.progress.on_done(member, self.session.sanitizer.data(rec))

    def needs_rerun(self, spec: TrialSpec, record: TrialRecordDict) -> bool:
        n = self.attempts.get(spec.trial_id, 0)
        if record.get("status") == INFRA_STATUS:
            return n < self.p.infra_retries
        return interfered(record, self.p.interference_cores) and n < self.p.interference_retries

    def on_done_retrying(self, spec: TrialSpec, record: TrialRecordDict) -> None:
        if self.needs_rerun(spec, record):
            self.retry.append(spec)
        self.interfered_now.append(interference_of(record).get("others_cores"))
        self.on_done(spec, record)

    def rerun(self) -> None:
        again, self.retry[:] = list(self.retry), []
        self.earlier = {}
        for s in again:
            self.attempts[s.trial_id] = self.attempts.get(s.trial_id, 0) + 1
            for m in paired_members(s):
                self.earlier[m.trial_id] = keep_attempt(Path(m.trial_dir),
                                                         self.why.pop(m.trial_id, None))
        log.warning("re-running %d trial(s) (%s): %s", len(again),
                    "; ".join(sorted({str(e[-1].get("why")) for e in self.earlier.values()})),
                    ", ".join(s.trial_id for s in again))
        self.progress.plan(self.progress.total + sum(len(paired_members(s)) for s in again),
                           self.progress.done)
        self.launcher.run(again, self.on_retry_done, self.timeout_s,
                          on_start=self.progress.on_start)

    def on_retry_done(self, spec: TrialSpec, record: TrialRecordDict) -> None:
        for m in paired_members(spec)[1:]:  # the arms a paired process also ran
            path = Path(m.trial_dir) / "trial.json"
            if path.exists():
                with_attempts(Path(m.trial_dir), read_json(path), self.earlier[m.trial_id])
        record = with_attempts(Path(spec.trial_dir), record, self.earlier[spec.trial_id])
        self.on_done_retrying(spec, record)


def waves(cfg: Config, specs: list[TrialSpec]) -> list[list[TrialSpec]]:
    """The specs in order, cut after each round's baseline trial that its round's variants
    follow, so a failed baseline stops them (:func:`skip_without_baseline`). Trials one at a
    time by process only: a parallel or Slurm launcher gets every spec at once, and a process
    paired by steps runs its round's arms together."""
    if joint_rounds(cfg.protocol.pairing) or cfg.launcher.name == "slurm" or (
            cfg.launcher.max_parallel > 1):
        return [list(specs)]
    out: list[list[TrialSpec]] = [[]]
    for i, s in enumerate(specs):
        out[-1].append(s)
        if s.is_baseline and s.kind == TrialKind.TIMED and any(
                not t.is_baseline and (t.round, t.bucket["name"]) == (s.round, s.bucket["name"])
                for t in specs[i + 1:]):
            out.append([])
    return [w for w in out if w]


def skip_without_baseline(planned: list[PlannedTrial], running: list[ResolvedArm],
                          wave: list[TrialSpec], finished: dict[str, TrialRecordDict],
                          on_done: OnDone) -> list[TrialSpec]:
    """The wave's specs less the variants (and the A/A control) whose round's baseline trial
    ended without a measurement (failed, crashed, out of memory, timed out): they have nothing
    to be compared with in that round. Each gets a record that says so (status ``skipped``,
    not final: a resume runs it again with its baseline) instead of running."""
    base_of = {(t.round, t.bucket): t.trial_id for t in planned if t.arm_id == running[0].arm_id}
    keep: list[TrialSpec] = []
    said: set[tuple[int, str]] = set()
    for s in wave:
        key = (s.round, s.bucket["name"])
        base: TrialRecordDict | dict[str, str] = finished.get(base_of.get(key, ""), {})  # {}: none
        if s.is_baseline or s.kind != TrialKind.TIMED or base.get("status") in (None, Status.OK, INFRA_STATUS):
            keep.append(s)
            continue
        why = (f"not run: the baseline's trial of round {s.round} at {key[1]} "
               f"({base.get('trial_id')}) ended {base.get('status')}, so this round has "
               "nothing to compare it with")
        if key not in said:
            said.add(key)
            log.warning("round %d, %s: the baseline's trial %s ended %s (%s): that round's "
                        "variants are not run", s.round, key[1], base.get("trial_id"),
                        base.get("status"), base.get("error"))
        record = record_or_failure(s, "skipped", why, "")
        Path(s.trial_dir).mkdir(parents=True, exist_ok=True)
        atomic_write_json(Path(s.trial_dir) / "trial.json", record)
        on_done(s, record)
    return keep


def paired_records(spec: TrialSpec, record: TrialRecordDict) -> list[tuple[TrialSpec, TrialRecordDict]]:
    """Each arm's record after a process ran (one arm; or every arm, protocol.pairing=steps).
    A paired process that died (crash, kill, timeout) left records only for what it finished:
    the arm whose block was running (running.json) gets the process's status, every other arm
    an infrastructure failure (not on its account)."""
    members = paired_members(spec)
    if len(members) == 1:
        return [(spec, record)]
    running = Path(spec.trial_dir) / "running.json"
    try:  # written without fsync by the paired process before each arm's block
        culprit = read_json(running).get("arm_id") if running.exists() else None
    except (OSError, ValueError, AttributeError):
        culprit = None
    out = [(members[0], record)]
    for m in members[1:]:
        path = Path(m.trial_dir) / "trial.json"
        if path.exists():
            out.append((m, read_json(path)))
            continue
        Path(m.trial_dir).mkdir(parents=True, exist_ok=True)
        own = {k: record.get(k) for k in ("kind", "bucket", "seq_len", "micro_batch",
                                           "bucket_weight", "round", "started_at",
                                           "finished_at")}
        own.update(trial_id=m.trial_id, arm_id=m.arm_id, arm_label=m.arm_label,
                   is_baseline=m.is_baseline, position=spec.position, pairing="steps",
                   paired_process=spec.trial_id)
        if culprit == m.arm_id:
            rec = trial_record(
                **own, status=record.get("status"), error=record.get("error"),
                stderr_tail=record.get("stderr_tail"))
        else:
            why = (f"the paired process ended {record.get('status')} in arm {culprit}'s block"
                   if culprit else f"the paired process ended {record.get('status')}")
            rec = trial_record(
                **own, status=INFRA_STATUS, infra_reason=why,
                error=f"not measured: {why} ({record.get('error')})")
        atomic_write_json(path, rec)
        out.append((m, rec))
    if culprit is not None and culprit != members[0].arm_id and record.get("status") != Status.OK \
            and record.get("pairing") != Pairing.steps:  # the launcher's record: the culprit's status
        rec = {**record, "status": INFRA_STATUS, "raw_status": record.get("status"),
               "infra_reason": f"the paired process ended {record.get('status')} in arm "
                               f"{culprit}'s block"}
        atomic_write_json(Path(spec.trial_dir) / "trial.json", rec)
        out[0] = (members[0], rec)
    return out
