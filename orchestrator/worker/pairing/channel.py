"""The client channel: where a user's trainer meets the round's block schedule
(:mod:`orchestrator.worker.pairing.client`).

The channel is a Unix socket in a temporary directory (``ORCH_CLIENT`` names its path) for a
command on one machine, or TCP (``ORCH_CLIENT_LISTEN=HOST[:PORT]``; ``ORCH_CLIENT=tcp://HOST:PORT``)
for one whose ranks span machines. The trial's token (``ORCH_CLIENT_TOKEN``) guards it: a
connection is read no further than its first line until that hello carries the token, one
that sends none within a minute is dropped, and every refused one is recorded in
``client_strays``.
"""

from __future__ import annotations

import hmac
import json
import secrets
import shutil
import socket
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, TypedDict, cast

from orchestrator import client as wire
from orchestrator.core.errors import ConfigError

# the longest line a rank may send: a batch's report is MAX_BATCH_CYCLES cycles of a block per
# arm, tens of bytes a step, well under a MiB at the protocol's largest blocks
MAX_MESSAGE_BYTES = 32 << 20
MAX_HELLO_BYTES = 64 << 10  # before a connection's hello: a stray cannot fill memory
MAX_STRAYS_KEPT = 20  # refused connections recorded one by one (the rest counted)
HELLO_TIMEOUT_S = 60.0  # a connection's hello is due within this (the client sends it at once)
CLOSE_WAIT_S = 2.0  # at the end, for the connections still open to end and be recorded


class ChannelError(Exception):
    """The trainer's use of the client cannot be measured (the reason is the message)."""


class Peer(TypedDict, total=False):
    """Who opened a connection: its process's pid on a Unix socket, its peer's address over
    TCP (the start of a ``client_strays`` entry)."""

    pid: int | None
    peer: str


class Stray(Peer, total=False):
    """A refused connection, an entry of the record's ``client_strays``."""

    rank: Any  # the rank it claimed, as it sent it (any JSON value, or None)
    why: str
    more: int  # the last entry kept: how many more were refused past MAX_STRAYS_KEPT



