"""One Slurm allocation per campaign (launcher.slurm.allocation=campaign,
orchestrator/launch/slurm_alloc.py): the command lines and helpers (always), and on the real
clusters of scripts/slurm_local.sh / scripts/slurm_twonode.sh (tests marked ``slurm``): a
campaign that waits in the queue once, a step over two nodes, the allocation cancelled on an
interrupt and by a resume after a killed orchestrator."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.core.errors import ConfigError
from orchestrator.launch.factory import make_launcher
from orchestrator.launch.slurm import ACTIVE_STATES, SlurmLauncher, squeue_states
from orchestrator.launch.slurm_alloc import (
    SlurmAllocationLauncher,
    StepEnvironment,
    expand_nodelist,
    parse_allocation_id,
    plan_entry,
    salloc_command,
    slurm_line,
    srun_command,
)
from orchestrator.spec.config import LauncherConfig, SlurmLauncherConfig
from tests.helpers.launching import make_spec, require_slurm, require_two_nodes

# --------------------------------------------------------------------------- no cluster needed


def test_salloc_asks_for_what_a_job_asks_for() -> None:
    cfg = SlurmLauncherConfig(
        partition="gpu", time_limit_min=90, gpus_per_node=8, cpus_per_task=6, mem_gb=4.0,
        account="proj", nodelist="node7", additional_parameters={"constraint": "h100",
                                                                 "exclusive": True},
        setup=["module load musa"], array_parallelism=3, allocation="campaign")
    cmd = salloc_command(cfg, ntasks=4, nodes=2)
    assert cmd[:2] == ["salloc", "--no-shell"]
    assert set(cmd[2:]) == {
        "--job-name=orch-campaign", "--time=90", "--nodes=2", "--ntasks-per-node=2",
        "--partition=gpu", "--gpus-per-node=8", "--cpus-per-task=6", "--mem=4096MB",
        "--account=proj", "--nodelist=node7", "--constraint=h100", "--exclusive"}
    step = srun_command("12", cfg, 2, 2, ["python", "-m", "x", "step.json"])
    assert step[:5] == ["srun", "--jobid=12", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2"]
    assert "--cpus-per-task=6" in step and "--gpus-per-node=8" in step
    # the setup lines run before the step's tasks, which then exec the entry point
    assert step[-8:-4] == ["bash", "-c", 'module load musa\nexec "$@"', "orch-step"]
    assert step[-4:] == ["python", "-m", "x", "step.json"]
    bare = salloc_command(SlurmLauncherConfig(), ntasks=1)
    assert bare == ["salloc", "--no-shell", "--job-name=orch-campaign", "--time=60",
                    "--nodes=1", "--ntasks-per-node=1"]


def test_step_environment_and_node_lists() -> None:
    assert expand_nodelist("node[1-3,7],gpu05") == ["node1", "node2", "node3", "node7", "gpu05"]
    assert expand_nodelist("orchn[1-2]") == ["orchn1", "orchn2"]
    assert expand_nodelist("a[08-10]-ib") == ["a08-ib", "a09-ib", "a10-ib"]
    assert parse_allocation_id("salloc: Pending job allocation 41") == "41"
    assert parse_allocation_id("salloc: Granted job allocation 41") == "41"
    assert parse_allocation_id("salloc: error: invalid partition") is None
    env = StepEnvironment({"SLURM_JOB_ID": "41", "SLURM_STEP_ID": "3", "SLURM_PROCID": "2",
                           "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
                           "SLURM_JOB_NODELIST": "n[1-4]", "SLURM_STEP_NODELIST": "n[2-3]"})
    assert (env.job_id, env.global_rank, env.local_rank, env.node) == ("41.3", 2, 0, 1)
    assert env.hostnames == ["n2", "n3"]  # the step's nodes, MASTER_ADDR the first


def test_the_mode_is_chosen_and_checked(tmp_path: Path, compose: Any) -> None:
    per_job = make_launcher(LauncherConfig(name="slurm"), run_dir=tmp_path)
    assert type(per_job) is SlurmLauncher
    camp = make_launcher(LauncherConfig(name="slurm", slurm=SlurmLauncherConfig(
        allocation="campaign")), run_dir=tmp_path)
    assert isinstance(camp, SlurmAllocationLauncher)
    with pytest.raises(ConfigError, match=r"^launcher\.slurm\.allocation: 'bogus' is not"):
        make_launcher(LauncherConfig(name="slurm", slurm=SlurmLauncherConfig(
            allocation="bogus")), run_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"^launcher\.slurm\.allocation: ") as err:
        compose(["workload=gpt_test", "launcher=slurm", "+sweep=fa2",
                 "launcher.slurm.allocation=per_round"])
    assert "\n" not in str(err.value)
    cfg = compose(["workload=gpt_test", "launcher=slurm", "+sweep=fa2",
                   "launcher.slurm.allocation=campaign"])
    assert plan_entry(cfg.launcher)["slurm_allocation"] == "campaign"
    assert plan_entry(cfg.launcher)["how"].startswith("slurm: one allocation per campaign")


def test_decisions_say_how_slurm_ran() -> None:
    camp = [{"launcher": "slurm", "slurm_job_id": "41", "slurm_allocation": "campaign",
             "slurm_allocation_id": "41"}] * 3
    assert slurm_line(camp).startswith("slurm: one allocation per campaign, job 41;")
    again = camp + [{**camp[0], "slurm_job_id": "57", "slurm_allocation_id": "57"}]
    assert "jobs 41, 57" in slurm_line(again)
    per_job = [{"launcher": "slurm", "slurm_job_id": j} for j in ("41", "42", "42")]
    assert slurm_line(per_job) == "slurm: one job per round and bucket (2 jobs)"
    assert slurm_line([{"launcher": "local"}]) == ""


# --------------------------------------------------------------------------- real clusters


def _shim(tmp_path: Path, monkeypatch: Any) -> Path:
    """sbatch, salloc and srun on PATH as wrappers that count their calls (one line each in
    ``calls``) and run the real one."""
    shims = tmp_path / "shims"
    shims.mkdir()
    calls = tmp_path / "calls"
    calls.touch()
    for tool in ("sbatch", "salloc", "srun"):
        real = shutil.which(tool)
        assert real, tool
        path = shims / tool
        path.write_text(f'#!/bin/sh\necho {tool} >> "{calls}"\nexec "{real}" "$@"\n')
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ['PATH']}")
    return calls


def _count(calls: Path) -> dict[str, int]:
    lines = calls.read_text().split()
    return {t: lines.count(t) for t in ("sbatch", "salloc", "srun")}


def _inactive(job_id: str) -> bool:
    states = squeue_states()
    return states is not None and states.get(job_id) not in ACTIVE_STATES


def _launcher(run_dir: Path, partition: str = "debug") -> SlurmAllocationLauncher:
    cfg = SlurmLauncherConfig(partition=partition, time_limit_min=20, poll_interval_s=0.5,
                              allocation="campaign")
    return SlurmAllocationLauncher(cfg, folder=str(run_dir / "slurm"))


@pytest.mark.slurm
def test_a_campaign_waits_in_the_queue_once(compose: Any, run_dir: Path, tmp_path: Path,
                                            monkeypatch: Any) -> None:
    """Two rounds and the correctness gate, one salloc and no sbatch: the gate's probes and
    each round's arms ran as job steps of one allocation, which is gone at the end."""
    from orchestrator.campaign.run import run_campaign

    conf = require_slurm()
    if conf:
        monkeypatch.setenv("SLURM_CONF", conf)
    calls = _shim(tmp_path, monkeypatch)
    cfg = compose(["workload=gpt_test", "protocol=quick", "device=cpu", "launcher=slurm",
                   "launcher.slurm.partition=debug", "launcher.slurm.poll_interval_s=0.5",
                   "launcher.slurm.allocation=campaign", "+sweep=fa2", "sweep.buckets=[s32]",
                   "sweep.values=[{backend:eager,sdpa_kernel:auto}]", "sweep.labels=[eager]",
                   "protocol.repeats=2", "protocol.max_rounds=2",
                   "protocol.interference_retries=0"])  # a busy test machine: no re-runs
    run_campaign(cfg, run_dir)
    assert _count(calls) == {"sbatch": 0, "salloc": 1, "srun": 3}  # gate + 2 rounds
    recs = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")]
    assert len(recs) == 4 and all(r["status"] == "ok" for r in recs), \
        [(r.get("status"), r.get("error")) for r in recs]
    probes = [json.loads(p.read_text()) for p in run_dir.glob("correctness/*/probe.json")]
    assert len(probes) == 3 and all(p["status"] == "ok" for p in probes)
    (alloc,) = {r["slurm_allocation_id"] for r in recs + probes}
    assert {r["slurm_job_id"] for r in recs + probes} == {alloc}
    assert {r["slurm_allocation"] for r in recs} == {"campaign"}
    steps = {r["round"]: r["slurm_step_id"] for r in recs}
    assert len(set(steps.values())) == 2  # a step per round, each round's arms in one
    assert len({p["slurm_step_id"] for p in probes} | set(steps.values())) == 3
    assert _inactive(alloc)
    assert json.loads((run_dir / "slurm" / "jobs.json").read_text()) == {"live": {}}
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["launcher"]["slurm_allocation"] == "campaign"
    md = (run_dir / "decisions.md").read_text()
    assert f"- slurm: one allocation per campaign, job {alloc};" in md


