"""Slurm through submitit: parameter translation (always) and a real single-node cluster
(tests marked ``slurm``; scripts/slurm_local.sh starts it, scripts/test.sh and .ci/run do so).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from orchestrator.spec.config import SlurmLauncherConfig
from orchestrator.core.errors import ConfigError
from orchestrator.launch.slurm import (
    GroupJob,
    SlurmLauncher,
    executor_parameters,
    job_state,
    parse_squeue,
    plan_waves,
)
from tests.conftest import TINY
from tests.helpers.launching import make_spec, pids_running, require_slurm
from tests.helpers.require import need_module

# --------------------------------------------------------------------------- no cluster needed


def test_parameters_translate_to_sbatch_lines(tmp_path: Path) -> None:
    need_module("submitit")
    cfg = SlurmLauncherConfig(
        partition="gpu", time_limit_min=90, gpus_per_node=8, cpus_per_task=6, mem_gb=4.0,
        account="proj", nodelist="node7", additional_parameters={"constraint": "h100"},
        setup=["module load musa"], array_parallelism=3)
    params = executor_parameters(cfg, ntasks=2, job_name="orch-r0")
    assert params == {
        "job_name": "orch-r0", "time": 90, "nodes": 1, "ntasks_per_node": 2,
        "array_parallelism": 3, "partition": "gpu", "gpus_per_node": 8, "cpus_per_task": 6,
        "mem": "4096MB", "account": "proj", "nodelist": "node7", "setup": ["module load musa"],
        "additional_parameters": {"constraint": "h100"}}
    text = SlurmLauncher(cfg, str(tmp_path)).executor(2, "orch-r0")._make_submission_file_text(
        "python -m submitit.core._submit x", "uid")
    for line in ("#SBATCH --partition=gpu", "#SBATCH --time=90", "#SBATCH --ntasks-per-node=2",
                 "#SBATCH --gpus-per-node=8", "#SBATCH --cpus-per-task=6", "#SBATCH --mem=4096MB",
                 "#SBATCH --account=proj", "#SBATCH --nodelist=node7", "#SBATCH --nodes=1",
                 "#SBATCH --constraint=h100", "#SBATCH --job-name=orch-r0", "module load musa"):
        assert line in text, line
    bare = executor_parameters(SlurmLauncherConfig(), ntasks=1, job_name="j")
    assert set(bare) == {"job_name", "time", "nodes", "ntasks_per_node", "array_parallelism"}


def test_rounds_become_waves_of_one_job_per_bucket(tmp_path: Path) -> None:
    a = [make_spec(tmp_path, arm, rnd=r, position=i) for i, (r, arm) in
         enumerate([(0, 0), (0, 1), (1, 1), (1, 0)])]
    waves = plan_waves(a)
    assert [[[s.trial_id for s in g] for g in w] for w in waves] == [
        [["r000-s32-a0", "r000-s32-a1"]], [["r001-s32-a1", "r001-s32-a0"]]]


def test_squeue_parsing_and_array_ranges() -> None:
    states = parse_squeue("12_0 RUNNING\n12_[1-3%1] PENDING\n15 COMPLETED\n16 CANCELLED+\n")
    assert job_state(states, "12_0") == "RUNNING"
    assert job_state(states, "12_2") == "PENDING"
    assert job_state(states, "15") == "COMPLETED"
    assert job_state(states, "16") == "CANCELLED"
    assert job_state(states, "99") is None


def test_requeue_stops_at_the_limit() -> None:
    job = GroupJob([], 10.0, None, 0.0, max_requeue=2)
    first = job.checkpoint()
    assert first.function.attempt == 1
    second = first.function.checkpoint()
    assert second.function.attempt == 2
    assert second.function.checkpoint() is None  # the third preemption ends the job


def test_sanitizer_learns_a_compute_nodes_host_name() -> None:
    """The private channel's end: a host name a Slurm job reported is replaced from then on,
    placeholders already handed out keep their meaning."""
    from orchestrator.core.sanitize import Identity, Sanitizer

    san = Sanitizer(Identity(hostnames=("login-host",)))
    assert san.text("on login-host") == "on <host-1>"
    assert san.text("node gpu-node17.acme.example up") == "node gpu-node17.acme.example up"
    san.add_hostnames(["gpu-node17.acme.example", "vm"])  # too short a name is kept (prose)
    assert san.text("node gpu-node17.acme.example up") == "node <host-2> up"
    assert san.text("gpu-node17 and login-host, vm") == "<host-3> and <host-1>, vm"


def test_job_ledger_keeps_uncollected_jobs(tmp_path: Path) -> None:
    from orchestrator.launch.slurm import JobLedger

    ledger = JobLedger(tmp_path / "slurm" / "jobs.json")
    assert ledger.jobs() == []
    ledger.add({"12": ["r000-s32-a0", "r000-s32-a1"]})
    ledger.add({"13_0": ["r001-s32-a1"], "13_1": ["r001-s64-a1"]})
    assert JobLedger(tmp_path / "slurm" / "jobs.json").jobs() == ["12", "13_0", "13_1"]
    ledger.remove(["12", "13_1"])
    data = json.loads((tmp_path / "slurm" / "jobs.json").read_text())
    assert list(data["live"]) == ["13_0"] and data["live"]["13_0"]["trials"] == ["r001-s32-a1"]
    (tmp_path / "slurm" / "jobs.json").write_text("{trunc")
    assert ledger.jobs() == []  # a torn file is no job at all, never a crash


def test_two_buckets_run_side_by_side_in_one_wave(tmp_path: Path) -> None:
    import dataclasses

    s64 = {"name": "s64", "seq_len": 64, "micro_batch": 2, "weight": 1.0}
    specs = []
    for i, (r, arm, b) in enumerate([(0, 0, "s32"), (0, 1, "s32"), (0, 0, "s64"), (0, 1, "s64"),
                                     (1, 1, "s32"), (1, 0, "s32"), (1, 1, "s64"), (1, 0, "s64")]):
        spec = make_spec(tmp_path, arm, rnd=r, position=i)
        if b == "s64":
            spec = dataclasses.replace(spec, bucket=s64, trial_id=spec.trial_id.replace("s32", b))
        specs.append(spec)
    waves = plan_waves(specs)
    assert [[[s.trial_id for s in g] for g in w] for w in waves] == [
        [["r000-s32-a0", "r000-s32-a1"], ["r000-s64-a0", "r000-s64-a1"]],
        [["r001-s32-a1", "r001-s32-a0"], ["r001-s64-a1", "r001-s64-a0"]]]


@pytest.mark.parametrize("override,match", [
    ("launcher.slurm.gpus_per_node=1",
     r"^launcher\.slurm\.gpus_per_node: 1 < the 2 processes per node a trial runs"),
    ("launcher.slurm.time_limit_min=0", r"^launcher\.slurm\.time_limit_min: must be > 0"),
    ("+launcher.slurm.additional_parameters.ntasks_per_node=4",
     r"^launcher\.slurm\.additional_parameters\.ntasks_per_node: is set by the launcher"),
    ("launcher.slurm.max_requeue=-1", r"^launcher\.slurm\.max_requeue: must be >= 0"),
])
def test_bad_slurm_settings_name_the_key(compose: Any, override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        compose(["workload=gpt_test", "launcher=slurm", "+sweep=fa2", "workload.world_size=2",
                 override])


@pytest.mark.parametrize("overrides,match", [
    (["launcher=local", "workload.world_size=4", "workload.nnodes=2"],
     r"^workload\.nnodes: 2 machines per trial need launcher=slurm \(launcher=local runs"),
    (["launcher=slurm", "workload.world_size=3", "workload.nnodes=2"],
     r"^workload\.world_size: 3 ranks do not split evenly over workload\.nnodes=2"),
    (["launcher=slurm", "workload.world_size=4", "workload.nnodes=2",
      "launcher.slurm.gpus_per_node=1"],
     r"^launcher\.slurm\.gpus_per_node: 1 < the 2 processes per node a trial runs"),
])
def test_trials_over_several_machines_are_refused_where_they_cannot_run(
        compose: Any, overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        compose(["workload=gpt_test", "+sweep=fa2", *overrides])


def test_a_job_over_two_nodes_asks_for_them(tmp_path: Path) -> None:
    need_module("submitit")
    params = executor_parameters(SlurmLauncherConfig(), ntasks=4, job_name="j", nodes=2)
    assert params["nodes"] == 2 and params["ntasks_per_node"] == 2


# --------------------------------------------------------------------------- real cluster

@pytest.fixture
def slurm_env(monkeypatch: Any) -> dict[str, str]:
    import os

    conf = require_slurm()
    if conf:
        monkeypatch.setenv("SLURM_CONF", conf)
    return dict(os.environ)


def _launcher(run_dir: Path, **kw: Any) -> SlurmLauncher:
    cfg = SlurmLauncherConfig(partition="debug", time_limit_min=20, poll_interval_s=0.5, **kw)
    return SlurmLauncher(cfg, folder=str(run_dir / "slurm"))


def _running_job(folder: Path, deadline_s: float = 300) -> str:
    """The id of the first job submitted under ``folder`` once squeue says it runs."""
    end = time.time() + deadline_s
    while time.time() < end:
        ids = [p.name.split("_submitted")[0] for p in folder.glob("*/*_submitted.pkl")]
        if ids:
            out = subprocess.run(["squeue", "-h", "-j", ids[0], "-o", "%T"],
                                 capture_output=True, text=True).stdout
            if "RUNNING" in out:
                return ids[0]
        time.sleep(0.3)
    raise AssertionError("no job reached RUNNING")


# values of a secret-named env switch; drawn per run (a literal would show in source.diff)
SECRETS = tuple(f"zq-{k}-{uuid.uuid4().hex[:12]}" for k in ("base", "variant"))


@pytest.mark.slurm
def test_tiny_sweep_end_to_end_on_slurm(run_dir: Path, slurm_env: dict[str, str]) -> None:
    """A sweep of a secret-named env.* switch: the values reach the jobs (pickled by submitit)
    yet no file of the run dir holds them afterwards (no pickle is left)."""
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator", "workload=gpt_test", "protocol=quick",
         "launcher=slurm", "launcher.slurm.partition=debug", "launcher.slurm.poll_interval_s=0.5",
         "+sweep=omp_threads", "sweep.variable=env.ORCH_TEST_API_TOKEN",
         f"sweep.baseline={SECRETS[0]}", f"sweep.values=[{SECRETS[1]}]",
         "sweep.baseline_label=base", "sweep.labels=[planted]", "sweep.buckets=[s32]",
         "protocol.repeats=1", f"run_dir='{run_dir}'"],
        capture_output=True, text=True, timeout=900, env=slurm_env)
    assert out.returncode == 0, out.stderr[-2000:]
    recs = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")]
    assert len(recs) == 2 and all(r["status"] == "ok" for r in recs)
    assert all(r["launcher"] == "slurm" for r in recs)
    jobs = {r["round"]: set() for r in recs}
    for r in recs:
        jobs[r["round"]].add(r["slurm_job_id"])
    assert all(len(j) == 1 for j in jobs.values())  # a round's arms share one job
    md = (run_dir / "decisions.md").read_text()
    assert "slurm" in md and "planted" in md
    assert list((run_dir / "slurm").glob("*/*_submission.sh"))  # it did go through submitit
    # the correctness gate's probes ran as a Slurm job too, not on the submitting host
    probes = [json.loads(p.read_text()) for p in run_dir.glob("correctness/*/probe.json")]
    assert len(probes) == 3 and all(p["status"] == "ok" for p in probes), probes
    assert {p["launcher"] for p in probes} == {"slurm"}
    (gate_job,) = {p["slurm_job_id"] for p in probes}
    assert gate_job not in {r["slurm_job_id"] for r in recs}
    assert json.loads((run_dir / "correctness.json").read_text())["launcher"] == "slurm"
    assert "on a compute node (launcher=slurm: one Slurm job" in md
    assert not list(run_dir.rglob("*.pkl"))
    for path in (p for p in run_dir.rglob("*") if p.is_file()):
        body = path.read_bytes()
        assert not any(s.encode() in body for s in SECRETS), path
    assert json.loads((run_dir / "slurm" / "jobs.json").read_text()) == {"live": {}}


@pytest.mark.slurm
def test_correctness_probes_run_as_a_slurm_job(compose: Any, run_dir: Path,
                                               slurm_env: dict[str, str]) -> None:
    """With launcher=slurm the gate dispatches its probes through the campaign's launcher: one
    Slurm job runs the baseline, the variant and the baseline repeat in order on one compute
    node (a distributed workload's probe as tasks of that job), where the trials run."""
    from orchestrator.campaign.gate import run_gate
    from orchestrator.spec.sweep import resolve_arms, selected_buckets

    cfg = compose(["workload=muon_tp_test", "protocol=quick", "launcher=slurm",
                   "launcher.slurm.partition=debug", "launcher.slurm.poll_interval_s=0.5",
                   "+sweep=tp_mode", "sweep.values=[distributed]",
                   "protocol.correctness.steps=4"])
    assert cfg.workload.world_size == 2
    launcher = _launcher(run_dir)
    doc = run_gate(cfg, run_dir, resolve_arms(cfg), selected_buckets(cfg), launcher)
    assert doc["launcher"] == "slurm" and not doc["in_process"]
    assert {n: p["status"] for n, p in doc["probes"].items()} == {
        "a0": "ok", "a1": "ok", "a0-repeat": "ok"}, doc["probes"]
    probes = {p.parent.name: json.loads(p.read_text())
              for p in run_dir.glob("correctness/*/probe.json")}
    assert {p["launcher"] for p in probes.values()} == {"slurm"}
    assert len({(p["slurm_job_id"], p["node_id"]) for p in probes.values()}) == 1
    assert {p["world_size"] for p in probes.values()} == {2}  # two ranks, tasks of the job
    assert (run_dir / "correctness" / "a1" / "stderr.rank1.log").exists()
    (sub,) = list((run_dir / "slurm").glob("*/*_submission.sh"))
    text = sub.read_text()
    assert "#SBATCH --job-name=orch-gate" in text and "#SBATCH --ntasks-per-node=2" in text
    assert doc["arms"]["a1"]["status"] in ("pass", "fail")  # judged, from the job's tensors
    assert launcher.seen_hostnames  # the node's name came back privately, for the sanitizer
    assert not list(run_dir.rglob("*.pkl"))
    assert json.loads((run_dir / "slurm" / "jobs.json").read_text()) == {"live": {}}


@pytest.mark.slurm
def test_distributed_trial_runs_as_tasks_of_one_job(run_dir: Path, slurm_env: dict) -> None:
    spec = make_spec(run_dir, 0, recipe="tests.helpers.ddp:build", world_size=2, label="ddp")
    got: dict[str, dict] = {}
    _launcher(run_dir).run([spec], lambda s, r: got.update({s.trial_id: r}), 600)
    rec = got[spec.trial_id]
    assert rec["status"] == "ok", (rec.get("error"), rec.get("stderr_tail"))
    assert rec["world_size"] == 2 and rec["dist_backend"] == "gloo"
    assert rec["rank_skew_median_s"] is not None
    tdir = Path(spec.trial_dir)
    assert (tdir / "stderr.rank1.log").exists() and not (tdir / "trial.rank1.json").exists()
    (sub,) = list((run_dir / "slurm").glob("*/*_submission.sh"))
    assert "#SBATCH --ntasks-per-node=2" in sub.read_text()


@pytest.mark.slurm
def test_cancelled_job_turns_its_trials_into_records(run_dir: Path, slurm_env: dict) -> None:
    hang = make_spec(run_dir, 0, recipe="tests.helpers.faulty:build_hang", label="hangs")
    after = make_spec(run_dir, 1, position=1, label="never-ran")
    got: dict[str, dict] = {}

    def cancel() -> None:
        jid = _running_job(run_dir / "slurm")
        subprocess.run(["scancel", jid], check=True)

    t = threading.Thread(target=cancel, daemon=True)
    t.start()
    _launcher(run_dir).run([hang, after], lambda s, r: got.update({s.arm_label: r}), 600)
    t.join(timeout=5)
    assert set(got) == {"hangs", "never-ran"}
    for rec in got.values():
        assert rec["status"] == "killed", rec
    assert got["never-ran"]["slurm_state"] == "CANCELLED"
    assert "before this trial finished" in got["never-ran"]["error"]


@pytest.mark.slurm
def test_preempted_job_is_requeued_and_finishes(run_dir: Path, slurm_env: dict) -> None:
    done = make_spec(run_dir, 0, label="first")
    victim = make_spec(run_dir, 1, recipe="tests.helpers.launchprobe:build_hang_first_attempt",
                       position=1, label="preempted")
    got: dict[str, dict] = {}

    def preempt() -> None:  # what Slurm does on preemption: SIGTERM, then submitit's USR2
        jid = _running_job(run_dir / "slurm")
        needle = str(Path(victim.trial_dir) / "spec.json")
        while not pids_running(needle):
            time.sleep(0.2)
        time.sleep(2.0)
        subprocess.run(["scancel", "--signal=SIGTERM", jid], check=True)
        subprocess.run(["scancel", "--signal=USR2", jid], check=True)
        # Slurm holds a requeued job for ~2 minutes before it may start again; skip the wait
        end = time.time() + 120
        while time.time() < end:
            state = subprocess.run(["squeue", "-h", "-j", jid, "-o", "%T"], capture_output=True,
                                   text=True).stdout.strip()
            if state == "PENDING":
                subprocess.run(["scontrol", "update", f"JobId={jid}", "StartTime=now"])
                return
            time.sleep(0.3)

    t = threading.Thread(target=preempt, daemon=True)
    t.start()
    _launcher(run_dir, max_requeue=1).run([done, victim],
                                          lambda s, r: got.update({s.arm_label: r}), 600)
    t.join(timeout=5)
    assert got["first"]["status"] == "ok" and got["first"]["slurm_attempt"] == 0
    assert got["preempted"]["status"] == "ok", got["preempted"]
    assert got["preempted"]["slurm_attempt"] == 1  # ran again after the requeue
    assert got["first"]["pid"] != got["preempted"]["pid"]


@pytest.mark.slurm
def test_hydra_submitit_multirun_puts_each_campaign_in_a_job(tmp_path: Path,
                                                             slurm_env: dict) -> None:
    need_module("hydra_plugins.hydra_submitit_launcher")
    sweep_dir = tmp_path / "multirun"
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator", "-m", "hydra/launcher=submitit_slurm",
         "hydra.launcher.partition=debug", "hydra.launcher.timeout_min=20",
         "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1",
         # inside each job the trials run with the campaign's launcher= (README: local by
         # default); inline here keeps the test cheap
         *TINY, "protocol.repeats=1",
         "+sweep=fa2", "sweep.buckets=[s32]", "sweep.values=[{backend:eager,sdpa_kernel:auto}]",
         "sweep.labels=[eager]", "protocol.seed=0,1", f"hydra.sweep.dir={sweep_dir}"],
        capture_output=True, text=True, timeout=900, env=slurm_env)
    assert out.returncode == 0, out.stderr[-3000:]
    index = json.loads((sweep_dir / "index.json").read_text())
    assert [c["run_dir"] for c in index["campaigns"]] == ["0_fa2", "1_fa2"]
    assert all(c["state"] == "decided" and c["verdicts"] for c in index["campaigns"])
    assert list(sweep_dir.glob(".submitit/*/*_submission.sh"))  # they really went through Slurm
    assert "eager" in (sweep_dir / "index.md").read_text()
    for c in index["campaigns"]:
        assert c["trials"] == {"planned": 2, "recorded": 2, "by_status": {"ok": 2}}
        log = (sweep_dir / c["run_dir"] / "campaign.log").read_text()
        assert log.count("campaign fa2 on gpt_test") == 1  # its own lines only


