"""How a worker process starts: forked from the campaign's fork server, or spawned.

``launcher.start_method``: ``auto`` (default) forks every job it soundly can from one fork server
per launcher (:mod:`orchestrator.launch.zygote`: torch, the worker code and the campaign's
recipes imported once) and spawns the rest, saying why; ``forkserver`` is ``auto`` with the
pre-flight refusing a configuration whose trials could never fork (an ``env.*`` switch read
when torch is imported, a multi-rank workload); ``spawn`` always starts ``python -m <worker>``.

A job spawns, and its record says why (``start_method_why``), when:

* the batch's (the campaign's) ``env.*`` switches name a setting read before or while torch is
  imported (:func:`pre_import_var`): every job of the batch spawns, so the start method never
  differs between the arms it would confound;
* its own environment differs from the fork server's in such a setting (e.g. a device set
  pinned with ``CUDA_VISIBLE_DEVICES`` other than the one the server started with);
* it has several ranks (``torch.distributed.run`` starts them; forking the agent saves
  nothing, each rank is a fresh interpreter anyway);
* its recipe is host-only or external (it never imports torch: a fork would bring torch along);
* the fork server cannot fork soundly (a second thread, an initialised device runtime), could
  not import what it preloads, or died.

A forked child is isolated as a spawned process is: its own process, memory, session and
device context. A segfault, a ``kill -9``, a hang past its time limit (its process group is
killed) or an OOM ends the child, which the server reaps and reports; the record comes from
:func:`orchestrator.launch.base.job_outcome` exactly as for a spawned process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from typing import IO, TYPE_CHECKING, Mapping, Optional, Sequence

from orchestrator.platform.children import GRACE_S, signal_group, start_child
from recipes.registry import REGISTRY

if TYPE_CHECKING:
    from orchestrator.launch.zygote import ForkReply, ForkRequest, RecipeFacts
    from orchestrator.spec.jobs import WorkerJob

START_METHODS = ("auto", "spawn", "forkserver")
FORK_SERVER = "fork-server"  # the record's start_method values
SPAWN = "spawn"

# Settings a process reads before or while it imports torch (the allocator, thread pools,
# device visibility, the dynamic loader, the interpreter, torch's own import-time flags): a
# fork of a server that imported torch under other values would not honour them.
PRE_IMPORT_NAMES = frozenset({
    "LD_PRELOAD", "LD_LIBRARY_PATH", "GLIBC_TUNABLES",
    "CUDA_VISIBLE_DEVICES", "MUSA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
    "OPENBLAS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS",
})
PRE_IMPORT_PREFIXES = (
    "PYTORCH_",  # PYTORCH_CUDA_ALLOC_CONF, PYTORCH_MUSA_ALLOC_CONF, PYTORCH_NO_CUDA_MEMORY_CACHING
    "TORCH",  # TORCH_LOGS, TORCHDYNAMO_*, TORCHINDUCTOR_* (read when their config imports)
    "OMP_", "KMP_", "GOMP_", "MKL_",  # thread counts and affinity of the thread pools
    "MALLOC_",  # glibc malloc tunables
    "PYTHON",  # PYTHONHASHSEED, PYTHONMALLOC, PYTHONPATH: fixed when the interpreter starts
)
SERVER_START_LIMIT_S = 600.0  # importing torch on a loaded machine, with margin
REPLY_LIMIT_S = SERVER_START_LIMIT_S  # a fork's first reply (the server may be preloading)


# ... but these name a cache folder that torch and Triton look up each time they use it
# (torch._inductor.runtime.cache_dir_utils, Triton's cache manager), so a fork honours them:
# each arm's own caches (protocol.compile_cache=arm) do not cost a fresh interpreter per trial
READ_AT_USE_NAMES = frozenset({"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"})


def pre_import_var(name: str) -> bool:
    """True when ``name`` is a setting read before or while torch is imported."""
    if name in READ_AT_USE_NAMES:
        return False
    return name in PRE_IMPORT_NAMES or name.startswith(PRE_IMPORT_PREFIXES)


def env_switch_reason(env_names: Sequence[str]) -> Optional[str]:
    """Why a campaign whose arms set these ``env.*`` switches must spawn, or None."""
    names = sorted({n for n in env_names if pre_import_var(n)})
    if not names:
        return None
    shown = ", ".join(f"env.{n}" for n in names)
    return (f"the sweep sets {shown}, read when torch is imported: every trial starts a fresh "
            "interpreter")


class ForkServerError(RuntimeError):
    """The fork server refused a job or is gone; nothing was forked (the job spawns)."""


class ForkServerLost(ForkServerError):
    """The fork server died while its child ran (the child died with it)."""


def _recv(sock: socket.socket, timeout_s: Optional[float]) -> Optional[ForkReply]:
    """One message; None on EOF (the server is gone). Raises socket.timeout."""
    sock.settimeout(timeout_s)
    data = sock.recv(1 << 20)
    return json.loads(data) if data else None


class ForkServer:
    """The launcher's handle on one fork server process."""

    def __init__(self, python: str, env: Mapping[str, str],
                 ignore_job_signals: bool = False) -> None:
        self.python = python
        self.env = dict(env)  # the environment the server imported torch under
        self._lock = threading.Lock()
        # the server's own output (an import's warning, a crash) is read only to say why it
        # failed; removed when it stops
        fd, self.log_path = tempfile.mkstemp(prefix="orch-forkserver-", suffix=".log")
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._t0 = time.monotonic()
        self.ready_s: Optional[float] = None  # start until its imports were done
        try:
            # no parent-death signal: it would fire when the starting thread ends (a parallel
            # group's); the server stops at EOF on its socket instead, which our exit causes
            self.proc = start_child(
                [python, "-m", "orchestrator.launch.zygote", str(theirs.fileno()),
                 *(["--ignore-job-signals"] if ignore_job_signals else [])],
                stdout=fd, stderr=fd, stdin=subprocess.DEVNULL, env=self.env,
                preexec_fn=None, pass_fds=(theirs.fileno(),))
        except OSError:
            mine.close()
            os.unlink(self.log_path)
            raise
        finally:
            theirs.close()
            os.close(fd)
        self.sock = mine
        self.pid = self.proc.pid
        self.recipes: dict[str, RecipeFacts] = {}
        self.hazard: Optional[str] = None
        self.threads: Optional[int] = None
        # the server stops when its end of the socket sees EOF: closing ours (or our exit) is
        # enough; the finalizer also waits for it and removes its log
        self._finalizer = weakref.finalize(self, _shutdown, self.proc, self.sock, self.log_path)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, chars: int = 2000) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                return fh.read().decode(errors="replace")[-chars:].strip()
        except OSError:
            return ""

    def _request(self, msg: ForkRequest, fds: Sequence[int]) -> socket.socket:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with self._lock:
                socket.send_fds(self.sock, [json.dumps(msg).encode()], [theirs.fileno(), *fds])
        except OSError as exc:
            mine.close()
            raise ForkServerError(f"the fork server is gone ({exc}){self._died()}") from exc
        finally:
            theirs.close()
        return mine

    def _died(self) -> str:
        rc = self.proc.poll()
        tail = self.log_tail(600)
        return ((f"; it exited with {rc}" if rc is not None else "")
                + (f": {tail}" if tail else ""))

    def preload(self, recipes: Sequence[str]) -> None:
        """Import these recipes in the server (the first call waits for its own imports)."""
        todo = [r for r in dict.fromkeys(recipes) if r not in self.recipes]
        if not todo and self.threads is not None:
            return
        with self._request({"op": "preload", "recipes": todo}, ()) as sock:
            try:
                reply = _recv(sock, SERVER_START_LIMIT_S)
            except socket.timeout as exc:
                raise ForkServerError("the fork server did not answer within "
                                      f"{SERVER_START_LIMIT_S:g} s") from exc
        if reply is None:
            raise ForkServerError(f"the fork server died while preloading{self._died()}")
        if self.ready_s is None:
            self.ready_s = time.monotonic() - self._t0
        self.recipes.update(reply["recipes"])
        self.threads = reply.get("threads")
        errors = reply.get("base_errors") or {}
        self.hazard = reply.get("hazard") or ("the fork server could not import " + "; ".join(
            f"{k} ({v})" for k, v in errors.items()) if errors else None)

    def run(self, module: str, argv: list[str], env: Mapping[str, str], stdout: IO[bytes],
            stderr: IO[bytes], timeout_s: Optional[float], cwd: Optional[str] = None,
            ignore_job_signals: bool = False) -> Optional[int]:
        """Fork ``python -m module argv`` and wait for it, as :func:`processes.run_child`
        does: its exit code (negative: the signal), or None when ``timeout_s`` passed (its
        process group is killed then). Any exception while waiting (Ctrl-C) kills it too and is
        re-raised. Raises :class:`ForkServerError` when nothing was forked,
        :class:`ForkServerLost` when the server died under the child."""
        msg: ForkRequest = {"op": "run", "module": module, "argv": argv, "env": dict(env),
                            "cwd": cwd or os.getcwd(), "ignore_job_signals": ignore_job_signals}
        start = time.monotonic()
        with self._request(msg, (stdout.fileno(), stderr.fileno())) as sock:
            try:
                first = _recv(sock, REPLY_LIMIT_S)
            except socket.timeout as exc:
                raise ForkServerError(f"no fork within {REPLY_LIMIT_S:g} s") from exc
            if first is None:
                raise ForkServerError(f"the fork server died before forking{self._died()}")
            if "refused" in first:
                raise ForkServerError(first["refused"])
            pid = int(first["pid"])
            try:
                left = None if timeout_s is None else max(0.0, timeout_s - (time.monotonic()
                                                                            - start))
                done = _recv(sock, left)
            except socket.timeout:
                self._stop(pid, sock)
                return None
            except BaseException:
                self._stop(pid, sock)
                raise
            if done is None:
                raise ForkServerLost(f"the fork server died while the job ran{self._died()}")
            return int(done["exit"])

    def _stop(self, pid: int, sock: socket.socket) -> None:
        """SIGTERM the child's process group, SIGKILL it after the grace period; wait until
        the server reports it reaped."""
        for sig, wait_s in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 60.0)):
            if not signal_group(pid, sig):
                return
            try:
                _recv(sock, wait_s)  # its exit, or EOF: the server (and so the child) is gone
                return
            except socket.timeout:
                continue
            except OSError:
                return

    def close(self) -> None:
        self._finalizer()


