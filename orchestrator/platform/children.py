"""Starting and stopping child processes: the one helper every process the orchestrator starts
goes through (worker processes of the local and Slurm launchers, an external training command).

A child runs in a session of its own, so that a time-out or an interrupt takes down its whole
process group (a torchrun agent and its ranks, a shell and its pipeline), SIGTERM first and
SIGKILL after a grace period. On Linux a child can also ask the kernel to SIGKILL it when its
parent dies (:func:`die_with_parent`), so a killed orchestrator leaves no orphan to race a
resumed campaign. A child that must not be forked with a pre-exec hook (a user's training
command, started from a process that may have threads) gets a :class:`SessionGuard` instead:
a watchdog process that kills everything the command started when its starter ends or dies,
and a record on disk, so that a resumed campaign kills what a dead one left.

"Everything the command started" includes what left its session (``setsid``, a daemon's double
fork). Each guarded command carries a random tag in its environment (``ORCH_TRIAL_TAG``), found
again in /proc/PID/environ; no privileges needed, and only a program that clears its own
environment loses it. Where this process may make a cgroup under its own (cgroup v2 with
``cgroup.kill`` or ``cgroup.freeze``, or the v1 freezer hierarchy: root, or a delegated
subtree; not a Slurm job's cgroup, which root owns), the command also runs in a cgroup of its
own, joined by a two-line shell before the command's program starts, and nothing it starts can
leave it; at the end every process in it is killed and the cgroup removed. ``ORCH_CGROUP=off``
(or ``cgroup2``, ``freezer``) forces the choice; the record names the one used.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from orchestrator.core import _watchdog
from orchestrator.core._watchdog import kill_cgroup, kill_command, start_ticks

GRACE_S = 5.0
_PR_SET_PDEATHSIG = 1


def how_it_ended(rc: int | None) -> str:
    """A child's non-zero exit in words: "was killed by signal SIGABRT" (a negative code, as
    subprocess reports a signal) or "exited with code 3"."""
    if rc is not None and rc < 0 and -rc in signal.Signals._value2member_map_:
        return f"was killed by signal {signal.Signals(-rc).name}"
    return f"exited with code {rc}"


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
    guard: SessionGuard | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` (a string runs through /bin/sh) in its own session and return at once
    (:func:`run_child` waits for it; the fork server of the launchers outlives one call).
    ``pass_fds``: descriptors the child keeps (every other one is closed). ``guard``: the
    :class:`SessionGuard` that tags the child, puts it in its cgroup and watches it (its
    :meth:`~SessionGuard.close` is the caller's)."""
    try:  # preexec_fn: None where this process may have threads (the caller knows)
        if guard is not None:
            argv, env = guard.wrap(argv, env, cwd)
        proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr, stdin=stdin,
                                env=dict(env) if env is not None else None, cwd=cwd,
                                shell=isinstance(argv, str), start_new_session=True,
                                preexec_fn=preexec_fn,  # noqa: PLW1509
                                pass_fds=pass_fds)
    except BaseException:
        if guard is not None:
            guard.close()
        raise
    if guard is not None:
        guard.watch(proc.pid)
    return proc


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
    stop_if: Callable[[], bool] | None = None,
    poll_s: float = 0.5,
) -> int | None:
    """Run ``argv`` (a string runs through /bin/sh) in its own session and wait for it.

    Returns its exit code, or None when ``timeout_s`` passed (its group is killed then). Any
    exception while waiting (Ctrl-C, SIGTERM turned into an interrupt) kills the group too and
    is re-raised. ``stop_on_sigterm``: a SIGTERM to this process (its launcher stopping it)
    kills the child's group and exits (main thread only). Raises OSError when the program
    cannot be started. ``guard``: start the child under a :class:`SessionGuard` (a path: its
    record file), so that nothing it starts outlives this call or this process. ``stop_if``:
    asked every ``poll_s`` while the child runs; True stops its group (the exit code is then
    the signal's, negative, as Popen reports it)."""
    watch = None if guard is False else SessionGuard(guard if isinstance(guard, Path) else None)
    proc = start_child(argv, stdout=stdout, stderr=stderr, stdin=stdin, env=env, cwd=cwd,
                       preexec_fn=preexec_fn, guard=watch)
    previous = None
    if stop_on_sigterm and threading.current_thread() is threading.main_thread():
        def _on_term(signum: int, frame: Any) -> None:
            kill_group(proc)
            raise SystemExit(128 + signum)

        previous = signal.signal(signal.SIGTERM, _on_term)
    try:
        if stop_if is None:
            return proc.wait(timeout=timeout_s)
        until = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = None if until is None else until - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout_s or 0.0)
            try:
                return proc.wait(timeout=poll_s if left is None else min(poll_s, left))
            except subprocess.TimeoutExpired:
                if until is not None and time.monotonic() >= until:
                    raise
            if stop_if():
                kill_group(proc)
                return proc.returncode
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
# which cgroup a command may get: auto (the first that works), off (session and tag only),
# cgroup2 or freezer (that one or none)
CGROUP_ENV = "ORCH_CGROUP"
CGROUP_CHOICES = ("auto", "off", "cgroup2", "freezer")
# the child joins its cgroup itself before the command runs (no pre-exec hook, no race)
_JOIN = '{ echo $$ > "$1"; } 2>/dev/null; shift; exec "$@"'