@pytest.mark.slurm
def test_resume_cancels_the_jobs_of_a_killed_orchestrator(run_dir: Path, slurm_env: dict) -> None:
    """kill -9 of the orchestrator leaves its job running (it would go on writing into the run
    dir while a resume runs the same trials again); the job ledger lets the resume's
    ``recover()`` cancel it for real before anything is replanned."""
    import os
    import signal

    from orchestrator.launch.slurm import squeue_states

    hang = make_spec(run_dir, 0, recipe="tests.helpers.faulty:build_hang", label="hangs")
    code = (
        "import json, sys\n"
        "from orchestrator.spec.config import SlurmLauncherConfig\n"
        "from orchestrator.launch.slurm import SlurmLauncher\n"
        "from orchestrator.worker.trial import TrialSpec\n"
        "spec = TrialSpec(**json.loads(sys.argv[1]))\n"
        "cfg = SlurmLauncherConfig(partition='debug', time_limit_min=20, poll_interval_s=0.5)\n"
        "SlurmLauncher(cfg, folder=sys.argv[2]).run([spec], lambda s, r: None, 600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(hang.__dict__),
                             str(run_dir / "slurm")], env=slurm_env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        jid = _running_job(run_dir / "slurm")
        needle = str(Path(hang.trial_dir) / "spec.json")
        end = time.time() + 300
        while not pids_running(needle) and time.time() < end:
            time.sleep(0.2)
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # the orchestrator dies without cleaning up
        proc.wait()
    ledger = json.loads((run_dir / "slurm" / "jobs.json").read_text())
    assert list(ledger["live"]) == [jid] and ledger["live"][jid]["trials"] == [hang.trial_id]
    assert (squeue_states() or {}).get(jid) == "RUNNING"  # the orphan job goes on
    assert pids_running(needle)

    _launcher(run_dir).recover()  # what a resume does first
    assert squeue_states().get(jid) == "CANCELLED"
    assert not pids_running(needle)  # its trial process is gone, not just the job record
    assert json.loads((run_dir / "slurm" / "jobs.json").read_text()) == {"live": {}}
    assert not list(run_dir.rglob("*.pkl"))


