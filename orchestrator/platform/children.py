"""Starting and stopping child processes: the one helper every process the orchestrator starts
goes through (worker processes of the local and Slurm launchers, an external training command).

A child runs in a session of its own, so that a time-out or an interrupt takes down its whole
process group (a torchrun agent and its ranks, a shell and its pipeline), SIGTERM first and
SIGKILL after a grace period. On Linux a child can also ask the kernel to SIGKILL it when its
parent dies (:func:`die_with_parent`), so a killed orchestrator leaves no orphan to race a
resumed campaign. A child that must not be forked with a pre-exec hook (a user's training
command, started from a process that may have threads) gets a :class:`SessionGuard` instead:
a watchdog process that kills the child's whole session when its starter ends or dies, and a
record of the session on disk, so that a resumed campaign kills what a dead one left.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from orchestrator.core import _watchdog
from orchestrator.core._watchdog import kill_session, start_ticks

GRACE_S = 5.0
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this process when its parent dies (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def ignore_job_signals() -> None:
    """In the forked child, before exec: die with the parent, and leave SIGTERM and SIGUSR2 to
    the parent. Slurm signals every process of a job (SIGTERM on preemption or cancel,
    submitit's SIGUSR2 to checkpoint and requeue); the job process decides and takes its child
    down itself, so a child dying from USR2 first cannot leave a final 'crashed' record that
    the requeued job would skip."""
    die_with_parent()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


def kill_group(proc: subprocess.Popen[Any], grace_s: float = GRACE_S) -> None:
    """SIGTERM the child's process group, then SIGKILL it if it outlives ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def start_child(
    argv: list[str] | str,
    *,
    stdout: IO[bytes] | int | None,
    stderr: IO[bytes] | int | None,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    stdin: IO[bytes] | int | None = None,
    preexec_fn: Callable[[], None] | None = die_with_parent,
    pass_fds: tuple[int, ...] = (),
) -> subprocess.Popen[bytes]:
    """Start ``argv`` (a string runs through /bin/sh) in its own session and return at once
    (:func:`run_child` waits for it; the fork server of the launchers outlives one call).
    ``pass_fds``: descriptors the child keeps (every other one is closed)."""
    return subprocess.Popen(argv, stdout=stdout, stderr=stderr, stdin=stdin,
                            env=dict(env) if env is not None else None, cwd=cwd,
                            shell=isinstance(argv, str), start_new_session=True,
                            preexec_fn=preexec_fn, pass_fds=pass_fds)


@contextlib.contextmanager
def sigterm_runs(cleanup: Callable[[], None]) -> Iterator[None]:
    """While inside, a SIGTERM to this process (its launcher stopping it) runs ``cleanup`` and
    exits with 128 + the signal (main thread only: elsewhere nothing is installed)."""
    previous = None
    if threading.current_thread() is threading.main_thread():
        def _on_term(signum: int, frame: Any) -> None:
            cleanup()
            raise SystemExit(128 + signum)

        previous = signal.signal(signal.SIGTERM, _on_term)
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to a process group; False when it is gone (or not ours)."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def run_child(
    argv: list[str] | str,
    *,
    stdout: IO[bytes] | int | None,
    stderr: IO[bytes] | int | None,
    timeout_s: float | None,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    stdin: IO[bytes] | int | None = None,
    preexec_fn: Callable[[], None] | None = die_with_parent,
    stop_on_sigterm: bool = False,
    guard: Path | None | bool = False,
) -> int | None:
    """Run ``argv`` (a string runs through /bin/sh) in its own session and wait for it.

    Returns its exit code, or None when ``timeout_s`` passed (its group is killed then). Any
    exception while waiting (Ctrl-C, SIGTERM turned into an interrupt) kills the group too and
    is re-raised. ``stop_on_sigterm``: a SIGTERM to this process (its launcher stopping it)
    kills the child's group and exits (main thread only). Raises OSError when the program
    cannot be started. ``guard``: watch the child's session with a :class:`SessionGuard`
    (a path: its record file), so that nothing of it outlives this call or this process."""
    proc = start_child(argv, stdout=stdout, stderr=stderr, stdin=stdin, env=env, cwd=cwd,
                       preexec_fn=preexec_fn)
    watch = None if guard is False else SessionGuard(
        proc.pid, guard if isinstance(guard, Path) else None)
    previous = None
    if stop_on_sigterm and threading.current_thread() is threading.main_thread():
        def _on_term(signum: int, frame: Any) -> None:
            kill_group(proc)
            raise SystemExit(128 + signum)

        previous = signal.signal(signal.SIGTERM, _on_term)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return None
    except BaseException:
        kill_group(proc)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if watch is not None:
            watch.close()


# --------------------------------------------------------------------------- session guard

# a running command's session, in its trial directory while it runs (a resume kills it)
COMMAND_SESSION = "command.session.json"
WATCHDOG = str(Path(_watchdog.__file__).resolve())


class SessionGuard:
    """Watch a child started in its own session: when :meth:`close` is called, or when this
    process dies, a watchdog process SIGKILLs every process left in that session; ``record``:
    a file naming the session while it runs (:func:`kill_recorded` reads it on a resume)."""

    def __init__(self, pid: int, record: Path | None = None) -> None:
        self.pid = pid
        self.since = start_ticks(pid)
        self.record = record
        self._w: int | None = None
        if record is not None:
            tmp = record.with_name(record.name + ".tmp")
            tmp.write_text(json.dumps({"session": pid, "start_ticks": self.since}))
            tmp.replace(record)
        if self.since is None:  # no /proc: the group kill in close() is all there is
            return
        r, w = os.pipe()
        try:
            subprocess.Popen([sys.executable, "-I", "-S", WATCHDOG, str(pid), str(self.since)],
                             stdin=r, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True, close_fds=True)
            self._w = w
        except OSError:
            os.close(w)
        finally:
            os.close(r)

    def close(self) -> None:
        """The child ended (or is being stopped): what is left of its session goes."""
        if self._w is not None:
            os.close(self._w)  # the watchdog wakes and kills the rest
            self._w = None
        kill_session(self.pid, self.since)
        if self.record is not None:
            self.record.unlink(missing_ok=True)


def kill_recorded(record: Path) -> list[int]:
    """A resume: kill the session a dead campaign's guard recorded, and drop the record."""
    try:
        doc = json.loads(record.read_text())
        sid, since = int(doc["session"]), doc.get("start_ticks")
    except (OSError, ValueError, KeyError, TypeError):
        record.unlink(missing_ok=True)
        return []
    found = kill_session(sid, int(since) if since is not None else None)
    record.unlink(missing_ok=True)
    return found