def cgroup_homes() -> list[tuple[str, Path]]:
    """(kind, this process's own cgroup directory) in the cgroup2 hierarchy and the v1 freezer
    hierarchy, those mounted here, in that order (/proc/self/cgroup, /proc/self/mountinfo)."""
    try:
        own = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    paths: dict[str, str] = {}  # kind -> this process's cgroup, from the hierarchy's root
    for line in own:
        hid, ctl, path = (line.split(":", 2) + ["", ""])[:3]
        if hid == "0" and not ctl:
            paths["cgroup2"] = path
        elif "freezer" in ctl.split(","):
            paths["freezer"] = path
    homes: dict[str, Path] = {}
    for line in mounts:  # ID PARENT DEV ROOT MOUNTPOINT OPTIONS... - FSTYPE SOURCE SUPEROPTIONS
        left, _, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if len(f) < 5 or len(r) < 3:
            continue
        kind = "cgroup2" if r[0] == "cgroup2" else (
            "freezer" if r[0] == "cgroup" and "freezer" in r[2].split(",") else "")
        own_path, root = paths.get(kind), f[3]
        if own_path is None or kind in homes:
            continue
        if root == "/" or own_path == root or own_path.startswith(root + "/"):
            homes[kind] = Path(f[4] + own_path[len(root.rstrip("/")):])
    return [(k, homes[k]) for k in ("cgroup2", "freezer") if k in homes]


def make_cgroup(name: str, choice: str | None = None) -> tuple[str, Path] | None:
    """A new cgroup ``name`` under this process's own, that can kill (or freeze) everything in
    it and that a child of this process may join: (kind, directory), or None where none can be
    made (no write access, as in a Slurm job's cgroup; no such hierarchy; ``choice`` or
    $ORCH_CGROUP ``off``)."""
    choice = choice or os.environ.get(CGROUP_ENV) or "auto"
    if choice not in CGROUP_CHOICES:
        raise ValueError(f"{CGROUP_ENV}={choice!r}: choose one of {', '.join(CGROUP_CHOICES)}")
    for kind, home in cgroup_homes():
        if choice not in ("auto", kind):
            continue
        d = home / name
        try:
            d.mkdir()
        except OSError:
            continue
        can_end = any((d / f).exists() for f in ("cgroup.kill", "cgroup.freeze", "freezer.state"))
        # moving a process needs write access to the common ancestor's procs file too
        if can_end and all(os.access(x / "cgroup.procs", os.W_OK) for x in (home, d)):
            return kind, d
        with contextlib.suppress(OSError):
            d.rmdir()
    return None


def _check_program(prog: str, env: Mapping[str, str], cwd: str | Path | None) -> None:
    """Raise the OSError that Popen would for a program that cannot be run: a shell execs the
    command after joining its cgroup, where a missing program would be exit code 127."""
    err: OSError | None = None
    for cand in [prog] if os.path.dirname(prog) else [
            os.path.join(d, prog) for d in os.get_exec_path(dict(env))]:
        full = os.path.join(cwd, cand) if cwd is not None else cand
        if os.path.isfile(full) and os.access(full, os.X_OK):
            return
        if os.path.exists(full):
            err = PermissionError(errno.EACCES, os.strerror(errno.EACCES), prog)
    raise err or FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), prog)


