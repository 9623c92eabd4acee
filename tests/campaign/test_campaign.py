"""End to end: a tiny real sweep through the in-process and the subprocess launcher."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.campaign.run import run_campaign
from tests.conftest import TINY


def _check_run_dir(run_dir: Path, n_trials: int) -> dict[str, Any]:
    for name in ("config.json", "plan.json", "results.csv", "baseline.json", "decisions.md",
                 "decisions.jsonl"):
        assert (run_dir / name).is_file(), name
    trials = sorted(run_dir.glob("trials/*/trial.json"))
    assert len(trials) == n_trials
    for t in trials:
        rec = json.loads(t.read_text())
        assert rec["schema_version"] == 1
        if rec["status"] == "ok":
            steps = pd.read_csv(t.parent / "steps.csv")
            assert list(steps["phase"]).count("measured") == rec["measured_steps"]
            assert (steps["step_time_s"] > 0).all()
            assert steps["loss"].notna().all()
    plan = json.loads((run_dir / "plan.json").read_text())
    return plan


def test_inline_sweep_end_to_end(compose: Any, run_dir: Path) -> None:
    cfg = compose([*TINY, "+sweep=fa2_tiling", "sweep.buckets=[s32]"])
    result = run_campaign(cfg, run_dir)
    plan = _check_run_dir(run_dir, 4 * 2)
    # each round in its row of the seeded Williams design (protocol.order=balanced)
    from orchestrator.core.blocks import balanced_order
    arms = ["a0", "a1", "a2", "a3"]
    for r in (0, 1):
        assert [t["arm_id"] for t in plan["trials"][4 * r:4 * r + 4]] == balanced_order(
            arms, r, "0|s32")
    assert len(result.verdicts) == 3
    # equivalent is legitimate at the final look (every tile records the baseline's kernel)
    assert {v.verdict for v in result.verdicts} <= {"retain", "reject", "inconclusive",
                                                    "equivalent"}
    md = (run_dir / "decisions.md").read_text()
    assert "# Decision: fa2_tiling" in md and "## Bucket `s32`" in md and "64x64" in md
    # the correctness gate ran once for the campaign (not per round) and the tiles agree
    gate = json.loads((run_dir / "correctness.json").read_text())
    assert {g["status"] for g in gate["arms"].values()} == {"pass"}
    assert sorted(gate["probe_seconds"]) == ["a0", "a0-repeat", "a1", "a2", "a3"]
    assert "## Correctness" in md
    assert all(any(r.startswith("correctness gate passed") for r in v.reasons)
               for v in result.verdicts if v.verdict != "reject")
    lines = (run_dir / "decisions.jsonl").read_text().splitlines()
    assert [json.loads(x)["label"] for x in lines] == ["64x64", "128x64", "128x128"]


def test_subprocess_sweep_with_crash_and_unavailable(compose: Any, run_dir: Path) -> None:
    cfg = compose([
        "workload=gpt_test", "protocol=quick", "launcher=local", "+sweep=fa2",
        "sweep.buckets=[s32]",
        "sweep.values=[{backend:sdpa,sdpa_kernel:flash},{backend:sdpa,sdpa_kernel:efficient}]",
        "sweep.labels=[flash,efficient]",
    ])
    result = run_campaign(cfg, run_dir)
    _check_run_dir(run_dir, 3 * 2)
    recs = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")]
    by_arm = {r["arm_label"]: r for r in recs}
    assert by_arm["flash"]["status"] == "ok"
    assert by_arm["flash"]["pid"] != by_arm["sdpa-math"]["pid"]  # fresh processes
    assert by_arm["efficient"]["status"] == "unavailable"
    assert "cannot run on cpu" in by_arm["efficient"]["error"]
    verdicts = {v.label: v for v in result.verdicts}
    assert verdicts["efficient"].verdict == "invalid"
    assert verdicts["flash"].verdict in ("retain", "inconclusive", "reject")


def test_crashing_trial_is_recorded_and_campaign_goes_on(compose: Any, run_dir: Path) -> None:
    cfg = compose([
        "workload=gpt_test", "protocol=quick", "launcher=local", "+sweep=fa2",
        "sweep.buckets=[s32]", "sweep.knob=null", "sweep.variable=workload.recipe",
        "sweep.baseline=gpt",
        "sweep.values=[tests.helpers.faulty:build_raise,tests.helpers.faulty:build_segfault]",
        "sweep.labels=[raises,segfaults]", "sweep.fixed={}", "sweep.baseline_label=null",
    ])
    result = run_campaign(cfg, run_dir)
    recs = {(r["arm_label"], r["round"]): r for r in
            (json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json"))}
    assert len(recs) == 6
    assert recs[("gpt", 0)]["status"] == "ok" and recs[("gpt", 1)]["status"] == "ok"
    assert recs[("raises", 0)]["status"] == "failed"
    assert "planted failure" in recs[("raises", 0)]["error"]
    assert recs[("segfaults", 1)]["status"] == "crashed"
    assert "SIGSEGV" in recs[("segfaults", 1)]["error"]
    verdicts = {v.label: v.verdict for v in result.verdicts}
    assert verdicts == {"raises": "reject", "segfaults": "reject"}
    gate = json.loads((run_dir / "correctness.json").read_text())["arms"]
    assert gate["a1"]["reasons"] == ["the variant's probe failed: RuntimeError: planted failure "
                                     "in train_step"]
    assert gate["a2"]["reasons"][0].startswith("the variant's probe crashed: process died from "
                                               "signal SIGSEGV")
    md = (run_dir / "decisions.md").read_text()
    assert "## Failed trials" in md and "SIGSEGV" in md


def test_rerun_on_same_run_dir_resumes(compose: Any, run_dir: Path) -> None:
    cfg = compose([*TINY, "+sweep=fa2", "sweep.buckets=[s32]"])
    run_campaign(cfg, run_dir)
    first = {p: p.stat().st_mtime_ns for p in run_dir.glob("trials/*/trial.json")}
    victim = sorted(first)[3]
    victim.unlink()
    run_campaign(cfg, run_dir)
    after = {p: p.stat().st_mtime_ns for p in run_dir.glob("trials/*/trial.json")}
    assert set(after) == set(first)
    changed = [p for p in after if p == victim or after[p] != first[p]]
    assert changed == [victim]


def test_arms_are_resolved_once_and_carry_their_workload(compose: Any, run_dir: Path,
                                                         monkeypatch: Any) -> None:
    """Planning resolves every arm's workload once; trial specs, the gate's probes and the
    A/A control read it from the arm (no stage applies the overrides again), and plan.json
    records the arms exactly as before."""
    from orchestrator.spec import sweep
    from orchestrator.core.convert import to_dict
    from recipes.gpt.config import GPTWorkloadConfig

    cfg = compose([*TINY, "launcher=local", "+sweep=fa2", "sweep.buckets=[s32]",
                   "protocol.aa_arm=true"])
    arms = sweep.resolve_arms(cfg)
    base = to_dict(cfg.workload)
    for arm in arms:
        assert arm.workload == sweep.apply_overrides(base, arm.overrides)
        assert isinstance(arm.workload_config, GPTWorkloadConfig)
        assert to_dict(arm.workload_config) == arm.workload
    calls = {"expand_arms": 0, "apply_overrides": 0}
    for name in calls:
        real = getattr(sweep, name)

        def counted(*a: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            calls[_name] += 1
            return _real(*a, **kw)

        monkeypatch.setattr(sweep, name, counted)
    run_campaign(cfg, run_dir)
    assert calls == {"expand_arms": 1, "apply_overrides": len(arms)}
    plan = json.loads((run_dir / "plan.json").read_text())
    assert [list(a) for a in plan["arms"]] == [
        ["arm_id", "label", "value", "is_baseline", "overrides", "env"]] * len(arms)
    assert plan["control_arm"]["arm_id"] != "a0" and plan["control_arm"]["overrides"] == \
        plan["arms"][0]["overrides"]
    specs = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/spec.json")]
    probes = [json.loads(p.read_text()) for p in run_dir.glob("correctness/*/spec.json")]
    by_arm = {a.arm_id: a.workload for a in arms}
    by_arm[plan["control_arm"]["arm_id"]] = by_arm["a0"]
    assert len(specs) == 2 * (len(arms) + 1) and len(probes) == len(arms) + 1
    for s in specs + probes:
        assert s["workload"] == by_arm[s["arm_id"]]
