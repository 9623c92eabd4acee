"""A data-parallel trainer started by ``torchrun`` (or by hand with RANK/MASTER_ADDR), for the
command tests across machines: each rank runs a small MLP step and all-reduces its gradients
(gloo), and local rank 0 of every node prints the step line, so every node's log has steps.

    torchrun --nnodes N --node-rank K --nproc-per-node P --rdzv-backend c10d \
        --rdzv-endpoint HOST:PORT tests/helpers/ddp_command.py --steps 12 [--units 40]

``--units`` (or ``DDP_UNITS``, an env.* switch) sets the width of the work per step;
``--fault F`` is what the ranks of node ``--fault-node K`` (1) do wrong: ``none``; ``slow``:
they sleep ``--slow-ms`` ms per step before the all-reduce (the others wait for them in it);
``fail``: they exit with code 3 before they join the process group (the others wait for them
there: a peer that never came); ``hang``: after the last step they sleep 300 s before the
closing barrier, so every node's command hangs at its end (the others wait for them in it), as
a trainer stuck in its teardown.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--units", type=int, default=64)
    ap.add_argument("--fault", choices=("none", "slow", "fail", "hang"), default="none")
    ap.add_argument("--fault-node", type=int, default=1)
    ap.add_argument("--slow-ms", type=float, default=30.0)
    a = ap.parse_args()
    units = int(os.environ.get("DDP_UNITS", a.units))
    node = int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", "0")))
    fault = a.fault if node == a.fault_node else "none"
    if fault == "fail":
        print(f"node {node}: failing on purpose (--fault fail)", flush=True)
        return 3
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(units, units), torch.nn.Tanh(),
                                torch.nn.Linear(units, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1000 + rank)
    for step in range(1, a.steps + 1):
        t0 = time.perf_counter()
        x = torch.randn(32, units, generator=gen)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        if fault == "slow":
            time.sleep(a.slow_ms / 1e3)
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        dt = time.perf_counter() - t0
        if local == 0:
            print(f"step {step} | loss {loss.item():.4f} | time {dt * 1e3:.3f}ms", flush=True)
    # every rank leaves together: gloo aborts a rank whose peers tore the group down while its
    # own last collective's threads were still winding up ("terminate called without an active
    # exception"), as real trainers guard with a closing barrier
    if fault == "hang":
        time.sleep(300)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # leave without the interpreter's teardown: over two nodes this torch build's gloo now and
    # then aborts a rank in it after the last step ("terminate called without an active
    # exception", about 1 trial in 50 here), which would fail a trial whose steps all ran
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
