"""Two torchrun ranks switching arms through orchestrator.client: do they stay in lockstep?

Each trial is one run of ``tests/helpers/client_trainer.py --mode dist`` under
``torch.distributed.run`` with two gloo ranks, paired by steps over arms whose steps run a
different number of all_reduce calls (``units``): ranks that switched at different steps would
run different numbers of collectives and hang or fail (a mismatch). Prints each trial's status,
cycles and rank skew, and the count of trials that ended ok.

    .venv/bin/python bench/client_lockstep.py --trials 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.spec.config import BucketConfig  # noqa: E402
from orchestrator.spec.jobs import PairedArm, TrialSpec  # noqa: E402
from orchestrator.worker.trial import run_trial  # noqa: E402
from recipes.command.config import CommandWorkloadConfig  # noqa: E402

COMMAND = ("{python} -m torch.distributed.run --standalone --nproc_per_node {world_size} "
           "tests/helpers/client_trainer.py --mode dist --steps {steps}")


def workload(units: int) -> dict:
    c = OmegaConf.structured(CommandWorkloadConfig)
    c.name, c.command, c.params, c.switchable = "lockstep", COMMAND, {"units": units}, ["units"]
    c.world_size, c.time_limit_s = 2, 120
    c.buckets = [BucketConfig(name="b", seq_len=1, micro_batch=1)]
    return OmegaConf.to_container(c)  # type: ignore[return-value]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--measured-steps", type=int, default=12)
    a = ap.parse_args()
    os.chdir(ROOT)
    ok = 0
    with tempfile.TemporaryDirectory() as tmp:
        for t in range(a.trials):
            root = Path(tmp) / f"t{t}"
            arms = [PairedArm(f"a{i}", f"u{u}", i == 0, f"t{t}-a{i}", str(root / f"a{i}"),
                              workload(u)) for i, u in enumerate((2, 5, 3))]
            spec = TrialSpec(trial_id=arms[0].trial_id, trial_dir=arms[0].trial_dir,
                             bucket={"name": "b", "seq_len": 1, "micro_batch": 1}, arm_id="a0",
                             arm_label="u2", is_baseline=True, round=t, position=0,
                             workload=arms[0].workload, device="cpu", warmup_steps=2,
                             measured_steps=a.measured_steps, block_steps=3,
                             switch_warmup_steps=1, order="balanced", order_seed=f"r{t}",
                             paired_arms=arms)
            t0 = time.time()
            run_trial(spec)
            recs = [json.loads((Path(x.trial_dir) / "trial.json").read_text()) for x in arms]
            good = all(r["status"] == "ok" for r in recs)
            ok += good
            skew = [r.get("rank_skew_median_s") for r in recs]
            print(f"trial {t:2d}: {'ok' if good else 'NOT OK'} "
                  f"{[r['status'] for r in recs]} cycles {recs[0].get('cycles')} "
                  f"rank skew (median per arm, us) "
                  f"{[round(s * 1e6) if s is not None else None for s in skew]} "
                  f"{time.time() - t0:.1f}s" + ("" if good else f" {recs[0].get('error')}"),
                  flush=True)
    print(f"{ok}/{a.trials} two-rank trials ended ok (no collective mismatch); "
          f"load avg {statistics.mean(os.getloadavg()):.1f}")
    return 0 if ok == a.trials else 1


if __name__ == "__main__":
    sys.exit(main())
