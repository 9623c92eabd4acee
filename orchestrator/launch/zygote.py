"""The fork server (zygote): one process that imports torch, the worker code and the campaign's
recipes once, then forks a fresh child per worker job.

Run as ``python -m orchestrator.launch.zygote FD`` by :class:`orchestrator.launch.forkserver.
ForkServer` (never by hand): FD is its end of a ``SOCK_SEQPACKET`` socket pair. Each request is
one JSON message; with it come, as passed descriptors, the socket its replies go to and, for a
job, the job's stdout and stderr log files.

* ``{"op": "preload", "recipes": [...]}``: import each recipe's builder module (what the
  recipe declares comes back: host-only, external, or the import error), then check that a
  fork is still sound. Replies ``{"recipes": {...}, "hazard": reason-or-null, "threads": n}``.
* ``{"op": "run", "module": M, "argv": [...], "env": {...}}``: fork; the child becomes exactly
  ``python -m M argv...`` with ``env`` as its whole environment and the two log files as its
  stdout and stderr, in a session of its own (so a time-out kills its process group and never
  the server). Replies ``{"pid": ...}`` at once, ``{"exit": returncode}`` when the child ends
  (negative: the signal that ended it, as :class:`subprocess.Popen` reports it); or
  ``{"refused": reason}`` without forking, when a fork is not sound here.

Why a fork is sound: the server never initialises a device (no CUDA/MUSA runtime: checked
before every fork through the device seam, and in a probe child after every preload, where
torch's bad-fork flag shows a runtime touched by a device count), never runs a torch op (no
OpenMP/intra-op thread pool has started, so the child's pool starts fresh at the size a spawned
process would pick), and has exactly one thread when it forks (checked before every fork, after
letting fork-aware pools such as OpenBLAS's stop, see :func:`hazard`: a recipe module that
starts a thread of its own at import makes the server refuse; the launcher then spawns). It
stops when the launcher's end of the socket closes (the launcher exited, was killed, or closed
it), killing the children still running first; each child dies with it (parent-death signal).
"""

from __future__ import annotations

import atexit
import importlib
import json
import logging
import os
import random
import runpy
import selectors
import signal
import socket
import sys
import threading
import traceback
from typing import Any, Optional, TypedDict

from orchestrator.platform import device as devmod
from orchestrator.platform.children import die_with_parent, signal_group
from orchestrator.worker.bootstrap import load_recipe

MAX_MESSAGE = 1 << 22  # a request carries an environment: far below this
MAX_FDS = 4
# imported before any job: the worker entry points (timed and profiled trials, probes) with
# torch and the optimizer machinery a recipe's first step pulls in (torch.optim; the first
# AdamW step imports torch._dynamo)
BASE_MODULES = ("torch", "torch.optim", "torch._dynamo", "orchestrator.worker.trial",
                "orchestrator.worker.probe")


def thread_count() -> int:
    """Threads of this process as the kernel sees them (torch's pools included), not only
    Python's."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def hazard() -> Optional[str]:
    """Why forking now would not be sound, or None.

    A thread pool that knows about fork stops its threads in its own pre-fork handler and starts
    them again only when next used: OpenBLAS, loaded with numpy when torch is imported, starts
    its pool at load and does so. When the server has more than one thread, one probe fork lets
    such pools stop; a thread still there after it (one no pre-fork handler stopped) makes a
    fork unsound."""
    if thread_count() > 1:
        probe_child()
    n = thread_count()
    if n > 1:
        return (f"the fork server has {n} threads (an import started one that no pre-fork "
                "handler stops); forking a multi-threaded process is unsafe")
    return devmod.fork_safety()


class ForkRequest(TypedDict, total=False):
    """A launcher's request to the fork server (JSON over its socket): ``preload`` recipes,
    or ``run`` one job as ``python -m module argv``."""

    op: str  # preload | run
    recipes: list[str]
    module: str
    argv: list[str]
    env: dict[str, str]
    cwd: str
    ignore_job_signals: bool


class RecipeFacts(TypedDict, total=False):
    """What the fork server's import of one recipe told (``error``: its import failed)."""

    host_only: bool
    external: bool
    error: str


class ForkReply(TypedDict, total=False):
    """One message of the fork server to a launcher (JSON over the request's reply socket):
    a preload's answer, a fork's pid or refusal, or the forked job's exit code."""

    recipes: dict[str, RecipeFacts]
    hazard: str | None
    threads: int
    base_errors: dict[str, str]  # module -> why its import failed
    pid: int
    refused: str
    server_threads: int
    exit: int


def send(sock: socket.socket, msg: ForkReply) -> None:
    try:
        sock.send(json.dumps(msg).encode())
    except OSError:  # the launcher stopped waiting (interrupted): nothing to tell
        pass


def peer_gone(sock: socket.socket) -> bool:
    """True when the other end of a reply socket is closed."""
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


def preload_base() -> dict[str, str]:
    errors = {}
    try:  # first: torch without its autoloaded extensions (torch_musa's import counts devices)
        devmod.preload_for_fork()
    except Exception as exc:  # a broken torch: reported; the jobs then spawn
        errors["torch"] = devmod.autoload_failure(exc) or f"{type(exc).__name__}: {exc}"
        return errors
    for name in BASE_MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:  # reported to the launcher; the jobs then spawn
            errors[name] = f"{type(exc).__name__}: {exc}"
    return errors


