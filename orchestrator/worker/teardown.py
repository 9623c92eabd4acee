"""A command that has done all it was asked for and does not exit: stopped, its steps kept.

A trainer that hangs at its end (an NCCL communicator's teardown, a dataloader worker never
joined, a final upload) would hold its node until ``workload.time_limit_s``. Once its log holds
every step it was asked for (``{steps}``: :class:`StepLines`), or its client plan is done, it
gets ``workload.exit_grace_s`` to exit (:class:`ExitGrace`, a ``stop_if`` of
``platform.children.run_child``); then it is stopped and the trial keeps its steps, its record
saying so in ``teardown``. Over several nodes (worker.nodes) the grace runs from the first node
whose log held every step, and every node's command is stopped (:func:`exit_watch`,
:func:`teardown_reason`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.core.logparse import StepRecord
from orchestrator.platform.children import how_it_ended
from orchestrator.worker import nodes


def safe_parse(trainer: Any, lines: list[str]) -> list[StepRecord]:
    """The trainer's step records in ``lines``; [] where none can be read."""
    try:
        return list(trainer.parse(lines))
    except ValueError:
        return []


class ExitGrace:
    """While a command runs: has it done all it was asked for (``done``) and still not exited
    ``grace_s`` later? It is then stopped (a trainer hanging at exit: an NCCL communicator's
    teardown, a dataloader worker that is never joined, a final upload), and its steps are
    kept. ``what``: what it had done, for the record."""

    def __init__(self, done: Any, grace_s: float, what: str) -> None:
        self.done, self.grace_s, self.what = done, grace_s, what
        self.done_at: float | None = None  # when it was seen done
        self.stopped = False

    def __call__(self) -> bool:
        if self.done_at is None:
            if self.done():
                self.done_at = time.time()
            return False
        self.stopped = time.time() - self.done_at >= self.grace_s
        return self.stopped

    def reason(self) -> str:
        """What happened, for the record (one line)."""
        return (f"the command had {self.what} and had not exited {self.grace_s:g} s later "
                "(workload.exit_grace_s): it was stopped and its steps kept")


class StepLines:
    """Whether a command's log (``path``: its own log file, or its captured output) holds the
    ``asked`` steps yet, read as it grows: only the new lines are parsed, each step number
    counted once (several ranks may print every step; worker.external's check_steps reads
    them so too) as the steps its line stands for.

    ``own_file``: the path is the trainer's own log file (``workload.log.file``), which may hold
    an earlier run's lines: what it holds now is skipped, and a file cut short or replaced is
    read again from its start. A step of an earlier run is never counted (it would stop this
    one early); a rewrite missed between two reads only leaves the grace unstarted."""

    def __init__(self, trainer: Any, path: Path, asked: int, own_file: bool = False) -> None:
        self.trainer, self.path, self.asked = trainer, path, asked
        self._pending = b""
        self._ino, self._offset = self._where() if own_file else (None, 0)
        self._seen: set[int] = set()
        self.steps = 0

    def _where(self) -> tuple[int | None, int]:
        try:
            st = os.stat(self.path)
        except OSError:
            return None, 0
        return st.st_ino, st.st_size

    def __call__(self) -> bool:
        ino, size = self._where()
        if (self._ino is not None and ino != self._ino) or size < self._offset:
            self._offset, self._pending = 0, b""  # replaced or cut short: a new run's file
            self._seen.clear()
            self.steps = 0
        self._ino = ino
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            return False
        self._offset += len(chunk)
        data = self._pending + chunk
        cut = data.rfind(b"\n") + 1
        self._pending = data[cut:]
        if cut:
            lines = data[:cut].decode("utf-8", errors="replace").splitlines()
            for r in safe_parse(self.trainer, lines):
                if r.step not in self._seen:
                    self._seen.add(r.step)
                    self.steps += r.steps
        return self.steps >= self.asked


def exit_grace(workload: Any, done: Any, what: str) -> ExitGrace | None:
    """The workload's :class:`ExitGrace` (None: ``workload.exit_grace_s`` is null)."""
    grace = getattr(workload, "exit_grace_s", None)
    return ExitGrace(done, float(grace), what) if grace else None


def exit_watch(trainer: Any, inv: Any, tdir: Path, log_path: Path, where: nodes.NodePlace,
               asked: tuple[int, bool] | None) -> ExitGrace | None:
    """A command trial's :class:`ExitGrace` where it takes ``{steps}`` (else None: how many
    step lines it logs is its own). Over several nodes the grace runs from the first moment any
    node's log held every step (nodes.mark_done): a node whose ranks do not print steps is
    stopped with the others."""
    if asked is None or not asked[1]:
        return None
    theirs = inv.log_file is not None and where.node == 0  # the trainer's own log file
    own = StepLines(trainer, Path(inv.cwd or ".", inv.log_file) if theirs else log_path,
                    asked[0], own_file=theirs)
    what = (f"seen all {asked[0]} steps of the trial logged (on this node or another)"
            if where.multi else f"logged all {asked[0]} steps it was asked for")
    return exit_grace(trainer.workload, seen_done(own, tdir, where), what)


def seen_done(own: Callable[[], bool], tdir: Path, where: nodes.NodePlace
              ) -> Callable[[], bool]:
    """``own`` (this node has done all it was asked for) as an :class:`ExitGrace`'s ``done``:
    on one node itself; over several, true once this node is done (said to the others:
    nodes.mark_done) or another node of this launch said it was (nodes.done_at)."""
    if not where.multi:
        return own

    def done() -> bool:
        if own():
            nodes.mark_done(tdir, where.node)
            return True
        return nodes.done_at(tdir) is not None

    return done


def teardown_reason(exits: ExitGrace | None, rc: int | None, where: nodes.NodePlace,
                    tdir: Path, ended: float) -> str | None:
    """Why a command that had logged every step did not end on its own, for the record; None
    when it did (or failed before). Over several nodes a command that exits non-zero once the
    grace is up (give or take PEER_GRACE_S of clock and file-system lag) lost its peers to
    another node's stop: that is the stop's doing, not its own failure."""
    if exits is None:
        return None
    if exits.stopped:
        return exits.reason()
    if not where.multi or rc in (None, 0) or exits.done_at is None:
        return None
    first = nodes.done_at(tdir) or exits.done_at
    if ended < first + exits.grace_s - nodes.PEER_GRACE_S:
        return None  # it failed at teardown by itself, before anything was stopped
    return (f"the command ended ({how_it_ended(rc)}) as the other nodes' commands were "
            f"stopped, {exits.grace_s:g} s after every step of the trial was logged "
            "(workload.exit_grace_s): its steps kept")


def any_stop(*watches: Any) -> Any:
    """One ``stop_if`` from several (None where none is given)."""
    live = [w for w in watches if w is not None]
    if not live:
        return None
    return lambda: any([w() for w in live])  # every watch polled, in order
