"""Duet runs (protocol.pairing=duet): a round's arms at the same time, each on its own slice
of the machine, placement rotated every round, each arm's steps kept where they overlap in
time; the slice's effect taken out of the contrasts; refusals of slices that cannot be one."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from orchestrator.campaign.run import run_campaign
from orchestrator.core import paired
from orchestrator.core.errors import ConfigError
from orchestrator.platform.slices import duet_slices, placement, slice_env
from orchestrator.spec.sweep import choose_pairing, resolve_arms

HELPER = Path(__file__).resolve().parents[1] / "helpers" / "duet_steps.py"
TWO_CORES = len(os.sched_getaffinity(0)) >= 2
needs_two = pytest.mark.skipif(not TWO_CORES, reason="a duet needs two cores here")


def _p(**kw: Any) -> Any:
    return SimpleNamespace(duet_cpus=kw.get("cpus"), duet_devices=kw.get("devices"))


def test_slices_split_check_and_rotate() -> None:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= 2:
        got = duet_slices(_p(), 2)
        assert [s["cpus"] for s in got] == [cores[:len(cores) // 2],
                                            cores[len(cores) // 2:2 * (len(cores) // 2)]]
    with pytest.raises(ConfigError, match="protocol.pairing: duet: 3 arms need 3 slices"):
        duet_slices(_p(), len(cores) + 1)
    with pytest.raises(ConfigError, match=r"protocol.duet_cpus\[1\]: core 0 is also in"):
        duet_slices(_p(cpus=[[0], [0]]), 2, pinned=[0, 1])
    with pytest.raises(ConfigError, match="protocol.duet_cpus: slices of \\[1, 2\\] cores"):
        duet_slices(_p(cpus=[[0], [1, 2]]), 2, pinned=[0, 1, 2])
    with pytest.raises(ConfigError, match="core 9 is not available"):
        duet_slices(_p(cpus=[[0], [9]]), 2, pinned=[0, 1])
    with pytest.raises(ConfigError, match="protocol.duet_devices: slices of \\[1, 2\\] devices"):
        duet_slices(_p(devices=["0", "1,2"]), 2, pinned=[0, 1])
    got = duet_slices(_p(devices=["0,1", "2,3"]), 2, pinned=[0, 1, 2, 3])
    assert got == [{"cpus": [0, 1], "devices": "0,1"}, {"cpus": [2, 3], "devices": "2,3"}]
    assert slice_env(got[1])["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert slice_env(got[1])["MUSA_VISIBLE_DEVICES"] == "2,3"
    assert slice_env(got[1])["OMP_NUM_THREADS"] == "2"
    # a Latin square: every arm on every slice equally often over as many rounds as slices
    rows = [placement(3, 3, r) for r in range(3)]
    assert all(sorted(col) == [0, 1, 2] for col in zip(*rows))


def test_a_faster_slice_is_taken_out_of_the_contrasts() -> None:
    """Contrasts d_r = delta +- gamma (the baseline on the fast slice every other round): the
    plain mean's interval is as wide as gamma; with the placement as covariate it is the
    noise's alone, around delta."""
    rng = np.random.default_rng(0)
    delta, gamma, noise = math.log(0.95), 0.15, 0.005
    cells, where = {}, {}
    for r in range(8):
        b_slice, v_slice = r % 2, (r + 1) % 2
        lb = math.log(0.01) + (gamma if b_slice == 1 else 0.0) + rng.normal(0, noise)
        lv = lb - delta + (gamma if v_slice == 1 else 0.0) - (gamma if b_slice == 1 else 0.0) \
            + rng.normal(0, noise)
        cells[(r, "a0")], cells[(r, "a1")] = lb, lv
        where[(r, "a0")], where[(r, "a1")] = b_slice, v_slice
    plain = paired.fit_blocks(cells, "a0", drop_outliers=False).effects["a1"]
    adjusted = paired.fit_blocks(cells, "a0", drop_outliers=False, placement=where).effects["a1"]
    assert plain.se is not None and adjusted.se is not None
    assert adjusted.se < plain.se / 10 and adjusted.df == 6 and plain.df == 7
    lo, hi = adjusted.interval(0.05)
    assert lo < math.exp(delta) < hi and hi < 1.0  # decided: slower
    lo, hi = plain.interval(0.05)
    assert lo < 1.0 < hi  # the slice's effect alone would leave it undecided


def _duet_workload(tmp_path: Path) -> str:
    conf = tmp_path / "conf"
    (conf / "workload").mkdir(parents=True)
    (conf / "sweep").mkdir()
    (conf / "workload" / "duet_test.yaml").write_text(
        "defaults:\n  - /schema/workload/command@_here_\n  - _self_\nname: duet_test\n"
        f"command: '{{python}} {HELPER} --steps {{steps}} --delay-ms {{delay_ms}} "
        "--fail {fail} --hang {hang}'\nparams: {delay_ms: 5.0, fail: 0, hang: 0}\n"
        "time_limit_s: 60\n"
        "buckets:\n  - {name: s1, seq_len: 1, micro_batch: 1}\n")
    (conf / "sweep" / "duet_delay.yaml").write_text(
        "defaults:\n  - /schema/sweep/sweep@_here_\n  - _self_\nname: duet_delay\n"
        "hypothesis: a longer sleep is slower\nvariable: workload.params.delay_ms\n"
        "baseline: 5.0\nvalues: [5.5]\nlabels: [slower]\n")
    return str(conf)


DUET = ["protocol=quick", "protocol.repeats=4", "protocol.max_rounds=4",
        "protocol.measured_steps=30", "protocol.aa_arm=false", "launcher=local", "device=cpu",
        "protocol.interference_retries=0", "protocol.pairing=auto"]


