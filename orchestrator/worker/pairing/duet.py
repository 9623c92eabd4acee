"""Duet runs (protocol.pairing=duet): the arms of a round run at the same time, each on its
own disjoint slice of the machine, so that both see the same interference (Bulej et al.,
"Duet Benchmarking", ICPE 2020).

One trial process starts every arm's command together, each pinned to its slice's cores
(the pinning is inherited from the starting thread, no pre-exec hook) with its thread pools
sized to match and its slice's devices visible (orchestrator.platform.slices). While they run,
each log is read as it grows and every line stamped with the time it arrived, so each step is
an interval [arrival - its logged time, arrival]. The measured steps an arm keeps are those
whose midpoint lies where every arm was in its measured steps (the overlap window); the rest
are in steps.csv as ``outside_overlap`` and never timed. One record per arm, as one arm per
process would write it, with a ``duet`` field (its slice, the window, the steps kept): the
analysis then pairs each round's arms, which ran side by side in time.

An arm whose command fails gets its status; the others, measured beside a partner that
stopped, are infrastructure failures of this duet (re-run, never counted against them).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, cast

from orchestrator.core.trial_record import DuetFacts, Slice, TrialBase, TrialRecordDict
from orchestrator.core.logparse import (
    LogParseError,
    MalformedStepLine,
    MissingSetting,
    StepRecord,
    is_long_line,
    long_lines_note,
)
from orchestrator.core.results import INFRA_STATUS, trial_record
from orchestrator.platform.children import SessionGuard, kill_group, sigterm_runs
from orchestrator.platform.slices import duet_slices, placement, slice_env
from orchestrator.spec.config import Config
from orchestrator.spec.jobs import PairingPart, TrialSpec, paired_arms, round_groups
from orchestrator.worker.teardown import ExitGrace, StepLines, exit_grace
from orchestrator.worker.external import (
    CheckedSteps,
    command_arms,
    start_command,
    LogProblem,
    ok_record,
    read_lines,
    check_steps,
    command_fields,
    log_tail,
    step_count,
    steps_followed,
    warmup_policy,
)

POLL_S = 0.02  # how often the logs are read while the arms run (the window's edges)
MIN_OVERLAP_STEPS = 3  # measured steps each arm must have inside the window
TAG = "duet"  # the tag of this module's part in a trial spec


@dataclass(frozen=True)
class DuetPart:
    """A duet trial's part: the machine's slices, and each paired arm's, in the arms' order."""

    slices: list[Slice]  # {"cpus": [...], "devices": [...]} (orchestrator.platform.slices)
    placement: list[int]  # the slice of each paired arm

    @classmethod
    def of(cls, spec: TrialSpec) -> DuetPart:
        """The part of a spec this module planned (a clear error for any other)."""
        part = spec.paired
        if part is None or part.mode != TAG:
            raise ValueError(f"trial {spec.trial_id}: not a duet trial "
                             f"(its part: {part.mode if part else None})")
        return cls(**part.settings)


def join(specs: Sequence[TrialSpec], slices: list[Slice]) -> list[TrialSpec]:
    """One spec per round and bucket whose arms run at the same time, arm i of the round on
    slice (i + round) mod slices (orchestrator.platform.slices). The arms run side by side, so
    the limit stays one trial's."""
    out = []
    for members in round_groups(specs):
        members = sorted(members, key=lambda m: m.arm_id)  # placement by arm, not by order
        head = copy.copy(members[0])
        part = DuetPart(slices, placement(len(members), len(slices), members[0].round))
        head.paired = PairingPart(TAG, paired_arms(members), dataclasses.asdict(part),
                                  own_processes=True)
        head.cpu_affinity = None  # each arm is pinned to its slice instead
        out.append(head)
    return out


def facts(cfg: Config, n_arms: int) -> dict[str, Any]:
    """plan.json's word on a duet: the slices and how the arms rotate over them."""
    return {"slices": duet_slices(cfg.protocol, n_arms, cfg.launcher.cpu_affinity),
            "placement": "arm i of a round on slice (i + round) mod slices"}