def preload_recipes(names: list[str]) -> dict[str, RecipeFacts]:
    out: dict[str, RecipeFacts] = {}
    for name in names:
        try:
            recipe = load_recipe(name)
            out[name] = {"host_only": bool(recipe.host_only), "external": bool(recipe.external)}
        except BaseException as exc:  # a broken recipe fails in its trial, as when spawned
            if isinstance(exc, KeyboardInterrupt):
                raise
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def probe_child() -> Optional[str]:
    """Fork once and ask the child whether the device runtimes are usable there."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the probe child
        try:
            os.close(r)
            why = devmod.fork_safety() or ""
            os.write(w, why.encode()[:4000])
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        why = fh.read().decode(errors="replace")
    os.waitpid(pid, 0)
    return why or None


class Server:
    def __init__(self, ctrl: socket.socket) -> None:
        self.ctrl = ctrl
        self.children: dict[int, socket.socket] = {}
        self.base_errors = preload_base()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)

    def serve(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.ctrl, selectors.EVENT_READ)
        sel.register(self.wake_r, selectors.EVENT_READ)
        while True:
            for key, _ in sel.select():
                if key.fileobj is self.wake_r:
                    try:
                        while os.read(self.wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                    continue
                msg, fds, flags, _ = socket.recv_fds(self.ctrl, MAX_MESSAGE, MAX_FDS)
                if not msg:  # the launcher is gone: so are its jobs
                    self.stop_children()
                    return
                try:
                    self.handle(json.loads(msg), fds)
                except Exception as exc:  # a bad request must not end the server
                    print(f"fork server: request failed: {exc!r}", file=sys.stderr, flush=True)
            self.reap()

    def handle(self, msg: ForkRequest, fds: list[int]) -> None:
        reply = socket.socket(fileno=fds[0])
        if msg.get("op") == "preload":
            recipes = preload_recipes(list(msg.get("recipes", [])))
            why = hazard() or probe_child()  # in the child: a device runtime touched here
            send(reply, {"recipes": recipes, "hazard": why, "threads": thread_count(),
                         "base_errors": self.base_errors, "pid": os.getpid()})
            reply.close()
            return
        out_fd, err_fd = fds[1], fds[2]
        threads = thread_count()
        why = ("could not import " + "; ".join(f"{k} ({v})" for k, v in self.base_errors.items())
               if self.base_errors else hazard())
        if peer_gone(reply):  # the launcher stopped waiting for this one: never start it
            why = "the launcher no longer waits for this job"
        if why:
            send(reply, {"refused": why})
            reply.close()
            os.close(out_fd)
            os.close(err_fd)
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child; never returns
            try:
                self.become_child(msg, reply, out_fd, err_fd)
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(70)
        os.close(out_fd)
        os.close(err_fd)
        self.children[pid] = reply
        send(reply, {"pid": pid, "server_threads": threads})

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            reply = self.children.pop(pid, None)
            if reply is not None:
                send(reply, {"exit": os.waitstatus_to_exitcode(status)})
                reply.close()

    def stop_children(self) -> None:
        for pid in list(self.children):
            signal_group(pid, signal.SIGKILL)
        for pid in list(self.children):
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass

    def become_child(self, msg: ForkRequest, reply: socket.socket, out_fd: int,
                     err_fd: int) -> None:
        """Turn this forked process into ``python -m MODULE ARGV`` for one job, then exit."""
        server_pid = os.getppid()
        os.setsid()  # a session of its own: a time-out kills its group, never the server
        die_with_parent()
        if os.getppid() != server_pid:  # the server died before the line above
            os._exit(70)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if msg.get("ignore_job_signals"):  # inside a Slurm job: the job process decides
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        for s in (self.ctrl, reply, *self.children.values()):
            s.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.close(out_fd)
        os.close(err_fd)
        os.environ.clear()
        os.environ.update(msg["env"])
        if msg.get("cwd"):
            os.chdir(msg["cwd"])
        reseed()
        rc = run_module_as_main(msg["module"], list(msg["argv"]))
        os._exit(rc)


def reseed() -> None:
    """A fresh process seeds Python's and numpy's global generators from the OS; a fork would
    share the server's state with every sibling. torch's default generator is left as the
    server's imports left it: a spawned process has the same state after the same imports."""
    random.seed()
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed()


def exit_code(code: Any) -> int:
    """The exit status Python gives ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run_module_as_main(module: str, argv: list[str]) -> int:
    """What ``python -m module argv...`` does from here on: run the worker's ``main(argv)``
    (what its ``if __name__ == "__main__": sys.exit(main())`` runs; the module is already
    imported, so it is not executed a second time), or a module without one as ``__main__``;
    turn SystemExit or an uncaught exception into the exit status, run the atexit handlers and
    flush the streams (the caller then leaves with ``os._exit``)."""
    try:
        mod = importlib.import_module(module)
        main = getattr(mod, "main", None)
        sys.argv = [getattr(mod, "__file__", None) or module, *argv]
        if callable(main):
            rc = exit_code(main(argv))
        else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            rc = 0
    except SystemExit as exc:
        rc = exit_code(exc.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        rc = 128 + signal.SIGINT
    except BaseException:
        traceback.print_exc()
        rc = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # non-daemon threads, as at exit
    except Exception:
        pass
    try:
        atexit._run_exitfuncs()
    except Exception:
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    return rc


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (1, 2) or argv[1:] not in ([], ["--ignore-job-signals"]):
        # no handler configured here: logging's last-resort handler writes it to stderr
        logging.getLogger(__name__).error(
            "usage: python -m orchestrator.launch.zygote FD [--ignore-job-signals] (started by "
            "the launcher)")
        return 2
    if argv[1:]:  # inside a Slurm job: preemption and cancel signal every process of the job;
        # the job process decides (as for its workers, processes.ignore_job_signals)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    ctrl = socket.socket(fileno=int(argv[0]))
    Server(ctrl).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
