"""Trials that span machines (issue 46), on a real two-node Slurm cluster on this machine
(scripts/slurm_twonode.sh: slurmctld and two slurmd, each node a network and UTS namespace of
its own). The jobs really go through slurmctld to both slurmd; the ranks reach each other over
the namespaces' bridge (gloo)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.launch.slurm import SlurmLauncher
from orchestrator.spec.config import SlurmLauncherConfig
from tests.helpers.launching import make_spec, require_two_nodes

pytestmark = pytest.mark.slurm


@pytest.fixture
def two_nodes(monkeypatch: Any) -> str:
    conf = require_two_nodes()
    monkeypatch.setenv("SLURM_CONF", conf)
    return conf


def _launcher(run_dir: Path, **kw: Any) -> SlurmLauncher:
    cfg = SlurmLauncherConfig(partition="two", time_limit_min=20, poll_interval_s=0.5, **kw)
    return SlurmLauncher(cfg, folder=str(run_dir / "slurm"))


def _two_node_spec(run_dir: Path, arm: int, world: int = 4, **kw: Any) -> Any:
    spec = make_spec(run_dir, arm, recipe="tests.helpers.ddp:build", world_size=world, **kw)
    spec.workload = {**spec.workload, "nnodes": 2}
    return spec


def test_an_embedded_recipe_runs_its_ranks_over_two_nodes(run_dir: Path, two_nodes: str) -> None:
    """World size 4 as 2 nodes x 2 ranks: one job step over both nodes, one process group
    (gloo), an all-reduce of the gradients every step; the slowest rank's time per step and the
    skew recorded, each rank on the node Slurm put it."""
    spec = _two_node_spec(run_dir, 0, label="ddp4")
    got: dict[str, dict] = {}
    _launcher(run_dir).run([spec], lambda s, r: got.update({s.trial_id: r}), 600)
    rec = got[spec.trial_id]
    assert rec["status"] == "ok", (rec.get("error"), rec.get("stderr_tail"))
    assert rec["world_size"] == 4 and rec["dist_backend"] == "gloo"
    assert rec["rank_skew_median_s"] is not None
    head = (Path(spec.trial_dir) / "steps.csv").read_text().splitlines()[0].split(",")
    assert {f"step_time_rank{r}_s" for r in range(4)} <= set(head)
    (sub,) = list((run_dir / "slurm").glob("*/*_submission.sh"))
    text = sub.read_text()
    assert "#SBATCH --nodes=2" in text and "#SBATCH --ntasks-per-node=2" in text
    # ranks 0, 1 on one machine and 2, 3 on the other, as Slurm placed them
    assert rec["nodes"] == 2 and rec["rank_nodes"] == [0, 0, 1, 1]
    assert rec["node_skew_median_s"] is not None and rec["node_skew_median_s"] >= 0
    assert sum(rec["slowest_node_counts"].values()) == rec["measured_steps_run"]
    for r in (1, 2, 3):
        assert (Path(spec.trial_dir) / f"stderr.rank{r}.log").exists()
    assert json.loads((Path(spec.trial_dir) / "trial.json").read_text())["slurm_job_id"]


def test_a_campaign_over_two_nodes_decides(compose: Any, run_dir: Path, two_nodes: str) -> None:
    """A real campaign whose trials each span both nodes (4 ranks, 2 per node, gloo): the
    data-parallel GPT against itself with 150 ms of sleep planted in every step of its last rank
    (on the second node); every trial spans both machines, the slowdown is rejected, and the
    step times are the slowest rank's (node 2's)."""
    from orchestrator.campaign.run import run_campaign

    cfg = compose(["workload=gpt_test", "protocol=quick", "launcher=slurm",
                   "launcher.slurm.partition=two", "launcher.slurm.poll_interval_s=0.5",
                   "+sweep=compile", "workload.world_size=4", "workload.nnodes=2",
                   "workload.recipe=tests.helpers.ddp:build", "protocol.repeats=3",
                   "protocol.max_rounds=3", "protocol.correctness.mode=off",
                   "workload.buckets=[{name:s32,seq_len:32,micro_batch:2}]",
                   "sweep.variable=workload.recipe", "sweep.baseline='tests.helpers.ddp:build'",
                   "sweep.baseline_label=ddp",
                   "sweep.values=['tests.helpers.ddp:build_slow_last_rank']",
                   "sweep.labels=[slow-node2]"])
    result = run_campaign(cfg, run_dir)
    recs = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")]
    assert len(recs) == 6 and all(r["status"] == "ok" for r in recs), \
        [r.get("error") for r in recs]
    assert {r["nodes"] for r in recs} == {2} and {r["world_size"] for r in recs} == {4}
    assert {tuple(r["rank_nodes"]) for r in recs} == {(0, 0, 1, 1)}
    slow = [r for r in recs if r["arm_label"] == "slow-node2"]
    # the planted rank is the slowest in most steps: its sleep is outside the all-reduce
    assert all(max(r["slowest_rank_counts"], key=lambda k: r["slowest_rank_counts"][k]) == "3"
               for r in slow), [r["slowest_rank_counts"] for r in slow]
    (v,) = result.verdicts
    assert v.verdict == "reject", v.reasons


ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = ("{python} -m torch.distributed.run --nnodes {nnodes} --node-rank {node_rank} "
            "--nproc-per-node {nproc_per_node} --rdzv-endpoint "
            "{rdzv_endpoint} --max-restarts 0 " + str(ROOT) +
            "/tests/helpers/ddp_command.py --steps {steps} --units {units} --fault {fault} "
            "--fault-node 1 --slow-ms 30")


@pytest.fixture(scope="module")
def torchrun_faults(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """(run dir, result) of one campaign of an unchanged torchrun command over both nodes, one
    round, 4 ranks (2 per node, gloo): the baseline and three arms whose node 1 goes wrong
    (tests/helpers/ddp_command.py --fault): ``slow-node1`` sleeps 30 ms a step, ``fail-node1``
    exits before the process group, ``hang-node1`` hangs before the closing barrier. One
    campaign for the three tests below: each would pay the cluster's start-up and a baseline
    trial of its own."""
    from orchestrator.campaign.run import run_campaign
    from orchestrator.cli.main import compose

    conf = require_two_nodes()
    run_dir = tmp_path_factory.mktemp("torchrun faults") / "run dir ü $x"
    run_dir.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", conf)
        mp.setenv("ORCH_COMPILE_CACHE_DIR", str(tmp_path_factory.mktemp("compile store")))
        cfg = compose(["+sweep=planted_command", "launcher=slurm", "device=cpu",
                       "launcher.slurm.partition=two", "launcher.slurm.poll_interval_s=0.5",
                       f"workload.command='{TORCHRUN}'", "workload.world_size=4",
                       "workload.nnodes=2", "workload.time_limit_s=120",
                       "workload.exit_grace_s=3", "protocol=quick",
                       "protocol.pairing=process", "protocol.warmup_steps=2",
                       "protocol.measured_steps=6", "protocol.correctness.mode=off",
                       "+workload.params.fault=none", "workload.params.units=32",
                       "sweep.variable=workload.params.fault", "sweep.baseline=none",
                       "sweep.values=[slow,fail,hang]",
                       "sweep.labels=[slow-node1,fail-node1,hang-node1]",
                       "protocol.repeats=1", "protocol.max_rounds=1",
                       "protocol.infra_retries=0"])
        return run_dir, run_campaign(cfg, run_dir)


def _by_label(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {r["arm_label"]: r for r in (json.loads(p.read_text())
                                        for p in run_dir.glob("trials/*/trial.json"))}


def test_a_torchrun_command_spans_both_nodes_and_completes_a_campaign(
        torchrun_faults: tuple[Path, Any]) -> None:
    """An unchanged ``torchrun --nnodes {nnodes} --node-rank {node_rank} --rdzv-endpoint
    {rdzv_endpoint}`` command, started once per node by one Slurm job step over both nodes:
    every trial that went right is ok, its step times come from both nodes' logs (the slowest
    node's per step), and no machine name is in the records. The variant that sleeps 30 ms per
    step on the second node's ranks is slower than the baseline."""
    run_dir, result = torchrun_faults
    recs = _by_label(run_dir)
    assert len(recs) == 4, sorted(recs)
    for label in ("base", "slow-node1", "hang-node1"):
        r = recs[label]
        assert r["status"] == "ok", (label, r.get("error"), r.get("stderr_tail"))
        tdir = run_dir / "trials" / r["trial_id"]
        assert r["nodes"] == 2 and r["nodes_logging_steps"] == [0, 1]
        assert r["node_skew_median_s"] is not None
        assert "<master_addr>" in r["command"] and "--nnodes 2" in r["command"]
        assert "--nproc-per-node 2" in r["command"]
        assert (tdir / "command.node1.log").exists() and (tdir / "node1.json").exists()
        head = (tdir / "steps.csv").read_text().splitlines()[0].split(",")
        assert {"step_time_node0_s", "step_time_node1_s"} <= set(head)
        assert not list(tdir.glob("trial.rank*.json"))
    text = "\n".join(p.read_text() for p in run_dir.glob("trials/*/trial.json"))
    assert "orchn1" not in text and "orchn2" not in text
    verdicts = {v.label: v.verdict for v in result.verdicts}
    assert verdicts["slow-node1"] in ("reject", "inconclusive"), verdicts  # one round: it ran
    # the 30 ms on node 1 reach every step (the all-reduce waits for it)
    assert recs["slow-node1"]["step_time_median_s"] > recs["base"]["step_time_median_s"] + 0.02