class SessionGuard:
    """Everything a command starts ends with it, wherever it moved. Made before the command
    starts (:func:`start_child` with ``guard=``): the command gets a random tag in its
    environment (``ORCH_TRIAL_TAG``) and, where the machine lets this process make one, a
    cgroup of its own, which it joins before it runs. When :meth:`close` is called, or when
    this process dies, a watchdog process SIGKILLs every process in that cgroup, in the
    command's session or carrying its tag (orchestrator.core._watchdog); ``record``: a file
    naming all three while the command runs (:func:`kill_recorded` reads it on a resume);
    ``cgroup``: the kind of cgroup it may have (one of CGROUP_CHOICES; default $ORCH_CGROUP,
    else auto)."""

    def __init__(self, record: Path | None = None, *, cgroup: str | None = None) -> None:
        self.record = record
        self.tag = secrets.token_hex(16)
        self.pid: int | None = None
        self.since: int | None = None
        self._w: int | None = None
        self._closed = False
        made = make_cgroup(f"orch-{self.tag}", cgroup)
        self.cgroup_kind: str | None = made[0] if made else None
        self.cgroup: Path | None = made[1] if made else None

    def wrap(self, argv: list[str] | str, env: Mapping[str, str] | None,
             cwd: str | Path | None) -> tuple[list[str] | str, dict[str, str]]:
        """The command line and environment that start ``argv`` tagged and in the cgroup."""
        full = {**(os.environ if env is None else env), _watchdog.TAG_VAR: self.tag}
        if self.cgroup is None:
            return argv, full
        if isinstance(argv, str):
            argv = ["/bin/sh", "-c", argv]
        elif argv:
            _check_program(argv[0], full, cwd)
        return ["/bin/sh", "-c", _JOIN, "sh", str(self.cgroup / "cgroup.procs"), *argv], full

    def watch(self, pid: int) -> None:
        """The command started as ``pid`` (its session's leader): record it, start the watch."""
        self.pid, self.since = pid, start_ticks(pid)
        if self.record is not None:
            tmp = self.record.with_name(self.record.name + ".tmp")
            tmp.write_text(json.dumps({
                "session": pid, "start_ticks": self.since, "tag": self.tag,
                "cgroup": str(self.cgroup) if self.cgroup else None,
                "cgroup_kind": self.cgroup_kind}))
            tmp.replace(self.record)
        if self.since is None:  # no /proc: the group kill in close() is all there is
            return
        r, w = os.pipe()
        try:
            subprocess.Popen([sys.executable, "-I", "-S", WATCHDOG, str(pid), str(self.since),
                              self.tag, str(self.cgroup or "-")],
                             stdin=r, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True, close_fds=True)
            self._w = w
        except OSError:
            os.close(w)
        finally:
            os.close(r)

    def close(self) -> None:
        """The child ended (or is being stopped): everything it started goes."""
        if self._closed:
            return
        self._closed = True
        if self._w is not None:
            os.close(self._w)  # the watchdog wakes and kills the rest
            self._w = None
        cgroup = str(self.cgroup) if self.cgroup else None
        if self.pid is not None:
            kill_command(self.pid, self.since, self.tag, cgroup)
        elif cgroup is not None:  # it never started
            kill_cgroup(cgroup)
        if self.record is not None:
            self.record.unlink(missing_ok=True)


def kill_recorded(record: Path) -> list[int]:
    """A resume: kill what the command a dead campaign's guard recorded left (its cgroup, its
    session, its tag), and drop the record."""
    try:
        doc = json.loads(record.read_text())
        sid, since = int(doc["session"]), doc.get("start_ticks")
        tag, cgroup = doc.get("tag"), doc.get("cgroup")
        since = int(since) if since is not None else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        record.unlink(missing_ok=True)
        return []
    # only what a guard makes: a hex tag, and a cgroup named after it (an edited record
    # must not name a system's cgroup, or a tag that everything carries)
    if not (isinstance(tag, str) and len(tag) >= 16 and all(c in "0123456789abcdef" for c in tag)):
        tag = None
    if not (tag and isinstance(cgroup, str) and Path(cgroup).name == f"orch-{tag}"):
        cgroup = None
    found = kill_command(sid, since, tag, cgroup)
    record.unlink(missing_ok=True)
    return found
