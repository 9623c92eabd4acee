"""Your own training loop, paired by steps: the few calls a trainer makes so that a campaign can
switch arms between its steps (``protocol.pairing=steps`` for a ``command`` workload).

Standard library only at import time (torch is looked up, never imported, when a block's end
synchronises the device)::

    from orchestrator import client

    for step in client.steps(max_iters):          # in a campaign: as many as the plan needs
        knobs = client.params({"attn": "sdpa"})    # this arm's values; read it every step
        with client.timed():                       # this step's work (no device sync here)
            loss = train_step(batch, knobs)
        client.report(loss=loss)                   # optional; read outside the timed window

Outside a campaign (no ``ORCH_CLIENT`` in the environment) every call is a cheap no-op:
``steps(n)`` is ``range(n)``, ``params`` returns the defaults, ``timed`` times nothing, so the
same script trains as it always did.

Inside a campaign the trial process that started the command listens on the channel it
names in ``ORCH_CLIENT``: a path is a Unix socket on this machine (a command on one machine);
``tcp://HOST:PORT`` a TCP port of the first node, for a command whose ranks span machines (the
client retries the connection for up to ``CONNECT_WAIT_S`` seconds, as ranks on another node
may start before it listens, and turns Nagle off: one small message per block). Either way it
hands the command a token of that trial in ``ORCH_CLIENT_TOKEN``. Every rank (``RANK`` / ``WORLD_SIZE``, as torchrun sets them) connects
with the token; a connection without it (a stray process, another campaign's client) is refused
and recorded, and never changes an arm's status. Once a rank has connected, both variables are
taken out of its environment, so a helper process the trainer starts afterwards (a logger, a
data server) does not inherit them. The orchestrator hands all ranks the same next block: which
arm, its params, how many steps. So every rank switches at the same step, decided once. The
steps' times and losses go back at the end of a batch, and
the reply is the next batch of blocks (or the end): the blocks whose order and length the
orchestrator can decide ahead (a whole number of cycles), so most steps see no message but a
one-line note of which block starts. Which params the trainer read goes with them, so a
param declared switchable but never read, or read but not declared, is refused instead of
measuring the same code twice.

Timing keeps the trainer's overlap: no window synchronises the device. The device (CUDA or
MUSA, where torch has started it) is synchronised once at each block's boundary, the end of
one block and the start of the next, before the block's times are read. Within the block the
host's clock times each window on the CPU; on a GPU each window is timed by two device events
recorded on the current stream at its ends (created once, reused block after block), read
after the block's sync. A step's time is the sum of its windows between two ``steps()``
iterations: with gradient accumulation, each micro-batch may have its own ``timed()`` window,
and they add up to the one step; a window opened inside another is part of it and counts once.
Every rank sends its own times; the orchestrator takes a step's slowest rank's as its time
and keeps every rank's beside it (rank 0's among them), the skew and the slowest rank.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any, TypedDict

ENV = "ORCH_CLIENT"  # the channel: a Unix socket's path or tcp://HOST:PORT, set for the command
TOKEN_ENV = "ORCH_CLIENT_TOKEN"  # the trial's token, which every hello must carry
# in the trial process's own environment (set by a launcher whose command spans machines):
# HOST or HOST:PORT (port 0 or none: one the OS picks) where the channel listens over TCP
LISTEN_ENV = "ORCH_CLIENT_LISTEN"
TCP_SCHEME = "tcp://"
CONNECT_TIMEOUT_S = 10.0  # one TCP connection attempt
CONNECT_WAIT_S = 60.0  # all attempts: the first node's trial process may not listen yet
# one arm per process (protocol.pairing=process): that arm's switchable params as JSON, which
# params() returns with no channel (step times then come from the command's log)
PARAMS_ENV = "ORCH_CLIENT_PARAMS"
PROTOCOL = 2  # 2: the hello carries the trial's token

__all__ = ["ClientError", "active", "arm", "begin", "end", "params", "report", "steps", "timed"]


class Message(TypedDict, total=False):
    """A rank's message to the channel, one JSON line (``op``: hello, next, error or bye; the
    channel reads only the keys its op carries)."""

    op: str
    protocol: int
    rank: int
    world: int
    pid: int
    token: str
    # next: the batch's blocks, [block, [[seconds, loss, tags] per step]] each (mixed arrays)
    blocks: list[list[Any]]
    read: list[str]
    clock: str
    block: int  # at: the block rank 0 starts
    message: str  # error: why this trainer cannot be measured


class Block(TypedDict):
    """One block of a batch that the channel hands every rank (a reply's ``blocks``)."""

    block: int
    arm: str
    params: dict[str, Any]  # the arm's switchable params: the user's own values (any JSON)
    steps: int


class Reply(TypedDict, total=False):
    """The channel's reply to a rank's message: the welcome to a hello (``switchable``,
    ``world``), the next batch (``blocks``), the end (``done``), or a refusal (``error``)."""

    switchable: list[str]
    world: int
    blocks: list[Block]
    done: bool
    error: str | None


class ClientError(RuntimeError):
    """The trainer used the client in a way the campaign cannot measure (the orchestrator is
    told the reason before this is raised, so the trial's record carries it)."""


def _device() -> Any:
    """The device module torch has started (``torch.cuda``, else ``torch.musa``), None when
    neither is (then the host's clock times the windows and nothing is synchronised)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_initialized():
        return cuda
    musa = getattr(torch, "musa", None)
    if musa is not None and getattr(musa, "is_initialized", lambda: False)():
        return musa
    return None


class _Timed:
    """``with client.timed():`` around a step's work (or one micro-batch's)."""

    __slots__ = ("_session",)

    def __init__(self, session: _Session | None) -> None:
        self._session = session

    def __enter__(self) -> _Timed:
        if self._session is not None:
            self._session.window_begin()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._session is not None:
            self._session.window_end()


class _Session:
    """One rank's conversation with the campaign's trial process."""

    def __init__(self, address: str, token: str) -> None:
        self.rank = int(os.environ.get("RANK", "0") or 0)
        self.world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        self.sock = _connect(address)
        self.reader = self.sock.makefile("rb")
        welcome = self._call({"op": "hello", "protocol": PROTOCOL, "rank": self.rank,
                              "world": self.world, "pid": os.getpid(), "token": token})
        self.declared = frozenset(welcome.get("switchable", ()))
        self.block = -1  # the block being run (-1: none yet)
        self.left = 0  # its steps still to run
        self.arm = ""
        self.values: dict[str, Any] = {}
        # this block's [seconds, loss, tags, first event] per step: seconds on the host's
        # clock (0.0 where device events time its windows), its first event's index or -1
        self.rows: list[list[Any]] = []
        self.batch: list[Block] = []  # the blocks of this batch still to run
        self.done_blocks: list[list[Any]] | None = None  # [block, rows] run in this batch
        self.row: list[Any] | None = None
        self.read: set[str] = set()
        self.done = False
        self.depth = 0  # timed windows open (one inside another counts once)
        self.t0 = 0.0  # the host's clock at the outermost open window's start
        self.dev: Any = None  # the device module whose events time the windows (None: host)
        self.events: list[Any] = []  # its timing events, reused block after block
        self.used = 0  # the events recorded in this block

    def _send(self, msg: Message) -> None:
        self.sock.sendall(json.dumps(msg, separators=(",", ":")).encode() + b"\n")

    def _call(self, msg: Message) -> Reply:
        self._send(msg)
        line = self.reader.readline()
        if not line:
            raise ClientError("the campaign's trial process closed the client channel")
        reply: Reply = json.loads(line)
        if reply.get("error"):
            raise ClientError(str(reply["error"]))
        return reply

    def fail(self, message: str) -> ClientError:
        """Tell the orchestrator why this trainer cannot be measured; the error to raise."""
        try:
            self._send({"op": "error", "rank": self.rank, "message": message})
        except OSError:
            pass
        return ClientError(message)

    def next_step(self) -> bool:
        """Before each step: close the last one; at a block's end start the next block of the
        batch (telling the orchestrator which, without waiting), and at a batch's end hand its
        steps over and take the next batch. False when the plan is done."""
        if self.depth:
            raise self.fail(f"step {self.block}:{len(self.rows) - 1} ended with its "
                            "client.timed() window open: close it (client.end()) in the step")
        if self.row is not None and self.row[0] is None:
            raise self.fail(f"step {self.block}:{len(self.rows) - 1} had no client.timed() "
                            "window: wrap each step's work in `with client.timed():`")
        while self.left == 0:
            self._settle()  # the block's end and the next one's start: the one device sync
            if self.done_blocks is not None:
                self.done_blocks.append([self.block, self.rows])
            if self.batch:  # the next block of this batch: no reply awaited
                self._start(self.batch.pop(0))
                self.sock.sendall(b'{"op":"at","rank":%d,"block":%d}\n' % (self.rank, self.block))
                continue
            reports = [[b, [[t, _number(loss), tags] for t, loss, tags, _ in rows]]
                       for b, rows in self.done_blocks or ()]
            reply = self._call({"op": "next", "rank": self.rank, "blocks": reports,
                                "read": sorted(self.read),
                                "clock": "device events" if self.dev is not None
                                else "host clock"})
            if reply.get("done"):
                self.done, self.row = True, None
                return False
            self.done_blocks, self.batch = [], list(reply["blocks"])
            self._start(self.batch.pop(0))
        self.left -= 1
        self.row = [None, None, "", -1]
        self.rows.append(self.row)
        return True

    def _start(self, blk: Block) -> None:
        self.block, self.left = int(blk["block"]), int(blk["steps"])
        self.arm, self.values = str(blk["arm"]), dict(blk["params"])
        self.rows = []

    def _settle(self) -> None:
        """At a block's boundary: wait for the device's queued work, then add each step's
        windows timed by device events to its seconds (the events are free again)."""
        dev = self.dev if self.dev is not None else _device()
        if dev is None:
            return
        dev.synchronize()
        self.dev = dev
        if not self.used:
            return
        ev, marked = self.events, [row for row in self.rows if row[3] >= 0]
        for k, row in enumerate(marked):  # a step's events run up to the next step's first
            stop = marked[k + 1][3] if k + 1 < len(marked) else self.used
            row[0] += sum(ev[i].elapsed_time(ev[i + 1]) for i in range(row[3], stop, 2)) / 1e3
        self.used = 0

    def _event(self) -> Any:
        """The next of this block's device events (one more is made only when a block records
        more than any before it)."""
        i = self.used
        if i == len(self.events):
            self.events.append(self.dev.Event(enable_timing=True))
        self.used = i + 1
        return self.events[i]

    def window_begin(self) -> None:
        """A timed window opens (one inside an open window only deepens it)."""
        if self.depth == 0:
            row = self.row
            if row is None:
                raise self.fail("client.timed() outside the client.steps() loop")
            if self.dev is None:  # torch may start the device after the block's start
                self.dev = _device()
            if self.dev is not None:
                if row[3] < 0:
                    row[3] = self.used
                self._event().record()
            else:
                self.t0 = time.perf_counter()
        self.depth += 1

    def window_end(self) -> None:
        """A timed window closes; the outermost adds its time to the step's."""
        if self.depth == 0:  # client.end() with no window open
            return
        self.depth -= 1
        if self.depth:
            return
        row = self.row
        assert row is not None  # a window opens only in a step, and the step outlasts it
        if self.dev is not None:
            self._event().record()
            if row[0] is None:
                row[0] = 0.0  # the events' time is added at the block's end
        else:
            dt = time.perf_counter() - self.t0
            row[0] = dt if row[0] is None else row[0] + dt

    def params(self, defaults: dict[str, Any]) -> dict[str, Any]:
        if self.row is None:
            raise self.fail("client.params() before the first step: read it inside the "
                            "client.steps() loop, so that each block's arm takes effect")
        out = dict(defaults)
        for key in defaults:
            if key not in self.declared:
                raise self.fail(f"the trainer reads param {key!r} through client.params(), but "
                                f"the workload does not declare it in workload.switchable "
                                f"({', '.join(sorted(self.declared)) or 'none declared'})")
            self.read.add(key)
            if key in self.values:
                out[key] = self.values[key]
        return out

    def report(self, loss: Any, tags: str) -> None:
        if self.row is not None:
            self.row[1] = loss
            if tags:
                self.row[2] = tags

    def close(self) -> None:
        try:
            self._send({"op": "bye", "rank": self.rank})
        except OSError:
            pass
        self.sock.close()


