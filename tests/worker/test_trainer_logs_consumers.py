"""Lines that average several steps (torchtitan, Megatron-LM) weighed as their steps by every
consumer of step records: the command trial, its steps.csv, several nodes, duets, alternation."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from orchestrator.core.logparse import StepRecord, parse_steps
from orchestrator.worker import nodes
from orchestrator.worker.external import LogProblem, check_steps, ok_record, step_rows
from orchestrator.worker.pairing.alternation import ArmFailed, ArmRun
from orchestrator.worker.pairing.duet import _interval
from recipes.command.recipe import CommandTrainer
from tests.core.test_trainer_logs import TOKENS, WORLD, megatron, titan


def _megatron_log() -> list[StepRecord]:
    # newer Megatron: iteration 1 alone, then every 10; the second line's average still
    # holds iteration 1 (its averages restart only after it), which the warm-up takes
    return parse_steps([megatron(1, 20000.0, 10.0), megatron(10, 2600.0, 9.0),
                        megatron(20, 500.0, 8.0), megatron(30, 520.0, 7.5)])


def _trainer() -> Any:
    return SimpleNamespace(tokens_per_step=None, tokens_source="unknown: not stated",
                           useful_flops_per_step=lambda: None)


def test_warmup_counts_steps_not_lines() -> None:
    recs = _megatron_log()
    got = check_steps(recs, skip=3)  # fixed: 3 steps = iteration 1 and the block to 10
    assert [r.step for r in got.warmup] == [1, 10] and [r.step for r in got.measured] == [20, 30]
    assert got.warmup_fields()["warmup_steps_used"] == 10
    assert any("2 measured step line(s) average several steps each (20 steps" in n
               for n in got.notes)
    # one measured line of 10 steps is 10 measured steps, not one
    assert [r.step for r in check_steps(recs[:3], skip=3).measured] == [20]
    with pytest.raises(LogProblem, match=r"4 step line\(s\) parsed \(30 steps\); skipping 30 "):
        check_steps(recs, skip=21)


def test_the_record_and_steps_csv_weigh_a_block_as_its_steps(tmp_path: Path) -> None:
    recs = _megatron_log()
    checked = check_steps(recs, skip=3)
    rec = ok_record(SimpleNamespace(trial_dir=tmp_path), {}, _trainer(), checked)
    assert rec["measured_steps"] == rec["measured_steps_run"] == 20
    assert rec["step_time_median_s"] == pytest.approx(0.51)  # 10 steps of 0.50, 10 of 0.52
    assert rec["warmup_steps_used"] == 10
    assert rec["warmup_excess_s"] == pytest.approx(20.0 + 9 * 2.6 - 10 * 0.51)
    assert rec["final_loss"] == 7.5 and rec["excluded_steps"] == 0
    steps = pd.read_csv(tmp_path / "steps.csv")
    assert list(steps["step"]) == list(range(1, 31))
    assert list(steps["phase"]) == ["warmup"] * 10 + ["measured"] * 20
    assert list(steps["interval_steps"]) == [1] + [9] * 9 + [10] * 20
    # the loss on the logged iteration's row only
    assert steps.loc[steps["loss"].notna(), "step"].tolist() == [1, 10, 20, 30]
    assert steps.loc[steps["phase"] == "measured", "step_time_s"].mean() == pytest.approx(0.51)


def test_per_step_logs_write_no_interval_column() -> None:
    checked = check_steps([StepRecord(i, 0.1) for i in range(6)], skip=1)
    assert "interval_steps" not in step_rows(checked)[0] and len(step_rows(checked)) == 6


def test_several_nodes_keep_the_block_size() -> None:
    merged, _, _ = nodes.merge_steps(_megatron_log(), {})
    assert [r.steps for r in merged] == [1, 9, 10, 10] and all(r.interval for r in merged)
    report = nodes.NodeReport(node=1, status="ok", error=None, returncode=0, wall_s=1.0,
                              steps=nodes.steps_of(_megatron_log()), at=0.0)
    merged, _, _ = nodes.merge_steps([], {1: report})
    assert [r.steps for r in merged] == [1, 9, 10, 10]


def test_a_duet_times_a_block_over_its_steps() -> None:
    rec = StepRecord(20, 0.5, steps=10, interval=True)
    assert _interval(rec, {20: 100.0}) == (95.0, 100.0)


def _arm(tmp_path: Path) -> ArmRun:
    trainer = SimpleNamespace(parse=lambda lines: parse_steps(
        lines, tokens_per_step=TOKENS, world_size=WORLD))
    return ArmRun(SimpleNamespace(arm_id="a"), trainer, None, tmp_path, {}, None, 100)


def test_alternated_arms_take_a_line_per_step_and_refuse_blocks(tmp_path: Path) -> None:
    run = _arm(tmp_path)
    for step in (1, 2, 3):  # metrics.log_freq 1: a line per step
        run._line(titan(step, 9.0, 4096 / 0.5))
    assert [r.step for r in run.records] == [1, 2, 3]
    with pytest.raises(ArmFailed, match=r"averages the 7 steps since .* log every step") as e:
        run._line(titan(10, 9.0, 4096 / 0.5))
    assert e.value.kind == "malformed_log"


def test_alternated_arms_name_a_missing_setting(tmp_path: Path) -> None:
    run = _arm(tmp_path)
    run.trainer = SimpleNamespace(parse=lambda lines: parse_steps(lines))
    with pytest.raises(ArmFailed, match="tokens_per_step") as e:
        run._line(titan(1, 9.0, 1000.0))
    assert e.value.kind == "missing_setting"


def test_the_command_recipe_gives_torchtitan_its_tokens_and_devices() -> None:
    workload = SimpleNamespace(tokens_per_step=TOKENS, world_size=WORLD, params={}, command="x",
                               cwd=None, env={}, log=SimpleNamespace(pattern=None, skip_steps=None,
                                                             log_interval=None))
    bucket = SimpleNamespace(name="b", seq_len=4096, micro_batch=1)
    trainer = CommandTrainer(workload, bucket, "cpu")  # type: ignore[arg-type]
    recs = trainer.parse([titan(1, 9.0, 4096 / 16.0), titan(10, 8.0, 4096 / 0.5)])
    assert [(r.step, r.step_time_s, r.steps) for r in recs] == [(1, 16.0, 1), (10, 0.5, 9)]


def test_a_resumed_megatron_run_takes_its_log_interval_from_the_workload() -> None:
    """A run resumed at iteration 100 logs its first line at 110: without workload.log.
    log_interval that line would be 110 steps; with it, its 10."""
    from recipes.command.config import CommandLogConfig, CommandWorkloadConfig
    from orchestrator.core.errors import ConfigError

    lines = [megatron(110, 520.0, 8.0), megatron(120, 500.0, 7.9), megatron(130, 510.0, 7.8)]
    bucket = SimpleNamespace(name="b", seq_len=4096, micro_batch=1)
    for interval, first in ((None, 110), (10, 10)):
        workload = CommandWorkloadConfig(command="{python} t.py",
                                         log=CommandLogConfig(log_interval=interval))
        workload.validate()
        recs = CommandTrainer(workload, bucket, "cpu").parse(lines)  # type: ignore[arg-type]
        assert [r.steps for r in recs] == [first, 10, 10]
        assert [round(r.step_time_s, 3) for r in recs] == [0.52, 0.5, 0.51]
    with pytest.raises(ConfigError, match="workload.log.log_interval"):
        CommandWorkloadConfig(command="{python} t.py",
                              log=CommandLogConfig(log_interval=0)).validate()