@pytest.mark.slurm
def test_job_that_fails_before_the_trials_becomes_records(run_dir: Path, slurm_env: dict) -> None:
    """A job that Slurm ends FAILED without running anything (its setup line fails) turns each
    of its trials into a record with the job's state, never a missing one."""
    specs = [make_spec(run_dir, 0, label="base"), make_spec(run_dir, 1, position=1, label="var")]
    got: dict[str, dict] = {}
    _launcher(run_dir, setup=["exit 3"]).run(specs, lambda s, r: got.update({s.arm_label: r}),
                                             600)
    assert set(got) == {"base", "var"}
    for rec in got.values():
        assert rec["status"] == "crashed" and rec["slurm_state"] == "FAILED", rec
        assert "ended FAILED with no result" in rec["error"]
        on_disk = json.loads((run_dir / "trials" / rec["trial_id"] / "trial.json").read_text())
        assert on_disk["slurm_state"] == "FAILED"
    assert not list(run_dir.rglob("*.pkl"))


def test_gpus_and_cpus_default_to_what_a_cluster_user_expects() -> None:
    """Unset gpus_per_node follows the processes per node on an accelerator (a command: its
    own ranks per node, one task per node); unset cpus_per_task gives each task its share of
    the partition's CPUs per node; a value the user set always wins, and the CPU asks for no
    GPU."""
    from orchestrator.launch.slurm import node_defaults

    cfg = SlurmLauncherConfig(partition="gpu")
    got, notes = node_defaults(cfg, procs_per_node=8, tasks_per_node=8, device_kind="cuda",
                               node_cpus=96)
    assert got == {"gpus_per_node": 8, "cpus_per_task": 12} and len(notes) == 2
    params = executor_parameters(cfg, 16, "j", nodes=2, defaults=got)
    assert params["gpus_per_node"] == 8 and params["cpus_per_task"] == 12
    assert params["ntasks_per_node"] == 8 and params["nodes"] == 2
    # a command over 2 nodes: one task per node running 8 ranks
    got, _ = node_defaults(cfg, 8, 1, "musa", 96)
    assert got == {"gpus_per_node": 8, "cpus_per_task": 96}
    assert node_defaults(cfg, 4, 4, "cpu", None) == ({}, [])
    own = SlurmLauncherConfig(gpus_per_node=8, cpus_per_task=6)
    assert node_defaults(own, 8, 8, "cuda", 96) == ({}, [])
    params = executor_parameters(own, 8, "j", defaults={"gpus_per_node": 2, "cpus_per_task": 1})
    assert params["gpus_per_node"] == 8 and params["cpus_per_task"] == 6


def test_gres_lines_give_the_gpus_per_node() -> None:
    from orchestrator.launch.slurm import parse_gres_gpus

    assert parse_gres_gpus("gpu:8\n") == 8
    assert parse_gres_gpus("gpu:a100:4(S:0-1)\ngpu:h100:8(S:0-1)") == 8
    assert parse_gres_gpus("(null)\n") == 0 and parse_gres_gpus("") == 0
    assert parse_gres_gpus("mps:100,gpu:2") == 2


def test_reserved_slurm_keys_are_refused_in_either_spelling(compose: Any) -> None:
    with pytest.raises(ConfigError, match=r"additional_parameters\.ntasks-per-node: is set by"):
        compose(["+sweep=compile", "launcher=slurm",
                 "+launcher.slurm.additional_parameters.ntasks-per-node=4"])
