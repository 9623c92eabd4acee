"""A trainer stand-in with a known amount of work per step and nothing else: no torch, so a
trial starts in tens of milliseconds and its steps take a few milliseconds. It is for
measuring the ``command`` path itself (``bench/planted_effects.py --workload command``):
a planted slowdown is more work units per step, the same in every process.

Each step runs ``--units`` fixed units of pure-Python arithmetic (about 30 microseconds each
on a 2-core VM: the default 180 units is a ~5 ms step) and prints one line in a built-in log format::

    step 12 | loss 0.4375 | time 5.012ms

``--steps`` is followed exactly unless ``--ignore-steps N`` makes it run N steps whatever it
was asked (a trainer that does not follow ``{steps}``, for the tests).

It also uses :mod:`orchestrator.client`, four lines: the loop runs ``client.steps``, reads the
work units through ``client.params`` every step, times the work in ``client.timed()`` and
reports the loss. Outside a campaign they change nothing (``--steps`` steps of ``--units``);
in one whose workload declares ``switchable: [units, label]`` (``conf/workload/command_client.yaml``)
one run of the script switches between the arms' units block by block.

    python recipes/examples/busy_steps.py --steps 20 --units 180
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from orchestrator import client

UNIT_ITERATIONS = 1000  # one work unit: this many multiply-adds in the interpreter


def work(units: int, x: float) -> float:
    for _ in range(units):
        for _ in range(UNIT_ITERATIONS):
            x = x * 0.999999 + 1e-6
    return x


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--units", type=int, default=180, help="work units per step")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--label", default="", help="ignored: names a run (an A/A variant)")
    ap.add_argument("--ignore-steps", type=int, default=None,
                    help="run this many steps whatever --steps says")
    args = ap.parse_args(argv)
    steps = args.ignore_steps if args.ignore_steps is not None else args.steps
    x = 0.5 + 0.001 * args.seed
    if hasattr(os, "sched_getaffinity"):  # where it may run (launcher.cpu_affinity pins it)
        print(f"# cpus {','.join(map(str, sorted(os.sched_getaffinity(0))))}", flush=True)
    for i in client.steps(steps):
        step = i + 1
        units = client.params({"units": args.units, "label": args.label})["units"]
        t0 = time.perf_counter()
        with client.timed():
            x = work(units, x)
        dt = time.perf_counter() - t0
        # the loss of a model that learns the same whatever the work per step (the correctness
        # gate compares it between arms); x only keeps the work from being skipped
        loss = 2.0 / (1.0 + 0.1 * step) + 0.001 * args.seed + 0.0 * x
        client.report(loss=loss)
        print(f"step {step} | loss {loss:.4f} | time {dt * 1e3:.3f}ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
