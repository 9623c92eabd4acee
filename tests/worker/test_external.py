"""The command workload: an external trainer's log as the measurement, faults as statuses."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from orchestrator.campaign.run import run_campaign
from orchestrator.core.errors import ConfigError
from orchestrator.spec.jobs import make_specs
from orchestrator.worker.external import LogProblem, check_steps
from orchestrator.analysis.loss_gate import loss_trajectory_gates
from orchestrator.core.logparse import StepRecord
from orchestrator.spec.plan import plan
from orchestrator.spec.sweep import Arm, resolve_arms
from orchestrator.worker.trial import run_trial

CMD = ["workload=command_example", "protocol=quick", "launcher=inline"]


def _recs(run_dir: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for p in run_dir.glob("trials/*/trial.json"):
        r = json.loads(p.read_text())
        out[f"{r['arm_label']}/r{r['round']}"] = r
    return out


def test_check_steps_skips_warmup_and_refuses_bad_logs() -> None:
    recs = [StepRecord(i, 0.01 * (i + 1)) for i in range(6)]
    got = check_steps(recs + [StepRecord(3, 0.5)], skip=2)  # a second rank repeating step 3
    assert [r.step for r in got.warmup] == [0, 1] and [r.step for r in got.measured] == [2, 3, 4, 5]
    assert got.notes == ["1 repeated step line(s) ignored (several ranks printing?)"]
    with pytest.raises(LogProblem, match="leaves fewer than 3") as e:
        check_steps(recs[:4], skip=2)
    assert e.value.kind == "too_few_steps"
    with pytest.raises(LogProblem, match=r"go backwards \(5 then 4\)"):
        check_steps([*recs[:3], StepRecord(5, 0.1), StepRecord(4, 0.1)], skip=0)
    with pytest.raises(LogProblem, match="step 2 has step time 0.0"):
        check_steps([StepRecord(0, 0.1), StepRecord(1, 0.1), StepRecord(2, 0.0)], skip=0)


def test_planted_slowdown_in_the_example_trainer_is_rejected(compose: Any, run_dir: Path) -> None:
    cfg = compose([*CMD, "+sweep=example_delay", "sweep.values=[60]", "sweep.labels=[delay-60ms]",
                   "protocol.measured_steps=5"])
    result = run_campaign(cfg, run_dir)
    recs = _recs(run_dir)
    assert {r["status"] for r in recs.values()} == {"ok"}
    base, slow = recs["no-delay/r0"], recs["delay-60ms/r0"]
    assert base["measured_steps"] == 5 and base["tokens_source"] == "log"
    assert base["tokens_per_step"] == 32 * 4
    assert slow["step_time_median_s"] > base["step_time_median_s"] + 0.05
    assert "--delay-ms 60" in slow["command"] and sys.executable not in slow["command"]
    steps = pd.read_csv(run_dir / "trials" / base["trial_id"] / "steps.csv")
    assert list(steps["phase"]) == ["warmup"] + ["measured"] * 5
    assert list(steps["step"]) == list(range(6)) and steps["loss"].notna().all()
    (v,) = result.verdicts
    assert v.verdict == "reject"
    # significantly slower, or (with few rounds at an early look's strict alpha) slower beyond
    # the non-inferiority margin: either is a reject with its interval
    assert "slower" in v.reasons[0] and re.search(r"\] \([\d.]+%\) lies below 1|lies below 0\.950",
                                                   v.reasons[0]), v.reasons
    # same seed, same data, same lr: the logged losses agree, so the gate passes
    assert any(r.startswith("loss trajectory gate passed") for r in v.reasons)


HEALTHY = "import time\nfor i in range(8):\n    time.sleep(0.002); print(f'step {i} time 2.0ms loss 1.0')"


@pytest.mark.parametrize(
    ("code", "status", "kind", "error"),
    [
        ("print('hello'); print('all good')", "failed", "no_step_lines",
         "log: no step lines matched any built-in step format"),
        ("print('step 0 time 5ms'); print('step 3 time 5ms'); print('step 2 time 5ms')",
         "failed", "malformed_log", "step numbers go backwards"),
        ("print('step 0 time 5ms'); print('step 1 time 5ms')", "failed", "too_few_steps",
         "2 step line(s) parsed"),
        ("import sys; print('step 0 time 5ms'); sys.exit(7)", "failed", "exit_code",
         "exited with code 7 after 1 step line(s)"),
        ("import time; print('step 0 time 5ms', flush=True); time.sleep(60)", "timeout",
         "timeout", "workload.time_limit_s=2 s and was killed (1 step line(s) by then)"),
        ("print('{\"step\": 0, \"step_time_ms\": 5}'); print('{\"step\": 1, \"step_time_ms\": \"n/a\"}')",
         "failed", "malformed_log", "log: line 2: field 'step_time_ms': 'n/a' is not a number"),
        ("print('{\"step\": 0, \"step_time_ms\": null}')", "failed", "malformed_log",
         "log: line 1: field 'step_time_ms': null is not a number"),
        ("print('starting'); print('step=2 time=30')", "failed", "malformed_log",
         "log: line 2: field 'time': '30' has no unit; log the unit (time=30ms, step_time_ms=30)"),
    ],
)
def test_faulty_commands_become_statuses(compose: Any, run_dir: Path, code: str, status: str,
                                         kind: str, error: str) -> None:
    """A healthy stand-in trainer (no torch, so fast) against a faulty one: the swept parameter
    is the program text itself."""
    cfg = compose([*CMD, "+sweep=example_delay", "protocol.repeats=1", "workload.time_limit_s=2",
                   "workload.command='{python} -c {code}'", "+workload.params.code=x",
                   "sweep.variable=workload.params.code", "sweep.baseline=ok", "sweep.values=[bad]",
                   "sweep.labels=null", "sweep.baseline_label=null"])
    cfg.sweep.baseline, cfg.sweep.values = HEALTHY, [code]
    cfg.sweep.baseline_label, cfg.sweep.labels = "healthy", ["faulty"]
    result = run_campaign(cfg, run_dir)
    recs = _recs(run_dir)
    assert recs["healthy/r0"]["status"] == "ok"
    assert recs["healthy/r0"]["step_time_median_s"] == pytest.approx(0.002)
    bad = recs["faulty/r0"]
    assert bad["status"] == status and bad["failure_kind"] == kind
    assert error in bad["error"]
    (v,) = result.verdicts
    assert v.verdict == "reject"
    md = (run_dir / "decisions.md").read_text()
    assert "## Failed trials" in md and kind != "exit_code" or "step 0 time 5ms" in md


def _two_programs(compose: Any, run_dir: Path, clean: str, label: str, variant: str,
                  *more: str) -> dict[str, dict[str, Any]]:
    """A one-round campaign of two Python programs given as source (``clean``, the baseline,
    labelled clean, and ``variant``, labelled ``label``), each run with its step count; the
    records by label/round."""
    cfg = compose([*CMD, "+sweep=example_delay", "protocol.repeats=1", *more,
                   "workload.command='{python} -c {code} {steps}'", "+workload.params.code=x",
                   "sweep.variable=workload.params.code", "sweep.baseline=ok", "sweep.values=[bad]",
                   "sweep.labels=null", "sweep.baseline_label=null"])
    cfg.sweep.baseline, cfg.sweep.values = clean, [variant]
    cfg.sweep.baseline_label, cfg.sweep.labels = "clean", [label]
    run_campaign(cfg, run_dir)
    return _recs(run_dir)


def test_a_command_that_crashes_after_its_last_step_is_told_apart(compose: Any,
                                                                  run_dir: Path) -> None:
    """A command killed by a signal after it logged every step it was asked for (a teardown
    crash, as gloo's at interpreter exit) fails, and its error says so: signal and step count."""
    logs = "import os, signal, sys\nfor i in range(int(sys.argv[1])): print(f'step {i} time 2.0ms')\n"
    recs = _two_programs(compose, run_dir, logs, "aborts",
                         logs + "sys.stdout.flush(); os.kill(os.getpid(), signal.SIGABRT)",
                         "workload.time_limit_s=20")
    assert recs["clean/r0"]["status"] == "ok", recs["clean/r0"].get("error")
    bad = recs["aborts/r0"]
    assert (bad["status"], bad["failure_kind"]) == ("failed", "exit_code")
    assert bad["error"].startswith("the command was killed by signal SIGABRT after logging all 4 "
                                   "step lines it was asked for: it failed at teardown"), bad["error"]


def test_a_command_that_hangs_after_its_last_step_is_stopped_and_its_steps_kept(
        compose: Any, run_dir: Path) -> None:
    """A command that logs every step it was asked for and then does not exit (a trainer
    hanging at NCCL teardown) is stopped workload.exit_grace_s later, not at its time limit;
    its steps are kept and the record says what happened. Nothing it started is left."""
    logs = "import subprocess, sys, time\nfor i in range(int(sys.argv[1])): print(f'step {i} time 2.0ms', flush=True)\n"
    # the hang: a child of its own, and the command waiting for ever
    recs = _two_programs(compose, run_dir, logs, "hangs",
                         logs + "subprocess.Popen(['sleep', '301']); time.sleep(300)",
                         "workload.time_limit_s=60", "workload.exit_grace_s=1")
    clean, hung = recs["clean/r0"], recs["hangs/r0"]
    assert clean["status"] == "ok" and "teardown" not in clean, clean.get("error")
    assert hung["status"] == "ok", hung.get("error")
    assert hung["teardown"].startswith("the command had logged all 4 steps it was asked for and "
                                       "had not exited 1 s later (workload.exit_grace_s)")
    assert hung["teardown"] in hung["log_notes"]
    assert hung["command_returncode"] < 0 and hung["command_wall_s"] < 30  # not its 60 s time limit
    assert hung["measured_steps"] == clean["measured_steps"]
    md = (run_dir / "decisions.md").read_text()
    assert "## Teardown" in md and "`hangs`: 1 of 1 trial(s)" in md, md
    assert "`clean`: 0 of 1 trial(s)" in md and "so the hang is the other arms' own" in md
    left = subprocess.run(["pgrep", "-f", "sleep 301"], capture_output=True, text=True)
    assert left.stdout == "", left.stdout


def test_step_lines_count_each_step_once_as_the_log_grows(tmp_path: Path) -> None:
    """What the exit grace waits for: the steps asked, read as the log grows (a line cut in
    two between reads counts once it is whole), a step printed by several ranks once; in the
    trainer's own log file, only this run's lines."""
    from types import SimpleNamespace

    from orchestrator.core.logparse import parse_steps
    from orchestrator.worker.teardown import StepLines

    log = tmp_path / "command.log"
    trainer = SimpleNamespace(parse=lambda lines: parse_steps(lines))
    watch = StepLines(trainer, log, 3)
    assert not watch()  # no log yet
    log.write_text("starting\nstep 1 time 2.0ms\nstep 1 time 2.1ms\nstep 2 ti")
    assert not watch() and watch.steps == 1  # rank 1's copy of step 1 and a half line
    with log.open("a") as f:
        f.write("me 2.0ms\nstep 2 time 2.2ms\n")
    assert not watch() and watch.steps == 2
    with log.open("a") as f:
        f.write("step 3 time 2.0ms\n")
    assert watch() and watch.steps == 3
    # the trainer's own log file may hold an earlier run: never counted
    mine = StepLines(trainer, log, 3, own_file=True)
    assert not mine() and mine.steps == 0
    log.write_text("step 1 time 2.0ms\n")  # this run rewrites it: read from its start
    assert not mine() and mine.steps == 1
    with log.open("a") as f:
        f.write("step 2 time 2.0ms\n")
    assert not mine() and mine.steps == 2
    new = tmp_path / "new.log"  # replaced (a rotating handler): a new file, from its start
    new.write_text("junk line\n" * 20 + "step 1 time 2.0ms\n")
    new.replace(log)
    assert not mine() and mine.steps == 1


def test_exit_grace_is_checked(compose: Any) -> None:
    with pytest.raises(ConfigError, match=r"workload\.exit_grace_s: must be > 0, got 0\.0; set workload\.exit_grace_s to a number in \(0, "):
        compose([*CMD, "+sweep=example_delay", "workload.exit_grace_s=0"])


def test_a_missing_program_or_cwd_is_refused_before_any_work(compose: Any) -> None:
    with pytest.raises(ConfigError, match=r"workload\.command: /no/such/trainer does not exist"):
        compose([*CMD, "+sweep=example_delay", "workload.command='/no/such/trainer --steps {steps}'"])
    with pytest.raises(ConfigError, match=r"workload\.command: 'no-such-trainer' is not on PATH"):
        compose([*CMD, "+sweep=example_delay", "workload.command='no-such-trainer {steps}'"])
    with pytest.raises(ConfigError, match=r"workload\.cwd: /no/such/dir is not a directory"):
        compose([*CMD, "+sweep=example_delay", "workload.cwd=/no/such/dir"])


def test_a_command_that_cannot_start_is_a_status(compose: Any, run_dir: Path) -> None:
    # the program comes from a param (known per arm only), so the pre-flight cannot check it
    cfg = compose([*CMD, "+sweep=example_delay", "protocol.repeats=1",
                   "+workload.params.prog=/no/such/trainer",
                   "workload.command='{prog} --steps {steps}'"])
    spec = make_specs(cfg, run_dir, resolve_arms(cfg),
                      plan(["a0"], ["s32"], 1, reverse_every_other_round=False))[0]
    rec = run_trial(spec)
    assert rec["status"] == "failed" and rec["failure_kind"] == "cannot_start"
    assert rec["error"].startswith("cannot start the command: FileNotFoundError")
    assert json.loads((run_dir / "trials" / spec.trial_id / "trial.json").read_text())["status"] == "failed"


def test_loss_trajectory_gate(compose: Any) -> None:
    cfg = compose(["workload=command_example", "+sweep=example_delay"])
    arms = [Arm("a0", "base", 0, True), Arm("a1", "same", 1, False), Arm("a2", "lr", 2, False)]
    trials = pd.DataFrame([
        {"trial_id": t, "arm_id": a, "bucket": "s32", "round": 0, "status": "ok"}
        for t, a in (("t0", "a0"), ("t1", "a1"), ("t2", "a2"))
    ])
    losses = {"t0": [4.0, 3.5, 3.0], "t1": [4.0, 3.5, 3.01], "t2": [4.0, 3.2, 2.5]}
    steps = pd.DataFrame([{"trial_id": t, "step": i, "loss": v}
                          for t, vals in losses.items() for i, v in enumerate(vals)])
    gates = loss_trajectory_gates(cfg, trials, steps, arms)
    assert gates["a1"][0].status == "pass"  # 0.33 % < loss_rtol 1 %
    assert gates["a2"][0].status == "fail"
    assert "1.67e-01 over 3 logged steps (at s32 round 0 step 2) exceeds workload.loss_rtol=0.01" in gates["a2"][0].detail
    assert loss_trajectory_gates(cfg, trials, steps.assign(loss=float("nan")), arms) == {}


def test_loss_trajectory_gate_non_finite_and_missing_losses(compose: Any) -> None:
    """steps.csv cannot tell a logged nan from no loss: the trial's nonfinite_loss_steps can."""
    cfg = compose(["workload=command_example", "+sweep=example_delay"])
    arms = [Arm("a0", "base", 0, True), Arm("a1", "nan", 1, False), Arm("a2", "silent", 2, False),
            Arm("a3", "inf", 3, False)]
    trials = pd.DataFrame([
        {"trial_id": t, "arm_id": a, "bucket": "s32", "round": 0, "status": "ok",
         "nonfinite_loss_steps": nf}
        for t, a, nf in (("t0", "a0", []), ("t1", "a1", [2]), ("t2", "a2", []), ("t3", "a3", [1]))
    ])
    nan = float("nan")
    losses = {"t0": [4.0, 3.5, 3.0], "t1": [4.0, 3.5, nan], "t2": [nan, nan, nan],
              "t3": [4.0, float("inf"), 3.0]}
    steps = pd.DataFrame([{"trial_id": t, "step": i, "loss": v}
                          for t, vals in losses.items() for i, v in enumerate(vals)])
    gates = loss_trajectory_gates(cfg, trials, steps, arms)
    assert gates["a1"][0].status == "fail"
    assert gates["a1"][0].detail == ("non-finite loss nan at s32 round 0 step 2 where the "
                                     "baseline's is 3")
    assert gates["a3"][0].status == "fail" and "loss inf at s32 round 0 step 1" in gates["a3"][0].detail
    assert gates["a2"][0].status == "error"
    assert "the baseline logs losses but the variant logs none (s32 round 0)" in gates["a2"][0].detail
    # the baseline diverging too is no failure of the variant at that step
    both = trials.assign(nonfinite_loss_steps=[[2], [2], [], [1]])
    gates = loss_trajectory_gates(cfg, both, steps.assign(loss=[4.0, 3.5, nan] + losses["t1"]
                                                          + losses["t2"] + losses["t3"]), arms)
    assert gates["a1"][0].status == "pass" and "over 2 logged steps" in gates["a1"][0].detail


def test_nan_loss_in_a_variant_is_rejected_naming_the_step(compose: Any, run_dir: Path) -> None:
    """The example trainer's loss turns NaN at step 3 in the variant: a reject naming the step,
    whatever its speed."""
    cfg = compose([*CMD, "+sweep=example_delay", "protocol.repeats=1",
                   ("workload.command='{python} recipes/examples/train_example.py --steps {steps} "
                    "--seq-len {seq_len} --batch-size {micro_batch} --nan-at-step {nan_at_step}'"),
                   "+workload.params.nan_at_step=-1", "sweep.variable=workload.params.nan_at_step",
                   "sweep.baseline=-1", "sweep.values=[3]", "sweep.labels=[nan-at-3]",
                   "sweep.baseline_label=finite"])
    result = run_campaign(cfg, run_dir)
    recs = _recs(run_dir)
    assert recs["finite/r0"]["status"] == recs["nan-at-3/r0"]["status"] == "ok"
    assert recs["nan-at-3/r0"]["nonfinite_loss_steps"] == [3]
    (v,) = result.verdicts
    assert v.verdict == "reject" and not v.timing_based
    assert any("loss trajectory gate failed: non-finite loss nan at s32 round 0 step 3 where the "
               "baseline's is " in r for r in v.reasons), v.reasons


def test_env_switch_reaches_the_trial_process(compose: Any, run_dir: Path) -> None:
    """env.OMP_NUM_THREADS is set in each fresh trial process before torch starts."""
    cfg = compose(["workload=gpt_test", "protocol=quick", "launcher=local", "+sweep=omp_threads",
                   "sweep.buckets=[s32]", "protocol.repeats=1", "sweep.baseline='2'",
                   "sweep.values=['1']"])
    run_campaign(cfg, run_dir)
    recs = {r["arm_label"]: r for r in (json.loads(p.read_text())
                                        for p in run_dir.glob("trials/*/trial.json"))}
    assert recs["2"]["env"] == {"OMP_NUM_THREADS": "2"} and recs["2"]["torch_threads"] == 2
    assert recs["1"]["env"] == {"OMP_NUM_THREADS": "1"} and recs["1"]["torch_threads"] == 1
    # environment.json is read in one trial; every arm's switch is recorded beside it
    report = json.loads((run_dir / "environment.json").read_text())
    assert report["env_switches_by_arm"] == {"2": {"OMP_NUM_THREADS": "2"},
                                             "1": {"OMP_NUM_THREADS": "1"}}
    assert report["source_arm"] in ("1", "2") and "env_switches_by_arm" in report["env_switches_note"]
    md = (run_dir / "decisions.md").read_text()
    assert "environment switches per arm (`env_switches_by_arm` in environment.json): " \
           "`2`: OMP_NUM_THREADS=2; `1`: OMP_NUM_THREADS=1" in md


def test_command_workload_cwd_env_log_file_pattern_and_skip(compose: Any, run_dir: Path) -> None:
    """The example trainer run from its trial directory (workload.cwd), a templated
    workload.env value and the swept env.OMP_NUM_THREADS reaching it, step lines read from
    workload.log.file in a format only the custom pattern reads, and skip_steps."""
    from orchestrator.campaign.validate import validate
    from orchestrator.core.logparse import LogParseError, parse_steps

    script = Path(__file__).resolve().parents[2] / "recipes" / "examples" / "train_example.py"
    cfg = compose([*CMD, "+sweep=omp_threads", "protocol.repeats=1", "protocol.warmup_steps=1",
                   "protocol.measured_steps=4", "workload.log.skip_steps=2",
                   "workload.cwd='{trial_dir}'", "workload.log.file=steps.log",
                   "+workload.env.EXAMPLE_RUN_NAME='{bucket}-seed{seed}'"])
    cfg.workload.params["script"] = str(script)
    cfg.workload.command = ("{python} {script} --steps {steps} --seq-len {seq_len} --batch-size "
                            "{micro_batch} --threads 0 --log-format custom --log-file steps.log")
    cfg.workload.log.pattern = r"\[it (?P<step>\d+)\] (?P<step_time_ms>[\d.]+) ms/it loss=(?P<loss>\S+)"
    validate(cfg)
    run_campaign(cfg, run_dir)
    recs = _recs(run_dir)
    assert {r["status"] for r in recs.values()} == {"ok"}, {k: r.get("error") for k, r in recs.items()}
    for label, threads in (("2", 2), ("1", 1)):
        rec = recs[f"{label}/r0"]
        tdir = run_dir / "trials" / rec["trial_id"]
        assert rec["env"] == {"OMP_NUM_THREADS": label}
        assert rec["command_env"] == {"EXAMPLE_RUN_NAME": "s32-seed0"}
        out = (tdir / "command.log").read_text()
        assert f"on {threads} thread(s), run s32-seed0" in out and "[it " not in out
        log_lines = (tdir / "steps.log").read_text().splitlines()  # written in the cwd
        with pytest.raises(LogParseError, match="no step lines matched"):
            parse_steps(log_lines)  # only the custom pattern reads this format
        steps = pd.read_csv(tdir / "steps.csv")
        assert list(steps["step"]) == list(range(5))
        assert list(steps["phase"]) == ["warmup"] * 2 + ["measured"] * 3
        assert steps["loss"].notna().all() and rec["measured_steps"] == 3
        assert rec["tokens_source"] == "bucket shape" and rec["tokens_per_step"] == 32 * 4


def _nanogpt_like(ms: float, mfu: float) -> str:
    """A stand-in trainer that logs like nanoGPT: its own mfu, -100 % for the first two iters."""
    return ("for i in range(6):\n"
            f"    m = -100.0 if i < 2 else {mfu}\n"
            f"    print(f'iter {{i}}: loss 1.0, time {ms:.2f}ms, mfu {{m:.2f}}%')")


def test_trainer_reported_mfu_and_declared_flops_give_both_figures(compose: Any, run_dir: Path) -> None:
    """The trainer's own MFU (unknown peak) lands in trial.json and decisions.md labelled as its
    claim; with workload.flops_per_step our MFU is computed against the named peak."""
    cfg = compose([*CMD, "+sweep=example_delay", "protocol.repeats=1", "hardware=h100",
                   "workload.command='{python} -c {code}'", "+workload.params.code=x",
                   "workload.flops_per_step=1.34e8", "sweep.variable=workload.params.code",
                   "sweep.baseline=a", "sweep.values=[b]"])
    cfg.sweep.baseline, cfg.sweep.values = _nanogpt_like(2.0, 40.0), [_nanogpt_like(4.0, 20.0)]
    cfg.sweep.baseline_label, cfg.sweep.labels = "fast", ["slow"]
    run_campaign(cfg, run_dir)
    recs = _recs(run_dir)
    fast, slow = recs["fast/r0"], recs["slow/r0"]
    assert fast["status"] == slow["status"] == "ok", (fast.get("error"), slow.get("error"))
    # quick protocol: iter 0 is the warm-up (skipped by count), iters 1..5 are measured:
    # -100 % (left out), then 40 % four times
    assert fast["trainer_reported_mfu_median"] == pytest.approx(0.40)
    assert fast["trainer_reported_mfu_left_out"] == 1 and fast["trainer_reported_mfu_steps"] == 4
    assert "its peak is unknown to us" in fast["trainer_reported_mfu_label"]
    assert slow["trainer_reported_mfu_median"] == pytest.approx(0.20)
    # ours: 1.34e8 FLOP / (0.002 s x 67 TFLOP/s, H100 fp32 datasheet) = 0.1 %; 0.05 % at 4 ms
    assert fast["useful_flops_per_step"] == 1.34e8 and fast["flops"]["useful_per_step"] == 1.34e8
    h100 = {u["peak"]: u for u in fast["utilization"]}["h100"]
    assert h100["peak_tflops"] == 67.0 and h100["mfu"] == pytest.approx(1e-3)
    assert {u["peak"]: u for u in slow["utilization"]}["h100"]["mfu"] == pytest.approx(5e-4)
    md = (run_dir / "decisions.md").read_text()
    assert ("- **trainer-reported mfu (the trainer's own claim; its peak is unknown to us)**: "
            "`fast` 40.00%, `slow` 20.00%") in md
    assert "2 negative step value(s) left out" in md
    assert "MFU vs h100 (datasheet)" in md and "| s32 | fast | 0.134 | — | 0.1% |" in md
    util = json.loads((run_dir / "utilization.json").read_text())
    assert {r["label"]: r["mfu"]["h100"] for r in util["rows"]} == {
        "fast": pytest.approx(1e-3), "slow": pytest.approx(5e-4)}


def test_trainer_reported_mfu_alone_says_how_to_get_ours(compose: Any, run_dir: Path) -> None:
    cfg = compose([*CMD, "+sweep=example_delay", "protocol.repeats=1",
                   "workload.command='{python} -c {code}'", "+workload.params.code=x",
                   "sweep.variable=workload.params.code", "sweep.baseline=a", "sweep.values=[b]"])
    cfg.sweep.baseline, cfg.sweep.values = _nanogpt_like(2.0, 0.0), [_nanogpt_like(4.0, 0.0)]
    run_campaign(cfg, run_dir)
    rec = next(iter(_recs(run_dir).values()))
    assert rec["trainer_reported_mfu_median"] == 0.0 and rec["useful_flops_per_step"] is None
    md = (run_dir / "decisions.md").read_text()
    assert "trainer-reported mfu (the trainer's own claim; its peak is unknown to us)**: " in md
    assert "no MFU of ours: declare workload.flops_per_step" in md


@pytest.mark.parametrize(("overrides", "match"), [
    (["workload.flops_per_step=-1"], r"^workload\.flops_per_step: must be > 0"),
    (["workload.flops_per_step=1e9",
      "workload.buckets=[{name:a,seq_len:8,micro_batch:1},{name:b,seq_len:16,micro_batch:1}]"],
     (r"^workload\.flops_per_step: is one figure for every bucket, but 2 buckets are selected "
      r"\(a, b\).*sweep\.buckets=\[a\]")),
])
def test_declared_flops_are_checked(compose: Any, overrides: list[str], match: str) -> None:
    from orchestrator.core.errors import ConfigError

    with pytest.raises(ConfigError, match=match):
        compose([*CMD, "+sweep=example_delay", *overrides])
    if len(overrides) == 2:  # one bucket selected: fine
        cfg = compose([*CMD, "+sweep=example_delay", *overrides, "sweep.buckets=[b]"])
        assert cfg.workload.flops_per_step == 1e9


# a stand-in for nanoGPT's train.py: its batch size is its own flag (a param), its sequence
# length the bucket's; it logs like nanoGPT and sleeps in proportion to its batch
NANOGPT = ("import sys\n"
           "args = dict(a[2:].split('=') for a in sys.argv[1:])\n"
           "import time\n"
           "for i in range(int(args['max_iters'])):\n"
           "    time.sleep(0.0005 * int(args['batch_size']))\n"
           "    print(f'iter {i}: loss 2.0, time {0.5 * int(args[\"batch_size\"]):.2f}ms, mfu 1.00%')")
NANO = [*CMD, "+sweep=example_delay", "protocol.repeats=1",
        ("workload.command='{python} -c {code} --batch_size={batch_size} --block_size={seq_len} "
         "--max_iters={steps} --compile={compile}'"),
        "+workload.params.code=x", "+workload.params.batch_size=4", "+workload.params.compile=no"]


def _nano(compose: Any, *more: str) -> Any:
    cfg = compose([*NANO, *more])
    cfg.workload.params["code"] = NANOGPT
    return cfg


@pytest.mark.parametrize(("overrides", "match"), [
    # undeclared: a param named like a batch size is refused as the work per step
    (["sweep.variable=workload.params.batch_size", "sweep.baseline=4", "sweep.values=[8]",
      "sweep.labels=[bs8]", "sweep.baseline_label=bs4"],
     (r"^sweep\.variable: 'workload\.params\.batch_size' is frozen: by its name it sets the "
      r"work per step .*workload\.tokens_per_step=")),
    # declared from the params: arms that differ in it are refused, with both figures
    (["workload.tokens_per_step='{batch_size} * {seq_len}'",
      "sweep.variable=workload.params.batch_size", "sweep.baseline=4", "sweep.values=[8]",
      "sweep.labels=[bs8]", "sweep.baseline_label=bs4"],
     (r"^sweep\.variable: 'workload\.params\.batch_size' is frozen: it changes the work per "
      r"step \(workload\.tokens_per_step: 128 tokens in 'bs4', 256 in 'bs8', bucket s32\)")),
    # a bucket's shape: frozen, and said so (not "does not exist")
    (["sweep.variable=workload.buckets.0.micro_batch", "sweep.baseline=4", "sweep.values=[8]"],
     (r"^sweep\.variable: 'workload\.buckets\.0\.micro_batch' is frozen by invariants "
      r"\(workload\.buckets: the shapes being measured; a shape changes the work per step\)")),
    (["workload.tokens_per_step='{batch_size} * {block}'"],
     r"^workload\.tokens_per_step: '\{batch_size\} \* \{block\}': unknown placeholder \{block\}"),
    (["workload.tokens_per_step=0"], r"^workload\.tokens_per_step: the figure is 0, not a whole"),
])
def test_a_sweep_that_changes_the_work_per_step_is_refused(
        compose: Any, overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _nano(compose, *overrides)


def test_work_per_step_stated_from_params_or_unknown(compose: Any, run_dir: Path) -> None:
    """A nanoGPT-style command (batch size a param, not {micro_batch}): tokens per step come
    from the stated product of params, never from the bucket shape it does not take; unstated,
    tokens/s is not given, and said so. decisions.md prints no placeholder (nan, None, xNone)."""
    sweep = ["sweep.variable=workload.params.compile", "sweep.baseline=no", "sweep.values=[yes]",
             "sweep.labels=[compiled]", "sweep.baseline_label=eager"]
    cfg = _nano(compose, *sweep, "workload.tokens_per_step='{batch_size} * {seq_len}'",
                "workload.params.batch_size=2")
    run_campaign(cfg, run_dir)
    recs = _recs(run_dir)
    base = recs["eager/r0"]
    assert base["status"] == "ok", base.get("error")
    # batch 2 (the param) x 32 tokens, not the bucket's micro_batch of 4
    assert base["tokens_per_step"] == 2 * 32 and base["tokens_per_s"] > 0
    assert base["tokens_source"] == "config: {batch_size} * {seq_len} = 2 x 32"
    md = (run_dir / "decisions.md").read_text()
    assert not re.findall(r"\bnan\b|\bNone\b|xNone", md), re.findall(r".*(?:nan|None).*", md)
    assert "- environment: external command (its device and torch are not probed), python" in md

    cfg = _nano(compose, *sweep, "workload.params.batch_size=2")
    other = run_dir.parent / "unstated"
    run_campaign(cfg, other)
    rec = _recs(other)["eager/r0"]
    assert rec["tokens_per_step"] is None and rec["tokens_per_s"] is None
    assert rec["tokens_source"].startswith("unknown: the command does not take {micro_batch}")
    md = (other / "decisions.md").read_text()
    assert "tokens/s not given: tokens per step unknown: the command does not take " \
           "{micro_batch}" in md
    assert not re.findall(r"\bnan\b|\bNone\b|xNone", md)


def test_logged_work_that_differs_makes_the_verdict_invalid() -> None:
    """Tokens per step a trainer logs differ between the arms: the comparison cannot be made
    (the pre-flight could not know), named with both figures."""
    from orchestrator.analysis.loss_gate import work_gates

    arms = [Arm("a0", "bs4", 4, True), Arm("a1", "bs8", 8, False), Arm("a2", "same", 4, False)]
    trials = pd.DataFrame({"trial_id": ["t0", "t1", "t2"], "arm_id": ["a0", "a1", "a2"],
                           "bucket": ["s32"] * 3, "status": ["ok"] * 3,
                           "tokens_per_step": [128, 256, 128], "tokens_source": ["log"] * 3})
    gates = work_gates(trials, arms)
    assert set(gates) == {"a1"} and gates["a1"].status == "error"
    assert gates["a1"].detail.startswith("at s32 the variant's steps did 256 tokens, the "
                                         "baseline's 128 (tokens per step from log)")


def test_a_failed_baseline_stops_its_rounds_variants_and_logs_are_named(
        compose: Any, run_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The baseline's trial fails (a bare assert): in round 0, where it runs first, the
    variant is not run (nothing to compare it with) and says so; in round 1, reversed, the
    variant ran before it (protocol.order=reversed pins those positions; under the balanced
    orders a variant is skipped wherever it follows its round's failed baseline). The console
    line and decisions.md name the command's log."""
    import logging

    cfg = compose([*CMD, "+sweep=example_delay", "protocol.repeats=2", "protocol.max_rounds=2",
                   "protocol.order=reversed",
                   "protocol.aa_arm=false", "workload.command='{python} -c {code}'",
                   "+workload.params.code=x", "sweep.variable=workload.params.code",
                   "sweep.baseline=ok", "sweep.values=[bad]", "sweep.labels=null",
                   "sweep.baseline_label=null", "protocol.correctness.mode=off"])
    cfg.sweep.baseline, cfg.sweep.values = "print('step 0 time 5ms')\nassert 1 == 2", [HEALTHY]
    cfg.sweep.baseline_label, cfg.sweep.labels = "broken", ["healthy"]
    with caplog.at_level(logging.INFO, logger="orchestrator.campaign.run"):
        result = run_campaign(cfg, run_dir)
    recs = _recs(run_dir)
    assert recs["broken/r0"]["status"] == recs["broken/r1"]["status"] == "failed"
    skipped = recs["healthy/r0"]
    assert skipped["status"] == "skipped" and skipped["error"].startswith(
        "not run: the baseline's trial of round 0 at s32 (r000-s32-a0) ended failed")
    assert not (run_dir / "trials" / skipped["trial_id"] / "command.log").exists()
    assert recs["healthy/r1"]["status"] == "ok"  # it ran before its round's baseline
    (v,) = result.verdicts
    assert v.verdict == "invalid" and "the baseline produced no measurement" in v.reasons[0]
    logged = [r.getMessage() for r in caplog.records]
    line = next(m for m in logged if "s32 broken r0: failed" in m)
    log = run_dir / "trials" / "r000-s32-a0" / "command.log"
    assert f"(log: {log})" in line and "AssertionError" in log.read_text()
    assert any("that round's variants are not run" in m for m in logged)
    md = (run_dir / "decisions.md").read_text()
    assert "  full log: `trials/r000-s32-a0/command.log`" in md
    assert "**skipped**: not run: the baseline's trial of round 0" in md


def test_a_bare_assert_says_where_it_was_raised() -> None:
    from orchestrator.worker.trial import one_line

    def check(x: int) -> None:
        if x != 2:  # what a bare `assert x == 2` raises (pytest rewrites the asserts here)
            raise AssertionError

    try:
        check(1)
    except AssertionError as exc:
        got = one_line(exc)
    assert got.startswith("AssertionError at test_external.py:") and got.endswith(
        "in check: raise AssertionError"), got
    assert one_line(ValueError("bad value\nmore")) == "ValueError: bad value"
