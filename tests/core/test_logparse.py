from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.core.logparse import (
    MAX_LINE_CHARS,
    TRAINER_MFU_LABEL,
    LogParseError,
    MalformedStepLine,
    StepRecord,
    long_lines_note,
    parse_steps,
    reported_mfu,
)


def test_builtin_formats() -> None:
    log = [
        "starting run, 4 gpus",
        "iter 10: loss 4.2000, time 123.45ms, mfu 30.1%",
        "step 11 | loss 4.1 | lr 3e-4 | time 0.125s | tokens 8192",
        '{"step": 12, "step_time_ms": 120.0, "loss": 4.0, "tokens": 8192}',
        "step=13 loss=3.9 step_time_s=0.119 samples=16",
        "garbage line with time 5ms but no step",
    ]
    recs = parse_steps(log)
    assert [r.step for r in recs] == [10, 11, 12, 13]
    assert [round(r.step_time_s, 5) for r in recs] == [0.12345, 0.125, 0.12, 0.119]
    assert [r.loss for r in recs] == [4.2, 4.1, 4.0, 3.9]
    assert recs[1].tokens == 8192 and recs[2].tokens == 8192 and recs[3].samples == 16


@pytest.mark.parametrize(("lines", "line_no", "field"), [
    (["step=0 time=12.5ms", "step=1 time=12.5"], 2, "time"),
    (["warming up", "step 2 time 13"], 2, "time"),
    (["step 2 | loss 3.1 | dt 13 | tokens 8"], 1, "dt"),
    (['{"step": 1, "time": 30}'], 1, "time"),
])
def test_time_without_unit_is_refused_not_guessed_or_dropped(lines: list[str], line_no: int,
                                                             field: str) -> None:
    with pytest.raises(MalformedStepLine, match=rf"^line {line_no}: field '{field}': .*no unit; "
                       r"log the unit .* or pass a pattern") as e:
        parse_steps(lines)
    assert (e.value.line_no, e.value.field) == (line_no, field)


def test_a_time_that_is_not_a_step_time_is_left_alone() -> None:
    recs = parse_steps(["step 3 time 13:02:11 started", "step 3 | time 4.0ms"])
    assert [(r.step, r.step_time_s) for r in recs] == [(3, 0.004)]


def test_non_finite_losses_parse_as_floats() -> None:
    recs = parse_steps([
        "step 1 | loss nan | time 3ms",
        "step=2 loss=inf step_time_ms=3",
        '{"step": 3, "loss": NaN, "step_time_ms": 3}',
        "iter 4: loss -inf, time 3.0ms",
        '{"step": 5, "loss": "nan", "step_time_ms": 3}',
        "step 6 | loss info | time 3ms",  # not a number: no loss
    ])
    assert [str(r.loss) for r in recs] == ["nan", "inf", "nan", "-inf", "nan", "None"]


@pytest.mark.parametrize(("line", "field", "why"), [
    ('{"step": 1, "step_time_ms": "n/a"}', "step_time_ms", "'n/a' is not a number"),
    ('{"step": 1, "step_time_ms": null}', "step_time_ms", "null is not a number"),
    ('{"step": 1, "step_time_s": [1]}', "step_time_s", r"\[1\] is not a number"),
    ('{"step": "x", "step_time_ms": 5}', "step", "'x' is not an integer"),
    ('{"step": 1.5, "step_time_ms": 5}', "step", "1.5 is not an integer"),
    ('{"step": 1, "step_time_ms": 5, "loss": "high"}', "loss", "'high' is not a number"),
    ('{"step": 1, "step_time_ms": 5, "tokens": "many"}', "tokens", "'many' is not an integer"),
])
def test_malformed_values_name_the_line_and_field(line: str, field: str, why: str) -> None:
    with pytest.raises(MalformedStepLine, match=rf"^line 2: field '{field}': {why}; fix the") as e:
        parse_steps(['{"step": 0, "step_time_ms": 5}', line])
    assert (e.value.line_no, e.value.field) == (2, field)


def test_custom_pattern_values_are_checked() -> None:
    rx = r"it (?P<step>\S+) t (?P<time>\S+) (?P<unit>\w+)"
    with pytest.raises(MalformedStepLine, match=r"line 1: field 'unit': 'us' is not ms or s; make "):
        parse_steps(["it 1 t 5 us"], pattern=rx)
    with pytest.raises(MalformedStepLine, match=r"line 1: field 'time': 'n/a' is not a number"):
        parse_steps(["it 1 t n/a ms"], pattern=rx)
    with pytest.raises(MalformedStepLine, match=r"line 1: field 'step': 'one' is not an integer"):
        parse_steps(["it one t 5 ms"], pattern=rx)


def test_custom_pattern() -> None:
    recs = parse_steps(["[it 5] took 250 ms, l=2.5"],
                       pattern=r"\[it (?P<step>\d+)\] took (?P<time>[\d.]+) (?P<unit>ms), l=(?P<loss>[\d.]+)")
    assert recs[0].step == 5 and recs[0].step_time_s == 0.25 and recs[0].loss == 2.5


