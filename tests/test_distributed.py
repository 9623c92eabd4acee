"""Distributed trials: torchrun locally, gloo on CPU, per-rank timing, slowest rank wins.

The recipe is the real GPT wrapped in DistributedDataParallel (tests/helpers/ddp.py): every
step all-reduces gradients across the two ranks of the process group the trial runner set up.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from orchestrator import device as devmod
from orchestrator import distributed as distmod
from orchestrator.errors import ConfigError
from orchestrator.launch.local import LocalLauncher, trial_command
from tests.conftest import TINY
from tests.helpers.launching import make_spec


def test_combine_takes_the_slowest_rank_per_step() -> None:
    slowest, skew, who = distmod.combine([[1.0, 2.0, 3.0], [1.5, 1.0, 3.0]])
    assert slowest == [1.5, 2.0, 3.0]
    assert skew == [0.5, 1.0, 0.0]
    assert who == [1, 0, 0]


def test_backend_and_thread_share() -> None:
    assert [devmod.dist_backend(k) for k in ("cpu", "cuda", "musa")] == ["gloo", "nccl", "mccl"]
    assert distmod.threads_for(2, cores=2) == 1
    assert distmod.threads_for(4, cores=2) == 1  # at least one
    assert distmod.threads_for(2, cores=16) == 8


def test_env_rank_reads_the_standard_variables(monkeypatch: Any) -> None:
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    assert distmod.env_rank() == (0, 1, 0)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert distmod.env_rank() == (3, 4, 1)


def test_torchrun_command_for_world_size_above_one(tmp_path: Path) -> None:
    cmd = trial_command("py", tmp_path / "spec.json", 2)
    assert cmd[:5] == ["py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    assert cmd[5:7] == ["-m", "orchestrator.trial"]
    assert trial_command("py", tmp_path / "s.json", 1) == ["py", "-m", "orchestrator.trial",
                                                           str(tmp_path / "s.json")]


def test_inline_refuses_a_distributed_workload(compose: Any) -> None:
    with pytest.raises(ConfigError, match=r"launcher\.name: .*world_size=2.*launcher=local"):
        compose([*TINY, "+sweep=fa2", "workload.world_size=2"])


def test_two_rank_trial_through_torchrun(run_dir: Path) -> None:
    """One real 2-rank DDP trial (gloo) and one whose rank 1 runs out of memory."""
    good = make_spec(run_dir, 0, recipe="tests.helpers.ddp:build", world_size=2, label="ddp")
    bad = make_spec(run_dir, 1, recipe="tests.helpers.ddp:build_oom_rank1", world_size=2,
                    label="oom1", position=1, measured=4)
    got: dict[str, dict] = {}
    LocalLauncher(device="cpu").run([good, bad], lambda s, r: got.update({s.arm_label: r}), 600)
    rec = got["ddp"]
    assert rec["status"] == "ok", rec.get("error")
    assert rec["world_size"] == 2 and rec["dist_backend"] == "gloo"
    cores = len(os.sched_getaffinity(0))
    assert rec["threads_per_rank"] == max(1, cores // 2)
    assert rec["rank_skew_median_s"] >= 0 and rec["rank_skew_max_s"] >= rec["rank_skew_median_s"]
    assert sum(rec["slowest_rank_counts"].values()) == rec["measured_steps"]
    assert rec["tokens_per_step"] == 2 * 2 * 32  # global: micro_batch x seq_len x ranks
    steps = pd.read_csv(Path(good.trial_dir) / "steps.csv")
    per_rank = steps[["step_time_rank0_s", "step_time_rank1_s"]].max(axis=1)
    assert (steps["step_time_s"] == per_rank).all()  # the slowest rank's time
    assert (steps["rank_skew_s"] >= 0).all()
    tdir = Path(good.trial_dir)
    assert sorted(p.name for p in tdir.glob("trial*.json")) == ["trial.json"]  # rank 0 only
    assert json.loads((tdir / "trial.json").read_text())["rank"] == 0
    oom = got["oom1"]
    assert oom["status"] == "oom" and "rank 1" in oom["error"], oom


def test_two_rank_profiled_trial_keeps_one_trace_per_rank(compose: Any, run_dir: Path) -> None:
    """A framework-profiled trial of a 2-rank DDP workload: every rank's trace is kept, rank 0
    compares the ranks, and the profiled step is the slowest rank's."""
    import dataclasses
    import gzip

    from orchestrator.config import to_dict

    cfg = compose([*TINY, "+sweep=fa2", "profile=framework"])
    out = run_dir / "profiles" / "framework"
    spec = dataclasses.replace(
        make_spec(run_dir, 0, recipe="tests.helpers.ddp:build", world_size=2, label="ddp"),
        trial_id="prof-framework-s32-a0", kind="profile",
        trial_dir=str(run_dir / "trials" / "prof-framework-s32-a0"),
        profile={**to_dict(cfg.profile), "layer": "framework", "out_dir": str(out)})
    got: dict[str, dict] = {}
    LocalLauncher(device="cpu").run([spec], lambda s, r: got.update({s.trial_id: r}), 600)
    rec = got[spec.trial_id]
    assert rec["status"] == "ok", rec.get("error")
    traces = sorted(p.name for p in out.glob("*.pt.trace.json.gz"))
    assert traces == ["prof-framework-s32-a0.pt.trace.json.gz",
                      "prof-framework-s32-a0.rank1.pt.trace.json.gz"]
    assert set(traces) <= {Path(a).name for a in rec["artifacts"]}
    for name in traces:  # real, distinct per-rank traces with the recipe's phase marks
        with gzip.open(out / name, "rt") as fh:
            ev = json.load(fh)["traceEvents"]
        assert any(e.get("name", "").startswith("phase/backward") for e in ev)
    s = json.loads((out / "prof-framework-s32-a0.summary.json").read_text())
    assert s["world_size"] == 2 and [r["rank"] for r in s["per_rank"]] == [0, 1]
    assert min(r["skew_vs_fastest"] for r in s["per_rank"]) == 1.0
    assert all(r["step_us"] > 0 for r in s["per_rank"])
    steps = pd.read_csv(Path(spec.trial_dir) / "profile_steps.csv")
    assert set(steps["rank"]) == {0, 1}
    active = steps[steps["profiler"] == "active"].groupby("step")["step_time_s"].max()
    assert s["profiled_step_median_s"] == pytest.approx(float(active.median()))
    tdir = Path(spec.trial_dir)
    assert sorted(p.name for p in tdir.glob("trial*.json")) == ["trial.json"]  # rank 0 writes