@pytest.mark.slurm
def test_an_interrupt_cancels_the_allocation(run_dir: Path, monkeypatch: Any) -> None:
    """The caller raises after the first round (as Ctrl-C would): the allocation, listed in
    the job ledger while held, is cancelled and dropped from it; the next round never ran."""
    conf = require_slurm()
    if conf:
        monkeypatch.setenv("SLURM_CONF", conf)
    specs = [make_spec(run_dir, 0, rnd=0), make_spec(run_dir, 0, rnd=1, position=1)]
    launcher = _launcher(run_dir)
    seen: list[str] = []

    def on_done(spec: Any, rec: dict) -> None:
        seen.append(rec["status"])
        live = json.loads((run_dir / "slurm" / "jobs.json").read_text())["live"]
        assert list(live) == launcher.history  # held, and listed for a resume to cancel
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        launcher.run(specs, on_done, 300)
    (alloc,) = launcher.history
    assert seen == ["ok"] and _inactive(alloc)
    assert json.loads((run_dir / "slurm" / "jobs.json").read_text()) == {"live": {}}
    assert not (Path(specs[1].trial_dir) / "trial.json").exists()


@pytest.mark.slurm
def test_a_resume_cancels_the_allocation_of_a_killed_orchestrator(run_dir: Path,
                                                                  monkeypatch: Any) -> None:
    conf = require_slurm()
    if conf:
        monkeypatch.setenv("SLURM_CONF", conf)
    code = (
        "import os, sys\n"
        "from orchestrator.spec.config import SlurmLauncherConfig\n"
        "from orchestrator.launch.slurm_alloc import SlurmAllocationLauncher\n"
        "cfg = SlurmLauncherConfig(partition='debug', time_limit_min=20, poll_interval_s=0.5,"
        " allocation='campaign')\n"
        "launcher = SlurmAllocationLauncher(cfg, folder=sys.argv[1])\n"
        "print(launcher.ensure(1, 1).job_id, flush=True)\n"
        "os._exit(0)  # dies without cleaning up, as under kill -9\n")
    out = subprocess.run([sys.executable, "-c", code, str(run_dir / "slurm")],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ),
                         check=False)
    alloc = out.stdout.strip()
    assert alloc.isdigit(), out.stderr[-2000:]
    assert (squeue_states() or {}).get(alloc) == "RUNNING"  # the orphan allocation holds on
    assert list(json.loads((run_dir / "slurm" / "jobs.json").read_text())["live"]) == [alloc]
    _launcher(run_dir).recover()  # what a resume does first
    assert _inactive(alloc)
    assert json.loads((run_dir / "slurm" / "jobs.json").read_text()) == {"live": {}}


