"""A command trial's warm-up from its own step times, and what its record says about it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from orchestrator.core.logparse import StepRecord, parse_steps
from orchestrator.core.steady import WarmupPolicy
from orchestrator.worker.external import check_steps, ok_record, warmup_policy


def _spec(policy: str, tmp_path: Path | None = None) -> SimpleNamespace:
    return SimpleNamespace(warmup_policy=policy, warmup_steps=3, warmup_max_steps=30,
                           warmup_window=3, warmup_tolerance=0.05, trial_dir=tmp_path)


def _log(slow: int, steady: int = 12) -> list[StepRecord]:
    times = [2.5] + [1.2] * (slow - 1) + [0.1] * steady  # compile, autotune, then steady
    return parse_steps([f"step {i} | loss 2.0 | time {t * 1e3:.1f}ms" for i, t in
                        enumerate(times)])


def test_the_policy_takes_the_commands_fixed_count_as_its_floor() -> None:
    assert warmup_policy(_spec("auto"), 5) == WarmupPolicy("auto", 5, 30, 3, 0.05)
    assert warmup_policy(_spec("auto"), 40).max_steps == 40  # log.skip_steps above the cap
    assert warmup_policy(SimpleNamespace(), 2) == WarmupPolicy("fixed", 2)


def test_five_slow_steps_are_dropped_and_a_flat_log_keeps_the_floor() -> None:
    auto = warmup_policy(_spec("auto"), 3)
    got = check_steps(_log(5), 3, auto)
    assert [r.step for r in got.warmup] == [0, 1, 2, 3, 4]
    assert got.warmup_fields() == {
        "warmup_policy": "auto", "warmup_steps_floor": 3, "warmup_steps_used": 5,
        "warmup_steps_detected": 5, "warmup_settled": True, "excluded_steps": 0,
        "excluded_tags": {}}
    flat = check_steps([StepRecord(i, 0.1) for i in range(15)], 3, auto)
    assert len(flat.warmup) == 3 and flat.warmup_fields()["warmup_steps_detected"] == 3
    # fixed: the count alone, nothing detected
    fixed = check_steps(_log(5), 3, warmup_policy(_spec("fixed"), 3))
    assert len(fixed.warmup) == 3 and fixed.warmup_fields()["warmup_steps_detected"] is None
    assert check_steps(_log(5), 3).warmup_fields()["warmup_policy"] == "fixed"


def test_detection_on_blocks_counts_steps() -> None:
    # a line per 10 steps: the floor of 3 steps is the first line, the slow second one is
    # found, the rest measured
    recs = [StepRecord(10 * (i + 1), t, steps=10, interval=True)
            for i, t in enumerate([3.0, 1.5] + [0.5] * 8)]
    got = check_steps(recs, 3, warmup_policy(_spec("auto"), 3))
    assert got.warmup_fields()["warmup_steps_used"] == 20
    assert sum(r.steps for r in got.measured) == 80


def test_the_trial_record_says_how_many_warmup_steps_were_dropped(tmp_path: Path) -> None:
    checked = check_steps(_log(5), 3, warmup_policy(_spec("auto"), 3))
    trainer = SimpleNamespace(tokens_per_step=64, tokens_source="config",
                              useful_flops_per_step=lambda: None)
    rec = ok_record(_spec("auto", tmp_path), {"warmup_steps": 3}, trainer, checked)
    assert rec["warmup_steps_detected"] == rec["warmup_steps_used"] == 5
    assert rec["warmup_steps_floor"] == 3 and rec["warmup_settled"] is True
    assert rec["measured_steps"] == 12 and rec["step_time_median_s"] == 0.1
    steps = pd.read_csv(tmp_path / "steps.csv")
    assert list(steps["phase"]) == ["warmup"] * 5 + ["measured"] * 12