def plan(cfg: Config, specs: Sequence[TrialSpec], arms: Sequence[Any]) -> list[TrialSpec]:
    """protocol.pairing=duet: a round's one-arm specs joined, by bucket, into one trial; as
    many slices as the campaign's arms, whichever of them a round still runs."""
    return join(specs, duet_slices(cfg.protocol, len(arms), cfg.launcher.cpu_affinity))


@dataclass
class _Arm:
    arm: Any  # PairedArm
    trainer: Any
    inv: Any
    slice: Slice
    slice_index: int
    tdir: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    out: IO[bytes] | None = None
    guard: SessionGuard | None = None
    started: float = 0.0
    ended: float = 0.0
    rc: int | None = None
    timed_out: bool = False
    start_error: str | None = None
    exits: ExitGrace | None = None  # stops it once every step is logged and it lingers
    teardown: str | None = None  # what its ExitGrace did, for the record
    stamps: list[tuple[float, str]] = field(default_factory=list)
    _pos: int = 0
    _partial: bytes = b""

    @property
    def log_path(self) -> Path:
        if self.inv.log_file is not None:
            return Path(self.inv.cwd or ".", self.inv.log_file)
        return self.tdir / "command.log"

    def read(self, now: float) -> None:
        """The complete lines its log gained since the last read, stamped ``now``."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self._pos)
                data = fh.read()
        except OSError:
            return
        if not data:
            return
        self._pos += len(data)
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        self.stamps += [(now, ln.decode("utf-8", errors="replace")) for ln in lines]

    def running(self) -> bool:
        return self.proc is not None and self.rc is None and not self.timed_out


def _arms(spec: TrialSpec) -> list[_Arm]:
    part = DuetPart.of(spec)
    slices, where = part.slices, part.placement
    arms = [_Arm(c.arm, c.trainer, c.inv, slices[where[i]], where[i], c.tdir,
                 {**c.env, **slice_env(slices[where[i]])})
            for i, c in enumerate(command_arms(spec, spec.measured_steps, spec.timeout_s,
                                               "protocol.pairing=duet"))]
    for r in arms:
        asked = r.trainer.workload.steps_asked(spec.warmup_steps, spec.measured_steps)
        if asked is not None and asked[1]:
            lines = StepLines(r.trainer, r.log_path, asked[0],
                              own_file=r.inv.log_file is not None)
            r.exits = exit_grace(r.trainer.workload, lines,
                                 f"logged all {asked[0]} steps it was asked for")
    return arms


def _start(arms: list[_Arm]) -> None:
    """Every arm's command, started one right after another in slice order (so the order
    rotates with the placement, and the slice covariate takes out a first starter's edge too),
    each pinned to its slice."""
    mine = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        for r in sorted(arms, key=lambda x: x.slice_index):
            r.out = open(r.tdir / "command.log", "wb")
            if mine is not None:  # the child inherits the starting thread's cores
                os.sched_setaffinity(0, r.slice["cpus"])
            try:
                r.proc, r.guard = start_command(r.inv, r.env, r.tdir, r.out)
            except OSError as exc:
                r.start_error = f"{type(exc).__name__}: {exc.strerror or exc}"
                continue
            r.started = time.monotonic()
    finally:
        if mine is not None:
            os.sched_setaffinity(0, mine)


def _wait(arms: list[_Arm]) -> None:
    """Read the logs as they grow until every arm ended (or ran past its time limit)."""
    while any(r.running() for r in arms):
        now = time.monotonic()
        for r in arms:
            if not r.running():
                continue
            assert r.proc is not None
            r.read(now)
            code = r.proc.poll()
            if code is not None:
                r.rc, r.ended = code, time.monotonic()
                r.read(r.ended)
            elif r.inv.time_limit_s and now - r.started > r.inv.time_limit_s:
                kill_group(r.proc)
                r.proc.wait()
                r.timed_out, r.ended = True, time.monotonic()
            elif r.exits is not None and r.exits():  # every step logged, and it lingers
                kill_group(r.proc)
                r.rc, r.ended, r.teardown = r.proc.wait(), time.monotonic(), r.exits.reason()
                r.read(r.ended)
        time.sleep(POLL_S)


def _stop(arms: list[_Arm]) -> None:
    for r in arms:
        if r.proc is not None and r.proc.poll() is None:
            kill_group(r.proc)
            r.proc.wait()
        if r.guard is not None:
            r.guard.close()
        if r.out is not None:
            r.out.close()


def _stamped_steps(r: _Arm) -> dict[int, float]:
    """step number -> when its line arrived (the first line of that step)."""
    out: dict[int, float] = {}
    for t, line in r.stamps:
        try:
            recs = r.trainer.parse([line])
        except (LogParseError, ValueError):
            continue
        for rec in recs:
            out.setdefault(rec.step, t)
    return out


def _interval(rec: StepRecord, ends: dict[int, float]) -> tuple[float, float] | None:
    end = ends.get(rec.step)
    return None if end is None else (end - rec.step_time_s * rec.steps, end)  # a line of k steps


def measure_duet(spec: Any, base: TrialBase) -> list[tuple[TrialRecordDict, str]]:
    """Run a round's arms side by side (module docstring); one (record, trial_dir) per arm."""
    arms = _arms(spec)
    try:
        with sigterm_runs(lambda: _stop(arms)):  # the launcher stops this trial
            _start(arms)
            _wait(arms)
    finally:
        _stop(arms)
    checked: dict[str, CheckedSteps] = {}
    failures: dict[str, tuple[str, str, str]] = {}  # arm id -> (status, kind, error)
    for r in arms:
        aid = r.arm.arm_id
        if r.start_error:
            failures[aid] = ("failed", "cannot_start", f"cannot start the command: {r.start_error}")
        elif r.timed_out:
            failures[aid] = ("timeout", "timeout", f"the command ran past workload.time_limit_s="
                             f"{r.inv.time_limit_s:g} s and was killed")
        elif r.rc != 0 and not r.teardown:
            failures[aid] = ("failed", "exit_code", f"the command exited with code {r.rc}")
        else:
            lines = read_lines(r.log_path)
            try:
                skip = r.trainer.skip_steps(spec.warmup_steps)
                checked[aid] = check_steps(r.trainer.parse(lines), skip, warmup_policy(spec, skip))
                checked[aid].notes.extend(long_lines_note(sum(map(is_long_line, lines))))
            except MalformedStepLine as exc:
                failures[aid] = ("failed", "malformed_log", f"log: {exc}")
            except MissingSetting as exc:
                failures[aid] = ("failed", "missing_setting", f"log: {exc}")
            except LogParseError as exc:
                failures[aid] = ("failed", "no_step_lines", f"log: {exc}")
            except LogProblem as exc:
                failures[aid] = ("failed", exc.kind, f"log: {exc}")
            except ValueError as exc:
                failures[aid] = ("failed", "malformed_log", f"log: unreadable step line ({exc})")
    window = None if failures else _window(arms, checked)
    if window is None and not failures:
        for r in arms:
            failures[r.arm.arm_id] = (INFRA_STATUS, "duet_no_overlap", (
                "the arms' measured steps did not overlap in time for "
                f"{MIN_OVERLAP_STEPS} steps each (one ran much longer than the other, or its "
                "steps could not be timed as they arrived): raise protocol.measured_steps"))
    return [_record(spec, base, r, checked.get(r.arm.arm_id), failures, window, arms)
            for r in arms]


