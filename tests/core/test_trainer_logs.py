"""Trainer logs as torchtitan and Megatron-LM print them: lines that average several steps.

The sample lines are written here after the trainers' own format strings (torchtitan's
``MetricsProcessor.log`` in torchtitan/components/metrics.py, with its ``Color`` codes and its
logging prefix; Megatron-LM's ``training_log`` in megatron/training/training.py), not copied
from their logs.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from orchestrator.cli.tools.summarize_steps import summarize
from orchestrator.core.logparse import (
    LogParseError,
    MalformedStepLine,
    MissingSetting,
    StepRecord,
    parse_steps,
    reported_mfu,
)
from orchestrator.tools import summarize_steps

# torchtitan.tools.utils.Color
RED, GREEN, BLUE, CYAN, MAGENTA, RESET = ("\033[31m", "\033[32m", "\033[34m", "\033[36m",
                                          "\033[35m", "\033[39m")
ORANGE, TURQUOISE = "\033[38;2;180;60;0m", "\033[38;2;54;234;195m"
TITAN_PREFIX = "[rank0]:[titan] 2025-06-01 10:00:00,123 - root - INFO - "


def titan(step: int, loss: float, tps: float, mfu: float | None = 30.41) -> str:
    """A line in the layout of torchtitan's metrics f-string (colours on)."""
    mfu_str = f"{mfu:.2f}%" if mfu is not None else "N/A"
    return (f"{TITAN_PREFIX}{RED}step: {step:2}  {GREEN}loss: {loss:8.5f}  "
            f"{ORANGE}grad_norm: {1.2345:7.4f}  {TURQUOISE}memory: {30.12:5.2f}GiB"
            f"({38.05:.2f}%)  {BLUE}tps: {round(tps):,}  {CYAN}tflops: {1234.5:,.2f}  "
            f"{MAGENTA}mfu: {mfu_str}{RESET}")


def titan_validation(step: int) -> str:
    return (f"{TITAN_PREFIX}\033[33mvalidate step: {step:2}  {GREEN}loss: {3.2:7.4f}  "
            f"{TURQUOISE}memory: {30.12:5.2f}GiB({38.05:.2f}%)  {BLUE}tps: {54321:,}{RESET}")


def megatron(iteration: int, ms: float, loss: float, total: int = 100, gbs: int = 64,
             skipped: int = 0) -> str:
    """A line in the layout of Megatron-LM's training_log (log_throughput on)."""
    return (f" [2025-06-01 10:00:00.123456] iteration {iteration:8d}/{total:8d} |"
            f" consumed samples: {iteration * gbs:12d} |"
            f" elapsed time per iteration (ms): {ms:.1f} |"
            f" throughput per GPU (TFLOP/s/GPU): {412.3:.1f} |"
            f" learning rate: {3e-4:.6E} |"
            f" global batch size: {gbs:5d} |"
            f" lm loss: {loss:.6E} |"
            f" loss scale: {1.0:.1f} |"
            f" grad norm: {0.873:.3f} |"
            f" number of skipped iterations: {skipped:3d} |"
            f" number of nan iterations: {0:3d} |")


# 8 devices, 4096 tokens of one step on each
WORLD, TOKENS = 8, 8 * 4096


def test_torchtitan_lines_with_colours_give_step_times_from_tps() -> None:
    log = ["[titan] 2025-06-01 09:59:00,000 - root - INFO - Training starts at step 1",
           titan(1, 12.25, 4096 / 16.0),  # 16 s: the first step, since the trainer started
           titan(10, 9.5, 4096 / 0.5),
           titan_validation(10),  # a validation line is not a step line
           titan(20, 8.125, 4096 / 0.4, mfu=None)]  # "mfu: N/A" (quantized training)
    recs = parse_steps(log, tokens_per_step=TOKENS, world_size=WORLD)
    assert [r.step for r in recs] == [1, 10, 20]
    # tps is per device: 4096 tokens a device per step over tps
    assert [round(r.step_time_s, 6) for r in recs] == [16.0, 0.5, 0.4]
    assert [r.steps for r in recs] == [1, 9, 10] and all(r.interval for r in recs)
    assert [r.loss for r in recs] == [12.25, 9.5, 8.125]
    assert [r.reported_mfu for r in recs] == [pytest.approx(0.3041), pytest.approx(0.3041), None]
    assert recs[0].tokens is None  # the record takes the workload's figure


