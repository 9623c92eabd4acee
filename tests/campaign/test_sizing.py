"""A command's trials sized by time (orchestrator.campaign.sizing), the step-count check, the
contamination re-run, futility only at a look with power, and trials pinned to cores."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.analysis import contamination
from orchestrator.analysis.decide import Rule, decide
from orchestrator.campaign.attempts import first_attempt_stands, keep_attempt
from orchestrator.campaign.run import run_campaign
from orchestrator.campaign.sizing import sized_bucket
from orchestrator.core import paired
from orchestrator.core.errors import ConfigError
from orchestrator.platform.interference import core_speed_problem, core_speeds
from orchestrator.spec.plan import ArmProgress, more_rounds_reason

# a ~0.3 ms step (10 work units of recipes/examples/busy_steps.py): the pilot must size it
BUSY = ["+sweep=planted_command", "protocol=quick", "launcher=local", "sweep.baseline=10",
        "sweep.values=[11]", "protocol.measured_min_s=0.05"]


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(run_dir.glob("trials/*/trial.json"))]


def test_sized_bucket_from_the_pilot() -> None:
    ok = {"trial_id": "pilot-b", "status": "ok", "step_time_median_s": 0.005}
    got = sized_bucket(ok, 10, 0.5)
    assert got["measured_steps"] == math.ceil(1.25 * 0.5 / 0.005) == 125
    assert got["pilot_step_s"] == 0.005 and "125 measured steps per trial" in got["why"]
    assert sized_bucket({**ok, "step_time_median_s": 0.2}, 10, 0.5)["measured_steps"] == 10
    assert sized_bucket({**ok, "step_time_median_s": 1e-6}, 10, 0.5)["measured_steps"] == 2000
    failed = sized_bucket({"trial_id": "pilot-b", "status": "failed", "error": "boom"}, 10, 0.5)
    assert failed["measured_steps"] is None and "boom" in failed["why"]
    assert "keep protocol.measured_steps=10" in failed["why"]
    ignored = sized_bucket({**ok, "steps_ignored": "does not follow it"}, 10, 0.5)
    assert ignored["measured_steps"] is None and "does not follow it" in ignored["why"]


def test_a_command_trial_is_sized_by_time(compose: Any, run_dir: Path) -> None:
    cfg = compose(BUSY)
    run_campaign(cfg, run_dir)
    plan = json.loads((run_dir / "plan.json").read_text())
    sizing = plan["sizing"]["buckets"]["busy"]
    n = sizing["measured_steps"]
    assert sizing["pilot"] == "pilot-busy" and n > cfg.protocol.measured_steps
    recs = _records(run_dir)
    pilot = [r for r in recs if r["kind"] == "pilot"]
    timed = [r for r in recs if r["kind"] == "timed"]
    assert len(pilot) == 1 and pilot[0]["arm_id"] == "a0" and len(timed) == 4
    assert {r["measured_steps"] for r in timed} == {n}  # every arm the same work
    assert {t["measured_steps"] for t in plan["trials"]} == {n}
    assert all(r["steps_asked"] == r["steps_logged"] == cfg.protocol.warmup_steps + n
               for r in timed)
    md = (run_dir / "decisions.md").read_text()
    assert "## Trial length" in md and f"measured per trial: {n}–{n} steps" in md
    # the pilot is not an arm's trial: the analysis counts 2 per arm
    assert "| 2/2 |" in md
    # a resume reads the sizing back from the pilot on disk: nothing runs again
    before = {p: p.stat().st_mtime for p in run_dir.glob("trials/*/trial.json")}
    cfg.resume = str(run_dir)
    run_campaign(cfg, run_dir)
    assert json.loads((run_dir / "plan.json").read_text())["sizing"]["buckets"]["busy"] == sizing
    assert {p: p.stat().st_mtime for p in run_dir.glob("trials/*/trial.json")} == before


def test_a_command_without_steps_or_ignoring_them_is_said(compose: Any, tmp_path: Path) -> None:
    no_steps = tmp_path / "no steps"
    cfg = compose([*BUSY, ("workload.command='{python} recipes/examples/busy_steps.py --steps 9 "
                           "--units {units} --label {label}'")])
    run_campaign(cfg, no_steps)
    plan = json.loads((no_steps / "plan.json").read_text())
    assert "does not take {steps}" in plan["sizing"]["why"]
    assert not list(no_steps.glob("trials/pilot-*"))
    assert "does not take {steps}" in (no_steps / "decisions.md").read_text()

    ignoring = tmp_path / "ignoring"
    cfg = compose([*BUSY, "workload.command='{python} recipes/examples/busy_steps.py --steps "
                          "{steps} --units {units} --label {label} --ignore-steps 12'"])
    run_campaign(cfg, ignoring)
    timed = [r for r in _records(ignoring) if r["kind"] == "timed"]
    assert all(r["steps_logged"] == 12 and "does not follow it" in r["steps_ignored"]
               for r in timed)
    md = (ignoring / "decisions.md").read_text()
    assert "the pilot asked for" in md and "the command did not follow its step count in 4" in md


def test_steps_asked_follows_the_template(compose: Any) -> None:
    w = compose(BUSY).workload
    assert w.steps_asked(2, 10) == (12, True)
    w.command = "{python} train.py --iters {measured_steps}"
    assert w.steps_asked(2, 10) == (10, False)
    w.command = "{python} train.py"
    assert w.steps_asked(2, 10) is None


def _trial(tid: str, arm: str, med: float, mad: float = 0.0001, n: int = 100) -> dict[str, Any]:
    return {"trial_id": tid, "bucket": "b", "arm_id": arm, "status": "ok", "kind": "timed",
            "step_time_median_s": med, "step_time_mad_s": mad, "measured_steps": n}


def test_contamination_flags_one_far_trial_and_not_a_two_state_host() -> None:
    meds = {"a0": [5.00, 5.05, 4.98, 5.02], "aa": [5.01, 4.97, 10.1, 5.03],
            "a1": [5.50, 5.46, 5.52, 5.49]}
    recs = [_trial(f"r{i}-{a}", a, m / 1e3) for a, ms in meds.items() for i, m in enumerate(ms)]
    flags, notes = contamination.screen(recs, 0.02)
    assert [f.trial_id for f in flags] == ["r2-aa"] and not notes
    assert "+101% off its arm's median" in flags[0].why()
    # a trial whose own steps are that noisy is not contamination
    noisy = [r if r["trial_id"] != "r2-aa" else {**r, "step_time_mad_s": 0.02, "measured_steps": 4}
             for r in recs]
    assert contamination.flag(noisy, 0.02) == []
    # too few trials of an arm: nothing to compare with
    assert contamination.flag([r for r in recs if r["trial_id"][1] in "01"], 0.02) == []
    # a host switching between two speeds: many "outliers", none re-run, and said so
    states = {"a0": [6.0, 6.05, 5.98, 8.5, 6.02], "aa": [6.01, 8.6, 5.97, 6.03, 6.0],
              "a1": [8.4, 6.0, 6.02, 5.99, 8.55]}  # mostly fast, now and then slow
    two = [_trial(f"r{i}-{a}", a, m / 1e3) for a, ms in states.items() for i, m in enumerate(ms)]
    flags, notes = contamination.screen(two, 0.02)
    assert flags == [] and "too many to be contamination" in notes[0]


def _paired_trial(rnd: int, arm: str, blocks: list[float]) -> dict[str, Any]:
    return {"trial_id": f"r{rnd}-{arm}", "bucket": "b", "arm_id": arm, "round": rnd,
            "is_baseline": arm == "a0", "status": "ok", "kind": "timed", "pairing": "steps",
            "blocks": [{"cycle": c, "median_s": m / 1e3} for c, m in enumerate(blocks)]}


def test_paired_rounds_are_screened_by_their_contrasts() -> None:
    """Paired by steps, the host's drift between rounds moves every arm of a round alike (no
    contamination); one arm's process 13 % slower in its round is, and only its round is
    named; every arm moving in one round (the baseline's process) is one flagged round."""
    drift = [1.0, 1.3, 0.9, 1.2, 1.1]  # the host's speed, round by round
    off = {("aa", 3): 1.13}  # a per-process offset of one arm in one round

    def recs(off: dict[tuple[str, int], float]) -> list[dict[str, Any]]:
        out = []
        for r, h in enumerate(drift):
            for j, (arm, base) in enumerate((("a0", 5.0), ("aa", 5.0), ("a1", 5.5))):
                k = off.get((arm, r), 1.0)
                noise = [1 + 0.004 * ((c * 7 + r * 3 + j) % 5 - 2) for c in range(8)]
                out.append(_paired_trial(r, arm, [base * h * k * e for e in noise]))
        return out

    assert contamination.screen_any(recs({}), 0.02) == ([], [])  # drift alone: nothing
    flags, notes = contamination.screen_any(recs(off), 0.02)
    assert [f.trial_id for f in flags] == ["r3-aa"] and not notes
    assert "contrast with its round's baseline was +13% off" in flags[0].why()
    # the baseline's own process slow in round 2: both arms' contrasts move, one round
    flags, notes = contamination.screen_any(recs({("a0", 2): 1.15}), 0.02)
    assert sorted(f.trial_id for f in flags) == ["r2-a1", "r2-aa"] and not notes
    # an arm off in two rounds: its own spread, nothing re-run, and said so
    flags, notes = contamination.screen_any(recs({**off, ("aa", 1): 0.88}), 0.02)
    assert flags == [] and "too many to be contamination" in notes[0]


def _trial_dir(tmp_path: Path, median_s: float, step: str) -> Path:
    """A finished trial's directory: its record (one median) and its steps."""
    tdir = tmp_path / "t"
    tdir.mkdir()
    (tdir / "trial.json").write_text(json.dumps({"trial_id": "t", "status": "ok",
                                                 "step_time_median_s": median_s}))
    (tdir / "steps.csv").write_text(f"step\n{step}\n")
    return tdir


def test_an_earlier_attempt_and_its_steps_are_kept_with_their_number(tmp_path: Path) -> None:
    tdir = _trial_dir(tmp_path, 0.01, "1")
    first = keep_attempt(tdir, "contaminated: far out")
    assert (tdir / "attempt1.json").exists() and (tdir / "attempt1.steps.csv").exists()
    assert first[-1]["reason"] == "contamination" and first[-1]["why"] == "contaminated: far out"
    # a later pass (another look) numbers on from the record, never over an earlier attempt
    (tdir / "trial.json").write_text(json.dumps({"trial_id": "t", "status": "ok",
                                                 "earlier_attempts": first}))
    second = keep_attempt(tdir)
    assert (tdir / "attempt2.json").exists() and len(second) == 2
    assert json.loads((tdir / "attempt1.json").read_text())["step_time_median_s"] == 0.01


def test_a_rerun_that_is_off_too_leaves_the_first_attempt_standing(tmp_path: Path) -> None:
    tdir = _trial_dir(tmp_path, 0.011, "first")
    earlier = keep_attempt(tdir, "contaminated: +8% off")
    (tdir / "trial.json").write_text(json.dumps({"trial_id": "t", "status": "ok",
                                                 "step_time_median_s": 0.02,
                                                 "earlier_attempts": earlier}))
    (tdir / "steps.csv").write_text("step\nrerun\n")
    first_attempt_stands(tdir, "contaminated: +88% off")
    now = json.loads((tdir / "trial.json").read_text())
    assert now["step_time_median_s"] == 0.011 and "first" in (tdir / "steps.csv").read_text()
    (kept,) = now["earlier_attempts"]
    assert kept["reason"] == "contamination" and kept["step_time_median_s"] == 0.02
    assert "+8% off" in kept["why"] and "+88% off" in kept["why"]
    assert "first attempt stands" in kept["why"]
    aside = json.loads((tdir / "attempt1.json").read_text())
    assert aside["step_time_median_s"] == 0.02 and "rerun" in (
        tdir / "attempt1.steps.csv").read_text()
    assert not list(tdir.glob("*.swap"))


def test_futility_is_judged_only_at_a_look_with_power() -> None:
    alpha, plan = 0.05, paired.looks(3, 7, 2)
    shares = [paired.alpha_spent(alpha, plan, r, 3.0) for r in plan]
    first = paired.look_power(shares[0], 2, 3, shares[-1], 7)
    second = paired.look_power(shares[1], 4, 5, shares[-1], 7)
    assert not first[0] and first[1] > 2 * first[2]  # ~15.9 against ~2.8
    assert second[0]
    early = ArmProgress("a1", "inconclusive", True, None, futility_judged=False)
    assert "little power" in more_rounds_reason(early, 3, 7)
    assert more_rounds_reason(ArmProgress("a1", "inconclusive", True, None), 5, 7) == ""


def test_decide_says_an_early_look_cannot_call_it_hopeless() -> None:
    from tests.analysis.test_decide import _analysis

    # the first look of the default protocol: 3 rounds (2 df), 0.39 % of the error rate
    a = _analysis({"s": (math.log(0.91), 0.11)})
    a.alpha_look = paired.alpha_spent(0.05, [3, 5, 7], 3, 3.0)
    eff = paired.Effect("a1", math.log(0.91), 0.11, 2, 3)
    a.comparisons[("s", "a1")].effect = eff
    early = Rule(max_rounds=7, final=False, alpha_last=paired.alpha_spent(0.05, [3, 5, 7], 7, 3.0))
    (v,) = decide(a, early)
    assert v.verdict == "inconclusive" and not v.futility_judged
    assert "this early look cannot call it hopeless (critical t 15.9" in v.headline
    # the same noise at the last look: futility is judged (no more rounds anyway)
    (v,) = decide(a, Rule(max_rounds=7, final=True, alpha_last=early.alpha_last))
    assert v.futility_judged


def test_cpu_affinity_pins_the_trial_and_its_command(compose: Any, run_dir: Path) -> None:
    cpu = min(os.sched_getaffinity(0))
    cfg = compose([*BUSY, f"launcher.cpu_affinity=[{cpu}]", "protocol.measured_min_s=0"])
    run_campaign(cfg, run_dir)
    timed = [r for r in _records(run_dir) if r["kind"] == "timed"]
    assert {tuple(r["cpu_affinity"]) for r in timed} == {(cpu,)}
    logs = [p.read_text() for p in run_dir.glob("trials/r*/command.log")]
    assert logs and all(f"# cpus {cpu}\n" in t for t in logs)
    assert os.sched_getaffinity(0) != {cpu} or len(os.sched_getaffinity(0)) == 1


@pytest.mark.parametrize(("value", "match"), [
    ("[99]", r"^launcher\.cpu_affinity: must be distinct cores this process may use"),
    ("[0,0]", r"^launcher\.cpu_affinity: must be distinct cores"),
])
def test_cpu_affinity_is_checked(compose: Any, value: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        compose([*BUSY, f"launcher.cpu_affinity={value}"])
    with pytest.raises(ConfigError, match=r"^launcher\.cpu_affinity: Slurm places"):
        compose([*BUSY, "launcher=slurm", "launcher.cpu_affinity=[0]"])


def test_cores_of_different_speed_are_said() -> None:
    assert core_speed_problem({0: 0.010, 1: 0.0105}) == ""
    warn = core_speed_problem({0: 0.016, 1: 0.010})
    assert "60% longer on core 0 than on core 1" in warn
    assert "launcher.cpu_affinity=[1]" in warn
    got = core_speeds(reps=1)
    if len(os.sched_getaffinity(0)) > 1:
        assert got is not None and set(got) == os.sched_getaffinity(0)
        assert all(t > 0 for t in got.values())