@pytest.mark.parametrize(("pattern", "match"), [
    (r"(?P<step>\d+", "invalid regex"),
    (r"(?P<x>\d+)", "needs a named group"),
    (r"(?P<step>\d+)", "needs a time group"),
    (r"(?P<step>\d+) (?P<time>\d+)", "needs a .*unit"),
])
def test_bad_patterns(pattern: str, match: str) -> None:
    with pytest.raises(LogParseError, match=match):
        parse_steps(["1 2"], pattern=pattern)


def test_a_logged_mfu_is_read_as_the_trainers_own_claim() -> None:
    recs = parse_steps([
        "iter 0: loss 10.9, time 2500.00ms, mfu -100.00%",  # nanoGPT before its 5th iter
        "iter 1: loss 9.8, time 110.00ms, mfu 30.00%",
        "step=2 step_time_ms=100 mfu=31.5%",
        "step=3 step_time_ms=100 mfu_pct=29",
        '{"step": 4, "step_time_ms": 100, "mfu": 0.305}',
        '{"step": 5, "step_time_ms": 100, "train/mfu": "32%"}',
        "step 6 | time 100ms | mfu: 0.33",
        "step 7 | time 100ms",
    ])
    assert [r.reported_mfu for r in recs] == [
        pytest.approx(-1.0), pytest.approx(0.30), pytest.approx(0.315), pytest.approx(0.29),
        pytest.approx(0.305), pytest.approx(0.32), pytest.approx(0.33), None]
    # the median over the steps given, negative values (a not-yet-measured sentinel) left out:
    # 0.30, 0.315, 0.29, 0.305, 0.32, 0.33 -> (0.305 + 0.315) / 2 = 0.31
    s = reported_mfu(recs)
    assert s["trainer_reported_mfu_median"] == pytest.approx(0.31)
    assert (s["trainer_reported_mfu_steps"], s["trainer_reported_mfu_left_out"]) == (6, 1)
    assert s["trainer_reported_mfu_label"] == TRAINER_MFU_LABEL
    assert "its peak is unknown to us" in TRAINER_MFU_LABEL
    assert reported_mfu(recs[7:]) == {}  # nothing logged: nothing claimed


def test_a_logged_mfu_that_is_not_a_number_names_the_field() -> None:
    with pytest.raises(MalformedStepLine, match=r"^line 1: field 'mfu': 'high' is not a number"):
        parse_steps(['{"step": 1, "step_time_ms": 5, "mfu": "high"}'])


def test_custom_pattern_mfu_groups() -> None:
    rx = r"\[it (?P<step>\d+)\] (?P<step_time_ms>[\d.]+) ms(?: mfu (?P<mfu_pct>[\d.]+)%)?"
    recs = parse_steps(["[it 1] 250 ms mfu 41.5%", "[it 2] 250 ms"], pattern=rx)
    assert recs[0].reported_mfu == pytest.approx(0.415) and recs[1].reported_mfu is None
    recs = parse_steps(["[it 1] 250 ms u=0.4"],
                       pattern=r"\[it (?P<step>\d+)\] (?P<step_time_ms>[\d.]+) ms u=(?P<mfu>[\d.]+)")
    assert recs[0].reported_mfu == pytest.approx(0.4)


def test_pairs_and_steps_read_as_before_the_linear_rewrite() -> None:
    """Where a key=value pair ends inside a run of key characters the next key starts there;
    digits, "/" or "." cannot start a key; the first step with a time after it wins, and a
    newline (inside one line given to the parser) ends what counts as after."""
    assert parse_steps(["t=3ms/step=4 time_ms=5"]) == [StepRecord(4, 0.005)]
    assert parse_steps(["a=1.step=4 x9=2 7time_ms=5"]) == [StepRecord(4, 0.005)]
    assert parse_steps(["step 1 step 2 time 3ms"]) == [StepRecord(1, 0.003)]
    assert parse_steps(["step 1\nstep 2 time 3ms"]) == [StepRecord(2, 0.003)]
    with pytest.raises(MalformedStepLine, match="field 'time': the step time has no unit"):
        parse_steps(["step 1 | step 2 | time 30"])


