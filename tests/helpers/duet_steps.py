"""A trainer stand-in for the duet tests: sleep-bound steps (the same on a loaded machine),
the cores it may run on printed first, an optional failure after two steps, and an optional
hang after the last (``--hang 1``: it sleeps 300 s instead of exiting).

    python tests/helpers/duet_steps.py --steps 20 --delay-ms 5 [--fail 1] [--hang 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--delay-ms", type=float, default=5.0)
    ap.add_argument("--fail", type=int, default=0, help="exit 3 after two steps when 1")
    ap.add_argument("--hang", type=int, default=0, help="do not exit after the last step when 1")
    args = ap.parse_args()
    print(f"# cpus {','.join(map(str, sorted(os.sched_getaffinity(0))))} "
          f"threads {os.environ.get('OMP_NUM_THREADS')}", flush=True)
    for i in range(args.steps):
        if args.fail and i == 2:
            return 3
        t0 = time.perf_counter()
        time.sleep(args.delay_ms / 1e3)
        dt = time.perf_counter() - t0
        print(f"step {i + 1} | loss {2 / (1 + 0.1 * (i + 1)):.4f} | time {dt * 1e3:.3f}ms",
              flush=True)
    if args.hang:
        time.sleep(300)
    return 0


if __name__ == "__main__":
    sys.exit(main())