class Channel:
    """The socket the command's ranks talk to (one thread per connection); every rank's report
    of a block is awaited before the next block goes to all of them. A Unix socket in a
    temporary directory of this machine; with ``listen`` (``HOST`` or ``HOST:PORT``, port 0 or
    none: one the OS picks) a TCP port bound there instead, for ranks on other machines
    (``tcp://HOST:PORT`` in ``ORCH_CLIENT``).

    Only the command's ranks count. A hello must carry the trial's token (handed to the
    command alone, in its environment, and never written to a record); a connection without
    it, or that says hello as a rank another connection already runs, or that speaks before
    its hello, or sends none (within HELLO_TIMEOUT_S, or before the trial ends), is a stray:
    refused, recorded in :attr:`strays` (the process's pid on a Unix socket, the peer's address
    over TCP), and never the trial's failure. Nothing beyond its first line, at most
    MAX_HELLO_BYTES, is read from a connection before its hello is accepted, and nothing waits
    on one that has not said it. A rank belongs to the first connection that runs a step as it
    (its first ``next`` or ``at``), so a helper that inherited the token and said hello first
    is refused then."""

    def __init__(self, plan: Any, world: int, listen: str | None = None,
                 token: str | None = None) -> None:
        self.plan, self.world = plan, world
        self.token = token or secrets.token_hex(16)
        self.dir: str | None = None
        if listen is None:
            self.dir = tempfile.mkdtemp(prefix="orch-client-")  # short: a socket path is <108 bytes
            self.address = str(Path(self.dir) / "s")
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(self.address)
        else:
            self.sock, self.address = _tcp_listener(listen)
        self.tcp = listen is not None
        self.sock.listen(world + 4)
        self.cond = threading.Condition()
        self.pending: dict[int, dict[int, list[list[Any]]]] = {}
        self.reads: dict[int, set[str]] = {}
        self.replies: dict[int, wire.Reply] = {}
        self.owner: dict[int, int] = {}  # rank -> the connection that runs it
        self.strays: list[Stray] = []  # refused connections: pid or peer, rank, why
        self.open: dict[socket.socket, threading.Thread] = {}  # connections being served
        self.left: set[int] = set()
        self.error: str | None = None
        self.error_kind = ""
        self.connected = False
        self.closed = False
        self.acceptor = threading.Thread(target=self._accept, name="client-accept", daemon=True)
        self.acceptor.start()

    def env(self) -> dict[str, str]:
        """What the command's environment gets: the channel's address and the trial's token."""
        return {wire.ENV: self.address, wire.TOKEN_ENV: self.token}

    def fail(self, kind: str, message: str) -> None:
        with self.cond:
            if self.error is None:
                self.error, self.error_kind = message, kind
            self.cond.notify_all()

    def stray(self, who: Peer, rank: Any, why: str) -> wire.Reply:
        """Record a refused connection (``who``: its process's pid, or its peer's address);
        the reply that tells it why."""
        with self.cond:
            if len(self.strays) < MAX_STRAYS_KEPT:
                self.strays.append({**who, "rank": rank, "why": why})
            else:
                self.strays[-1]["more"] = self.strays[-1].get("more", 0) + 1
        return {"error": f"refused: {why}"}

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return  # closed (close() shuts the listener down, which wakes this)
            who = _tcp_peer(conn, peer) if self.tcp else {"pid": _peer_pid(conn)}
            # the hello is due at once: a connection that never sends it ends here, unserved
            conn.settimeout(HELLO_TIMEOUT_S)
            thread = threading.Thread(target=self._serve, args=(conn, who), name="client-conn",
                                      daemon=True)
            with self.cond:
                if self.closed:
                    conn.close()
                    return
                self.open[conn] = thread
            thread.start()

    def _serve(self, conn: socket.socket, who: Peer) -> None:
        rank: int | None = None  # the rank this connection said hello as (token checked)
        bye = False
        batches = 0
        me = id(conn)
        try:
            with conn.makefile("rb") as reader:
                while True:
                    msg = self._read(reader, conn, rank, who)
                    if msg is None:
                        break
                    op = msg.get("op")
                    if op == "hello" and rank is None:
                        rank, reply = self._hello(who, msg)
                        if rank is not None:
                            conn.settimeout(None)  # a rank may compute for hours between blocks
                    elif rank is None:
                        reply = self.stray(who, msg.get("rank"), f"{op!r} before a hello")
                    elif op in ("at", "next") and not self._claim(rank, me):
                        reply = self.stray(who, rank, f"said hello as rank {rank}, which "
                                           "another process of the command runs")
                        rank = None
                    elif op == "at":
                        if rank == 0:  # the block rank 0 starts (no reply: the step goes on)
                            self.plan.at = int(msg.get("block", 0))
                        continue
                    elif op == "next":
                        reply = self._next(rank, batches, msg)
                        batches += 1
                    elif op == "error":
                        self.fail("client", str(msg.get("message", "the client raised")))
                        continue
                    elif op == "bye":
                        bye = True
                        break
                    else:
                        reply = {"error": f"unexpected client message {op!r}"}
                    if not self._reply(conn, reply) or reply.get("error"):
                        break
        finally:
            with self.cond:  # closed under the lock: close() shuts open ones down under it
                self.open.pop(conn, None)
                conn.close()
        if rank is not None and self.owner.get(rank) != me:
            self.stray(who, rank, f"said hello as rank {rank} and left before it ran a step "
                       "as that rank")
        with self.cond:
            if rank is not None and self.owner.get(rank) == me:
                self.left.add(rank)
                if not bye and not self.plan.done:  # the others must not wait for it
                    self.cond.notify_all()

    def _read(self, reader: Any, conn: socket.socket, rank: int | None, who: Peer
              ) -> wire.Message | None:
        """The connection's next message; None at its end, or when it sent what no client
        sends (a rank's fault; before its hello, a stray's, recorded and told)."""
        # a connection not yet known gets a short line: a stray cannot fill memory
        limit = MAX_MESSAGE_BYTES if rank is not None else MAX_HELLO_BYTES
        try:
            line = reader.readline(limit + 1)
            lost: OSError | None = None
        except OSError as exc:  # reset, a dead node (keep-alive), or no hello in time
            line, lost = b"", exc
        if not line:
            if rank is None:  # nothing came before the hello: recorded, no reply
                if isinstance(lost, TimeoutError):
                    why = f"sent no hello within HELLO_TIMEOUT_S={HELLO_TIMEOUT_S:g} s"
                elif self.closed:
                    why = "sent no hello before the trial ended"
                else:
                    why = "closed the connection without a hello"
                self.stray(who, None, why)
            return None
        try:
            msg = json.loads(line) if line.endswith(b"\n") or len(line) <= limit else None
        except ValueError:
            msg = None
        if isinstance(msg, dict):
            return cast(wire.Message, msg)  # a JSON object: its keys are checked where read
        why = ("a line that is not a JSON object" if line.endswith(b"\n") or len(line) <= limit
               else f"a message of more than {limit} bytes without a newline (the client "
               "sends one JSON object per line)")
        if rank is None:
            self._reply(conn, self.stray(who, None, f"{why} before its hello"))
        else:
            self.fail("client", f"rank {rank} sent {why}")
        return None

    @staticmethod
    def _reply(conn: socket.socket, reply: wire.Reply) -> bool:
        try:
            conn.sendall(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
            return True
        except OSError:
            return False

    def _claim(self, rank: int, conn: int) -> bool:
        """The rank is run by the first connection that runs a step as it."""
        with self.cond:
            return self.owner.setdefault(rank, conn) == conn

    def _hello(self, who: Peer, msg: wire.Message
               ) -> tuple[int | None, wire.Reply]:
        token = msg.get("token")
        if not isinstance(token, str) or not hmac.compare_digest(token, self.token):
            why = ("no token" if not token else "a wrong token") + (
                f" (a client of protocol {msg.get('protocol')}; this orchestrator speaks "
                f"{wire.PROTOCOL})" if msg.get("protocol") != wire.PROTOCOL else
                f": not a process the trial started ({wire.TOKEN_ENV} is handed to its "
                "command alone)")
            return None, self.stray(who, msg.get("rank"), why)
        try:
            rank, world = int(msg.get("rank", 0)), int(msg.get("world", 1))
        except (TypeError, ValueError):
            rank, world = -1, -1
        if msg.get("protocol") != wire.PROTOCOL:
            why = (f"the trainer's orchestrator.client speaks protocol {msg.get('protocol')}, "
                   f"this orchestrator {wire.PROTOCOL}: import the client of the orchestrator "
                   "that runs the campaign")
        elif world != self.world:
            why = (f"the command runs {world} rank(s) (WORLD_SIZE), but workload.world_size "
                   f"is {self.world}; set it to the ranks the command starts")
        elif not 0 <= rank < world:
            why = f"rank {rank} is out of range (world size {world})"
        else:
            with self.cond:
                if rank in self.owner:  # its rank runs already: a helper that inherited the token
                    return None, self.stray(who, rank, f"said hello as rank {rank}, which "
                                            "another process of the command runs")
            self.connected = True
            return rank, {"switchable": self.plan.declared, "world": self.world}
        self.fail("client", why)
        return None, {"error": why}

    def _next(self, rank: int, batch: int, msg: wire.Message) -> wire.Reply:
        """Rank ``rank``'s report of batch ``batch``; the next batch once every rank's is in."""
        with self.cond:
            self.pending.setdefault(batch, {})[rank] = list(msg.get("blocks") or [])
            self.reads.setdefault(batch, set()).update(msg.get("read") or [])
            if isinstance(msg.get("clock"), str):
                self.plan.clocks.add(msg["clock"])
            if len(self.pending[batch]) == self.world and self.error is None:
                try:
                    self.replies[batch] = self.plan.take(self.pending.pop(batch),
                                                         self.reads.pop(batch))
                except ChannelError as exc:
                    self.error, self.error_kind = str(exc), "client"
                except Exception as exc:  # noqa: BLE001 (a bug here must not hang the ranks)
                    self.error, self.error_kind = f"{type(exc).__name__}: {exc}", "client"
                self.cond.notify_all()
            while batch not in self.replies and self.error is None:
                gone = self.left - {rank}
                if gone:
                    self.error = self.error or (f"rank {min(gone)} left the client channel "
                                                "mid-block")
                    self.error_kind = self.error_kind or "exited_mid_block"
                    break
                self.cond.wait(1.0)
            if batch in self.replies:
                return self.replies[batch]
            return {"error": self.error}

    def close(self) -> None:
        """Stop listening and end every connection still open (one that never said hello
        is recorded as it ends); the command has exited by now."""
        self.closed = True
        try:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept loop
            except OSError:
                pass
            self.sock.close()
            with self.cond:
                left = dict(self.open)
                for conn in left:
                    try:
                        conn.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
            deadline = time.monotonic() + CLOSE_WAIT_S
            for thread in (self.acceptor, *left.values()):
                thread.join(max(0.0, deadline - time.monotonic()))
        finally:
            if self.dir is not None:
                shutil.rmtree(self.dir, ignore_errors=True)


def tcp_endpoint(host: str, port: int) -> str:
    """``tcp://HOST:PORT`` (an IPv6 address in brackets), as ``ORCH_CLIENT`` names it."""
    return f"{wire.TCP_SCHEME}[{host}]:{port}" if ":" in host else f"{wire.TCP_SCHEME}{host}:{port}"


def listen_address(text: str) -> tuple[str, int]:
    """``ORCH_CLIENT_LISTEN``'s ``HOST``, ``HOST:PORT`` or ``[IPv6]:PORT`` (a bare IPv6 address
    is a host; ``tcp://`` may come first) as (host, port), port 0 where none is given. Raises
    ConfigError."""
    s = text.strip().removeprefix(wire.TCP_SCHEME)
    if s.startswith("["):
        host, bracket, rest = s[1:].partition("]")
        port = rest[1:]
        ok = bool(bracket) and (not rest or (rest.startswith(":") and bool(port)))
    elif s.count(":") == 1:
        host, _, port = s.partition(":")
        ok = bool(port)
    else:  # a name, an IPv4 address or a bare IPv6 one
        host, port, ok = s, "", True
    if not ok or not host or (port and not (port.isdigit() and int(port) <= 65535)):
        raise ConfigError(wire.LISTEN_ENV, f"{text!r} is not HOST or HOST:PORT (e.g. 10.0.0.1 "
                          "or 10.0.0.1:29600, [fe80::1]:0; port 0 or none: one the OS picks); "
                          "unset it for a Unix socket on one machine")
    return host, int(port or 0)


def _tcp_listener(listen: str) -> tuple[socket.socket, str]:
    """A TCP socket bound where ``listen`` says; the ``tcp://HOST:PORT`` the ranks connect to
    (the bound address and port; this machine's name where it listens on every interface)."""
    host, port = listen_address(listen)
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port reused soon
            sock.bind(addr)
        except OSError:
            sock.close()
            raise
    except OSError as exc:
        raise ConfigError(wire.LISTEN_ENV, f"cannot listen on {listen!r} ({exc.strerror or exc})"
                          ": give an address of this machine that the command's other nodes "
                          "reach (`hostname -I`), or unset it for a Unix socket on one machine"
                          ) from None
    bound = str(sock.getsockname()[0]).partition("%")[0]
    shown = socket.gethostname() if bound in ("0.0.0.0", "::") else bound
    return sock, tcp_endpoint(shown, int(sock.getsockname()[1]))


def _tcp_peer(conn: socket.socket, peer: Any) -> Peer:
    """A TCP connection's peer, as its stray record names it; Nagle off (one small reply per
    message) and keep-alive on, so that a rank on a node that died ends its connection."""
    try:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for opt, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
            if hasattr(socket, opt):  # Linux: a dead peer noticed in about 25 s
                conn.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)
    except OSError:
        pass
    host, port = str(peer[0]), int(peer[1])
    return {"peer": f"[{host}]:{port}" if ":" in host else f"{host}:{port}"}


def _peer_pid(conn: socket.socket) -> int | None:
    """The connecting process's pid (Linux SO_PEERCRED), None where the OS does not say."""
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return int(struct.unpack("3i", creds)[0])
    except (AttributeError, OSError):
        return None