def _window(arms: list[_Arm], checked: dict[str, CheckedSteps]) -> tuple[float, float] | None:
    """The time when every arm was in its measured steps, or None when too short."""
    starts: list[float] = []
    ends: list[float] = []
    for r in arms:
        stamps = _stamped_steps(r)
        spans = [s for x in checked[r.arm.arm_id].measured
                 if (s := _interval(x, stamps)) is not None]
        if len(spans) < MIN_OVERLAP_STEPS:
            return None
        starts.append(spans[0][0])
        ends.append(spans[-1][1])
    lo, hi = max(starts), min(ends)
    if hi <= lo:
        return None
    for r in arms:  # each arm needs steps inside it
        if len(_inside(r, checked[r.arm.arm_id], (lo, hi))[0]) < MIN_OVERLAP_STEPS:
            return None
    return lo, hi


def _inside(r: _Arm, c: CheckedSteps, window: tuple[float, float]
            ) -> tuple[list[StepRecord], list[StepRecord]]:
    """(measured steps whose midpoint lies in the window, the others)."""
    stamps = _stamped_steps(r)
    keep: list[StepRecord] = []
    out: list[StepRecord] = []
    for x in c.measured:
        span = _interval(x, stamps)
        mid = None if span is None else (span[0] + span[1]) / 2
        (keep if mid is not None and window[0] <= mid <= window[1] else out).append(x)
    return keep, out


