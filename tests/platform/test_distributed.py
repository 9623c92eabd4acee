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

from orchestrator.platform import device as devmod
from orchestrator.platform import distributed as distmod
from orchestrator.core.errors import ConfigError
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
    assert cmd[5:7] == ["-m", "orchestrator.worker.trial"]
    assert trial_command("py", tmp_path / "s.json", 1) == ["py", "-m", "orchestrator.worker.trial",
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


def test_ranks_agree_on_warmup_and_exclusions_under_the_default_protocol(run_dir: Path) -> None:
    """The default protocol's auto warm-up, a time floor on the measured window and a tag one
    rank alone sets: decided on each rank's own numbers, the ranks would run different numbers
    of steps and crash in a mismatched collective (issue 22). Decided on the numbers every rank
    shares (the slowest rank's time, the union of the tags), both trials run clean."""
    import dataclasses

    auto: dict[str, Any] = {"warmup_policy": "auto", "warmup_steps": 4, "warmup_max_steps": 30,
                            "warmup_window": 3, "warmup_tolerance": 0.05, "measured_min_s": 0.3}
    slow = dataclasses.replace(
        make_spec(run_dir, 0, recipe="tests.helpers.ddp:build_slow_warmup_rank1", world_size=2,
                  label="slow", measured=4), **auto)
    tag = dataclasses.replace(
        make_spec(run_dir, 1, recipe="tests.helpers.ddp:build_tag_rank1", world_size=2,
                  label="tag", position=1, measured=4), **auto)
    for spec in (slow, tag):
        spec.env["DDP_TEST_COUNT_DIR"] = spec.trial_dir
    got: dict[str, dict] = {}
    LocalLauncher(device="cpu").run([slow, tag], lambda s, r: got.update({s.arm_label: r}), 180)
    for label, spec in (("slow", slow), ("tag", tag)):
        rec = got[label]
        assert rec["status"] == "ok", (label, rec.get("error"), rec.get("stderr_tail"))
        counts = [int((Path(spec.trial_dir) / f"steps.rank{r}").read_text()) for r in (0, 1)]
        assert counts[0] == counts[1], (label, counts)  # the same training steps on both ranks
        steps = pd.read_csv(Path(spec.trial_dir) / "steps.csv")
        # every rank timed every step: the ranks ran the same steps
        assert steps["step_time_rank1_s"].notna().all() and steps["step_time_rank0_s"].notna().all()
        assert rec["step_agreement_median_s"] > 0
        measured = steps[steps["phase"] == "measured"]
        assert measured["step_time_s"].sum() >= 0.3  # the time floor, on the agreed times
    slow_steps = pd.read_csv(Path(slow.trial_dir) / "steps.csv")
    # rank 1's 0.2 s after its steps 4 and 5 kept both ranks warming up past them
    assert (slow_steps.loc[slow_steps["step"] <= 6, "phase"] == "warmup").all()
    tag_steps = pd.read_csv(Path(tag.trial_dir) / "steps.csv")
    assert tag_steps.loc[tag_steps["step"] == 2, "phase"].item() == "excluded"
    assert "validation" in tag_steps.loc[tag_steps["step"] == 2, "tags"].item()


def test_two_rank_profiled_trial_keeps_one_trace_per_rank(compose: Any, run_dir: Path) -> None:
    """A framework-profiled trial of a 2-rank DDP workload: every rank's trace is kept, rank 0
    compares the ranks, and the profiled step is the slowest rank's."""
    import dataclasses
    import gzip

    from orchestrator.core.convert import to_dict

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
    assert rec["status"] == "ok", (rec.get("error"), rec.get("stderr_tail"))
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


def test_harness_failures_are_recognised_in_a_multi_rank_trials_log(tmp_path: Path) -> None:
    from orchestrator.launch.base import infrastructure_failure, mark_infrastructure

    assert "mismatch" in infrastructure_failure(
        "terminate called after throwing an instance of 'gloo::EnforceNotMet' ... op.preamble."
        "length <= op.nbytes. 98304 vs 4")
    assert "reset" in infrastructure_failure("Read error [127.0.0.1]:46978: Connection reset by peer")
    assert infrastructure_failure("RuntimeError: CUDA out of memory") is None
    assert infrastructure_failure("ValueError: the variant is wrong") is None
    two = make_spec(tmp_path, 0, world_size=2)
    Path(two.trial_dir).mkdir(parents=True)
    (Path(two.trial_dir) / "stderr.log").write_text("[rank1]: RuntimeError: Connection reset by peer")
    rec = mark_infrastructure(two, {"status": "crashed", "error": "process exited with code 1"})
    assert rec["status"] == "infra_failed" and rec["raw_status"] == "crashed"
    assert rec["failure_kind"] == "infrastructure" and "reset" in rec["infra_reason"]
    # a variant's own failure, and any single-process trial, keep their status
    assert mark_infrastructure(two, {"status": "oom", "error": "x"})["status"] == "oom"
    one = make_spec(tmp_path / "one", 0)
    Path(one.trial_dir).mkdir(parents=True)
    (Path(one.trial_dir) / "stderr.log").write_text("Connection reset by peer")
    assert mark_infrastructure(one, {"status": "failed"})["status"] == "failed"


def test_a_collective_mismatch_is_re_run_and_never_a_reject(
        compose: Any, run_dir: Path, monkeypatch: Any, tmp_path: Path) -> None:
    """Real gloo collective mismatches in 2-rank trials (tests/helpers/ddp.py): the eager arm's
    first attempt only, the tiled arm's every attempt. The harness failure is recorded as such
    and re-run once (protocol.infra_retries): eager then measures normally, tiled ends invalid
    with the reason, and no verdict is a reject."""
    import json

    from orchestrator.campaign.run import run_campaign

    monkeypatch.setenv("DDP_TEST_MISMATCH_DIR", str(tmp_path))
    cfg = compose(["workload=gpt_test", "protocol=quick", "launcher=local", "+sweep=fa2",
                   "workload.world_size=2", "workload.recipe=tests.helpers.ddp:build_mismatch",
                   "protocol.repeats=1", "protocol.max_rounds=1", "protocol.measured_steps=3",
                   "protocol.correctness.mode=off",
                   "sweep.values=[{backend:eager,sdpa_kernel:auto},{backend:tiled,sdpa_kernel:auto}]",
                   "sweep.labels=[eager,tiled]", "sweep.buckets=[s32]"])
    assert cfg.protocol.infra_retries == 1
    result = run_campaign(cfg, run_dir)
    recs = {r["arm_label"]: r for r in (json.loads(p.read_text())
                                        for p in run_dir.glob("trials/*/trial.json"))}
    assert recs["sdpa-math"]["status"] == "ok"
    eager = recs["eager"]
    assert eager["status"] == "ok", eager.get("error")
    assert [a["status"] for a in eager["earlier_attempts"]] == ["infra_failed"]
    assert "mismatch" in eager["earlier_attempts"][0]["infra_reason"]
    tiled = recs["tiled"]
    assert tiled["status"] == "infra_failed" and tiled["failure_kind"] == "infrastructure"
    assert len(tiled["earlier_attempts"]) == 1
    kept = {json.loads(p.read_text())["arm_label"] for p in run_dir.glob("trials/*/attempt1.json")}
    assert kept == {"eager", "tiled"}  # each failed attempt's record kept beside the new one
    verdicts = {v.label: v for v in result.verdicts}
    assert verdicts["tiled"].verdict == "invalid", verdicts["tiled"].reasons
    assert "harness" in verdicts["tiled"].reasons[0] and "infra_retries" in verdicts["tiled"].reasons[0]
    md = (run_dir / "decisions.md").read_text()
    assert "## Trials re-run (harness failures, interference, contamination)" in md and "now **ok**" in md
    assert all(v.verdict != "reject" for v in result.verdicts), [
        (v.label, v.verdict, v.reasons) for v in result.verdicts]
