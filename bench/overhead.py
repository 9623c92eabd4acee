"""The orchestrator's own cost, measured side by side in one run.

1. Step time: median step time of a trial run by the orchestrator (a fresh process forked from
   the fork server, and one spawned: the local launcher's two start methods) versus the same
   recipe in a bare loop (bench/_bare_loop.py), in the same conditions, interleaved. Target:
   ratio <= 1.01 for each.
2. Fixed cost per trial: process start to first step minus the recipe's own build (the trainer's
   construction, ``trainer_build_s`` in trial.json), spawned and forked, each versus
   ``python -c "import torch"``; target for the fork server <= 0.3x. Also the bare loop's own
   start-to-first-step (what any training script pays: interpreter, torch, the build), and the
   fork server's start (paid once per campaign).
3. Two-rank trials (``--dist-trials N``, default 3; 0 skips): the per-step agreement that makes
   every rank take the same warm-up, exclusion and stopping decisions (one small all-reduce
   after each step's clock stops) costs wall time outside the timed window; printed beside
   the median step time it accompanies.

Usage: python bench/overhead.py [--pairs 5] [--workload gpt_tiny] [--bucket s128]
       [--dist-trials 3] [--dist-workload muon_tp]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.cli.main import compose  # noqa: E402
from orchestrator.core.convert import to_dict  # noqa: E402
from orchestrator.launch.local import LocalLauncher  # noqa: E402
from orchestrator.worker.trial import LAUNCH_T0_VAR, TrialSpec  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--workload", default="gpt_tiny")
    ap.add_argument("--bucket", default="s128")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--dist-trials", type=int, default=3)
    ap.add_argument("--dist-workload", default="muon_tp")
    args = ap.parse_args()
    cfg = compose([f"workload={args.workload}", "+sweep=fa2"])
    bucket = next(to_dict(b) for b in cfg.workload.buckets if b.name == args.bucket)
    tmp = Path(tempfile.mkdtemp(prefix="overhead-"))
    spawn = LocalLauncher(device="cpu", start_method="spawn")
    fork = LocalLauncher(device="cpu", start_method="auto")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    step: dict[str, list[float]] = {"spawn": [], "fork": [], "bare": []}
    fixed: dict[str, list[float]] = {"spawn": [], "fork": []}
    build: dict[str, list[float]] = {"spawn": [], "fork": []}
    total: dict[str, list[float]] = {"spawn": [], "fork": []}
    bare_start, imp = [], []
    order = ("spawn", "fork", "bare")
    for i in range(args.pairs):
        spec = TrialSpec(
            trial_id=f"t{i}", trial_dir=str(tmp / f"t{i}"), bucket=bucket, arm_id="a0",
            arm_label="baseline", is_baseline=True, round=i, position=i,
            workload=to_dict(cfg.workload), device="cpu", warmup_steps=3,
            measured_steps=args.steps,
        )
        for which in order[i % 3:] + order[:i % 3]:  # each goes first in turn
            if which in ("spawn", "fork"):
                spec.trial_dir = str(tmp / f"{which}{i}")
                rec = (spawn if which == "spawn" else fork).run_one(spec, 600)
                if rec["status"] != "ok":
                    raise SystemExit(f"{which} trial {i}: {rec['status']}: {rec.get('error')}")
                want = "fork-server" if which == "fork" else "spawn"
                if rec["start_method"] != want:
                    raise SystemExit(f"{which} trial {i} started by {rec['start_method']}: "
                                     f"{rec['start_method_why']}")
                step[which].append(rec["step_time_median_s"])
                fixed[which].append(rec["startup_to_first_step_s"] - rec["trainer_build_s"])
                build[which].append(rec["trainer_build_s"])
                total[which].append(rec["startup_to_first_step_s"])
            else:
                Path(spec.trial_dir).mkdir(parents=True, exist_ok=True)
                p = Path(spec.trial_dir) / "bare.json"
                p.write_text(spec.to_json())
                env[LAUNCH_T0_VAR] = repr(time.time())
                out = subprocess.run([sys.executable, str(ROOT / "bench/_bare_loop.py"), str(p)],
                                     env=env, capture_output=True, text=True, check=True)
                r = json.loads(out.stdout)
                step["bare"].append(r["median"])
                bare_start.append(r["startup"])
        t0 = time.time()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        imp.append(time.time() - t0)
    server = fork.starter.server
    server_s = server.ready_s if server is not None else float("nan")
    fork.close()
    med = statistics.median
    print(f"workload {args.workload}, bucket {args.bucket}, {args.pairs} interleaved rounds "
          f"(spawned trial, forked trial, bare loop), {args.steps} measured steps each, "
          f"{os.cpu_count()} cores")
    for which, name in (("fork", "fork server"), ("spawn", "spawn")):
        ratio = med(step[which]) / med(step["bare"])
        print(f"step time   {name:<11} {med(step[which]) * 1e3:8.3f} ms   bare loop "
              f"{med(step['bare']) * 1e3:8.3f} ms   ratio {ratio:.4f}  (target <= 1.01)")
    print(f"fixed cost  start->first step minus the recipe's build; python -c 'import torch' "
          f"{med(imp):.3f} s")
    for which, name, target in (("spawn", "spawn", ""),
                                ("fork", "fork server", "  (target <= 0.3)")):
        f = fixed[which]
        print(f"            {name:<11} {med(f):.3f} s  (min {min(f):.3f}, max {max(f):.3f}; "
              f"build {med(build[which]):.3f} s)   ratio to import torch {med(f) / med(imp):.3f}"
              f"{target}")
    print(f"            fork server / spawn {med(fixed['fork']) / med(fixed['spawn']):.3f}; "
          f"the fork server's own start (torch, worker code, recipe imported; once per "
          f"campaign) {server_s:.3f} s")
    print(f"            start->first step, build included: spawn {med(total['spawn']):.3f} s, "
          f"fork server {med(total['fork']):.3f} s, bare loop {med(bare_start):.3f} s (a "
          "spawned build includes the first AdamW's torch._dynamo import)")
    if args.dist_trials > 0:
        two_rank(spawn, tmp, args.dist_workload, args.dist_trials, args.steps)


def two_rank(launcher: LocalLauncher, tmp: Path, workload: str, trials: int, steps: int) -> None:
    """The per-step rank agreement's cost in real two-rank trials (gloo on CPU here)."""
    cfg = compose([f"workload={workload}", "workload.world_size=2", "+sweep=tp_mode"])
    step, agree = [], []
    for i in range(trials):
        spec = TrialSpec(
            trial_id=f"d{i}", trial_dir=str(tmp / f"d{i}"), bucket=to_dict(cfg.workload.buckets[0]),
            arm_id="a0", arm_label="baseline", is_baseline=True, round=i, position=i,
            workload=to_dict(cfg.workload), device="cpu", warmup_policy="auto", warmup_steps=3,
            measured_steps=steps)
        rec = launcher.run_one(spec, 600)
        if rec["status"] != "ok":
            raise SystemExit(f"two-rank trial {i}: {rec['status']}: {rec.get('error')}")
        step.append(rec["step_time_median_s"])
        agree.append(rec["step_agreement_median_s"])
    med = statistics.median
    print(f"two ranks   {workload} (gloo), {trials} trials, auto warm-up: step {med(step) * 1e3:.3f} ms"
          f" (timed), rank agreement {med(agree) * 1e6:.0f} us per step outside the timed window"
          f" ({med(agree) / med(step):.2%} of a step's wall time added)")


if __name__ == "__main__":
    main()
