"""A plain command for the alternation tests (orchestrator.worker.pairing.alternation): no client, a known
amount of pure-Python work per step, one step line each, and the ways a trainer goes wrong.

    python tests/helpers/plain_trainer.py --steps 50 --units 10 [--mode M --at K]

``--units`` (or the PLAIN_UNITS environment variable, which wins: an env.* switch) sets the
work per step. Modes: ``ok``; ``exit`` (exit code 3 at step K); ``hang`` (sleep at step K);
``malformed`` (a step line without a time unit at step K); ``short`` (exit 0 after K steps,
whatever --steps says); ``buffered`` (step lines held back and written 100 at a time, as a
program with a block-buffered stdout does). ``--slow-match`` makes one process of one
round four times as slow for its whole life, once (the contamination tests).
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def work(units: int, x: float) -> float:
    for _ in range(units):
        for _ in range(1000):
            x = x * 0.999999 + 1e-6
    return x


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--units", type=int, default=10)
    ap.add_argument("--mode", default="ok")
    ap.add_argument("--at", type=int, default=12)
    ap.add_argument("--trial-dir", default="", help="with --slow-match: this run's trial dir")
    ap.add_argument("--slow-match", default="",
                    help="the first run whose trial dir's name contains this runs four times as slow "
                         "for its whole life (a contaminated process); its re-run does not")
    a = ap.parse_args()
    units = int(os.environ.get("PLAIN_UNITS", a.units))
    if a.slow_match and a.slow_match in os.path.basename(a.trial_dir.rstrip("/")):
        marker = os.path.join(a.trial_dir, "slowed-once")
        if not os.path.exists(marker):
            open(marker, "w").close()
            units *= 4
    print(f"# plain trainer: {units} units per step", flush=True)
    held: list[str] = []
    x = 0.5
    steps = min(a.steps, a.at) if a.mode == "short" else a.steps
    for step in range(1, steps + 1):
        if a.mode == "exit" and step == a.at:
            print("boom", flush=True)
            return 3
        if a.mode == "hang" and step == a.at:
            time.sleep(3600)
        t0 = time.perf_counter()
        x = work(units, x)
        dt = time.perf_counter() - t0
        loss = 2.0 / (1.0 + 0.1 * step) + 0.0 * x
        line = f"step {step} | loss {loss:.4f} | time {dt * 1e3:.3f}ms"
        if a.mode == "malformed" and step == a.at:
            line = f"step {step} | loss {loss:.4f} | time {dt * 1e3:.3f}"
        if a.mode == "buffered":
            held.append(line)
            if len(held) == 100:
                sys.stdout.write("\n".join(held) + "\n")
                sys.stdout.flush()
                held = []
            continue
        print(line, flush=True)
    if held:
        sys.stdout.write("\n".join(held) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
