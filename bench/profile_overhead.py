"""What profiling costs, measured side by side in one run.

1. Phase marks in a timed trial: the cost per call of ``orchestrator.core.phases.phase``
   with no profiler running (what every timed step pays), next to an inactive
   ``torch.profiler.record_function`` and a bare ``nullcontext``.
2. Profiler overhead: median step time of a profiled trial's active steps (torch.profiler,
   record_shapes, profile_memory, with_flops) versus a timed trial of the same arm, each in a
   fresh process through the local launcher, interleaved.

Usage: python bench/profile_overhead.py [--pairs 3] [--workload gpt_test] [--bucket s32]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import sys
import tempfile
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.cli.main import compose
from orchestrator.core.convert import to_dict
from orchestrator.launch.local import LocalLauncher
from orchestrator.core.phases import FORWARD, phase
from orchestrator.worker.trial import TrialSpec

MARKS_PER_STEP = 6  # the gpt recipe: data, optimizer (x2), forward, backward, clip


def per_call_ns(fn: object, number: int = 20000) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e9  # type: ignore[arg-type]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--workload", default="gpt_test")
    ap.add_argument("--bucket", default="s32")
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    import torch

    null = contextlib.nullcontext()

    def mark() -> None:
        with phase(FORWARD):
            pass

    def raw() -> None:
        with torch.profiler.record_function(FORWARD):
            pass

    def bare() -> None:
        with null:
            pass

    cost = {name: per_call_ns(fn) for name, fn in
            (("phase()", mark), ("record_function", raw), ("nullcontext", bare))}

    cfg = compose([f"workload={args.workload}", "+sweep=fa2", "profile=framework",
                   f"profile.active_steps={args.steps}"])
    bucket = next(to_dict(b) for b in cfg.workload.buckets if b.name == args.bucket)
    tmp = Path(tempfile.mkdtemp(prefix="profile-overhead-"))
    launcher = LocalLauncher()
    timed, profiled = [], []
    for i in range(args.pairs):
        spec = TrialSpec(
            trial_id=f"t{i}", trial_dir=str(tmp / f"t{i}"), bucket=bucket, arm_id="a0",
            arm_label="baseline", is_baseline=True, round=i, position=i,
            workload=to_dict(cfg.workload), device="cpu", warmup_steps=3,
            measured_steps=args.steps,
        )
        pspec = dataclasses.replace(
            spec, trial_id=f"p{i}", trial_dir=str(tmp / f"p{i}"), kind="profile",
            profile={**to_dict(cfg.profile), "layer": "framework",
                     "out_dir": str(tmp / "profiles")})
        for which in (("timed", "profiled") if i % 2 == 0 else ("profiled", "timed")):
            if which == "timed":
                timed.append(launcher.run_one(spec, 900)["step_time_median_s"])
            else:
                rec = launcher.run_one(pspec, 900)
                assert rec["status"] == "ok", rec
                profiled.append(rec["profiled_step_median_s"])
    med = statistics.median
    step_ns = med(timed) * 1e9
    print(f"workload {args.workload}, bucket {args.bucket}, {args.pairs} interleaved pairs, "
          f"{args.steps} steps each, torch {torch.__version__}")
    print("inactive phase mark per call: " + "   ".join(f"{k} {v:,.0f} ns" for k, v in cost.items()))
    print(f"phase marks per timed step ({MARKS_PER_STEP} calls): "
          f"{MARKS_PER_STEP * cost['phase()'] / 1e3:.2f} us = "
          f"{MARKS_PER_STEP * cost['phase()'] / step_ns:.3%} of the timed step "
          f"(raw record_function would be {MARKS_PER_STEP * cost['record_function'] / step_ns:.3%})")
    print(f"step time   timed {med(timed) * 1e3:8.3f} ms   profiled (active steps) "
          f"{med(profiled) * 1e3:8.3f} ms   profiler overhead {med(profiled) / med(timed):.2f}x")


if __name__ == "__main__":
    main()