@needs_two
def test_a_duet_campaign_runs_the_arms_side_by_side(tmp_path: Path, compose: Any,
                                                   run_dir: Path) -> None:
    conf = _duet_workload(tmp_path)
    cfg = compose(["workload=duet_test", "+sweep=duet_delay", *DUET,
                   "protocol.duet_cpus=[[0],[1]]"], True, [conf])
    result = run_campaign(cfg, run_dir)
    plan = json.loads((run_dir / "plan.json").read_text())
    # declared slices: pairing=auto picks duet for a param the trainer cannot switch
    assert plan["pairing"]["mode"] == "duet" and "declared slices" in plan["pairing"]["why"]
    recs = {p.parent.name: json.loads(p.read_text()) for p in run_dir.glob("trials/r*/trial.json")}
    assert len(recs) == 8 and all(r["status"] == "ok" for r in recs.values())
    for r in range(4):
        a0, a1 = recs[f"r00{r}-s1-a0"], recs[f"r00{r}-s1-a1"]
        assert a0["duet"]["window_s"] == a1["duet"]["window_s"] > 0  # one window per round
        assert a0["duet"]["steps_in_window"] >= 3 and a1["duet"]["steps_in_window"] >= 3
        # the placement swaps every round, and each command ran on its slice's core alone
        assert (a0["duet_slice"], a1["duet_slice"]) == ((0, 1) if r % 2 == 0 else (1, 0))
        for rec in (a0, a1):
            first = (run_dir / "trials" / rec["trial_id"] / "command.log").read_text().split("\n")[0]
            assert first == f"# cpus {rec['duet_slice']} threads 1"
    steps = (run_dir / "trials" / "r000-s1-a0" / "steps.csv").read_text()
    assert "measured" in steps
    v = result.verdicts[0]
    assert v.verdict == "reject", v.headline  # 10 % more sleep: slower, decided side by side


@needs_two
def test_a_failing_arm_in_a_duet_leaves_its_partner_an_infrastructure_failure(
        tmp_path: Path, compose: Any, run_dir: Path) -> None:
    conf = _duet_workload(tmp_path)
    cfg = compose(["workload=duet_test", "+sweep=duet_delay", *DUET, "protocol.repeats=1",
                   "protocol.max_rounds=1", "protocol.pairing=duet", "protocol.infra_retries=0",
                   "sweep.values=[1]",
                   "sweep.variable=workload.params.fail", "sweep.baseline=0",
                   "sweep.labels=[crashes]"], True, [conf])
    run_campaign(cfg, run_dir)
    base = json.loads((run_dir / "trials" / "r000-s1-a0" / "trial.json").read_text())
    var = json.loads((run_dir / "trials" / "r000-s1-a1" / "trial.json").read_text())
    assert var["status"] == "failed" and "exited with code 3" in var["error"]
    assert base["status"] == "infra_failed" and "duet partner failed" in base["error"]


@needs_two
def test_an_arm_that_hangs_after_its_last_step_is_stopped_and_kept(
        tmp_path: Path, compose: Any, run_dir: Path) -> None:
    """An arm whose command logs every step and then does not exit is stopped
    workload.exit_grace_s later (not at its 60 s time limit); both arms keep their steps."""
    conf = _duet_workload(tmp_path)
    cfg = compose(["workload=duet_test", "+sweep=duet_delay", *DUET, "protocol.repeats=1",
                   "protocol.max_rounds=1", "protocol.pairing=duet", "protocol.infra_retries=0",
                   "workload.exit_grace_s=1", "sweep.values=[1]",
                   "sweep.variable=workload.params.hang", "sweep.baseline=0",
                   "sweep.labels=[hangs]"], True, [conf])
    run_campaign(cfg, run_dir)
    base = json.loads((run_dir / "trials" / "r000-s1-a0" / "trial.json").read_text())
    var = json.loads((run_dir / "trials" / "r000-s1-a1" / "trial.json").read_text())
    assert base["status"] == "ok" and "teardown" not in base, base.get("error")
    assert var["status"] == "ok", var.get("error")
    assert var["teardown"].startswith("the command had logged all")
    assert var["command_wall_s"] < 30 and var["duet"]["steps_in_window"] >= 3


@needs_two
def test_duet_is_refused_where_it_cannot_run(compose: Any) -> None:
    with pytest.raises(ConfigError, match="protocol.pairing: duet runs each arm as a program"):
        compose(["workload=gpt_test", "+sweep=fa2_tiling", "protocol.pairing=duet",
                 "protocol.aa_arm=false", "protocol.duet_cpus=[[0],[1]]"])
    with pytest.raises(ConfigError, match="launcher.max_parallel: must be 1"):
        compose(["workload=command_busy", "+sweep=planted_command", "protocol.pairing=duet",
                 "protocol.aa_arm=false", "protocol.duet_cpus=[[0],[1]]",
                 "launcher.max_parallel=2"])
    # a duet's arms train at the same time: one log file for all of them is no log at all
    duet = ["workload=command_busy", "+sweep=planted_command", "protocol.aa_arm=false",
            "protocol.duet_cpus=[[0],[1]]", "device=cpu"]
    with pytest.raises(ConfigError, match="protocol.pairing: duet: workload.log.file 'train.log' "
                                          "is one file for every arm"):
        compose([*duet, "protocol.pairing=duet", "workload.log.file=train.log"])
    assert compose([*duet, "protocol.pairing=duet",
                    "workload.log.file='{trial_dir}/train.log'"]).protocol.pairing == "duet"
    # auto: the duet it would pick falls back to one arm per process, and says why
    cfg = compose([*duet, "protocol.pairing=auto", "workload.log.file=train.log"])
    mode, why = choose_pairing(cfg, resolve_arms(cfg))
    assert mode == "process" and "no duet: workload.log.file" in why, why
