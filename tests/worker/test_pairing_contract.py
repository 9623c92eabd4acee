"""The contract every pairing mode keeps (orchestrator.worker.pairing), as the launchers keep
theirs: the planner's choice for a round is the mode that measures it, and that mode writes
exactly one record per planned arm, in its trial directory, with the fields the analysis reads;
a variant that fails is that arm's failure and never another arm's. One case per mode, planned
the way a campaign plans it (compose, resolve the arms, choose the pairing, make the specs),
run by the real worker (run_trial) on real processes.

A new mode passes these by adding its case to CASES: a workload it pairs, and how its variant
fails."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.core.records import FINAL, Pairing, Status, TrialKind
from orchestrator.spec.jobs import job_from_payload, make_specs
from orchestrator.worker.pairing import plan_specs
from orchestrator.spec.plan import plan
from orchestrator.spec.sweep import choose_pairing, resolve_arms
from orchestrator.worker.pairing import MODES, mode_for
from orchestrator.worker.trial import run_trial
from tests.helpers.launching import in_dir

ROOT = Path(__file__).resolve().parents[2]
DUET_HELPER = ROOT / "tests" / "helpers" / "duet_steps.py"
QUICK = ["protocol=quick", "protocol.repeats=1", "protocol.max_rounds=1", "protocol.aa_arm=false",
         "launcher=inline", "device=cpu", "protocol.measured_steps=12", "protocol.block_steps=3"]
SYNTHETIC = ["workload=synthetic", "+sweep=calibrate", "workload.recipe=tests.helpers.failing:build",
             "workload.units_per_token=0.05", "sweep.labels=[v]"]


PLAIN = ROOT / "tests" / "helpers" / "plain_trainer.py"


def _conf(tmp: Path) -> str:
    """Two command workloads of the tests' helpers: duet_steps (sleep-bound steps, ``fail``
    exits 3 after two steps) and plain_trainer (pure-Python work, mode ``exit`` exits 3 at
    step 4), and a sweep over any of their params."""
    conf = tmp / "conf"
    (conf / "workload").mkdir(parents=True, exist_ok=True)
    (conf / "sweep").mkdir(exist_ok=True)
    head = "defaults:\n  - /schema/workload/command@_here_\n  - _self_\n"
    (conf / "workload" / "duet_contract.yaml").write_text(
        f"{head}name: duet_contract\ncommand: '{{python}} {DUET_HELPER} --steps {{steps}} "
        "--delay-ms {delay_ms} --fail {fail}'\nparams: {delay_ms: 2.0, fail: 0}\n"
        "time_limit_s: 60\nbuckets:\n  - {name: s1, seq_len: 1, micro_batch: 1}\n")
    (conf / "workload" / "plain_contract.yaml").write_text(
        f"{head}name: plain_contract\ncommand: '{{python}} {PLAIN} --steps {{steps}} "
        "--units {units} --mode {mode} --at 4'\nparams: {units: 8, mode: ok}\n"
        "time_limit_s: 60\nbuckets:\n  - {name: s1, seq_len: 1, micro_batch: 1}\n")
    (conf / "sweep" / "contract.yaml").write_text(
        "defaults:\n  - /schema/sweep/sweep@_here_\n  - _self_\nname: contract\n"
        "hypothesis: the variant differs\nvariable: workload.params.units\nbaseline: 8\n"
        "values: [16]\nlabels: [v]\n")
    return str(conf)


def _sweep(variable: str, baseline: Any, value: Any) -> list[str]:
    return ["+sweep=contract", f"sweep.variable={variable}", f"sweep.baseline={baseline}",
            f"sweep.values=[{value}]"]


CLIENT = ("workload.command='{python} tests/helpers/client_trainer.py --steps {steps} "
          "--units 5 --nan-units 9 --label'")
# per mode: (the overrides that plan a round of it, those of a variant that fails)
CASES: dict[str, tuple[list[str], list[str]]] = {
    "process": ([*SYNTHETIC, "protocol.pairing=process", "sweep.values=[0.5]"],
                [*SYNTHETIC, "protocol.pairing=process", "sweep.values=[1.0]"]),
    "in-process": ([*SYNTHETIC, "protocol.pairing=steps", "sweep.values=[0.5]"],
                   [*SYNTHETIC, "protocol.pairing=steps", "sweep.values=[1.0]"]),
    # units 9: the trainer reports a NaN loss in that arm's blocks (the arm fails)
    "client": (["+sweep=planted_client", "protocol.pairing=steps", CLIENT,
                "sweep.variable=workload.params.units", "sweep.baseline=5", "sweep.values=[6]",
                "sweep.labels=[v]"],
               ["+sweep=planted_client", "protocol.pairing=steps", CLIENT,
                "sweep.variable=workload.params.units", "sweep.baseline=5", "sweep.values=[9]",
                "sweep.labels=[v]"]),
    "alternation": (["workload=plain_contract", "protocol.pairing=steps",
                     *_sweep("workload.params.units", 8, 16)],
                    ["workload=plain_contract", "protocol.pairing=steps",
                     *_sweep("workload.params.mode", "ok", "exit")]),
    "duet": (["workload=duet_contract", "protocol.pairing=duet", "protocol.duet_cpus=[[0],[1]]",
              "protocol.measured_steps=30", *_sweep("workload.params.delay_ms", 2.0, 2.5)],
             ["workload=duet_contract", "protocol.pairing=duet", "protocol.duet_cpus=[[0],[1]]",
              "protocol.measured_steps=30", *_sweep("workload.params.fail", 0, 1)]),
}
NEEDS_TWO_CORES = {"duet"}


def _planned(compose: Any, tmp: Path, name: str, failing: bool) -> list[Any]:
    """Round 0's specs, planned as a campaign plans them (the pairing chosen by the planner)."""
    cfg = compose([*QUICK, *CASES[name][failing]], True, [_conf(tmp)])
    arms = resolve_arms(cfg)
    mode, _ = choose_pairing(cfg, arms)
    cfg.protocol.pairing = mode  # as the campaign's pre-flight does
    buckets = [cfg.workload.buckets[0].name]
    planned = plan([a.arm_id for a in arms], buckets, 1, reverse_every_other_round=False)
    return plan_specs(cfg, make_specs(cfg, tmp / "run", arms, planned), arms)