def test_torchtitan_without_its_settings_names_the_key_to_set() -> None:
    line = titan(1, 12.0, 1000.0)
    with pytest.raises(MissingSetting, match=r"^line 2: .*tps.*set the tokens of one step on "
                       r"all devices \(workload\.tokens_per_step") as e:
        parse_steps(["hello", line], world_size=WORLD)
    assert e.value.key == "tokens_per_step" and isinstance(e.value, LogParseError)
    with pytest.raises(MissingSetting, match=r"workload\.world_size") as e:
        parse_steps([line], tokens_per_step=TOKENS)
    assert e.value.key == "world_size"
    # a validation line alone is no step line, and needs nothing; nor does a line of another
    # trainer with a tps but not torchtitan's fields
    for other in (titan_validation(10), "step: 10 | loss: 2.0 | tps: 1000"):
        with pytest.raises(LogParseError, match="no step lines matched"):
            parse_steps([other])


@pytest.mark.parametrize(("line", "field"), [
    (titan(3, 2.0, 100.0).replace("tps: 100", "tps: n/a"), "tps"),
    (titan(3, 2.0, 0.0), "tps"),  # no step time from 0 tokens/s
    (titan(3, 2.0, 100.0).replace("mfu: 30.41%", "mfu: lots%"), "mfu"),
])
def test_an_unreadable_torchtitan_line_is_refused_naming_it(line: str, field: str) -> None:
    with pytest.raises(MalformedStepLine, match=rf"^line 2: field '{field}'") as e:
        parse_steps([titan(1, 2.0, 100.0), line], tokens_per_step=TOKENS, world_size=WORLD)
    assert (e.value.line_no, e.value.field) == (2, field)


def test_megatron_lines_are_blocks_of_their_log_interval() -> None:
    log = ["building GPT model ...", megatron(10, 812.5, 9.123), megatron(20, 640.0, 7.5),
           megatron(30, 650.2, 6.25, skipped=1)]
    recs = parse_steps(log)
    assert [(r.step, r.steps) for r in recs] == [(10, 10), (20, 10), (30, 10)]
    assert [r.step_time_s for r in recs] == [0.8125, 0.64, 0.6502]
    assert [r.loss for r in recs] == [9.123, 7.5, 6.25]  # written as 9.123000E+00
    assert [r.samples for r in recs] == [64, 64, 64]  # the global batch size
    assert all(r.interval and r.reported_mfu is None for r in recs)


def test_megatron_first_iteration_line_and_a_resumed_log() -> None:
    # newer Megatron also logs its first iteration, then every log_interval iterations
    recs = parse_steps([megatron(1, 30000.0, 10.9), megatron(10, 3800.0, 9.0),
                        megatron(20, 500.0, 8.0)])
    assert [r.steps for r in recs] == [1, 9, 10]
    # resumed at iteration 1000: without the interval the first line would be 1010 steps
    resumed = [megatron(1010, 500.0, 3.0, total=2000), megatron(1020, 500.0, 3.0, total=2000)]
    assert [r.steps for r in parse_steps(resumed)] == [1010, 10]
    assert [r.steps for r in parse_steps(resumed, log_interval=10)] == [10, 10]
    first = [megatron(1001, 9000.0, 3.0, total=2000), megatron(1010, 500.0, 3.0, total=2000)]
    assert [r.steps for r in parse_steps(first, log_interval=10)] == [1, 9]


def test_repeated_lines_of_several_ranks_keep_their_block_size() -> None:
    recs = parse_steps([megatron(10, 800.0, 9.0), megatron(10, 800.0, 9.0),
                        megatron(20, 600.0, 8.0), megatron(20, 600.0, 8.0)])
    assert [(r.step, r.steps) for r in recs] == [(10, 10), (10, 10), (20, 10), (20, 10)]