def _connect(address: str) -> socket.socket:
    """The channel's socket: a Unix socket's path, or ``tcp://HOST:PORT`` (tried again until
    CONNECT_WAIT_S has passed: the listener on the first node may not be reachable yet)."""
    if not address.startswith(TCP_SCHEME):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(address)
        except OSError as exc:
            sock.close()
            raise ClientError(f"cannot reach the campaign's trial process at {ENV}={address} "
                              f"({exc.strerror or exc})") from None
        return sock
    host, sep, port = address[len(TCP_SCHEME):].rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # [IPv6]
    if not sep or not host or not port.isdigit():
        raise ClientError(f"{ENV}={address} is neither a Unix socket's path nor "
                          f"{TCP_SCHEME}HOST:PORT: unset it to run outside a campaign")
    deadline = time.monotonic() + CONNECT_WAIT_S
    pause = 0.05
    while True:
        try:
            sock = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
            break
        except OSError as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ClientError(f"cannot reach the campaign's trial process at {ENV}={address} "
                                  f"in {CONNECT_WAIT_S:g} s of tries ({exc.strerror or exc})"
                                  ) from None
            time.sleep(min(pause, left))
            pause = min(2 * pause, 1.0)
    sock.settimeout(None)  # a reply may wait for the slowest rank's whole batch
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # Nagle: tens of ms a block
    return sock