def test_a_node_whose_command_fails_stops_the_other_node_and_fails_the_trial(
        torchrun_faults: tuple[Path, Any]) -> None:
    """The variant's ranks on node 1 exit before joining the process group; node 0's ranks
    wait for them there (a peer that never came: gloo's wait is 30 min, NCCL's 10). Node 0 does
    not sit out workload.time_limit_s: it sees node 1's report and stops its command 10 s
    later; the trial fails with node 1's reason, and the baseline's trial is untouched."""
    run_dir, _ = torchrun_faults
    recs = _by_label(run_dir)
    assert recs["base"]["status"] == "ok", recs["base"].get("error")
    bad = recs["fail-node1"]
    assert bad["status"] == "failed" and bad["failure_kind"] == "node_failed", bad
    assert bad["error"] == "node 1: the command exited with code 1 after 0 step line(s)", \
        bad["error"]
    # node 0's command was stopped, not left to run to the time limit
    assert bad["node_wall_s"]["0"] < 120, bad["node_wall_s"]
    tdir = run_dir / "trials" / bad["trial_id"]
    assert json.loads((tdir / "node1.json").read_text())["status"] == "failed"


def test_a_trial_whose_nodes_hang_after_the_last_step_is_stopped_and_kept(
        torchrun_faults: tuple[Path, Any]) -> None:
    """The variant's ranks on node 1 do not reach the closing barrier after the last step, and
    node 0's wait for them in it: both nodes' commands hang at their end. Both are stopped
    workload.exit_grace_s after the steps were all logged (not at the 120 s time limit), the
    trial keeps its steps, and its record says what happened."""
    run_dir, _ = torchrun_faults
    recs = _by_label(run_dir)
    assert recs["base"]["status"] == "ok" and "teardown" not in recs["base"], recs["base"]
    hung = recs["hang-node1"]
    assert hung["status"] == "ok", (hung.get("error"), hung.get("stderr_tail"))
    assert hung["nodes_logging_steps"] == [0, 1]
    assert "workload.exit_grace_s" in hung["teardown"], hung["teardown"]
    assert max(hung["node_wall_s"].values()) < 60, hung["node_wall_s"]
    # the commands' own exit codes are kept (stopped: not 0), apart from the trial process's
    assert hung["command_returncode"] not in (None, 0) and hung["returncode"] == 0, hung
    assert recs["base"]["command_returncode"] == 0
    tdir = run_dir / "trials" / hung["trial_id"]
    node1 = json.loads((tdir / "node1.json").read_text())
    assert node1["status"] == "ok" and node1["returncode"] not in (None, 0), node1
    md = (run_dir / "decisions.md").read_text()
    assert "`hang-node1`: 1 of 1 trial(s)" in md and "`base`: 0 of 1 trial(s)" in md


