"""Host-speed reference: how much steadier are step times in units of the host's speed?

Runs trials of the calibrated synthetic step (the same recipe the planted-effects benchmark
uses) back to back in this process, with the fixed host reference of
``orchestrator.core.reference`` timed before every step, as a trial does with
``protocol.speed_reference`` on. Pairs of consecutive trials form A/A rounds. Prints, side by
side in one run, the spread of raw and normalised figures:

- between trials: robust CV of the trial medians;
- A/A rounds: SD of log(trial median ratio) over the rounds (what the speedup interval sees);
- within trials: median robust CV of the steps.

    python bench/speed_reference.py [--trials 40] [--steps 10]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.core import stats
from orchestrator.cli.main import compose
from orchestrator.core.reference import host_reference, normalise
from recipes.synthetic.recipe import SyntheticTrainer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--steps", type=int, default=10, help="measured steps per trial")
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args(argv)
    cfg = compose(["workload=synthetic", "+sweep=calibrate"])
    trainer = SyntheticTrainer(cfg.workload, cfg.workload.buckets[0], "cpu")
    ref = host_reference()
    steps: dict[str, list[float]] = {}
    refs: dict[str, list[float]] = {}
    t_start = time.perf_counter()
    for k in range(args.trials):
        batches = trainer.batches()
        for _ in range(args.warmup):
            ref()
            trainer.train_step(next(batches))
        s, r = [], []
        for _ in range(args.steps):
            r.append(ref())
            t0 = time.perf_counter()
            trainer.train_step(next(batches))
            s.append(time.perf_counter() - t0)
        steps[f"t{k:03d}"], refs[f"t{k:03d}"] = s, r
    wall = time.perf_counter() - t_start
    norm = normalise(steps, refs)
    print(f"{args.trials} trials x {args.steps} steps of the synthetic step "
          f"({stats.median([x for s in steps.values() for x in s]) * 1e3:.2f} ms median), "
          f"reference {stats.median([x for r in refs.values() for x in r]) * 1e3:.3f} ms median, "
          f"{wall:.1f} s in all")
    print("| figure | raw | normalised | normalised / raw |")
    print("|---|---:|---:|---:|")

    def row(name: str, raw: float, nrm: float) -> None:
        print(f"| {name} | {raw:.4f} | {nrm:.4f} | {nrm / raw if raw else float('nan'):.3f} |")

    def between(d: dict[str, list[float]]) -> float:
        return stats.robust_cv([stats.median(v) for v in d.values()])

    def aa_sd(d: dict[str, list[float]]) -> float:
        meds = [stats.median(d[t]) for t in sorted(d)]
        logs = [math.log(meds[i] / meds[i + 1]) for i in range(0, len(meds) - 1, 2)]
        mean = sum(logs) / len(logs)
        return math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))

    def within(d: dict[str, list[float]]) -> float:
        return stats.median([stats.robust_cv(v) for v in d.values()])

    row("between-trial robust CV of medians", between(steps), between(norm))
    row("A/A rounds: SD of log median ratio", aa_sd(steps), aa_sd(norm))
    row("within-trial robust CV of steps", within(steps), within(norm))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