def _record(spec: Any, base: TrialBase, r: _Arm, c: CheckedSteps | None,
            failures: dict[str, tuple[str, str, str]], window: tuple[float, float] | None,
            arms: list[_Arm]) -> tuple[TrialRecordDict, str]:
    a = r.arm
    own_spec = ArmView(spec, a)
    # cast: mypy reads no keys through the conditional ** (the code is the arm's where known)
    common = command_fields(own_spec, cast(TrialBase, {
        **base, "trial_id": a.trial_id, "arm_id": a.arm_id, "arm_label": a.arm_label,
        "is_baseline": a.is_baseline, **({"code": a.code} if a.code else {})}), r.inv)
    partners = [x.arm.trial_id for x in arms if x is not r]
    duet: DuetFacts = {"slice": r.slice, "partners": partners, "duet_trial": spec.trial_id,
                       "arms": len(arms)}
    common.update(  # type: ignore[call-arg]  # mypy: TypedDict.update takes no keywords
        pairing="duet", command_returncode=r.rc, duet=duet, duet_slice=r.slice_index,
        **({"teardown": r.teardown} if r.teardown else {}),
                  command_wall_s=(r.ended - r.started) if r.started and r.ended else None)
    tail = log_tail(r.tdir / "command.log", str(r.tdir))
    if failures:
        mine = failures.get(a.arm_id)
        if mine is None:
            other = ", ".join(f"{k}: {v[2]}" for k, v in failures.items())
            mine = (INFRA_STATUS, "duet_partner", f"not measured: its duet partner failed "
                    f"({other})")
        status, kind, error = mine
        rec = trial_record(**common, status=status, failure_kind=kind, error=error,
                           stderr_tail=tail,
                           **({"infra_reason": error} if status == INFRA_STATUS else {}))
        return rec, a.trial_dir
    assert c is not None and window is not None
    keep, outside = _inside(r, c, window)
    duet.update(window_s=window[1] - window[0],  # type: ignore[call-arg]  # as above
                steps_in_window=step_count(keep),
                steps_outside_window=step_count(outside))
    kept = replace(c, measured=keep, notes=c.notes + (
        [f"{step_count(outside)} measured step(s) outside the duet's overlap window, not timed"]
        if outside else []))
    rec = ok_record(own_spec, {**common, **steps_followed(own_spec, r.trainer, c)},
                     r.trainer, kept)
    _write_outside(r.tdir, outside)
    return rec, a.trial_dir


def _write_outside(tdir: Path, outside: list[StepRecord]) -> None:
    """steps.csv keeps the measured steps outside the window, as ``outside_overlap``."""
    if not outside:
        return
    path = tdir / "steps.csv"
    with open(path, "a", encoding="utf-8") as fh:
        header = read_lines(path)[0].split(",") if path.exists() else []
        for x in outside:
            row = {"step": x.step, "phase": "outside_overlap", "step_time_s": x.step_time_s,
                   "data_wait_s": "", "tokens": x.tokens if x.tokens is not None else "",
                   "samples": x.samples if x.samples is not None else "",
                   "batch_index": x.step, "loss": x.loss if x.loss is not None else ""}
            fh.write(",".join(str(row.get(h, "")) for h in header) + "\n")


class ArmView:
    """The spec as one arm's trial sees it (its trial dir, its env switches)."""

    def __init__(self, spec: Any, arm: Any) -> None:
        self._spec, self._arm = spec, arm

    def __getattr__(self, name: str) -> Any:
        if name == "trial_dir":
            return self._arm.trial_dir
        if name == "env":
            return self._arm.env
        if name == "trial_id":
            return self._arm.trial_id
        return getattr(self._spec, name)
