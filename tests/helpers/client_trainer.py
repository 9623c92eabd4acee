"""A trainer that uses orchestrator.client, with ways to use it wrongly (the client path's
tests). ``--mode``:

- ``ok``: reads ``units`` (and ``label`` when --label) through client.params every step;
- ``exit_mid``: exits with code 3 at step --at (mid-block);
- ``no_client``: a plain loop that never calls the client;
- ``undeclared``: also reads param ``other``, which no workload declares;
- ``unread``: never calls client.params;
- ``nan``: reports a NaN loss once its units are --nan-units;
- ``stop_early``: leaves the client.steps() loop after --at steps and exits 0;
- ``dist``: torch.distributed (gloo) ranks, each step ``units`` all_reduces: ranks that left
  lockstep would run different numbers of collectives and fail;
- ``ddp``: a tiny model trained by torch.distributed (gloo) ranks: the ranks meet at a barrier
  before each step's window (outside it), then forward, backward, the gradients all-reduced,
  an SGD step and ``units`` of work inside it; the loss reported as a tensor;
- ``stray``: as ``ok``, but first a helper process that inherited the environment connects to
  the client channel twice as rank 0 (once raw, with no token; once through the client, with
  the token it inherited) and leaves; after the loop, a child prints whether it sees
  ``ORCH_CLIENT`` (``child sees ORCH_CLIENT: False``);
- ``hang_after``: as ``ok``, then it does not exit (a trainer hanging at teardown), a child of
  its own alive beside it;
- ``long_line``: as ``ok``, but at step --at it sends the channel --long-mib MiB with no newline;
- ``silent``: as ``ok``, but first a process of its own session (so it outlives the command)
  connects to the channel and never sends a byte; it waits until the channel closes it
  (``silent helper: connected`` in the log, at most a minute); with --until-dropped the
  trainer starts its loop only once the channel has dropped that connection.

The channel may be a Unix socket's path or ``tcp://HOST:PORT`` (``ORCH_CLIENT``); the helpers
connect to either. ``--slow-rank R --slow-ms M``: rank R (``RANK``) sleeps M ms more at the end
of each step's timed window (in ``ok`` mode the ranks meet only at the client's batch ends, so
rank R's windows are the slower ones). ``--ranks N``: this script starts itself N times as
the ranks of one group on this machine (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT, as torchrun sets them, without torchrun's agent and its start-up) and exits with
the first non-zero exit code of theirs. ``--hang-node K`` (``dist``): after the loop the ranks
of node K do not reach the closing barrier, so every node's command hangs at its end.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

from orchestrator import client


def work(units: int) -> None:
    x = 0.5
    for _ in range(units * 100):
        x = x * 0.999999 + 1e-6


CONNECT = """
import os, socket
from orchestrator import client
def connect():
    where = os.environ[client.ENV]
    if where.startswith(client.TCP_SCHEME):
        host, _, port = where[len(client.TCP_SCHEME):].rpartition(":")
        return socket.create_connection((host.strip("[]"), int(port)), timeout=60)
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.connect(where)
    return raw
"""

STRAY = CONNECT + """
import json
raw = connect()
raw.sendall(json.dumps({"op": "hello", "protocol": client.PROTOCOL, "rank": 0,
                        "world": 1}).encode() + b"\\n")
print("stray raw reply:", raw.makefile("rb").readline().decode().strip(), flush=True)
print("stray through the client:", client.active(), flush=True)
"""


SILENT = CONNECT + """
import sys
raw = connect()
raw.settimeout(60)
print("silent helper: connected", flush=True)
try:
    got = raw.recv(1)  # nothing is sent; returns when the channel ends the connection
    said = "the channel closed it" if got == b"" else repr(got)
except OSError as exc:
    said = repr(exc)
try:
    print(f"silent helper: {said}", flush=True)
except BrokenPipeError:  # the trainer stopped listening long ago
    pass
os._exit(0)
"""


def silent_helper(until_dropped: bool) -> None:
    """A connection that never says anything, held by a process of its own session (it
    outlives the command); with ``until_dropped`` the trainer starts once the channel has
    dropped it."""
    p = subprocess.Popen([sys.executable, "-c", SILENT], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    assert p.stdout is not None
    print(p.stdout.readline().strip(), flush=True)
    if until_dropped:
        print(p.stdout.readline().strip(), flush=True)


def stray_helper() -> None:
    """A process the trainer starts before it uses the client: it inherits the environment."""
    subprocess.run([sys.executable, "-c", STRAY], check=True, timeout=60)


def long_line(mib: int) -> None:
    """Send ``mib`` MiB with no newline down this rank's own connection to the channel."""
    from orchestrator import client
    s = client._current()
    assert s is not None
    chunk = b"x" * (1 << 20)
    try:
        for _ in range(mib):
            s.sock.sendall(chunk)
    except OSError:
        pass


