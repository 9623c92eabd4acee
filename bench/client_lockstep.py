"""torchrun ranks switching arms through orchestrator.client: do they stay in lockstep?

Each trial is one run of ``tests/helpers/client_trainer.py --mode dist`` under
``torch.distributed.run`` with gloo ranks, paired by steps over arms whose steps run a
different number of all_reduce calls (``units``): ranks that switched at different steps would
run different numbers of collectives and hang or fail (a mismatch). Prints each trial's status,
cycles and rank skew, and the count of trials that ended ok.

    .venv/bin/python bench/client_lockstep.py --trials 20
    .venv/bin/python bench/client_lockstep.py --trials 20 --nodes 2   # two-node Slurm

``--nodes 2``: 4 ranks over the two-node cluster (scripts/slurm_twonode.sh start: partition
``two``, each node a network namespace), one Slurm job step over both nodes per trial, the
channel on the first node over TCP, the second node's ranks reaching it over the bridge. It
also prints what the client takes of each step (the trainer's ``client_us``: params, with a
block's round trip to the channel at its boundary, the timed window's ends and report) for the
ranks on the channel's node and for those on the other node, side by side in the same trials.
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
from orchestrator.worker.pairing.steps import StepsPart, part as steps_part  # noqa: E402
from orchestrator.worker.trial import run_trial  # noqa: E402
from recipes.command.config import CommandWorkloadConfig  # noqa: E402

COMMAND = ("{python} -m torch.distributed.run --standalone --nproc_per_node {world_size} "
           "tests/helpers/client_trainer.py --mode dist --steps {steps}")
NODES_COMMAND = ("{python} -m torch.distributed.run --nnodes {nnodes} --node-rank {node_rank} "
                 "--nproc-per-node {nproc_per_node} --rdzv-endpoint {rdzv_endpoint} "
                 "--max-restarts 0 " + str(ROOT / "tests/helpers/client_trainer.py") +
                 " --mode dist --steps {steps}")
TWO_NODE_CONF = "/tmp/orchestrator-slurm2/slurm.conf"


def workload(units: int, nodes: int = 1) -> dict:
    c = OmegaConf.structured(CommandWorkloadConfig)
    c.name, c.params, c.switchable = "lockstep", {"units": units}, ["units"]
    c.command = COMMAND if nodes == 1 else NODES_COMMAND
    c.world_size, c.time_limit_s = 2 * nodes, 120
    c.nnodes = nodes
    c.buckets = [BucketConfig(name="b", seq_len=1, micro_batch=1)]
    return OmegaConf.to_container(c)  # type: ignore[return-value]


def client_us(log: Path, ranks: set[int]) -> list[float]:
    """The trainer's ``client_us`` of every step line of ``ranks`` in a command log."""
    out = []
    for ln in log.read_text(errors="replace").splitlines():
        parts = dict(p.split(" ", 1) for p in ln.split(" | ") if " " in p)
        if ln.startswith("step") and "client_us" in parts and int(parts.get("rank", -1)) in ranks:
            out.append(float(parts["client_us"]))
    return out


def run_on_two_nodes(specs: list[TrialSpec]) -> None:
    """Every trial through the Slurm launcher on the two-node cluster (one job each)."""
    from orchestrator.launch.slurm import SlurmLauncher
    from orchestrator.spec.config import SlurmLauncherConfig

    os.environ.setdefault("SLURM_CONF", TWO_NODE_CONF)
    folder = Path(specs[0].trial_dir).parents[1] / "slurm"
    launcher = SlurmLauncher(SlurmLauncherConfig(partition="two", time_limit_min=30,
                                                 poll_interval_s=0.5), folder=str(folder))
    launcher.run(specs, lambda s, r: None, 300)


def make_spec(root: Path, t: int, measured: int, nodes: int) -> tuple[TrialSpec, list]:
    arms = [PairedArm(f"a{i}", f"u{u}", i == 0, f"t{t}-a{i}", str(root / f"a{i}"),
                      workload(u, nodes)) for i, u in enumerate((2, 5, 3))]
    spec = TrialSpec(trial_id=arms[0].trial_id, trial_dir=arms[0].trial_dir,
                     bucket={"name": "b", "seq_len": 1, "micro_batch": 1}, arm_id="a0",
                     arm_label="u2", is_baseline=True, round=t, position=0,
                     workload=arms[0].workload, device="cpu", warmup_steps=2,
                     measured_steps=measured,
                     paired=steps_part(arms, StepsPart(3, 1, "balanced", f"r{t}")))
    return spec, arms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--measured-steps", type=int, default=12)
    ap.add_argument("--nodes", type=int, default=1, choices=(1, 2))
    a = ap.parse_args()
    os.chdir(ROOT)
    ok = 0
    near: list[float] = []
    far: list[float] = []
    with tempfile.TemporaryDirectory(prefix="orch-lockstep-") as tmp:
        made = [make_spec(Path(tmp) / "trials" / f"t{t}", t, a.measured_steps, a.nodes)
                for t in range(a.trials)]
        t0 = time.time()
        if a.nodes == 2:  # the nodes share this machine's file system (the trial dirs)
            run_on_two_nodes([s for s, _ in made])
        for t, (spec, arms) in enumerate(made):
            if a.nodes == 1:
                t0 = time.time()
                run_trial(spec)
            recs = [json.loads((Path(x.trial_dir) / "trial.json").read_text()) for x in arms]
            good = all(r["status"] == "ok" for r in recs)
            ok += good
            skew = [r.get("rank_skew_median_s") for r in recs]
            if a.nodes == 2:
                tdir = Path(spec.trial_dir)
                # static rendezvous: node 0 (the channel's) runs ranks 0-1, node 1 ranks 2-3
                near += client_us(tdir / "command.log", {0, 1})
                far += client_us(tdir / "command.node1.log", {2, 3})
            print(f"trial {t:2d}: {'ok' if good else 'NOT OK'} "
                  f"{[r['status'] for r in recs]} cycles {recs[0].get('cycles')} "
                  f"rank skew (median per arm, us) "
                  f"{[round(s * 1e6) if s is not None else None for s in skew]}"
                  + (f" {time.time() - t0:.1f}s" if a.nodes == 1 else "")
                  + ("" if good else f" {recs[0].get('error')}"), flush=True)
    what = "two-rank" if a.nodes == 1 else "4-rank two-node"
    print(f"{ok}/{a.trials} {what} trials ended ok (no collective mismatch); "
          f"load avg {statistics.mean(os.getloadavg()):.1f}")
    if a.nodes == 2 and near and far:
        for name, xs in (("ranks 0-1, on the channel's node", near),
                         ("ranks 2-3, on the other node (over the bridge)", far)):
            print(f"client per step, {name}: median {statistics.median(xs):.1f} us, mean "
                  f"{statistics.mean(xs):.1f} us (a block's round trip included), "
                  f"{len(xs)} steps")
    return 0 if ok == a.trials else 1


if __name__ == "__main__":
    sys.exit(main())
