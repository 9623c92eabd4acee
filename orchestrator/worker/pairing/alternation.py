"""A plain command's arms paired by steps, with no client: ``protocol.pairing=steps`` for a
``command`` workload whose trainer does not switch arms itself (orchestrator.client).

On a host whose speed drifts within seconds (a VM's vCPU, a GPU's clocks), arms timed in
processes run one after another are compared across that drift; the blocks of one paired
process are not. A plain command cannot switch arms, but its process can be paused. The trial
process starts every arm's command as a process of its own (its own session, params and
environment), and the arms, resident together, take turns on the same cores: one runs a block
of steps while every other is stopped (SIGSTOP to its process group), then it is stopped and
the next one resumed (SIGCONT). The schedule is the paired process's
(:class:`orchestrator.worker.pairing.client.Plan`): each arm warms up to its own steady state,
then cycles of one block per arm in the protocol's Williams order, ``switch_warmup_steps``
excluded and ``block_steps`` measured steps a block, until every arm has its measured steps
and seconds (an even number of cycles).

A block ends when its step lines have arrived: the arm is stopped, and the lines it printed
before the stop landed are drained into the block. The step it was in when stopped ends after
it resumes and counts the pause, so the first step line after every resume is excluded
(tagged ``switch`` whatever switch_warmup_steps says; two when the stop fell inside a line).
Every block starts on the round's core (the arm's main thread is moved there while it is
stopped and freed again once it runs), so single-threaded arms do not sit on cores of
different speed for a whole round.

Each arm runs its own trajectory from step 0, so its logged losses line up with the
baseline's step for step (the loss gate compares them) and its peak memory is its own. Its
command is asked for more steps than the plan needs (``{steps}``) and stopped once the plan is
done. What it needs: step lines as they happen (``PYTHONUNBUFFERED=1`` is set for it; a log
that arrives in bursts is a failure with the fix), a time per step in its log (not a running
average), and memory for every arm's process at once.

What goes wrong is a status of the arm with a one-line reason, never a crash, and the other
arms go on; the baseline failing leaves the rest "not measured".
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import IO, Any, cast

from orchestrator.core.trial_record import TrialBase, TrialRecordDict
from orchestrator.client import PARAMS_ENV
from orchestrator.core import blocks
from orchestrator.core.logparse import (
    LogParseError,
    MalformedStepLine,
    MissingSetting,
    StepRecord,
    is_long_line,
    MAX_LINE_CHARS,
    long_lines_note,
    reported_mfu,
)
from orchestrator.core.results import INFRA_STATUS, Status, trial_record, write_csv
from orchestrator.platform.children import SessionGuard, how_it_ended, sigterm_runs
from orchestrator.worker.pairing.client import ChannelError, Plan, ok_paired_record
from orchestrator.worker.pairing.duet import ArmView
from orchestrator.worker.pairing.steps import StepsPart
from orchestrator.worker.external import (
    MIN_MEASURED,
    command_arms,
    command_fields,
    log_tail,
    start_command,
)

STOP_WAIT_S = 1.0  # the longest a SIGSTOP may take to land on every process of an arm
END_GRACE_S = 3.0  # SIGTERM to SIGKILL when the plan is done (every arm at once)
POLL_S = 0.001  # how often a log file (workload.log.file) is read while its arm runs
READ_WAIT_S = 0.5  # the longest one wait for output lasts (the time limit is checked between)
# step lines in one read, worth this much of their logged time: the command's output is
# buffered (it reaches the pipe in bursts), so its turns cannot end at a step
BURST_LINES = 48
BURST_S = 0.2
LEAD = 1  # the step a pause splits: excluded at the head of the next block
PEAK_EVERY = 16  # turns between readings of an arm's peak memory (and at its end)
SWITCH = blocks.SWITCH_TAG


class ArmFailed(Exception):
    """An arm's command cannot go on: (status, failure_kind, message)."""

    def __init__(self, status: str, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


class OutOfSteps(Exception):
    """An arm's command ran every step it was asked for before the plan was done."""


# the most of an unfinished line kept: a longer one is over the parser's cap in characters
# (UTF-8: at most 4 bytes each) whatever its text, so nothing past it is needed
PARTIAL_KEEP = 4 * MAX_LINE_CHARS + 4


class ArmRun:
    """One arm's command: started, resumed and stopped block by block, its output read as it
    comes (into its ``command.log``) and its step lines parsed in order."""

    def __init__(self, arm: Any, trainer: Any, inv: Any, tdir: Path, env: dict[str, str],
                 limit_s: float | None, asked: int) -> None:
        self.arm, self.trainer, self.inv, self.tdir, self.env = arm, trainer, inv, tdir, env
        self.limit_s, self.asked = limit_s, asked
        self.proc: subprocess.Popen[bytes] | None = None
        self.out: IO[bytes] | None = None
        self.guard: SessionGuard | None = None
        self.fd = -1
        # the line being written (the log file's, when it has one), kept to PARTIAL_KEEP
        # bytes: a longer one is no step line, and a line arriving in pieces costs no more
        # than its length
        self.partial = bytearray()
        self.file_pos = 0
        self.pending: list[StepRecord] = []
        self.records: list[StepRecord] = []  # every step line parsed, in order
        self.tags: list[str] = []  # their tags (a pause's split step: switch)
        self.lines = 0
        self.seen: set[int] = set()
        self.dups = 0
        self.long_lines = 0  # lines over logparse.MAX_LINE_CHARS: not step lines
        self.straddle = 0  # step lines still to tag after the last resume
        self.active_s = 0.0
        self.resumed_at: float | None = None
        self.born = self.died = 0.0
        self.rc: int | None = None
        self.eof = False
        self.cores: Counter[int] = Counter()  # the core its main thread was on at each stop
        self.resumes = 0
        self.drained = 0  # step lines that arrived after a block had its steps, before the stop
        self.peak = 0

    @property
    def aid(self) -> str:
        return str(self.arm.arm_id)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    # ------------------------------------------------------------------ the process

    def start(self) -> None:
        """Start the command (running) with its output on a pipe. Raises ArmFailed."""
        self.out = open(self.tdir / "command.log", "wb")  # noqa: SIM115 (closed in end())
        try:
            self.proc, self.guard = start_command(self.inv, self.env, self.tdir,
                                                  subprocess.PIPE)
        except OSError as exc:
            raise ArmFailed(Status.FAILED, "cannot_start", "cannot start the command: "
                            f"{type(exc).__name__}: {exc.strerror or exc}") from None
        assert self.proc.stdout is not None
        self.fd = self.proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.born = self.resumed_at = time.monotonic()

    def resume(self, core: int | None) -> None:
        """SIGCONT its process group, its main thread first moved to ``core`` (while it is
        stopped: it wakes there) and freed to its own cores again once it runs."""
        own = None
        if core is not None and hasattr(os, "sched_setaffinity"):
            try:
                own = os.sched_getaffinity(self.pid)
                if core in own and len(own) > 1:
                    os.sched_setaffinity(self.pid, {core})
                else:
                    own = None
            except OSError:
                own = None
        self.straddle = LEAD + (1 if self.partial else 0)
        self.resumes += 1
        self.resumed_at = time.monotonic()
        _signal(self.pid, signal.SIGCONT)
        if own is not None:
            try:
                os.sched_setaffinity(self.pid, own)
            except OSError:
                pass

    def stop(self) -> None:
        """SIGSTOP its process group, wait until it has landed, and read what it printed."""
        _signal(self.pid, signal.SIGSTOP)
        deadline = time.monotonic() + STOP_WAIT_S
        for pid in [self.pid, *_descendants(self.pid)]:
            while _state(pid) not in ("T", "t", "Z", "X", None) and time.monotonic() < deadline:
                time.sleep(0.0001)
        if self.resumed_at is not None:
            self.active_s += time.monotonic() - self.resumed_at
            self.resumed_at = None
        core = _core(self.pid) if self.resumes else None  # a turn's (not its start-up's)
        if core is not None:
            self.cores[core] += 1
        if self.resumes % PEAK_EVERY == 1:  # its peak so far, should it die before the end
            self.peak = max(self.peak, _peak_rss(self.pid))
        self.read(0.0)

    def end(self) -> None:
        """Stop the command for good (SIGTERM, then SIGKILL after the grace) and close up."""
        if self.proc is not None and self.proc.poll() is None:
            self.peak = max(self.peak, _peak_rss(self.pid))
            _signal(self.pid, signal.SIGTERM)
            _signal(self.pid, signal.SIGCONT)  # a stopped process takes its SIGTERM now
        if self.resumed_at is not None:
            self.active_s += time.monotonic() - self.resumed_at
            self.resumed_at = None

    def reap(self, deadline: float) -> None:
        if self.proc is not None:
            try:
                self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal(self.pid, signal.SIGKILL)
                self.proc.wait()
            if self.rc is None:
                self.rc = self.proc.returncode
            if not self.died:
                self.died = time.monotonic()
            try:
                self.read(0.0)
            except ArmFailed:
                pass
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        if self.guard is not None:
            self.guard.close()
            self.guard = None
        if self.out is not None:
            self.out.close()
            self.out = None

    def running_s(self) -> float:
        now = time.monotonic()
        return self.active_s + (now - self.resumed_at if self.resumed_at is not None else 0.0)

    # ------------------------------------------------------------------ its output

    def read(self, wait_s: float) -> None:
        """What the command printed (waiting up to ``wait_s`` for the first of it): into its
        command.log, and its step lines parsed into ``pending``. Raises ArmFailed."""
        got = self._pipe(wait_s)
        if self.inv.log_file is not None:  # its steps are in a file of its own
            got = self._file()
        if got:
            before = len(self.records)
            head, *rest = got.split(b"\n")
            self.partial += head[:max(0, PARTIAL_KEEP - len(self.partial))]
            if rest:
                lines = [bytes(self.partial), *rest[:-1]]
                self.partial = bytearray(rest[-1][:PARTIAL_KEEP])
                for raw in lines:
                    self._line(raw.decode("utf-8", errors="replace"))
            new = self.records[before:]
            if len(new) >= BURST_LINES and sum(x.step_time_s for x in new) >= BURST_S:
                raise ArmFailed(Status.FAILED, "buffered_log", (
                    f"its step lines arrive in bursts ({len(new)} at once, "
                    f"{sum(x.step_time_s for x in new):.2f} s of steps): its output is "
                    "buffered, so its turns cannot end at a step; flush each line "
                    "(print(..., flush=True); PYTHONUNBUFFERED=1 is set for Python; stdbuf "
                    "-oL for a C program), or use protocol.pairing=process"))

    def _pipe(self, wait_s: float) -> bytes:
        if self.fd < 0 or self.eof:
            if wait_s > 0:
                time.sleep(min(wait_s, POLL_S))
            return b""
        if wait_s > 0 and self.inv.log_file is None:
            select.select([self.fd], [], [], wait_s)
        elif wait_s > 0:
            time.sleep(min(wait_s, POLL_S))
        chunks = []
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                self.eof = True
                break
            chunks.append(data)
        data = b"".join(chunks)
        if data and self.out is not None:
            self.out.write(data)
            self.out.flush()
        return data

    def _file(self) -> bytes:
        path = Path(self.inv.cwd or ".", self.inv.log_file)
        try:
            with open(path, "rb") as fh:
                fh.seek(self.file_pos)
                data = fh.read()
        except OSError:
            return b""
        self.file_pos += len(data)
        return data

    def _line(self, line: str) -> None:
        self.lines += 1
        if is_long_line(line):
            self.long_lines += 1
            return
        try:
            recs = self.trainer.parse([line])
        except MalformedStepLine as exc:
            raise ArmFailed(Status.FAILED, "malformed_log",
                            f"log line {self.lines}: {str(exc).split(': ', 1)[-1]}") from None
        except MissingSetting as exc:
            raise ArmFailed(Status.FAILED, "missing_setting", f"log: {exc}") from None
        except (LogParseError, ValueError):
            return  # not a step line
        for rec in recs:
            if rec.step in self.seen:  # several ranks printing the same step
                self.dups += 1
                continue
            if self.records and rec.step < self.records[-1].step:
                raise ArmFailed(Status.FAILED, "malformed_log", f"step numbers go backwards "
                                f"({self.records[-1].step} then {rec.step}); two runs in one log?")
            if not math.isfinite(rec.step_time_s) or rec.step_time_s <= 0:
                raise ArmFailed(Status.FAILED, "malformed_log",
                                f"step {rec.step} has step time {rec.step_time_s!r} s")
            gap = rec.step - (self.records[-1].step if self.records else 0)
            if rec.interval and gap > 1:  # a line per k steps, averaged: no block can end at a step
                raise ArmFailed(Status.FAILED, "malformed_log", (
                    f"step {rec.step}'s line averages the {gap} steps since the previous one (a "
                    "log interval); alternated arms need a line per step: log every step "
                    "(Megatron-LM --log-interval 1, torchtitan --metrics.log_freq 1)"))
            self.seen.add(rec.step)
            tag = ""
            if self.straddle > 0:
                tag, self.straddle = SWITCH, self.straddle - 1
            self.records.append(rec)
            self.tags.append(tag)
            self.pending.append(rec)

    def ended(self) -> bool:
        """Whether the command has exited (its output read to the end)."""
        if self.proc is None:
            return True
        if self.rc is None and self.proc.poll() is not None:
            self.rc, self.died = self.proc.returncode, time.monotonic()
        return self.rc is not None

    def steps(self, n: int) -> list[tuple[StepRecord, str]]:
        """Run until ``n`` more step lines have arrived (the arm is running). Raises
        ArmFailed when it exits, hangs past its time limit or logs what cannot be read."""
        while len(self.pending) < n:
            if self.ended():
                self.read(0.0)
                if len(self.pending) >= n:
                    break
                raise self._exited(n)
            left = None if self.limit_s is None else self.limit_s - self.running_s()
            if left is not None and left <= 0:
                raise ArmFailed(Status.TIMEOUT, "timeout", (
                    f"the command ran past workload.time_limit_s={self.limit_s:g} s of its own "
                    f"running time (its turns) and was killed ({len(self.records)} step "
                    "line(s) by then)"))
            self.read(READ_WAIT_S if left is None else max(min(READ_WAIT_S, left), 0.0))
        return self.take()

    def take(self) -> list[tuple[StepRecord, str]]:
        """The step lines parsed since the last take, with their tags."""
        n = len(self.pending)
        self.pending = []
        start = len(self.records) - n
        return list(zip(self.records[start:], self.tags[start:]))

    def _exited(self, n: int) -> ArmFailed:
        rc = self.rc
        if rc == 0:
            return ArmFailed(Status.FAILED, "stopped_early", (
                f"the command exited (code 0) after {len(self.records)} step line(s), before "
                f"the plan's last block; it was asked for {self.asked} steps ({{steps}}): it "
                "does not follow its step count, or the plan needed more steps than asked"))
        return ArmFailed(Status.FAILED, "exit_code",
                         f"the command {how_it_ended(rc)} at step line {len(self.records)}")


def _signal(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].decode().split()
    except (OSError, IndexError):
        return None


def _state(pid: int) -> str | None:
    """The process's state letter (T: stopped), None when it is gone or unknown."""
    fields = _stat(pid)
    return fields[0] if fields else None


def _core(pid: int) -> int | None:
    """The core the process last ran on."""
    fields = _stat(pid)
    try:
        return int(fields[36]) if fields else None
    except (IndexError, ValueError):
        return None


def _descendants(pid: int) -> list[int]:
    """Its children, theirs, and so on (Linux /proc; [] where it cannot tell)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            kids = [int(x) for x in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except (OSError, ValueError):
            kids = []
        out += kids
        todo += kids
    return out


def _peak_rss(pid: int) -> int:
    """The largest peak resident set (VmHWM) among the process and its descendants."""
    peak = 0
    for p in [pid, *_descendants(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
        except (OSError, ValueError, IndexError):
            continue
    return peak


def asked_steps(spec: Any) -> int:
    """The steps each arm's command is asked for: its warm-up at the most (each warm-up block
    losing its head to the pause), and twice the blocks its measured steps take, each with its
    switch steps, the split step and a drained one; the plan stops it when it is done."""
    part = StepsPart.of(spec)
    per_block = part.switch_warmup_steps + part.block_steps + LEAD + 1
    cycle_blocks = math.ceil(max(spec.measured_steps, 1) / part.block_steps) + 2
    return (1 + LEAD) * spec.warmup_max_steps + 2 * cycle_blocks * per_block + 10


def round_core(spec: Any) -> int | None:
    """The core every block of this round starts on: the trial's cores in turn by round."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    return cores[spec.round % len(cores)] if len(cores) > 1 else None


