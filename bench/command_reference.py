"""Would a host-speed reference timed around a command's run explain its trials' spread?

A plain command (no client) runs its steps in another program, so the in-process host-speed
reference (orchestrator.core.reference: a fixed host workload timed before every step) cannot
run between its steps. The nearest thing is to bracket the run: time the reference right before
the command starts and right after it exits, on the same core, and divide the trial's mean step
by the geometric mean of the two. This script measures whether that would help, before any of
it is built: identical trials of ``recipes/examples/busy_steps.py`` (~5 ms pure-Python steps)
one after another, each bracketed by the numpy reference and by a pure-Python one, and prints
the spread of the trials' log mean step time raw and normalised, over trials and over
consecutive pairs (what a round's contrast sees), with the two brackets' own disagreement.

    python bench/command_reference.py [--trials 40] [--pin 0|1|none] [--steps 100]

Measured on the 2-core VM on 2026-12-03 (nothing else running), in docs/benchmarks.md: it
does not help there, because the host's speed changes within a trial.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.core.objective import trimmed_mean  # noqa: E402
from orchestrator.core.reference import host_reference  # noqa: E402

STEP = re.compile(r"time ([0-9.]+)ms")
WARMUP = 5


def python_reference(runs: int = 20) -> float:
    """The median time of a fixed pure-Python loop (the command's own kind of work)."""
    def one() -> float:
        t0 = time.perf_counter()
        x = 0.5
        for _ in range(20000):
            x = x * 0.999999 + 1e-6
        return time.perf_counter() - t0
    return statistics.median(one() for _ in range(runs))


def trial_mean_ms(steps: int) -> float:
    out = subprocess.run([sys.executable, str(ROOT / "recipes/examples/busy_steps.py"),
                          "--steps", str(steps + WARMUP)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True).stdout
    ts = [float(m) for m in STEP.findall(out)][WARMUP:]  # the warm-up steps, by position
    return trimmed_mean(ts)  # the campaign's own trial summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--pin", default="0", help="core to pin this process and the command to, or none")
    ap.add_argument("--steps", type=int, default=100)
    a = ap.parse_args()
    if a.pin != "none":
        os.sched_setaffinity(0, {int(a.pin)})
    ref = host_reference()

    def numpy_reference() -> float:
        return statistics.median(ref() for _ in range(40))

    rows = []
    for _ in range(a.trials):
        before = (numpy_reference(), python_reference())
        mean = trial_mean_ms(a.steps)
        after = (numpy_reference(), python_reference())
        rows.append((mean, math.sqrt(before[0] * after[0]), math.sqrt(before[1] * after[1]),
                     before[0] / after[0]))
    series = {"raw": [math.log(r[0]) for r in rows],
              "/ numpy bracket": [math.log(r[0] / r[1]) for r in rows],
              "/ python bracket": [math.log(r[0] / r[2]) for r in rows]}
    print(f"{a.trials} identical command trials, {a.steps} measured steps each, pin {a.pin}")
    print("| trial mean step | SD of log over trials | SD of log over consecutive pairs |")
    print("|---|---:|---:|")
    for name, xs in series.items():
        pairs = [xs[i + 1] - xs[i] for i in range(0, len(xs) - 1, 2)]
        print(f"| {name} | {statistics.stdev(xs):.4f} | {statistics.stdev(pairs):.4f} |")
    print(f"before/after numpy bracket: SD of their log ratio {statistics.stdev(math.log(r[3]) for r in rows):.4f}")
    print(f"correlation of raw with the numpy bracket: "
          f"{statistics.correlation(series['raw'], [math.log(r[1]) for r in rows]):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
