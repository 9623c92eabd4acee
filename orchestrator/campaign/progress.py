"""One progress display per campaign: a live line on a terminal, plain log lines otherwise.

The live line shows trials done/total, the current bucket and arm, elapsed time and an estimate
of the time left; it is rewritten in place on stderr. Every finished trial is also logged (to
campaign.log always; to the console only when there is no live line).
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Callable, Optional, TextIO

from orchestrator.spec.jobs import TrialSpec
from orchestrator.core.results import Status
from orchestrator.core.trial_record import TrialRecordDict

log = logging.getLogger("orchestrator.campaign.run")

_MARK = "progress_line"


def _dur(seconds: Optional[float]) -> str:
    if seconds is None:
        return "?"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def remaining_s(done: int, total: int, elapsed_s: float, already: int = 0) -> Optional[float]:
    """Mean time per trial finished in this invocation times the trials left (None before the
    first one). ``already``: trials of ``done`` that were complete before it started (resume)."""
    ran = done - already
    if ran <= 0:
        return None
    return elapsed_s / ran * max(0, total - done)


def format_line(name: str, done: int, total: int, current: str, elapsed_s: float,
                already: int = 0) -> str:
    left = remaining_s(done, total, elapsed_s, already)
    now = f" | {current}" if current else ""
    return (f"{name} [{done}/{total}]{now} | elapsed {_dur(elapsed_s)}, "
            f"~{_dur(left)} left")


# a failed trial's log, where the launcher or the command wrote one (first found)
TRIAL_LOGS = ("command.log", "stderr.log")


def trial_log(trial_dir: str | Path, record: TrialRecordDict) -> Path | None:
    """The log to read for a failed trial: the command's output (command workloads) or the
    trial process's stderr, in its directory or its paired process's."""
    base = Path(trial_dir)
    dirs = [base]
    if isinstance(record.get("paired_process"), str):
        dirs.append(base.parent / record["paired_process"])
    return next((d / n for d in dirs for n in TRIAL_LOGS if (d / n).is_file()), None)


def trial_result(record: TrialRecordDict, log_path: Path | None = None) -> str:
    med = record.get("step_time_median_s")
    if record.get("status") == Status.OK and med:
        return f"{med * 1e3:.2f} ms/step"
    return f"{record.get('status')}: {record.get('error')}" + (
        f" (log: {log_path})" if log_path is not None else "")


class _DropProgress(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, _MARK, False)


class Progress:
    """Feed it the launcher's ``on_start`` / ``on_done`` callbacks. One per campaign
    invocation: the total is the whole plan (trials already complete included, so a resume
    starts at ``[done/total]``), raised by :meth:`plan` when adaptive rounds extend it."""

    def __init__(self, name: str, total: int, stream: Optional[TextIO] = None,
                 live: Optional[bool] = None, clock: Callable[[], float] = time.monotonic,
                 done: int = 0) -> None:
        self.name = name
        self.total = total
        self.done = done
        self.ran = 0  # trials finished by this invocation: the time estimate's basis
        self.current = ""
        self.stream = stream or sys.stderr
        isatty = getattr(self.stream, "isatty", lambda: False)
        self.live = bool(isatty()) if live is None else live
        self.clock = clock
        self.t0 = clock()
        self._filter = _DropProgress()
        self._filtered: list[logging.Handler] = []
        if self.live:
            for h in logging.getLogger().handlers:
                if type(h) is logging.StreamHandler:  # the console, not campaign.log
                    h.addFilter(self._filter)
                    self._filtered.append(h)

    def plan(self, total: int, done: int) -> None:
        """The plan now has ``total`` trials, ``done`` of them complete on disk."""
        self.total, self.done = total, done

    def line(self) -> str:
        return format_line(self.name, self.done, self.total, self.current, self.clock() - self.t0,
                           self.done - self.ran)

    def _draw(self) -> None:
        if self.live:
            self.stream.write("\r\x1b[K" + self.line())
            self.stream.flush()

    def on_start(self, spec: TrialSpec) -> None:
        self.current = f"{spec.bucket['name']} {spec.arm_label} r{spec.round}"
        self._draw()

    def on_done(self, spec: TrialSpec, record: TrialRecordDict) -> None:
        self.done += 1
        self.ran += 1
        elapsed = self.clock() - self.t0
        left = remaining_s(self.done, self.total, elapsed, self.done - self.ran)
        log.info("[%d/%d] %s %s r%d: %s (elapsed %s, ~%s left)", self.done, self.total,
                 spec.bucket["name"], spec.arm_label, spec.round,
                 trial_result(record, None if record.get("status") == Status.OK else
                              trial_log(spec.trial_dir, record)),
                 _dur(elapsed), _dur(left), extra={_MARK: True})
        if self.done >= self.total:
            self.current = ""
        self._draw()

    def close(self) -> None:
        if self.live:
            self.stream.write("\n")
            self.stream.flush()
        for h in self._filtered:
            h.removeFilter(self._filter)
        self._filtered = []