def _shutdown(proc: subprocess.Popen[bytes], sock: socket.socket, log_path: str) -> None:
    sock.close()  # EOF: the server kills what it still runs and exits
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    try:
        os.unlink(log_path)
    except OSError:
        pass


HOST_ONLY_WHY = ("host-only recipe: it never imports torch, a fork of the fork server would "
                 "bring torch along")


def _declared_host_only(recipe: str) -> bool:
    """Whether a registered recipe declares itself host-only (recipes.base.host_only_recipe),
    read here without starting the fork server (whose start imports torch); an import-path
    recipe, or one that cannot be read here, is left to the server's preload."""
    if recipe not in REGISTRY:
        return False
    # start-up cost: the pre-flight imports this module, and needs no recipe
    from orchestrator.worker.bootstrap import load_recipe

    try:
        return bool(load_recipe(recipe).host_only)
    except Exception:  # noqa: BLE001 (the trial reports a recipe that cannot load)
        return False


class Starter:
    """Decides how each worker job of a launcher starts, and owns its fork server (started at
    the first job that may fork, with that job's environment; one per launcher, hence one per
    campaign, or per Slurm job). Thread-safe: parallel groups share it."""

    def __init__(self, method: str = "auto", python: Optional[str] = None,
                 ignore_job_signals: bool = False) -> None:
        if method not in START_METHODS:
            raise ValueError(f"start method {method!r}: use one of {', '.join(START_METHODS)}")
        self.method = method
        self.python = python or sys.executable
        self.ignore_job_signals = ignore_job_signals
        self.server: Optional[ForkServer] = None
        self.broken: Optional[str] = None  # why the fork server is out of use
        self.batch_why: Optional[str] = None
        self._recipes: list[str] = []
        self._lock = threading.Lock()

    def prepare(self, jobs: Sequence[WorkerJob]) -> None:
        """Before a batch (a round's trials, the gate's probes): whether its env.* switches
        force a spawn, and its recipes to preload (now when the server runs, else at its
        start)."""
        if self.method == "spawn":
            return
        self.batch_why = env_switch_reason([k for j in jobs for k in j.env])
        recipes = [str(j.workload.get("recipe")) for j in jobs if j.workload.get("recipe")]
        with self._lock:
            self._recipes = list(dict.fromkeys([*self._recipes, *recipes]))
            if self.server is not None and self.broken is None:
                self._preload(self.server, recipes)

    def _preload(self, server: ForkServer, recipes: Sequence[str]) -> None:
        try:
            server.preload(recipes)
        except ForkServerError as exc:
            self.broken = f"fork server unavailable: {exc}"

    def choose(self, job: WorkerJob, env: Mapping[str, str]) -> tuple[Optional[ForkServer], str]:
        """(the server to fork the job from, "") or (None, why it spawns)."""
        if self.method == "spawn":
            return None, "launcher.start_method=spawn"
        if self.batch_why:
            return None, self.batch_why
        if job.nproc() > 1:
            return None, (f"multi-rank ({job.nproc()} ranks): each rank is a fresh interpreter "
                          "started by torch.distributed.run or Slurm")
        if _declared_host_only(str(job.workload.get("recipe"))):  # no server started for it
            return None, HOST_ONLY_WHY
        with self._lock:
            if self.broken:
                return None, self.broken
            server = self.server
            if server is None:
                try:
                    server = self.server = ForkServer(self.python, env, self.ignore_job_signals)
                except OSError as exc:
                    self.broken = f"fork server unavailable: cannot start it: {exc}"
                    return None, self.broken
                self._preload(server, self._recipes)
            recipe = str(job.workload.get("recipe"))
            if self.broken is None and recipe not in server.recipes:
                self._preload(server, [recipe])
            if self.broken:
                return None, self.broken
        if server.hazard:
            return None, f"the fork server cannot fork soundly: {server.hazard}"
        info = server.recipes.get(recipe, {})
        if info.get("host_only"):
            return None, HOST_ONLY_WHY
        for name in sorted(set(env) | set(server.env)):
            if pre_import_var(name) and env.get(name) != server.env.get(name):
                return None, (f"{name} differs from the fork server's, and torch reads it when "
                              "imported")
        return server, ""

    def lost(self, exc: ForkServerError) -> str:
        """A fork server failure: the server is out of use from now on; the reason."""
        with self._lock:
            if self.server is not None and not self.server.alive:
                self.broken = f"fork server unavailable: {exc}"
        return f"fork server: {exc}"

    def close(self) -> None:
        with self._lock:
            if self.server is not None:
                self.server.close()
                self.server = None