def _number(value: Any) -> float | None:
    """A loss as a float (a tensor is read here, outside the timed window); None stays None."""
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.detach().float().item() if hasattr(value, "detach") else value.item()
    return float(value)  # nan and inf travel as JSON's NaN / Infinity (Python reads them)


_session: _Session | None = None
_looked = False


def _current() -> _Session | None:
    global _session, _looked
    if not _looked:
        _looked = True
        address = os.environ.get(ENV)
        if address:
            token = os.environ.get(TOKEN_ENV, "")
            _session = _Session(address, token)
            # this rank holds the channel now: what it starts later must not say hello too
            os.environ.pop(ENV, None)
            os.environ.pop(TOKEN_ENV, None)
    return _session


def active() -> bool:
    """Whether this process runs inside a campaign's paired trial."""
    return _current() is not None


def steps(n: int) -> Iterator[int]:
    """The steps to run: ``range(n)`` outside a campaign; inside one, as many as the plan
    needs (``n`` is then not the length), in blocks whose arm :func:`params` returns."""
    s = _current()
    if s is None:
        yield from range(n)
        return
    i = 0
    try:
        while s.next_step():
            yield i
            i += 1
    finally:
        if s.done:
            s.close()


_fixed: dict[str, Any] | None = None


def _fixed_params() -> dict[str, Any]:
    global _fixed
    if _fixed is None:
        text = os.environ.get(PARAMS_ENV)
        try:
            fixed = json.loads(text) if text else {}
        except ValueError as exc:
            raise ClientError(f"{PARAMS_ENV} is not JSON ({exc}); it holds the arm's switchable "
                              "params as a JSON object, set by the campaign: unset it to run "
                              "outside one") from None
        if not isinstance(fixed, dict):
            raise ClientError(f"{PARAMS_ENV} holds {type(fixed).__name__}, not a JSON object of "
                              "the arm's switchable params: unset it to run outside a campaign")
        _fixed = fixed
    return _fixed