def _as_sent(spec: Any) -> Any:
    """The spec as a launcher hands it to a worker: through its JSON payload (the mode's part
    as plain data, read back by the spec)."""
    return job_from_payload(json.loads(json.dumps(spec.payload())))


def _records(specs: list[Any]) -> dict[str, dict[str, Any]]:
    with in_dir(ROOT):  # the commands name their helpers by paths relative to the repository
        for spec in specs:
            run_trial(_as_sent(spec))
    out = {}
    for spec in specs:
        arms = spec.paired_arms or [spec]
        for a in arms:
            path = Path(a.trial_dir) / "trial.json"
            assert path.is_file(), f"no record for {a.trial_id}"
            out[str(a.arm_id)] = json.loads(path.read_text())
    return out


def _skip(name: str) -> None:
    if name in NEEDS_TWO_CORES and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("a duet needs two cores here")


def test_every_mode_has_a_case() -> None:
    assert {m.name for m in MODES} == set(CASES)


def test_a_mode_reads_its_own_part_only(compose: Any, tmp_path: Path) -> None:
    """Each mode types its part in its own module and refuses another mode's, by name."""
    from orchestrator.worker.pairing.duet import DuetPart
    from orchestrator.worker.pairing.steps import StepsPart

    steps = _planned(compose, tmp_path / "s", "in-process", failing=False)[0]
    part = StepsPart.of(steps)
    assert (part.block_steps, part.order) == (3, "balanced")  # QUICK, and the default order
    with pytest.raises(ValueError, match=r"^trial r0+-\w+-a0: not a duet trial \(its part: steps\)$"):
        DuetPart.of(steps)
    one = _planned(compose, tmp_path / "p", "process", failing=False)[0]
    with pytest.raises(ValueError, match=r"not a paired-steps trial \(its part: None\)$"):
        StepsPart.of(one)


@pytest.mark.parametrize("name", list(CASES))
def test_the_planned_round_is_measured_by_its_mode_one_record_per_arm(
        compose: Any, tmp_path: Path, name: str) -> None:
    _skip(name)
    specs = _planned(compose, tmp_path, name, failing=False)
    modes = {mode_for(s).name for s in specs}
    assert modes == {name}, modes
    sent = [_as_sent(s) for s in specs]  # the part survives the payload: the same mode, settings
    assert {mode_for(s).name for s in sent} == {name}
    assert [s.paired for s in sent] == [s.paired for s in specs]
    mode = next(m for m in MODES if m.name == name)
    recs = _records(specs)
    assert set(recs) == {"a0", "a1"}
    for arm, rec in recs.items():
        assert rec["status"] == Status.OK, (arm, rec.get("error"))
        assert rec["arm_id"] == arm and rec["kind"] == TrialKind.TIMED
        assert rec.get("pairing", Pairing.process) == mode.pairing
        assert rec["measured_steps_run"] >= 3 and rec["step_time_median_s"] > 0
        steps = Path(rec_dir(specs, arm)) / "steps.csv"
        assert "measured" in steps.read_text()
    if mode.pairing is Pairing.steps:  # the arms of one process, in blocks of cycles
        a0, a1 = recs["a0"], recs["a1"]
        assert a0["paired_process"] == a1["paired_process"]
        assert sorted(a0["paired_arms"]) == ["a0", "a1"]
        for rec in (a0, a1):
            assert rec["cycles"] % 2 == 0 and len(rec["blocks"]) == rec["cycles"]


def rec_dir(specs: list[Any], arm: str) -> str:
    for spec in specs:
        for a in spec.paired_arms or [spec]:
            if str(a.arm_id) == arm:
                return str(a.trial_dir)
    raise KeyError(arm)


@pytest.mark.parametrize("name", list(CASES))
def test_a_failing_variant_is_its_own_failure_and_no_one_elses(
        compose: Any, tmp_path: Path, name: str) -> None:
    _skip(name)
    specs = _planned(compose, tmp_path, name, failing=True)
    recs = _records(specs)
    assert set(recs) == {"a0", "a1"}
    variant = Status(recs["a1"]["status"])
    assert variant is not Status.OK and variant.arms_failure or variant is Status.UNAVAILABLE, \
        recs["a1"]
    assert recs["a1"].get("error") and "\n" not in recs["a1"]["error"]
    # the baseline measured, or (sharing the variant's process or slot) not on its account
    base = Status(recs["a0"]["status"])
    assert base in (Status.OK, Status.INFRA_FAILED), recs["a0"]
    assert base in FINAL or base is Status.INFRA_FAILED