def spawn_ranks(n: int) -> int:
    """Run this script's other arguments as ``n`` ranks on this machine; the first non-zero
    exit code (the others then stopped), else 0."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    i = sys.argv.index("--ranks")
    argv = [sys.executable, __file__, *sys.argv[1:i], *sys.argv[i + 2:]]
    procs = [subprocess.Popen(argv, env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r),
                                         "WORLD_SIZE": str(n), "MASTER_ADDR": "127.0.0.1",
                                         "MASTER_PORT": str(port)}) for r in range(n)]
    while True:
        codes = [p.poll() for p in procs]
        bad = [c for c in codes if c]
        if bad or all(c == 0 for c in codes):
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
            return bad[0] if bad else 0
        time.sleep(0.05)


def ddp(args: argparse.Namespace, slow_s: float) -> None:
    """The ``ddp`` mode's loop (module docstring)."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)  # its SGD by hand: torch.optim takes seconds to import
    x, y = torch.randn(32, 16), torch.randn(32, 1)
    world = dist.get_world_size()
    for step in client.steps(args.steps):
        units = client.params({"units": args.units})["units"]
        dist.barrier()  # the ranks meet here, outside the window
        with client.timed():
            model.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    assert p.grad is not None
                    dist.all_reduce(p.grad)
                    p -= 0.01 * p.grad / world
            work(units)
            if slow_s:
                time.sleep(slow_s)
        client.report(loss=loss.detach())
        print(f"step {step} | arm {client.arm()} | units {units} | rank {dist.get_rank()}",
              flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="ok")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--units", type=int, default=5)
    ap.add_argument("--at", type=int, default=7)
    ap.add_argument("--nan-units", type=int, default=-1)
    ap.add_argument("--long-mib", type=int, default=0)
    ap.add_argument("--label", action="store_true", help="read param 'label' too")
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-ms", type=float, default=0.0)
    ap.add_argument("--until-dropped", action="store_true", help="silent: wait until dropped")
    ap.add_argument("--ranks", type=int, default=0, help="start this many ranks of this script")
    ap.add_argument("--hang-node", type=int, default=-1,
                    help="dist: after the loop the ranks of node K (torchrun's GROUP_RANK) sleep "
                         "300 s before the closing barrier: every node's command hangs at its end")
    args = ap.parse_args()
    if args.ranks:
        return spawn_ranks(args.ranks)
    slow_s = args.slow_ms / 1e3 if int(os.environ.get("RANK", "0")) == args.slow_rank else 0.0
    if args.mode == "stray":
        stray_helper()
    if args.mode == "silent":
        silent_helper(args.until_dropped)
    if args.mode == "ddp":
        ddp(args, slow_s)
        return 0
    if args.mode == "no_client":
        for step in range(args.steps):
            t0 = time.perf_counter()
            work(args.units)
            print(f"step {step} | loss 1.0 | time {(time.perf_counter() - t0) * 1e3:.3f}ms")
        return 0
    dist = None
    if args.mode == "dist":
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo")
        t = torch.ones(4)
    for step in client.steps(args.steps):
        if args.mode == "exit_mid" and step == args.at:
            sys.exit(3)
        if args.mode == "stop_early" and step == args.at:
            break
        if args.mode == "long_line" and step == args.at:
            long_line(args.long_mib)
        tp = time.perf_counter()
        p: dict[str, object] = {"units": args.units}
        if args.mode == "undeclared":
            p["other"] = 1
        if args.label:
            p["label"] = "base"
        units = args.units if args.mode == "unread" else client.params(p)["units"]
        t0 = time.perf_counter()
        with client.timed():
            w0 = time.perf_counter()
            work(units)
            if dist is not None:
                for _ in range(units):
                    dist.all_reduce(t)
            if slow_s:
                time.sleep(slow_s)
            w1 = time.perf_counter()
        loss = float("nan") if units == args.nan_units else 1.0 / (1 + step)
        client.report(loss=loss)
        dt = (time.perf_counter() - t0) * 1e3
        # what the client took of this step: params (a block's round trip to the channel at
        # its boundary), the timed window's ends and report (bench/client_lockstep.py)
        overhead_us = (time.perf_counter() - tp - (w1 - w0)) * 1e6
        print(f"step {step} | loss {loss:.4f} | time {dt:.3f}ms | arm {client.arm()} | units "
              f"{units} | client_us {overhead_us:.1f} | rank {os.environ.get('RANK', '0')}",
              flush=True)
    if dist is not None:
        if int(os.environ.get("GROUP_RANK", "0")) == args.hang_node:
            time.sleep(300)  # the other nodes' ranks wait for these in the barrier
        dist.barrier()
        dist.destroy_process_group()
    if args.mode == "hang_after":
        subprocess.Popen(["sleep", "302"])
        time.sleep(300)
    if args.mode == "stray":
        seen = subprocess.run([sys.executable, "-c", "import os; print('ORCH_CLIENT' in os.environ)"],
                              capture_output=True, text=True, check=True).stdout.strip()
        print(f"child sees ORCH_CLIENT: {seen}; this process: {'ORCH_CLIENT' in os.environ}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
