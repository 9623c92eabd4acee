"""The fork server (zygote) of the local launcher: real processes, real faults.

A child that segfaults, is killed with kill -9 or hangs past its limit becomes a record exactly
as a spawned process does, and the same server (same pid, still alive) serves the next trial;
settings read when torch is imported force a spawn, with the reason in the record; a campaign
through the local launcher forks its trials and decisions.md says so.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.campaign.run import run_campaign
from orchestrator.core.convert import to_dict
from orchestrator.core.errors import ConfigError
from orchestrator.launch.forkserver import env_switch_reason, pre_import_var
from orchestrator.launch.local import LocalLauncher
from orchestrator.analysis.decisions_md import start_method_line
from orchestrator.worker.trial import TrialSpec
from tests.helpers.launching import make_spec, pids_writing

FAULTY = "tests.helpers.faulty:build_"
PROBE = "tests.helpers.forkprobe:build"


def _run(launcher: LocalLauncher, specs: list[TrialSpec], timeout_s: float) -> dict[str, dict]:
    got: dict[str, dict] = {}

    def on_done(spec: TrialSpec, record: dict) -> None:
        assert spec.trial_id not in got
        on_disk = json.loads((Path(spec.trial_dir) / "trial.json").read_text())
        assert on_disk["status"] == record["status"]
        assert on_disk["start_method"] == record["start_method"]
        got[spec.trial_id] = record

    launcher.run(specs, on_done, timeout_s)
    assert set(got) == {s.trial_id for s in specs}
    return {rec["arm_label"]: rec for rec in got.values()}


def test_children_crash_get_killed_and_hang_while_the_server_serves_on(run_dir: Path) -> None:
    launcher = LocalLauncher(device="cpu")  # start_method auto: the fork server
    modes = ["segfault", "killed", "hangs", "oom", "raise"]
    specs = [make_spec(run_dir, i, recipe=FAULTY + ("hang" if m in ("killed", "hangs") else m),
                       position=i, label=m) for i, m in enumerate(modes)]
    specs.append(make_spec(run_dir, len(modes), position=len(modes), label="healthy"))
    victim = specs[1]
    stop = threading.Event()
    killed: list[int] = []

    def killer() -> None:  # kill -9 the victim's child from outside once it runs
        out = Path(victim.trial_dir) / "stdout.log"
        while not stop.is_set():
            pids = pids_writing(out)
            if pids:
                time.sleep(1.0)
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                killed.extend(pids)
                return
            time.sleep(0.1)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    try:
        recs = _run(launcher, specs, timeout_s=15)
        server = launcher.starter.server
        assert server is not None and server.alive  # unharmed by any of it
    finally:
        stop.set()
    assert recs["segfault"]["status"] == "crashed" and "SIGSEGV" in recs["segfault"]["error"]
    assert recs["killed"]["status"] == "killed" and "SIGKILL" in recs["killed"]["error"]
    assert recs["hangs"]["status"] == "timeout" and "15 s" in recs["hangs"]["error"]
    assert recs["oom"]["status"] == "oom"
    assert recs["raise"]["status"] == "failed"
    assert "planted failure" in recs["raise"]["stderr_tail"]  # its own stderr.log
    assert recs["healthy"]["status"] == "ok"  # served after all of the above
    assert {r["start_method"] for r in recs.values()} == {"fork-server"}
    assert all(r["start_method_why"] is None for r in recs.values())
    # one process per trial, none of them the server; the killed one was the trial's own
    pids = [r["pid"] for r in recs.values() if "pid" in r]
    assert len(set(pids)) == len(pids) and server.pid not in pids
    assert killed and server.pid not in killed
    assert pids_writing(Path(specs[2].trial_dir) / "stdout.log") == []  # the hang is gone
    assert server.threads == 1  # it forked single-threaded
    launcher.close()
    assert not server.alive and launcher.starter.server is None


def test_a_forked_child_gets_its_own_environment_threads_and_seeds(run_dir: Path,
                                                                    monkeypatch: Any) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    specs = [make_spec(run_dir, i, recipe=PROBE, position=i, label=f"t{i}") for i in range(2)]
    for s in specs:
        s.env = {"ORCH_TEST_SWITCH": "on"}  # not read at import: forking honours it
    spawned = make_spec(run_dir, 2, recipe=PROBE, position=2, label="spawned")
    forked = _run(LocalLauncher(device="cpu"), specs, timeout_s=300)
    ref = _run(LocalLauncher(device="cpu", start_method="spawn"), [spawned],
               timeout_s=300)["spawned"]
    assert ref["start_method"] == "spawn"
    assert ref["start_method_why"] == "launcher.start_method=spawn"
    for rec in forked.values():
        assert rec["status"] == "ok", rec.get("error")
        assert rec["start_method"] == "fork-server"
        assert rec["seen_switch"] == "on"
        # the child's intra-op pool starts fresh, at the size a spawned process picks
        assert rec["seen_threads"] == rec["torch_threads"] == ref["torch_threads"]
        assert rec["seen_cwd"] == os.getcwd()
        assert rec["startup_to_first_step_s"] > 0
    # Python's generator is reseeded per child (a fork would otherwise share the server's)
    assert forked["t0"]["seen_random"] != forked["t1"]["seen_random"]


def test_the_forced_spawn_list() -> None:
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_MUSA_ALLOC_CONF", "OMP_NUM_THREADS",
                 "MKL_NUM_THREADS", "KMP_AFFINITY", "CUDA_VISIBLE_DEVICES",
                 "MUSA_VISIBLE_DEVICES", "LD_PRELOAD", "TORCHINDUCTOR_MAX_AUTOTUNE",
                 "TORCH_LOGS", "PYTHONHASHSEED", "MALLOC_ARENA_MAX"):
        assert pre_import_var(name), name
    for name in ("ORCH_TEST_SWITCH", "NCCL_DEBUG", "HOME", "MY_OMP_NUM_THREADS"):
        assert not pre_import_var(name), name
    assert env_switch_reason(["ORCH_TEST_SWITCH"]) is None
    why = env_switch_reason(["OMP_NUM_THREADS", "ORCH_TEST_SWITCH", "LD_PRELOAD"])
    assert why is not None and "env.LD_PRELOAD, env.OMP_NUM_THREADS" in why


def test_settings_read_at_import_force_a_spawn(run_dir: Path, monkeypatch: Any) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    launcher = LocalLauncher(device="cpu")
    # an arm's env.* switch torch reads at import: the whole batch spawns, both arms alike
    a0 = make_spec(run_dir, 0, recipe=PROBE, label="a0")
    a1 = make_spec(run_dir, 1, recipe=PROBE, position=1, label="a1")
    a1.env = {"OMP_NUM_THREADS": "1"}
    recs = _run(launcher, [a0, a1], timeout_s=300)
    for rec in recs.values():
        assert rec["status"] == "ok", rec.get("error")
        assert rec["start_method"] == "spawn"
        assert "env.OMP_NUM_THREADS" in rec["start_method_why"]
    assert recs["a1"]["seen_threads"] == recs["a1"]["torch_threads"] == 1  # it took effect
    # a batch without such a switch forks ...
    b0 = make_spec(run_dir, 0, recipe=PROBE, rnd=1, position=2, label="b0")
    assert _run(launcher, [b0], timeout_s=300)["b0"]["start_method"] == "fork-server"
    # ... until the launcher's own environment differs from the server's in such a setting
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    b1 = make_spec(run_dir, 1, recipe=PROBE, rnd=1, position=3, label="b1")
    rec = _run(launcher, [b1], timeout_s=300)["b1"]
    assert rec["status"] == "ok" and rec["start_method"] == "spawn"
    assert rec["start_method_why"].startswith("OMP_NUM_THREADS differs from the fork server's")
    assert rec["torch_threads"] == 1
    launcher.close()


def test_multi_rank_and_host_only_trials_spawn_with_the_reason(compose: Any,
                                                               run_dir: Path) -> None:
    launcher = LocalLauncher(device="cpu")
    synth = make_spec(run_dir, 0, label="synthetic")
    synth.workload = to_dict(compose(["workload=synthetic", "+sweep=calibrate"]).workload)
    synth.bucket = synth.workload["buckets"][0]
    rec = _run(launcher, [synth], timeout_s=300)["synthetic"]
    assert rec["start_method"] == "spawn", rec
    assert rec["start_method_why"].startswith("host-only recipe")
    two = make_spec(run_dir, 1, position=1, world_size=2, label="two-rank")
    rec = _run(launcher, [two], timeout_s=300)["two-rank"]
    assert rec["status"] == "ok", rec.get("error")
    assert rec["start_method"] == "spawn" and rec["start_method_why"].startswith("multi-rank")
    launcher.close()


def test_a_server_with_a_second_thread_refuses_to_fork(run_dir: Path) -> None:
    launcher = LocalLauncher(device="cpu")
    spec = make_spec(run_dir, 0, recipe="tests.helpers.threaded:build", label="threaded")
    rec = _run(launcher, [spec], timeout_s=300)["threaded"]
    assert rec["status"] == "ok", rec.get("error")  # spawned instead, and said why
    assert rec["start_method"] == "spawn"
    assert "2 threads" in rec["start_method_why"]
    launcher.close()


def test_a_campaign_forks_its_trials_and_says_so(compose: Any, run_dir: Path) -> None:
    cfg = compose(["workload=gpt_test", "protocol=quick", "launcher=local", "+sweep=fa2",
                   "sweep.buckets=[s32]", "sweep.values=[{backend:sdpa,sdpa_kernel:flash}]",
                   "sweep.labels=[flash]"])
    assert cfg.launcher.start_method == "auto"  # the default
    run_campaign(cfg, run_dir)
    recs = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")]
    assert recs and all(r["status"] == "ok" for r in recs), [r.get("error") for r in recs]
    assert {r["start_method"] for r in recs} == {"fork-server"}
    probes = [json.loads(p.read_text()) for p in run_dir.glob("correctness/*/probe.json")]
    assert probes and {p["start_method"] for p in probes} == {"fork-server"}
    md = (run_dir / "decisions.md").read_text()
    assert f"- trial processes: forked from the fork server ({len(recs)} trials)" in md


def test_start_method_line() -> None:
    recs = [{"start_method": "fork-server", "start_method_why": None}] * 3 + [
        {"start_method": "spawn", "start_method_why": "multi-rank (2 ranks): ..."},
        {"start_method": float("nan")}, {}]
    assert start_method_line(recs) == ("forked from the fork server (3 trials); "
                                       "spawn (1 trial: multi-rank (2 ranks): ...)")
    assert start_method_line([{}]) == ""


@pytest.mark.parametrize(("overrides", "match"), [
    (["launcher.start_method=fork"],
     r"launcher\.start_method: 'fork' is not a valid choice; choose one of: auto, spawn, "
     r"forkserver$"),
    (["launcher=inline", "launcher.start_method=forkserver"],
     r"launcher\.start_method: forkserver starts trial processes, inline runs them"),
    (["launcher.start_method=forkserver", "+sweep=omp_threads"],
     (r"launcher\.start_method: forkserver cannot honour it: the sweep sets "
      r"env\.OMP_NUM_THREADS, read when torch is imported.*use launcher\.start_method=auto")),
    (["launcher.start_method=forkserver", "workload.world_size=2", "+sweep=fa2"],
     r"launcher\.start_method: forkserver cannot start workload\.world_size=2"),
])
def test_bad_start_methods_name_the_key_and_the_fix(compose: Any, overrides: list[str],
                                                    match: str) -> None:
    if not any(o.startswith("+sweep") for o in overrides):
        overrides = [*overrides, "+sweep=fa2"]
    with pytest.raises(ConfigError, match=match):
        compose(["workload=gpt_test", "launcher=local", *overrides])