def params(defaults: dict[str, Any]) -> dict[str, Any]:
    """This step's values of the switchable params: ``defaults`` outside a campaign, the
    current arm's values for the keys it sets inside one. Read it every step (or at least
    whenever :func:`arm` changes)."""
    s = _current()
    if s is not None:
        return s.params(defaults)
    fixed = _fixed_params()
    if not fixed:
        return dict(defaults)
    return {k: fixed.get(k, v) for k, v in defaults.items()}


def arm() -> str:
    """The current arm's id ("" outside a campaign)."""
    s = _current()
    return "" if s is None else s.arm


def timed() -> _Timed:
    """``with client.timed():`` around a step's work (forward, backward, optimizer step): its
    time goes to the step's record, with no device sync (module docstring). Several windows in
    one step (a micro-batch each) add up to the step's time; a window inside another counts
    once. Outside a campaign it does nothing."""
    return _Timed(_current())


def begin() -> None:
    """The start of a step's timed window, for a loop whose step body you would rather not
    re-indent under ``with client.timed():`` (then :func:`end` closes it)."""
    s = _current()
    if s is not None:
        s.window_begin()


def end() -> None:
    """The end of the window :func:`begin` opened."""
    s = _current()
    if s is not None:
        s.window_end()


def report(loss: Any = None, tags: str = "") -> None:
    """The step's loss (a float or a 0-d tensor, read only at the block's end, outside any
    timed window) for the correctness check, and tags (``"compile"``, ``";"``-separated) that
    exclude the step from the measurement. A no-op outside a campaign."""
    s = _current()
    if s is not None:
        s.report(loss, tags)