def test_a_line_over_the_cap_is_not_a_step_line_and_is_said_once() -> None:
    """The cap is 64 KiB (a step line is well under 1 KiB); lines over it are skipped and
    counted, said once: in parse_steps' error when nothing else matched, and as the note a
    worker adds to the trial record's log_notes."""
    assert MAX_LINE_CHARS == 64 * 1024
    blob = "QUJD" * (MAX_LINE_CHARS // 4 + 1)  # a base64 blob just over the cap
    step_over = "step 3 time 5ms " + "." * MAX_LINE_CHARS
    recs = parse_steps(["step 1 time 5ms", blob, "step 2 time 5ms", step_over, blob[:MAX_LINE_CHARS]])
    assert [r.step for r in recs] == [1, 2]
    with pytest.raises(LogParseError) as exc:
        parse_steps([blob, "starting", step_over])
    assert str(exc.value).count("longer than") == 1
    assert "no step lines matched any built-in step format (2 line(s) longer than 65536 " \
           "characters were not read as step lines)" in str(exc.value)
    assert long_lines_note(0) == []
    assert long_lines_note(2) == ["2 line(s) longer than 65536 characters were not read as step lines"]
    assert parse_steps([step_over], max_line_chars=None) == [StepRecord(3, 0.005)]


# a command that prints a 70 KiB blob after its step line 1, and after step 3 a 1 MiB line of
# progress dots in 4 KiB pieces, each flushed (each step a real 2 ms)
BLOB_TRAINER = """import sys, time
for i in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    time.sleep(0.002)
    print(f"step {i} time {(time.perf_counter() - t0) * 1e3:.3f}ms", flush=True)
    if i == 1:
        print("data:" + "QUJD" * 17500, flush=True)
    if i == 3:
        for _ in range(256):
            sys.stdout.write("." * 4096)
            sys.stdout.flush()
        print(flush=True)
"""
NOTE = "2 line(s) longer than 65536 characters were not read as step lines"


def test_a_long_line_in_a_command_log_is_skipped_and_noted_once(compose: Any, run_dir: Path,
                                                               tmp_path: Path) -> None:
    """One arm per process (orchestrator.worker.external): the trial is ok, its steps are the
    step lines, and its record says once that two lines were not read."""
    from orchestrator.spec.jobs import make_specs
    from orchestrator.spec.plan import plan
    from orchestrator.spec.sweep import resolve_arms
    from orchestrator.worker.trial import run_trial

    trainer = tmp_path / "trainer.py"
    trainer.write_text(BLOB_TRAINER)
    cfg = compose(["workload=command_example", "protocol=quick", "launcher=inline",
                   "+sweep=example_delay", "protocol.repeats=1",
                   f"+workload.params.trainer='{trainer}'",
                   "workload.command='{python} {trainer} {steps}'"])
    spec = make_specs(cfg, run_dir, resolve_arms(cfg),
                      plan(["a0"], ["s32"], 1, reverse_every_other_round=False))[0]
    rec = run_trial(spec)
    assert rec["status"] == "ok", rec.get("error")
    assert rec["steps_logged"] == rec["steps_asked"]
    assert [n for n in rec["log_notes"] if "longer than" in n] == [NOTE]


def test_a_long_line_in_an_alternated_arms_log_is_skipped_and_noted_once(tmp_path: Path) -> None:
    """Arms taking turns (orchestrator.worker.pairing.alternation), which read their logs line by line:
    each arm's record says it once too."""
    import json

    from omegaconf import OmegaConf

    from orchestrator.spec.config import BucketConfig
    from orchestrator.spec.jobs import PairedArm, TrialSpec
    from orchestrator.worker.pairing.steps import StepsPart, part as steps_part
    from orchestrator.worker.trial import run_trial
    from recipes.command.config import CommandWorkloadConfig

    trainer = tmp_path / "trainer.py"
    trainer.write_text(BLOB_TRAINER)
    c = OmegaConf.structured(CommandWorkloadConfig)
    c.name, c.command, c.time_limit_s = "blob", "{python} {trainer} {steps}", 60.0
    c.params = {"trainer": str(trainer)}
    c.buckets = [BucketConfig(name="b", seq_len=1, micro_batch=1)]
    workload: dict[str, Any] = OmegaConf.to_container(c)  # type: ignore[assignment]
    arms = [PairedArm(f"a{i}", f"arm{i}", i == 0, f"r0-a{i}", str(tmp_path / f"r0-a{i}"),
                      workload, env={}) for i in range(2)]
    spec = TrialSpec(trial_id="r0-a0", trial_dir=arms[0].trial_dir,
                     bucket={"name": "b", "seq_len": 1, "micro_batch": 1}, arm_id="a0",
                     arm_label="arm0", is_baseline=True, round=0, position=0, workload=workload,
                     device="cpu", warmup_steps=2, measured_steps=6,
                     paired=steps_part(arms, StepsPart(3, 1, "balanced", "t"), alternate=True))
    run_trial(spec)
    for a in arms:
        rec = json.loads((Path(a.trial_dir) / "trial.json").read_text())
        assert rec["status"] == "ok", rec.get("error")
        assert [n for n in rec["log_notes"] if "longer than" in n] == [NOTE]


def test_a_failed_records_log_tail_clips_a_long_line(tmp_path: Path) -> None:
    """A 1 MiB line in the last lines of a failed command's log is clipped in its record."""
    from orchestrator.worker.external import log_tail

    log = tmp_path / "command.log"
    log.write_text("step 1 time 2ms\n" + "x" * (1 << 20) + "\nTraceback: boom\n")
    tail = log_tail(log, str(tmp_path)).splitlines()
    assert tail[0] == "step 1 time 2ms" and tail[-1] == "Traceback: boom"
    assert tail[1] == "x" * 2000 + f"... ({(1 << 20) - 2000} more characters)"