@pytest.mark.parametrize(("bad", "field"), [
    (megatron(20, 600.0, 8.0).replace("(ms): 600.0", "(ms): n/a"),
     "elapsed time per iteration (ms)"),
    (megatron(20, 600.0, 8.0).replace(" elapsed time per iteration (ms): 600.0 |", ""),
     "elapsed time per iteration (ms)"),
    (megatron(20, 600.0, 8.0).replace("lm loss: 8.000000E+00", "lm loss: 8.0E+0x"), "lm loss"),
    (megatron(20, 600.0, 8.0).replace("global batch size:    64", "global batch size: 6.4"),
     "global batch size"),
])
def test_an_unreadable_megatron_line_is_refused_naming_it(bad: str, field: str) -> None:
    with pytest.raises(MalformedStepLine, match=rf"^line 2: field '{re.escape(field)}'") as e:
        parse_steps([megatron(10, 800.0, 9.0), bad])
    assert (e.value.line_no, e.value.field) == (2, field)


def test_other_iteration_lines_are_still_free_text() -> None:
    recs = parse_steps(["iteration 3/10 | loss 2.5 | time 5.0ms"])
    assert [(r.step, r.step_time_s, r.steps, r.interval) for r in recs] == [(3, 0.005, 1, False)]


def test_colour_codes_do_not_hide_the_other_formats() -> None:
    recs = parse_steps(["\033[32mstep 4 | loss 1.5 | time 12.0ms\033[0m"])
    assert [(r.step, r.step_time_s, r.loss) for r in recs] == [(4, 0.012, 1.5)]


def test_a_block_counts_as_its_steps_in_the_statistics() -> None:
    # one first iteration of 10 s, then a block of 9 steps of 1 s: 10 steps, median 1 s
    recs = [StepRecord(1, 10.0, steps=1, interval=True), StepRecord(10, 1.0, steps=9,
                                                                    interval=True)]
    s = summarize(recs, tokens_per_step=100)
    assert s["count"] == 10 and s["first_step"] == 1 and s["last_step"] == 10
    assert s["step_time_median_s"] == 1.0
    assert s["step_time_mean_s"] == pytest.approx(19.0 / 10)
    assert s["tokens_per_s"] == pytest.approx(1000 / 19.0)  # 10 steps of 100 tokens in 19 s
    assert s["interval_lines"] == 1
    # a trainer's MFU on a block counts for its steps
    mfu = reported_mfu([StepRecord(1, 1.0, reported_mfu=0.1),
                        StepRecord(10, 1.0, reported_mfu=0.3, steps=9, interval=True)])
    assert mfu["trainer_reported_mfu_median"] == 0.3 and mfu["trainer_reported_mfu_steps"] == 10


def test_summarize_steps_reads_a_torchtitan_log(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "titan.log"
    log.write_text("\n".join([titan(1, 12.0, 4096 / 20.0), titan(10, 9.0, 4096 / 0.5),
                              titan(20, 8.0, 4096 / 0.25)]) + "\n")
    assert summarize_steps.main([str(log), "--json"]) == 2  # no tokens per step
    assert "tokens_per_step" in capsys.readouterr().err
    argv = [str(log), "--tokens-per-step", str(TOKENS), "--world-size", str(WORLD),
            "--skip-first", "1", "--json"]
    assert summarize_steps.main(argv) == 0
    s = json.loads(capsys.readouterr().out)
    # the first step dropped; steps 2-10 at 0.5 s, 11-20 at 0.25 s
    assert s["count"] == 19 and s["first_step"] == 2 and s["last_step"] == 20
    assert s["skipped_first"] == 1 and s["interval_lines"] == 2
    argv[-2] = "5"  # a line of 9 steps is left out whole: 10 steps skipped
    assert summarize_steps.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["skipped_first"] == 10
    argv[-2] = "1"
    assert summarize_steps.main(argv) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["step_time_median_s"] == 0.25
    assert s["step_time_mean_s"] == pytest.approx((9 * 0.5 + 10 * 0.25) / 19)
    assert s["tokens_per_s"] == pytest.approx(19 * TOKENS / (9 * 0.5 + 10 * 0.25))
    times = [0.5] * 9 + [0.25] * 10
    assert s["step_time_std_s"] == pytest.approx(statistics.stdev(times))