def _arms(spec: Any, asked: int) -> list[ArmRun]:
    arms = max(1, len(spec.paired_arms))
    one = None if spec.timeout_s is None else spec.timeout_s / arms
    out = []
    for c in command_arms(spec, asked - spec.warmup_steps, one, "alternated arms",
                          {"PYTHONUNBUFFERED": "1"}):
        switched = {k: c.trainer.workload.params.get(k)
                    for k in getattr(c.trainer.workload, "switchable", None) or ()}
        if switched:  # what orchestrator.client.params() returns in this arm's run
            c.env[PARAMS_ENV] = json.dumps(switched)
        out.append(ArmRun(c.arm, c.trainer, c.inv, c.tdir, c.env, c.inv.time_limit_s, asked))
    return out


class _Alternation:
    """The arms of one round and bucket taking turns; the plan decides the blocks."""

    def __init__(self, spec: Any, runs: list[ArmRun]) -> None:
        self.spec, self.runs = spec, {r.aid: r for r in runs}
        baseline = next((str(a.arm_id) for a in spec.paired_arms if a.is_baseline),
                        str(spec.paired_arms[0].arm_id))
        self.plan = Plan(spec, {r.aid: {} for r in runs}, baseline, [], lead=LEAD)
        self.core = round_core(spec)
        self.error: str | None = None
        self.out_of_steps: str | None = None  # the plan ended early: why
        self.head: dict[str, list[tuple[StepRecord, str]]] = {}  # steps before its first block

    def fail(self, r: ArmRun, exc: ArmFailed) -> None:
        """The arm leaves the rotation with its status; its command goes now (it would run
        beside the others' turns)."""
        if r.aid not in self.plan.failed:
            self.plan.failed[r.aid] = {"status": exc.status, "failure_kind": exc.kind,
                                       "error": str(exc)}
        r.end()
        r.reap(time.monotonic() + END_GRACE_S)

    def start_all(self) -> None:
        """Each arm's command, one at a time, until its first step line; then stopped."""
        for r in self.runs.values():
            try:
                r.start()
                first = r.steps(1)
                r.stop()
                self.head[r.aid] = [(rec, "start") for rec, _ in first + r.take()]
            except ArmFailed as exc:
                self.fail(r, exc)

    def run(self) -> None:
        reports: list[list[Any]] = []
        try:
            while True:
                reply = self.plan.take({0: reports}, set())
                if reply.get("done"):
                    return
                reports = []
                for b in reply["blocks"]:
                    try:
                        reports.append([b["block"], self.block(b["arm"], int(b["steps"]))])
                    except OutOfSteps as exc:
                        reports.append([b["block"], exc.args[1]])
                        self.out_of_steps = str(exc.args[0])
                        self.plan.finish({0: reports})
                        return
        except ChannelError as exc:
            self.error = str(exc)

    def block(self, arm: str, n: int) -> list[list[Any]]:
        """One block of ``arm``: resumed, ``n`` step lines, stopped; its steps as the plan
        takes them ([seconds, loss, tags, step] each)."""
        r = self.runs[arm]
        if arm in self.plan.failed:
            return []
        got = self.head.pop(arm, [])
        try:
            r.resume(self.core)
            got += r.steps(n)
            r.stop()
            late = r.take()
            r.drained += len(late)
            got += late
        except ArmFailed as exc:
            got += r.take()
            rows = [[rec.step_time_s, rec.loss, tag, rec.step] for rec, tag in got]
            if exc.kind == "stopped_early" and len(r.records) >= r.asked:
                raise OutOfSteps(
                    f"arm {arm}'s command ran all {r.asked} steps it was asked for ({{steps}}) "
                    "before the plan was done, which then ended at that block: its steps are "
                    "slower than the pilot's or than its step count allowed for", rows) from None
            self.fail(r, exc)
            return rows
        return [[rec.step_time_s, rec.loss, tag, rec.step] for rec, tag in got]


