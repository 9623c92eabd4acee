"""A trainer seen from the host as a GPU trainer is: minutes to start, then steps that wait.

It stands in for a torchtitan- or Megatron-class trainer where what a decision costs is the
point (bench/decision_cost.py), not what it computes: it imports nothing heavy and does no
arithmetic. Its start-up is ``--startup-s`` seconds of waiting, of which ``--compile-s`` is a
compile a warm cache skips: it looks for its artifact in ``$TORCHINDUCTOR_CACHE_DIR`` (the
folder torch.compile would use) and writes it there after "compiling". Each step then waits
``--step-ms`` x ``--factor`` (a planted effect) x a per-process offset (log-normal,
``--process-sd``: each process lands on the device a little differently) x a per-step jitter
(``--step-sd``), as a step that waits on the device; a first ``--warmup-slow`` steps are 3x
slower (autotuning, the first collectives). One line per step::

    step 12 | loss 3.9876 | time 101.23ms

Waiting instead of computing keeps its timing out of reach of the machine's other load, so
campaigns of it can be compared by node time on a 2-core machine.

    python recipes/examples/startup_trainer.py --steps 20 --startup-s 2 --compile-s 1.2
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time

ARTIFACT = "startup_trainer.compiled"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--startup-s", type=float, default=20.0, help="start-up, compile included")
    p.add_argument("--compile-s", type=float, default=12.0, help="the part a warm cache skips")
    p.add_argument("--step-ms", type=float, default=100.0)
    p.add_argument("--factor", type=float, default=1.0, help="planted effect on every step")
    p.add_argument("--process-sd", type=float, default=0.01, help="per-process log-SD")
    p.add_argument("--step-sd", type=float, default=0.005, help="per-step log-SD")
    p.add_argument("--warmup-slow", type=int, default=2, help="first steps 3x slower")
    p.add_argument("--seed", type=int, default=0, help="the loss curve's (not the noise's)")
    p.add_argument("--tag", default="a", help="changes nothing: an A/A variant's switch")
    return p.parse_args(argv)


def compiled_already() -> tuple[bool, str | None]:
    """(whether the cache holds this trainer's artifact, the cache folder or None)."""
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not folder:
        return False, None
    return os.path.exists(os.path.join(folder, ARTIFACT)), folder


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    noise = random.Random(int.from_bytes(os.urandom(8), "little"))  # a process's own luck
    warm, folder = compiled_already()
    time.sleep(max(a.startup_s - (a.compile_s if warm else 0.0), 0.0))
    if folder and not warm:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, ARTIFACT), "w", encoding="utf-8") as fh:
            fh.write("compiled\n")
    print(f"startup_trainer: compile cache {'warm' if warm else 'cold'}", flush=True)
    offset = math.exp(noise.gauss(0.0, a.process_sd))
    loss = 4.0 + 0.01 * a.seed
    for step in range(1, a.steps + 1):
        t0 = time.perf_counter()
        slow = 3.0 if step <= a.warmup_slow else 1.0
        time.sleep(a.step_ms / 1000.0 * a.factor * offset * slow
                   * math.exp(noise.gauss(0.0, a.step_sd)))
        loss *= 0.995
        ms = (time.perf_counter() - t0) * 1000.0
        print(f"step {step} | loss {loss:.4f} | time {ms:.2f}ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