SCRIPT = ROOT / "scripts" / "slurm_twonode.sh"


def _node_state(node: str) -> str:
    import subprocess

    out = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%t"], capture_output=True, text=True,
                         timeout=30, check=False).stdout
    return out.strip().rstrip("*~#")


def test_a_node_lost_mid_trial_is_recorded_and_a_resume_finishes_the_campaign(
        compose: Any, run_dir: Path, two_nodes: str) -> None:
    """Every process of the second node (its slurmd, the job's step, the trial's ranks) is
    killed while the first trial runs over both nodes; once Slurm has marked it down, the node
    comes back. The jobs do not let Slurm requeue them (``--no-requeue``, as on a cluster with
    JobRequeue=0; with Slurm's requeue the job would run its unfinished trials again by
    itself): the lost trial gets a recorded status with a one-line reason (the machine's
    failure, infra_failed, not the arm's), the campaign goes on, and a resume runs what is
    missing: every planned trial ends ok exactly once."""
    import subprocess
    import threading
    import time

    from orchestrator.campaign.run import run_campaign

    overrides = ["workload=gpt_test", "protocol=quick", "launcher=slurm",
                 "launcher.slurm.partition=two", "launcher.slurm.poll_interval_s=0.5",
                 "launcher.slurm.lost_after_s=20", "+sweep=compile", "workload.world_size=4",
                 "workload.nnodes=2", "workload.recipe=tests.helpers.ddp:build",
                 "protocol.repeats=1", "protocol.max_rounds=1", "protocol.infra_retries=0",
                 "protocol.correctness.mode=off", "protocol.measured_steps=40",
                 "+launcher.slurm.additional_parameters.no-requeue=true",
                 "workload.buckets=[{name:s32,seq_len:32,micro_batch:2}]",
                 "sweep.variable=workload.recipe", "sweep.baseline='tests.helpers.ddp:build'",
                 "sweep.baseline_label=ddp", "sweep.values=['tests.helpers.ddp:build_slow_last_rank']",
                 "sweep.labels=[slow]"]
    killed: list[str] = []

    def kill_when_running() -> None:
        end = time.time() + 300
        while time.time() < end:  # the first trial's ranks are stepping on both nodes
            if list(run_dir.glob("trials/r000-*/stderr.rank3.log")):
                time.sleep(3.0)
                subprocess.run(["bash", str(SCRIPT), "kill-node", "orchn2"], check=False)
                killed.append(next(iter(run_dir.glob("trials/r000-*/stderr.rank3.log"))
                                   ).parent.name)
                down = time.time() + 90
                while not _node_state("orchn2").startswith("down") and time.time() < down:
                    time.sleep(1.0)
                subprocess.run(["bash", str(SCRIPT), "start-node", "orchn2"], check=False)
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=kill_when_running, daemon=True)
    watcher.start()
    try:
        run_campaign(compose(overrides), run_dir)
    finally:
        watcher.join(timeout=5)
        subprocess.run(["bash", str(SCRIPT), "start-node", "orchn2"], check=False)
    assert killed, "the first trial never started on both nodes"
    recs = {p.parent.name: json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")}
    hit = recs[killed[0]]
    assert hit["status"] == "infra_failed", hit
    assert hit["error"] and "\n" not in hit["error"] and hit.get("infra_reason"), hit
    # the node is back in service (slurmd registered again)
    end = time.time() + 120
    while _node_state("orchn2") not in ("idle", "mix", "alloc") and time.time() < end:
        time.sleep(1.0)
    run_campaign(compose([*overrides, "resume=true"]), run_dir)
    final = {p.parent.name: json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")}
    assert len(final) == 2 and all(r["status"] == "ok" for r in final.values()), \
        {k: (r["status"], r.get("error")) for k, r in final.items()}
    # Slurm's word (the job ended NODE_FAIL) or the survivors' (a peer's connection closed)
    assert hit.get("slurm_state") in ("NODE_FAIL", "LOST") or hit.get("raw_status"), hit
    # a trial that had finished ok before the node was lost kept its first (and only) run; the
    # lost trial (and any other of the lost job's trials) ran again
    for tid, r in final.items():
        if recs.get(tid, {}).get("status") == "ok":
            assert r["started_at"] == recs[tid]["started_at"], tid
    assert final[killed[0]].get("started_at") != hit.get("started_at")


CLIENT_TORCHRUN = ("{python} -m torch.distributed.run --nnodes {nnodes} --node-rank {node_rank} "
                   "--nproc-per-node {nproc_per_node} --rdzv-endpoint {rdzv_endpoint} "
                   "--max-restarts 0 " + str(ROOT) + "/tests/helpers/client_trainer.py "
                   "--mode dist --label --steps {steps}")


def test_a_client_trainer_over_both_nodes_switches_arms_in_lockstep(
        compose: Any, run_dir: Path, two_nodes: str) -> None:
    """A trainer that uses orchestrator.client, 4 ranks under torchrun over both nodes, each
    step ``units`` all-reduces (ranks on different arms would run different numbers of
    collectives and fail): every rank of both nodes reaches node 0's channel over TCP (the
    first node's address, the trial's token), the arms switch at the same step on every rank,
    each block's time is the slowest rank's, and the channel's address names no machine. After
    the last step node 1's ranks hang before the closing barrier, node 0's wait for them in it:
    both nodes' commands are stopped workload.exit_grace_s after the plan's last block (not at
    the time limit) and the round is kept, its records saying so (one campaign for both, to
    spare the suite a third minute of this cluster)."""
    from orchestrator.campaign.run import run_campaign

    cfg = compose(["+sweep=planted_client", "launcher=slurm", "device=cpu",
                   "launcher.slurm.partition=two", "launcher.slurm.poll_interval_s=0.5",
                   f"workload.command='{CLIENT_TORCHRUN} --hang-node 1'",
                   "workload.exit_grace_s=3", "workload.time_limit_s=120",
                   "workload.world_size=4",
                   "workload.nnodes=2", "protocol=quick", "protocol.pairing=steps",
                   "protocol.correctness.mode=off", "protocol.repeats=2",
                   "protocol.max_rounds=2", "sweep.baseline=2", "sweep.values=[5]",
                   "sweep.labels=[more]", "workload.params.units=2"])
    run_campaign(cfg, run_dir)
    recs = {p.parent.name: json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")}
    assert len(recs) == 4 and all(r["status"] == "ok" for r in recs.values()), \
        {k: (r.get("error"), r.get("stderr_tail")) for k, r in recs.items()}
    for tid, r in recs.items():
        assert r["nodes"] == 2 and r["client_channel"].startswith("tcp://<master_addr>:")
        assert r["rank_skew_median_s"] is not None
        # node 0's own stop is said (the other node's is in its report)
        assert r["teardown"].startswith("the command had run every block of its plan"), r
        assert r["command_returncode"] != 0 and r["command_wall_s"] < 60, r
        assert max(r["node_wall_s"].values()) < 60, r["node_wall_s"]
    for tdir in {Path(r["paired_process"]) for r in recs.values()}:
        logs = [(run_dir / "trials" / tdir / n).read_text()
                for n in ("command.log", "command.node1.log")]
        # both nodes' ranks ran both arms' blocks
        assert all("units 5" in t and "units 2" in t for t in logs)
        assert not (run_dir / "trials" / tdir / "client.json").exists()
        node1 = json.loads((run_dir / "trials" / tdir / "node1.json").read_text())
        assert node1["status"] == "ok" and node1["teardown"], node1
    head = next(iter(run_dir.glob("trials/*/steps.csv"))).read_text().splitlines()[0]
    assert {f"step_time_rank{r}_s" for r in range(4)} <= set(head.split(","))
