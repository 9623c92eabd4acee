"""Trials whose training runs in another program: launch, time limit, log, statuses.

The orchestrator keeps the protocol: it starts the command (its own process group), enforces the
time limit, captures stdout+stderr to ``trials/<id>/command.log``, parses step records from the
log, drops the warm-up steps and writes the same trial.json / steps.csv as an in-process trial.
Whatever goes wrong becomes a status with a reason, never a crash:

- ``timeout``: the time limit passed (the command's process group is killed);
- ``failed`` with ``failure_kind``: ``cannot_start`` (no such program or directory),
  ``exit_code`` (non-zero exit), ``no_step_lines`` (nothing in the log matched),
  ``malformed_log`` (a step line that cannot be read: a field that is not a number, a time
  without a unit; the error names the line and the field; steps going backwards, a time <= 0), or
  ``too_few_steps`` (fewer than 3 steps after the warm-up), ``missing_setting`` (a log that
  needs a setting the workload did not give: torchtitan's tps and workload.tokens_per_step).

Warm-up: with ``protocol.warmup_policy=auto`` it is found from the command's own step times
(orchestrator.core.steady.warmup_from_series: slow compile, autotune and first-collective
steps at the start), at least the fixed count (``workload.log.skip_steps``, else
``protocol.warmup_steps``); ``fixed`` drops the fixed count. Counted in steps, not lines: a line
averaging k steps (Megatron-LM, torchtitan: orchestrator.core.logparse) is k steps, dropped or
measured whole. The record says ``warmup_policy``, ``warmup_steps_floor``, ``warmup_steps_used``
(the steps dropped, as every trial's record), ``warmup_steps_detected`` (the same, ``auto``
only) and ``warmup_settled``. Such a line's steps are measured as k steps of its average time:
steps.csv has a row per step (``interval_steps`` says the line's k; its loss on the logged
step's row), so medians, means and step counts weigh it as k steps, and ``log_notes`` says so.

MFU: one the trainer logs (nanoGPT's ``mfu 30.00%``) is recorded as
``trainer_reported_mfu_median`` over the measured steps, labelled as the trainer's own claim
against a peak we do not know. With ``workload.flops_per_step`` the record also gets
``useful_flops_per_step``, the peaks of ``hardware=`` and our MFU against each (at the median
step time), so the campaign's utilization section and results.csv carry it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from orchestrator.core.trial_record import (
    WarmupFields,
    AlternationFacts,
    DeviceSummary,
    DuetFacts,
    TrialBase,
    TrialRecordDict,
)
from orchestrator.client import PARAMS_ENV
from orchestrator.platform import device as devmod
from orchestrator.core.errors import BackendUnavailable
from orchestrator.platform.flops import (
    DEFINITIONS,
    EXECUTED,
    FlopsFacts,
    UtilizationEntry,
    peaks_and_utilization,
)
from orchestrator.platform.hardware import PeakRefDict
from orchestrator.core.logparse import (
    lines_covering,
    LogParseError,
    MalformedStepLine,
    MissingSetting,
    StepRecord,
    StepRecordDict,
    is_long_line,
    long_lines_note,
    reported_mfu,
)
from orchestrator.platform.children import (COMMAND_SESSION, SessionGuard, how_it_ended, run_child,
                                           start_child)
from orchestrator.worker import nodes
from orchestrator.worker.teardown import (ExitGrace, any_stop, exit_watch, safe_parse,
                                          teardown_reason)
from orchestrator.worker.bootstrap import start_worker
from orchestrator.core.results import trial_record, write_csv, Status
from orchestrator.core.steady import WarmupPolicy, warmup_from_series

log = logging.getLogger(__name__)

MIN_MEASURED = 3
_TAIL_LINES = 30
_TAIL_LINE_CHARS = 2000  # a failed record's log tail: each line at most this long


class StepsFollowed(TypedDict, total=False):
    """The step lines a command was asked for and logged (trial.json), and
    ``steps_ignored`` where it did not follow its ``{steps}`` placeholder."""

    steps_asked: int | None
    steps_logged: int
    steps_ignored: str


class DeclaredUtilization(TypedDict, total=False):
    """A command trial's FLOP fields of trial.json from its declared useful FLOPs (the peaks
    and utilization, or ``peaks_note`` where the device cannot be resolved here)."""

    flops: FlopsFacts
    matmul_dtype: str | None
    matmul_dtype_why: str
    peaks: list[PeakRefDict]
    utilization: list[UtilizationEntry]
    peaks_note: str


class CommandFields(TrialBase, total=False):
    """A command trial's record before its status (trial.json): the trial's base fields,
    :func:`command_fields`, then what its run, its nodes, its step lines and its pairing mode
    (worker.pairing's duet, alternation, client) add."""

    command: str
    env: dict[str, str]
    command_env: dict[str, str]
    python_version: str
    device: DeviceSummary
    command_wall_s: float | None
    # the command's exit code (negative: the signal that ended it, as when the exit grace or
    # a failed peer node stopped it); ``returncode`` is the launcher's, of the trial process
    command_returncode: int | None
    client_params: dict[str, Any]  # the user's workload params, free-form JSON
    infra_reason: str
    # several nodes (worker.nodes.NodeStepFields, worker.pairing.client_nodes.NodeFields)
    nodes: int
    node_wall_s: dict[str, float | None]
    nodes_logging_steps: list[int]
    node_skew_median_s: float | None
    slowest_node_counts: dict[str, int] | None
    step_time_from: str
    # the step lines (StepsFollowed)
    steps_asked: int | None
    steps_logged: int
    steps_ignored: str
    step_source: str
    # stopped after logging every step asked for (ExitGrace): what happened
    teardown: str
    # a paired mode's (worker.pairing)
    pairing: str
    paired_by: str
    paired_process: str
    paired_arms: list[str]
    block_steps: int
    switch_warmup_steps: int
    cycles: int
    alternation: AlternationFacts
    duet: DuetFacts
    duet_slice: int
    client_channel: str


class LogProblem(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class CheckedSteps:
    warmup: list[StepRecord]
    measured: list[StepRecord]
    notes: list[str]
    warmup_policy: str = "fixed"
    warmup_floor: int = 0  # the fixed count, in steps
    warmup_settled: bool = True

    def warmup_fields(self) -> WarmupFields:
        """The trial record's warm-up fields (in steps; no tagged steps are excluded)."""
        used = step_count(self.warmup)
        return {"warmup_policy": self.warmup_policy, "warmup_steps_floor": self.warmup_floor,
                "warmup_steps_used": used,
                "warmup_steps_detected": used if self.warmup_policy == "auto" else None,
                "warmup_settled": self.warmup_settled, "excluded_steps": 0, "excluded_tags": {}}


def step_count(records: Sequence[StepRecord]) -> int:
    """The steps ``records`` stand for (an interval line is its k steps)."""
    return sum(r.steps for r in records)


def warmup_policy(spec: Any, skip: int) -> WarmupPolicy:
    """The spec's warm-up policy with the command's fixed count (``skip``) as its floor."""
    return WarmupPolicy(getattr(spec, "warmup_policy", "fixed"), skip,
                        max(getattr(spec, "warmup_max_steps", 30), skip),
                        getattr(spec, "warmup_window", 3), getattr(spec, "warmup_tolerance", 0.05))


def check_steps(records: Sequence[StepRecord], skip: int,
                policy: WarmupPolicy | None = None) -> CheckedSteps:
    """Warm-up and measured records from parsed step lines (pure): at least ``skip`` warm-up
    steps, and with an ``auto`` policy as many more as the step times show (module
    docstring); None: ``skip`` (fixed). Raises LogProblem."""
    notes: list[str] = []
    seen: set[int] = set()
    kept: list[StepRecord] = []
    dups = 0
    for r in records:
        if r.step in seen:  # several ranks printing the same step: keep the first line
            dups += 1
            continue
        if kept and r.step < kept[-1].step:
            raise LogProblem("malformed_log", f"step numbers go backwards ({kept[-1].step} then "
                             f"{r.step}); two runs in one log?")
        if not math.isfinite(r.step_time_s) or r.step_time_s <= 0:
            raise LogProblem("malformed_log", f"step {r.step} has step time {r.step_time_s!r} s")
        seen.add(r.step)
        kept.append(r)
    if dups:
        notes.append(f"{dups} repeated step line(s) ignored (several ranks printing?)")
    p = policy or WarmupPolicy("fixed", skip)
    floor = lines_covering(kept, skip)
    # a warm-up found from the steps never eats into the steps to measure: the command was
    # asked for the fixed warm-up and the window; past that it is "not settled", not a failure
    room, tail = 0, 0  # the most warm-up lines that leave MIN_MEASURED steps
    for i in range(len(kept) - 1, -1, -1):
        tail += kept[i].steps
        if tail >= MIN_MEASURED:
            room = i
            break
    room = max(room, floor)
    cap = max(floor, min(lines_covering(kept, p.max_steps + 1) - 1, room))
    n, settled = warmup_from_series([r.step_time_s for r in kept], WarmupPolicy(
        p.policy, floor, cap, p.window, p.tolerance))
    if p.policy == "auto" and n >= cap > floor and cap == room:
        settled = False
        notes.append(f"the step times had not settled after {step_count(kept[:n])} warm-up "
                     f"step(s), the most the command's {step_count(kept)} steps allow while "
                     f"leaving {MIN_MEASURED} to measure: ask it for more steps "
                     "(protocol.warmup_steps, or a longer window)")
    warm, measured = kept[:n], kept[n:]
    if step_count(measured) < MIN_MEASURED:
        raise LogProblem(
            "too_few_steps",
            f"{len(kept)} step line(s) parsed ({step_count(kept)} steps); skipping "
            f"{step_count(warm)} warm-up step(s) leaves fewer than {MIN_MEASURED} to measure",
        )
    blocks = [r for r in measured if r.steps > 1]
    if blocks:
        notes.append(f"{len(blocks)} measured step line(s) average several steps each "
                     f"({step_count(blocks)} steps, the trainer's log interval): each of their "
                     "steps is counted at its line's average time")
    return CheckedSteps(warm, measured, notes, p.policy, skip,
                        settled if p.policy == "auto" else True)


def _redact(text: str, trial_dir: str) -> str:
    """No interpreter, trial or home paths in the record (they name users and machines)."""
    home = os.path.expanduser("~")
    for path, name in ((sys.executable, "python"), (trial_dir, "<trial_dir>")):
        text = text.replace(path, name)
    return text.replace(home, "~") if home not in ("", "/") else text


def run_command(argv: list[str] | str, cwd: str | None, env: dict[str, str], log_path: Path,
                time_limit_s: float | None, session: str = COMMAND_SESSION,
                stop_if: Any = None) -> tuple[int | None, str | None]:
    """(exit code or None on timeout, error when it could not start). Output goes to log_path;
    the running command's session is recorded beside it in ``session``. ``stop_if``: asked
    while it runs; True stops it (another node of its launch failed)."""
    full_env = {**os.environ, **env}
    with open(log_path, "wb") as out:
        try:
            # the launcher stops a trial with SIGTERM to its group: take the command down too
            # no pre-exec hook (this process may have threads): a watchdog kills the
            # command's session if this process dies, and its record lets a resume do it
            return run_child(argv, cwd=cwd, env=full_env, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, timeout_s=time_limit_s, preexec_fn=None,
                             stop_on_sigterm=True, guard=log_path.with_name(session),
                             stop_if=stop_if), None
        except OSError as exc:
            return None, f"{type(exc).__name__}: {exc.strerror or exc}"


@dataclass
class CommandArm:
    """One arm's command of a paired round, ready to start: its trainer (the workload's
    command, parsed), the invocation for this trial, its trial directory and environment."""

    arm: Any  # the spec's PairedArm
    trainer: Any
    inv: Any
    tdir: Path
    env: dict[str, str]


def command_arms(spec: Any, measured_steps: int, time_limit_s: float | None, what: str,
                 first_env: dict[str, str] | None = None) -> list[CommandArm]:
    """Every paired arm's command, in the spec's order: its worker started from the arm's own
    workload, its invocation asking for ``measured_steps`` after the warm-up, its environment
    this process's with ``first_env``, then the arm's env.* switches and the invocation's
    own. Raises RuntimeError (``what`` runs command workloads only) for an embedded recipe."""
    out = []
    for a in spec.paired_arms:
        worker = start_worker(a.workload, spec.device)
        if not worker.external:
            raise RuntimeError(f"{what} runs command workloads only")
        trainer = worker.trainer(spec.bucket)
        tdir = Path(a.trial_dir)
        tdir.mkdir(parents=True, exist_ok=True)
        inv = trainer.invocation(str(tdir), spec.warmup_steps, measured_steps, time_limit_s)
        env = {**os.environ, **(first_env or {}), **a.env, **inv.env}
        out.append(CommandArm(a, trainer, inv, tdir, env))
    return out


def start_command(inv: Any, env: dict[str, str], tdir: Path,
                  stdout: Any) -> tuple[subprocess.Popen[bytes], SessionGuard]:
    """Start an arm's command in a session of its own, guarded (its descendants end with it,
    orchestrator.platform.children), its output to ``stdout`` and its errors with it; the
    process and its guard. Raises OSError when the program cannot start."""
    guard = SessionGuard(tdir / COMMAND_SESSION)
    try:
        proc = start_child(inv.argv, stdout=stdout, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, env=env, cwd=inv.cwd, preexec_fn=None,
                           guard=guard)
    except OSError:
        guard.close()
        raise
    return proc, guard


def command_fields(spec: Any, base: TrialBase, inv: Any) -> CommandFields:
    """The fields of every record of a command's trial: the command line and its environment
    (no interpreter, trial or home paths), and the device it is not probed for."""
    tdir = str(spec.trial_dir)
    shown = inv.argv if isinstance(inv.argv, str) else " ".join(inv.argv)
    addr = (getattr(inv, "launch_env", None) or {}).get("MASTER_ADDR")
    if addr and addr not in ("127.0.0.1", "localhost"):  # the first node's name stays out
        shown = shown.replace(addr, "<master_addr>")
    return {
        **base,
        "command": _redact(shown, tdir),
        "env": spec.shown_env(dict(spec.env)),  # an ArmView: the arm's own switches
        "command_env": {k: _redact(v, tdir) for k, v in inv.env.items()},
        "python_version": platform.python_version(),
        "device": {"kind": "external", "name": "not probed (external command)", "count": None},
    }


def log_tail(log_path: Path, trial_dir: str) -> str:
    """The last lines of a command's log, for a failed record."""
    return _redact("\n".join(_clipped(x) for x in read_lines(log_path)[-_TAIL_LINES:]),
                   trial_dir)


def _clipped(line: str) -> str:
    """A tail line of at most _TAIL_LINE_CHARS characters (a base64 blob or a line of progress
    dots would otherwise fill the record), saying how much was left out."""
    if len(line) <= _TAIL_LINE_CHARS:
        return line
    return f"{line[:_TAIL_LINE_CHARS]}... ({len(line) - _TAIL_LINE_CHARS} more characters)"


def child_peak_rss() -> tuple[int, str]:
    """(bytes, source) of the largest child process's peak resident set."""
    rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (rss_kib * (1 if sys.platform == "darwin" else 1024),
            "largest child process peak RSS (host side)")


def read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _command_env(trainer: Any, inv: Any, common: CommandFields) -> dict[str, str]:
    """The command's own environment (its invocation's and its node's launch), with what
    orchestrator.client.params() returns in this run (one arm: the workload's switchable
    params), those said in ``common``."""
    switched = {k: trainer.workload.params.get(k)
                for k in getattr(trainer.workload, "switchable", None) or ()}
    env = {**inv.env, **getattr(inv, "launch_env", {})}
    if switched:
        env[PARAMS_ENV] = json.dumps(switched)
        common["client_params"] = switched
    return env


def measure_external(spec: Any, base: TrialBase, trainer: Any) -> TrialRecordDict:
    """Run one external trial and build its record (statuses instead of exceptions). Over
    several machines (orchestrator.worker.nodes) node 0 writes the record from every node's
    report, the others leave their report."""
    tdir = Path(spec.trial_dir)
    inv = trainer.invocation(str(tdir), spec.warmup_steps, spec.measured_steps, spec.timeout_s)
    where = nodes.place(getattr(inv, "launch_env", {}) or {})
    common = command_fields(spec, base, inv)
    if where.multi:
        common.update(nodes=where.nnodes)  # type: ignore[call-arg]  # mypy: TypedDict.update takes no keywords
    log_path = tdir / nodes.log_name(where)
    t0 = time.time()
    env = _command_env(trainer, inv, common)
    peers = nodes.PeerWatch(tdir, where) if where.multi else None
    asked = trainer.workload.steps_asked(spec.warmup_steps, spec.measured_steps)
    exits = exit_watch(trainer, inv, tdir, log_path, where, asked)
    rc, start_error = run_command(inv.argv, inv.cwd, env, log_path, inv.time_limit_s,
                                  nodes.session_name(where, COMMAND_SESSION),
                                  stop_if=any_stop(peers, exits))
    wall = time.time() - t0
    out_lines = read_lines(log_path)
    own_log = inv.log_file is None or where.node > 0
    lines = out_lines if own_log else read_lines(Path(inv.cwd or ".", inv.log_file))
    tail = _redact("\n".join(out_lines[-_TAIL_LINES:]), str(tdir))
    common.update(command_wall_s=wall, command_returncode=rc)  # type: ignore[call-arg]  # mypy: TypedDict.update takes no keywords

    def failed(kind: str, error: str, status: str = "failed") -> TrialRecordDict:
        return trial_record(**common, status=status, failure_kind=kind, error=error,
                            stderr_tail=tail)

    stopped = peers is not None and peers.stopped
    teardown = teardown_reason(exits, rc, where, tdir, t0 + wall)
    if teardown:  # stopped by us, every step logged: not the command's failure
        common["teardown"] = teardown
    # the reports keep the command's own exit code (rc); the outcome takes a stop as an end
    outcome = (failed("peer_failed", peers.reason()) if stopped and peers is not None else
               _outcome(start_error, 0 if teardown else rc, inv, trainer, lines, failed,
                        asked))
    if where.multi and where.node > 0:
        return _node_report(trainer, lines, tdir, where, outcome, rc, wall,
                            own_log=inv.log_file is None, teardown=teardown,
                            stopped_by=peers.seen.node if stopped and peers and peers.seen
                            else None) or trial_record(**common, status=Status.OK)
    others: dict[int, nodes.NodeReport] = {}
    if where.multi:  # node 0: the other nodes' reports; a lost node is the infrastructure's
        others, verdict = _node0(tdir, where, wall, rc, outcome, stopped, common, exits)
        if verdict is not None:
            return failed(*verdict)
    if outcome is not None:
        return outcome
    got = _read_steps(spec, trainer, lines, where, others, common)
    if isinstance(got[0], str):  # (failure kind, error)
        return failed(*got)
    checked, per_node = got
    return ok_record(spec, {**common, **steps_followed(spec, trainer, checked)}, trainer,
                     checked, per_node)


def _outcome(start_error: str | None, rc: int | None, inv: Any, trainer: Any,
             lines: list[str], failed: Any,
             asked: tuple[int, bool] | None = None) -> TrialRecordDict | None:
    """The record of a command that could not start, timed out or exited non-zero; None when
    it exited 0. ``asked``: the step lines it was asked for (WorkloadConfig.steps_asked), to
    say whether it failed before its last step or after it, at teardown."""
    if start_error:
        return failed("cannot_start", f"cannot start the command: {start_error}")
    if rc is None:
        n = sum(1 for _ in safe_parse(trainer, lines))
        return failed("timeout", f"the command ran past workload.time_limit_s="
                      f"{inv.time_limit_s:g} s and was killed ({n} step line(s) by then)",
                      "timeout")
    if rc != 0:
        return failed("exit_code", _nonzero_exit(rc, len(safe_parse(trainer, lines)), asked))
    return None


def _nonzero_exit(rc: int, logged: int, asked: tuple[int, bool] | None) -> str:
    """Why a command that exited non-zero failed, with how far it got: one that logged every
    step line it was asked for failed at teardown, which its steps do not show but which makes
    the trial a failure all the same (a crash at exit may be the arm's)."""
    why = how_it_ended(rc)
    if asked is not None and logged >= asked[0] > 0:
        return (f"the command {why} after logging all {asked[0]} step lines it was asked for: "
                "it failed at teardown (a process group destroyed while a peer still sends, a "
                "thread alive at interpreter exit?); the trial's steps are not used")
    return f"the command {why} after {logged} step line(s)"


def _read_steps(spec: Any, trainer: Any, lines: list[str], where: nodes.NodePlace,
                others: dict[int, nodes.NodeReport], common: CommandFields,
                ) -> tuple[CheckedSteps, dict[int, dict[int, float]]] | tuple[str, str]:
    """(the checked steps, each node's time per step) from the log (and the other nodes'
    reports), or (failure kind, error) when they cannot be read."""
    try:
        per_node: dict[int, dict[int, float]] = {}
        if where.multi and any(r.steps for r in others.values()):
            # node 0 may print none: torchrun's rendezvous puts global rank 0 on any node
            records = _steps_or_none(trainer, lines)
            records, node_fields, per_node = nodes.merge_steps(records, others)
            common.update(node_fields)
        else:
            records = trainer.parse(lines)
        skip = trainer.skip_steps(spec.warmup_steps)
        checked = check_steps(records, skip, warmup_policy(spec, skip))
        checked.notes.extend(long_lines_note(sum(map(is_long_line, lines))))
    except MalformedStepLine as exc:
        return "malformed_log", f"log: {exc}"
    except MissingSetting as exc:
        return "missing_setting", f"log: {exc}"
    except LogParseError as exc:
        return "no_step_lines", f"log: {exc}"
    except LogProblem as exc:
        return exc.kind, f"log: {exc}"
    except ValueError as exc:  # a step line whose fields cannot be read
        return "malformed_log", f"log: unreadable step line ({exc})"
    return checked, per_node


def _node0(tdir: Path, where: nodes.NodePlace, wall: float, rc: int | None,
           outcome: TrialRecordDict | None, stopped: bool, common: CommandFields,
           exits: ExitGrace | None,
           ) -> tuple[dict[int, nodes.NodeReport], tuple[str, str, str] | None]:
    """Node 0 over several nodes, its command ended: its own failure reported to the others
    (they stop theirs: PeerWatch), then theirs gathered (:func:`_other_nodes`; past the exit
    grace, which they may be sitting out); another node's command stopped by its exit grace
    is said in ``common`` where node 0's was not."""
    if outcome is not None and not stopped:
        nodes.NodeReport(node=0, status=outcome["status"], error=outcome.get("error"),
                         returncode=rc, wall_s=wall, at=time.time(),
                         launch=nodes.launch_id()).write(tdir)
    # stopped because another node failed: that node's failure is the trial's
    others, verdict = _other_nodes(tdir, where, wall, None if stopped else outcome, common,
                                   wait_s=max(nodes.NODE_GRACE_S, (
                                       exits.grace_s if exits else 0) + nodes.PEER_GRACE_S))
    late = next((f"node {k}: {r.teardown}" for k, r in sorted(others.items()) if r.teardown),
                None)
    if late and "teardown" not in common:
        common["teardown"] = late
    return others, verdict


def _other_nodes(tdir: Path, where: nodes.NodePlace, wall: float,
                 outcome: TrialRecordDict | None, common: CommandFields,
                 wait_s: float = nodes.NODE_GRACE_S,
                 ) -> tuple[dict[int, nodes.NodeReport], tuple[str, str, str] | None]:
    """Node 0, its command ended: the other nodes' reports (waiting ``wait_s`` at most), and
    (failure kind, error, status) when they decide the trial's failure (a node that failed
    while node 0 did not, or one that sent nothing while node 0's command ran); both failed:
    node 0's error, theirs after."""
    ended = time.time()
    others, missing = nodes.gather(tdir, where, ended, wait_s)
    common["node_wall_s"] = {"0": wall, **{str(k): r.wall_s for k, r in others.items()}}
    own = None if outcome is None else str(outcome.get("error"))
    bad = nodes.node_failure(others, missing, time.time() - ended, own)
    if bad is None:
        return others, None
    cannot_start = outcome is not None and outcome.get("failure_kind") == "cannot_start"
    if not cannot_start and (outcome is None or missing):
        status, kind, error = bad
        if status == Status.INFRA_FAILED:
            common["infra_reason"] = error
        return others, (kind, error, status)
    if outcome is not None:
        outcome["error"] = f"{outcome['error']}; {bad[2]}"
    return others, None


def _steps_or_none(trainer: Any, lines: list[str]) -> list[StepRecord]:
    """Node 0's step records, [] when it logged none (another node did); a malformed step
    line still raises."""
    try:
        return list(trainer.parse(lines))
    except (MalformedStepLine, MissingSetting):
        raise
    except LogParseError:
        return []


def _node_report(trainer: Any, lines: list[str], tdir: Path, where: nodes.NodePlace,
                 outcome: TrialRecordDict | None, rc: int | None, wall: float,
                 own_log: bool, stopped_by: int | None = None,
                 teardown: str | None = None) -> TrialRecordDict | None:
    """Node k > 0: its report for node 0 (status, exit code, its step lines where it has any);
    its record when it failed (left as trial.rank<k>.json), else None."""
    steps: list[StepRecordDict] = []
    note = None
    if outcome is None and own_log:
        try:
            steps = nodes.steps_of(list(trainer.parse(lines)))
        except LogParseError:
            note = f"node {where.node} logged no step lines"
        except ValueError as exc:  # malformed: node 0's log decides; say it
            note = f"node {where.node}'s step lines could not be read ({exc})"
    elif outcome is None:
        note = "the workload's log.file is read on node 0 only"
    nodes.NodeReport(node=where.node, status=outcome["status"] if outcome else "ok",
                     error=outcome.get("error") if outcome else None, returncode=rc,
                     wall_s=wall, steps=steps, note=note, at=time.time(),
                     launch=nodes.launch_id(), stopped_by=stopped_by,
                     teardown=teardown).write(tdir)
    return outcome


def steps_followed(spec: Any, trainer: Any, checked: CheckedSteps) -> StepsFollowed:
    """The step lines the command was asked for and logged, and a note where it did not follow
    its ``{steps}`` (then trials cannot be sized by time: the length is the command's own)."""
    asked = trainer.workload.steps_asked(spec.warmup_steps, spec.measured_steps)
    logged = step_count(checked.warmup) + step_count(checked.measured)
    if asked is None:
        return {"steps_asked": None, "steps_logged": logged}
    n, exact = asked
    out: StepsFollowed = {"steps_asked": n, "steps_logged": logged}
    if logged < n or (exact and logged > n + 1):
        out["steps_ignored"] = (f"asked for {n} step(s) through the command's step placeholder, "
                                f"its log has {logged}: it does not follow it, so its trials "
                                "cannot be sized by time (protocol.measured_min_s)")
    return out


def step_rows(checked: CheckedSteps) -> list[dict[str, Any]]:
    """steps.csv's rows: one per step, a line of k steps as k rows of its average time (its
    loss on the logged step's row; ``interval_steps`` = k where the log has such lines)."""
    interval = any(r.interval for r in checked.warmup + checked.measured)
    rows = []
    for phase, recs in (("warmup", checked.warmup), ("measured", checked.measured)):
        for r in recs:
            for step in range(r.step - r.steps + 1, r.step + 1):
                rows.append({"step": step, "phase": phase, "step_time_s": r.step_time_s,
                             "data_wait_s": None, "tokens": r.tokens, "samples": r.samples,
                             "batch_index": step, "loss": r.loss if step == r.step else None,
                             **({"interval_steps": r.steps} if interval else {})})
    return rows


def _per_step(records: Sequence[StepRecord], value: Any) -> list[Any]:
    """``value(record)`` once per step of each record (an interval line: k times)."""
    return [value(r) for r in records for _ in range(r.steps)]


def ok_record(spec: Any, common: CommandFields, trainer: Any, checked: CheckedSteps,
              per_node: dict[int, dict[int, float]] | None = None) -> TrialRecordDict:
    rows = step_rows(checked)
    nodes.node_columns(rows, per_node or {})
    write_csv(Path(spec.trial_dir) / "steps.csv", rows)
    measured = _per_step(checked.measured, lambda r: r.step_time_s)
    median = statistics.median(measured)
    logged = [t for t in _per_step(checked.measured, lambda r: r.tokens) if t]
    if logged:
        tokens, source = int(statistics.median(logged)), "log"
    else:
        tokens, source = trainer.tokens_per_step, trainer.tokens_source  # None: unknown
    losses = [(r.step, r.loss) for r in checked.warmup + checked.measured if r.loss is not None]
    peak, peak_source = child_peak_rss()
    warm = sum(r.step_time_s * r.steps for r in checked.warmup)
    useful = trainer.useful_flops_per_step()
    return trial_record(
        **{**common, "measured_steps": len(measured), **checked.warmup_fields()},
        status=Status.OK,
        torch_version=None,
        measured_steps_run=len(measured),  # as every mode's record says it
        step_time_median_s=median,
        step_time_mad_s=statistics.median(abs(v - median) for v in measured),
        tokens_per_step=tokens,
        tokens_source=source,
        tokens_per_s=None if tokens is None else tokens / median,
        peak_mem_bytes=peak,
        peak_mem_source=peak_source,
        useful_flops_per_step=useful,
        final_loss=losses[-1][1] if losses else None,
        nonfinite_loss_steps=[s for s, v in losses if not math.isfinite(v)],
        warmup_excess_s=warm - step_count(checked.warmup) * median,
        log_notes=checked.notes + [common[k] for k in ("steps_ignored", "teardown")
                                   if k in common],
        **reported_mfu(checked.measured),
        **(declared_utilization(spec, trainer, useful, median) if useful is not None else {}),
    )


def declared_utilization(spec: Any, trainer: Any, useful: float, median_s: float
                         ) -> DeclaredUtilization:
    """FLOPs, peaks and MFU for declared useful FLOPs (workload.flops_per_step). The peak is the
    one of the device this process resolves for ``device=`` (the command must train there), at
    workload.precision; a device this process cannot see is a stated reason, not a failure."""
    flops: FlopsFacts = {"useful_per_step": useful, "useful_definition": trainer.useful_flops_definition,
             "executed_per_step": None, "executed_definition": DEFINITIONS[EXECUTED],
             "executed_note": "not counted: the command trains in another program"}
    try:
        dev = devmod.resolve(spec.device)
    except BackendUnavailable as exc:
        return {"flops": flops, "peaks": [], "utilization": [], "peaks_note": f"no peak: {exc}"}
    return {"flops": flops, **peaks_and_utilization(dev, spec.hardware, trainer.workload.precision,
                                                    useful, None, median_s)}
