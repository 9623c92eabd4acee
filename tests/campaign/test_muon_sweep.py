"""`+sweep=tp_mode` through the real campaign machinery."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from orchestrator.campaign.run import run_campaign


@pytest.fixture
def one_thread() -> Any:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # inline trials share this process; spin-waits on a busy host
    yield
    torch.set_num_threads(before)


def test_tp_mode_sweep_single_rank_end_to_end(compose: Any, run_dir: Path, one_thread: Any) -> None:
    cfg = compose(["workload=muon_tp_test", "workload.world_size=1", "protocol=quick",
                   "launcher=inline", "+sweep=tp_mode"])
    result = run_campaign(cfg, run_dir)
    recs = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")]
    assert len(recs) == 6 and all(r["status"] == "ok" for r in recs), recs
    assert {r["muon_tp"]["mode"] for r in recs} == {"duplicated", "distributed", "auto"}
    assert [v.label for v in result.verdicts] == ["distributed", "auto"]
    md = (run_dir / "decisions.md").read_text()
    assert "## Muon tp_mode" in md and "| auto | auto | 1 |" in md


def test_tp_mode_sweep_two_ranks_end_to_end(compose: Any, run_dir: Path) -> None:
    # the sweep file's gate: 24 probe steps, update within 1e-4 (fp32); 8 steps keep it cheap
    # one timed round keeps the cost down (the gate's four 2-rank probes are the added cost)
    cfg = compose(["workload=muon_tp_test", "protocol=quick", "launcher=local",
                   "+sweep=tp_mode", "protocol.correctness.steps=8", "protocol.repeats=1",
                   "protocol.max_rounds=1"])
    assert cfg.invariants.tolerances["fp32"].update_rel_l2 == 1e-4
    result = run_campaign(cfg, run_dir)
    recs = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")]
    assert recs and all(r["status"] == "ok" for r in recs), [r.get("error") for r in recs]
    assert {r["muon_tp"]["group_size"] for r in recs} == {2}
    md = (run_dir / "decisions.md").read_text()
    assert "## Muon tp_mode" in md and "predicted distributed (ms)" in md

    # the correctness gate ran across two ranks and passed both modes
    gate = json.loads((run_dir / "correctness.json").read_text())
    assert {p["status"] for p in gate["probes"].values()} == {"ok"}, gate["probes"]
    probe = json.loads((run_dir / "correctness" / "a0" / "probe.json").read_text())
    assert probe["world_size"] == 2
    assert {g["label"]: g["status"] for g in gate["arms"].values()} == {
        "distributed": "pass", "auto": "pass"}, [g["reasons"] for g in gate["arms"].values()]
    assert all(v.verdict != "invalid" for v in result.verdicts), result.verdicts
    for g in gate["arms"].values():
        facts = g["buckets"]["s32"]
        assert len(facts["trajectory"]["variant"]) == 8 and facts["trajectory"]["passed"]
        updates = [t for t in facts["tensors"] if t["name"].startswith("update/blocks.0.")]
        # the full (gathered) update of every sharded matrix, compared within 1e-4
        assert {t["name"] for t in updates} >= {f"update/blocks.0.{w}.weight"
                                                 for w in ("qkv", "proj", "fc1", "fc2")}
        assert all(t["rel_l2"] <= 1e-4 for t in updates), updates
    # useful FLOPs are per device (the model's work / G), so MFU cannot exceed HFU, whose
    # executed FLOPs are rank 0's own dispatch count (replicated work and Newton-Schulz included)
    for r in recs:
        for u in r["utilization"]:
            if u["mfu"] is not None and u["hfu"] is not None:
                assert u["mfu"] <= u["hfu"] * 1.001, (r["arm_label"], u)
        assert r["flops"]["useful_definition"].startswith("per device")
    # rank 0 of the auto trial logged one line per distinct shape to the trial's stderr.log
    (auto,) = [r for r in recs if r["muon_tp"]["mode"] == "auto"]
    log = (run_dir / "trials" / auto["trial_id"] / "stderr.log").read_text()
    for c in auto["muon_tp"]["choices"]:
        assert f"tp_mode auto: [{c['m']}, {c['n']}] G=2 dim={c['partition_dim']} -> {c['mode']}" \
            in log, log[-2000:]
    assert log.count("tp_mode auto: G=2") == 1  # the profile line, rank 0 only
    assert "all 1 trials chose the same mode" in md
    # what each arm's step ran (recipes.base.Trainer.executes): the Newton-Schulz path per
    # weight in step order; auto's from its choices, so the rule can see when auto is the
    # baseline's step
    by_mode = {r["muon_tp"]["mode"]: r["executes"]["newton_schulz"] for r in recs}
    # ... and it speaks for the mode only: a sweep of anything else gets no same-step claim
    assert all(r["executes_covers"] == ["workload.tp.mode"] for r in recs)
    sharded = [x for x in by_mode["duplicated"] if not x.endswith(":local")]
    assert sharded and all(x.endswith(":duplicated") for x in sharded), by_mode
    assert all(x.endswith(":distributed") for x in by_mode["distributed"]
               if not x.endswith(":local"))
    chosen = {f"{c['m']}x{c['n']}/p{c['partition_dim']}": c["mode"]
              for c in auto["muon_tp"]["choices"]}
    assert [x.rsplit(":", 1)[1] for x in by_mode["auto"] if not x.endswith(":local")] == [
        chosen[x.rsplit(":", 1)[0]] for x in by_mode["auto"] if not x.endswith(":local")]

    import torch

    grads = torch.load(run_dir / "correctness" / "a0" / "s32.pt", weights_only=True)["grads"]
    assert tuple(grads["blocks.0.fc1.weight"].shape) == (128, 32)  # d_ff x d_model, not a shard


def test_tp_mode_gate_rejects_a_planted_distributed_error(compose: Any, run_dir: Path) -> None:
    """distributed scaled by 1 + 5e-4 (tests/helpers/muon_planted.py): the gate, with the
    sweep's 1e-4 update tolerance, must reject it and name the sharded weights' updates."""
    from orchestrator.campaign.gate import run_gate
    from orchestrator.spec.sweep import resolve_arms, selected_buckets

    cfg = compose(["workload=muon_tp_test", "protocol=quick", "launcher=local",
                   "+sweep=tp_mode", "sweep.values=[distributed]",
                   "workload.recipe=tests.helpers.muon_planted:build",
                   "protocol.correctness.steps=4"])
    doc = run_gate(cfg, run_dir, resolve_arms(cfg), selected_buckets(cfg))
    assert {p["status"] for p in doc["probes"].values()} == {"ok"}, doc["probes"]
    (g,) = doc["arms"].values()
    assert g["status"] == "fail", g
    named = [r for r in g["reasons"] if "update/blocks.0." in r]
    assert any("update/blocks.0.qkv.weight" in r for r in named), g["reasons"]
    # forward and gradients are untouched by the planted optimizer error
    assert not any(" grad/" in r or " outputs" in r for r in g["reasons"]), g["reasons"]


def test_tp_mode_sweep_two_ranks_default_protocol(compose: Any, run_dir: Path) -> None:
    """The shipped default protocol (auto warm-up, time floor on the measured window, A/A arm)
    on two ranks: every rank must take the same warm-up and stopping decisions, or the ranks
    fall out of step and the trials crash in mismatched collectives (issue 22). For CI time
    one round (no adaptive extension: its one process takes every warm-up and stopping
    decision of all four arms across the two ranks), each paired process times every arm for
    protocol.paired_min_s=1 s (the shipped 2 s is the same floor to agree on, twice as long)
    and the correctness gate is off (the two-rank gate runs in the end-to-end test above)."""
    cfg = compose(["workload=muon_tp_test", "launcher=local", "+sweep=tp_mode",
                   "protocol.correctness.mode=off", "protocol.repeats=1",
                   "protocol.max_rounds=1", "protocol.paired_min_s=1"])
    assert cfg.protocol.warmup_policy == "auto" and cfg.protocol.aa_arm
    assert cfg.protocol.measured_min_s > 0
    result = run_campaign(cfg, run_dir)
    recs = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")]
    assert len(recs) == 4, len(recs)  # 4 arms (A/A included) x 1 round
    assert all(r["status"] == "ok" for r in recs), [(r["trial_id"], r["status"], r.get("error"))
                                                    for r in recs if r["status"] != "ok"]
    assert not list(run_dir.glob("trials/*/attempt*.json"))  # nothing needed a re-run
    assert all(r["step_agreement_median_s"] is not None for r in recs)
    assert all(r["warmup_policy"] == "auto" for r in recs)
    for r in recs:  # paired by steps, every arm timed for at least paired_min_s
        steps = pd.read_csv(run_dir / "trials" / r["trial_id"] / "steps.csv")
        assert r["pairing"] == "steps"
        assert steps.loc[steps["phase"] == "measured", "step_time_s"].sum() >= 0.9 * 1.0
    for v in result.verdicts:
        assert not any("failed" in why or "crashed" in why for why in v.reasons), v.reasons


def test_the_tp_mode_sweep_changes_only_what_the_muon_description_covers(compose: Any) -> None:
    """The shipped tp_mode sweep's arms differ from the baseline only in the setting the Muon
    trainer's executes() speaks for, so auto that resolves to duplicated can be called
    equivalent by construction; an environment sweep on the same workload cannot."""
    from orchestrator.spec.sweep import differing_settings, expand_arms, resolve_arms
    from recipes.muon.recipe import MuonTPTrainer

    cfg = compose(["workload=muon_tp_test", "+sweep=tp_mode"])
    for arms in (expand_arms(cfg), resolve_arms(cfg)):  # from the overrides, and resolved
        assert [a.label for a in arms] == ["duplicated", "distributed", "auto"]
        assert all(differing_settings(arms[0], a) == set(MuonTPTrainer.executes_covers)
                   for a in arms[1:])
    arms = expand_arms(compose(["workload=muon_tp_test", "+sweep=omp_threads"]))
    assert all(differing_settings(arms[0], a) == {"env.OMP_NUM_THREADS"} for a in arms[1:])