def measure_alternated(spec: Any, base: TrialBase) -> list[tuple[TrialRecordDict, str]]:
    """Every arm of ``spec.paired_arms`` as a process of its own, the arms taking turns block
    by block (module docstring); one (record, trial dir) per arm, in the spec's order."""
    asked = asked_steps(spec)
    runs = _arms(spec, asked)
    alt = _Alternation(spec, runs)
    try:
        with sigterm_runs(lambda: _end(runs)):  # the launcher stops this trial
            alt.start_all()
            alt.run()
    finally:
        _end(runs)
    return [(_record(spec, base, alt, r), r.arm.trial_dir) for r in runs]


def _end(runs: list[ArmRun]) -> None:
    for r in runs:
        r.end()
    deadline = time.monotonic() + END_GRACE_S
    for r in runs:
        r.reap(deadline)


def _record(spec: Any, base: TrialBase, alt: _Alternation, r: ArmRun) -> TrialRecordDict:
    a, plan = r.arm, alt.plan
    view = ArmView(spec, a)
    # cast: mypy reads no keys through the conditional ** (the code is the arm's where known)
    own = command_fields(view, cast(TrialBase, {
        **base, "trial_id": a.trial_id, "arm_id": a.arm_id, "arm_label": a.arm_label,
        "is_baseline": a.is_baseline, "position": spec.position + spec.paired_arms.index(a),
        **({"code": a.code} if a.code else {})}), r.inv)
    own.update(  # type: ignore[call-arg]  # mypy: TypedDict.update takes no keywords
        pairing="steps", paired_by="alternation", paired_process=spec.trial_id,
        paired_arms=plan.ids, block_steps=plan.part.block_steps,
        switch_warmup_steps=plan.part.switch_warmup_steps, cycles=plan.cycle,
        step_source="log (alternated)", command_returncode=r.rc,
        command_wall_s=(r.died or time.monotonic()) - r.born if r.born else None,
        steps_asked=r.asked, steps_logged=len(r.records),
        alternation={"command_pid": r.proc.pid if r.proc is not None else None,
                     "core": alt.core, "cores_at_stop": {str(k): v for k, v in
                                                          sorted(r.cores.items())},
                     "turns": r.resumes, "running_s": round(r.active_s, 4),
                     "drained_steps": r.drained, "repeated_step_lines": r.dups})
    if r.env.get(PARAMS_ENV):
        own["client_params"] = json.loads(r.env[PARAMS_ENV])
    rows = plan.rows(r.aid)
    if rows:
        write_csv(r.tdir / "steps.csv", rows)
    tail = log_tail(r.tdir / "command.log", str(r.tdir))
    if alt.error is not None:
        return trial_record(**own, status=Status.FAILED, failure_kind="alternation",
                            error=f"alternation: {alt.error}", stderr_tail=tail)
    if r.aid in plan.failed:
        return trial_record(**own, **plan.failed[r.aid], stderr_tail=tail)
    if r.aid not in plan.alive():
        why = f"the baseline failed ({plan.failed[plan.baseline]['error']})"
        return trial_record(**own, status=INFRA_STATUS, infra_reason=why,
                            error="not measured: the baseline failed first")
    measured_steps = {int(x["step"]) for x in rows if x["phase"] == "measured"}
    if len(measured_steps) < MIN_MEASURED:
        return trial_record(**own, status=Status.FAILED, failure_kind="too_few_steps", error=(
            f"{len(measured_steps)} measured step(s) before the plan ended"
            + (f" ({alt.out_of_steps})" if alt.out_of_steps else "")), stderr_tail=tail)
    measured = [rec for rec in r.records if rec.step in measured_steps]
    logged = sorted(rec.tokens for rec in measured if rec.tokens)
    tokens = (logged[len(logged) // 2], "log") if logged else None
    notes = [f"{r.dups} repeated step line(s) ignored (several ranks printing?)"] if r.dups else []
    notes += long_lines_note(r.long_lines)
    if alt.out_of_steps:
        notes.append(alt.out_of_steps)
    return ok_paired_record(
        view, r.trainer, plan, own, r.aid, rows, tokens=tokens,
        peak=(r.peak, "peak RSS of the arm's own command (VmHWM, its largest process)")
        if r.peak else None,
        log_notes=notes, **reported_mfu(measured))