@pytest.mark.slurm
def test_a_step_over_two_nodes(run_dir: Path, monkeypatch: Any) -> None:
    """A 2-node allocation; the trial's 4 ranks a step over both (gloo across them)."""
    monkeypatch.setenv("SLURM_CONF", require_two_nodes())
    spec = make_spec(run_dir, 0, recipe="tests.helpers.ddp:build", world_size=4, label="ddp4")
    spec.workload = {**spec.workload, "nnodes": 2}
    launcher = _launcher(run_dir, partition="two")
    got: dict[str, dict] = {}
    try:
        launcher.run([spec], lambda s, r: got.update({s.trial_id: r}), 600)
    finally:
        launcher.close()
    rec = got[spec.trial_id]
    assert rec["status"] == "ok", (rec.get("error"), rec.get("stderr_tail"))
    assert rec["world_size"] == 4 and rec["rank_nodes"] == [0, 0, 1, 1]
    assert rec["slurm_allocation_id"] == launcher.history[0] and _inactive(launcher.history[0])
    assert {"orchn1", "orchn2"} <= launcher.seen_hostnames


@pytest.mark.slurm
def test_an_allocation_that_ends_under_a_step(run_dir: Path, monkeypatch: Any) -> None:
    """The allocation is cancelled while a trial runs (as a time limit, a preemption or a
    node failure would end it): that trial is infra_failed (re-run, not on its arm's
    account), and the next round runs in a new allocation."""
    import threading
    import time

    from tests.helpers.launching import pids_running

    conf = require_slurm()
    if conf:
        monkeypatch.setenv("SLURM_CONF", conf)
    hang = make_spec(run_dir, 0, recipe="tests.helpers.faulty:build_hang", label="hangs")
    after = make_spec(run_dir, 1, rnd=1, position=1, label="after")
    launcher = _launcher(run_dir)

    def end_it() -> None:
        needle = str(Path(hang.trial_dir) / "spec.json")
        deadline = time.time() + 120
        while not (launcher.history and pids_running(needle)) and time.time() < deadline:
            time.sleep(0.2)
        subprocess.run(["scancel", launcher.history[0]], check=True)

    t = threading.Thread(target=end_it, daemon=True)
    t.start()
    got: dict[str, dict] = {}
    try:
        launcher.run([hang, after], lambda s, r: got.update({s.arm_label: r}), 300)
    finally:
        launcher.close()
    t.join(timeout=5)
    first, second = launcher.history
    rec = got["hangs"]
    assert rec["status"] == "infra_failed" and rec["failure_kind"] == "infrastructure", rec
    assert f"allocation {first} ended (" in rec["infra_reason"]  # CANCELLED, as Slurm says
    assert rec["slurm_allocation_id"] == first
    assert got["after"]["status"] == "ok" and got["after"]["slurm_allocation_id"] == second
    assert _inactive(first) and _inactive(second)
