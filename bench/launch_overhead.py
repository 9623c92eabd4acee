"""Fixed cost per trial of each launcher: submission to the first measured step.

Runs the same tiny trial (gpt_test, bucket s32, CPU, ``warmup_steps=0`` so the first step is a
measured one) through each launcher and prints the median of ``startup_to_first_step_s``:

* inline: from the call to the first step (torch is already imported; model build only);
* local: from just before the trial is started to the first step: forked from the fork server
  (``local``, the default start method; the server's own start, once per launcher, is not in
  it) or spawned (``local-spawn``: interpreter, imports, build);
* slurm: from just before ``sbatch`` to the first step (queueing, job start, submitit's
  unpickling, then the same as local). One job per trial, so each sample pays the whole path.

Slurm is measured only when a cluster answers (``bash scripts/slurm_local.sh start``).
The machine's load average is printed too: these figures move with it.

Usage: python bench/launch_overhead.py [--trials 3] [--launchers inline,local,local-spawn,slurm]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.spec.config import SlurmLauncherConfig  # noqa: E402
from orchestrator.launch.inline import InlineLauncher  # noqa: E402
from orchestrator.launch.local import LocalLauncher  # noqa: E402
from orchestrator.launch.slurm import SlurmLauncher  # noqa: E402
from orchestrator.worker.trial import TrialSpec  # noqa: E402
from tests.helpers.launching import make_spec, slurm_conf  # noqa: E402


def _specs(run_dir: Path, n: int) -> list[TrialSpec]:
    specs = []
    for i in range(n):  # one round each: on Slurm every trial is the first of its own job
        s = make_spec(run_dir, 0, rnd=i, position=i, label="bench")
        s.warmup_steps = 0
        specs.append(s)
    return specs


def measure(name: str, n: int, tmp: Path) -> list[float]:
    run_dir = tmp / name
    if name == "inline":
        launcher: object = InlineLauncher()
    elif name in ("local", "local-spawn"):
        launcher = LocalLauncher(device="cpu",
                                 start_method="spawn" if name == "local-spawn" else "auto")
    else:
        conf = slurm_conf()
        if conf is None:
            raise RuntimeError("no Slurm cluster answers")
        if conf:
            os.environ["SLURM_CONF"] = conf
        launcher = SlurmLauncher(SlurmLauncherConfig(partition="debug", poll_interval_s=0.2),
                                 folder=str(run_dir / "slurm"))
    got: list[dict] = []
    launcher.run(_specs(run_dir, n), lambda s, r: got.append(r), 600)  # type: ignore[attr-defined]
    bad = [r for r in got if r["status"] != "ok"]
    if bad:
        raise RuntimeError(f"{name}: {bad[0]['status']}: {bad[0].get('error')}")
    return [r["startup_to_first_step_s"] for r in got]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--launchers", default="inline,local,local-spawn,slurm")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    print(f"launch overhead: submission -> first measured step, gpt_test s32 on CPU, "
          f"{args.trials} trials per launcher, {os.cpu_count()} cores, load average {load:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.launchers.split(","):
            t0 = time.time()
            try:
                xs = measure(name, args.trials, Path(tmp))
            except RuntimeError as exc:
                print(f"{name:>11}: not measured ({exc})")
                continue
            print(f"{name:>11}: median {statistics.median(xs):7.3f} s  (min {min(xs):.3f}, "
                  f"max {max(xs):.3f}; {time.time() - t0:.0f} s wall for {len(xs)} trials)")


if __name__ == "__main__":
    main()
