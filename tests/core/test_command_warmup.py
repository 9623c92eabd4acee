"""A command's warm-up found from its own step times, the fixed count as a floor."""

from __future__ import annotations

import random

from orchestrator.core.steady import WarmupPolicy, steady_state_start, warmup_from_series

AUTO = WarmupPolicy("auto", warmup_steps=3, max_steps=30, window=3, tolerance=0.05)


def test_slow_compile_steps_are_the_warmup() -> None:
    times = [9.0, 4.0, 4.0, 4.0, 4.0] + [1.0] * 20  # 5 compile-like steps, then steady
    assert warmup_from_series(times, AUTO) == (5, True)


def test_a_flat_series_keeps_the_floor() -> None:
    assert warmup_from_series([1.0] * 20, AUTO) == (3, True)
    assert warmup_from_series([1.0] * 20, WarmupPolicy("auto", 0, 30, 3, 0.05)) == (0, True)


def test_noise_alone_is_not_warmup() -> None:
    rng = random.Random(48)
    times = [1.0 + rng.gauss(0.0, 0.08) for _ in range(60)]  # 8 % noise, 5 % tolerance
    assert warmup_from_series(times, AUTO) == (3, True)


def test_a_plateau_of_equally_slow_steps_is_not_a_steady_state() -> None:
    times = [5.0] * 8 + [1.0] * 20
    # the rolling rule of an in-process trial sees the slow steps agree with each other
    assert steady_state_start(times, AUTO) == (6, True)
    assert warmup_from_series(times, AUTO) == (8, True)


def test_a_late_slow_step_does_not_stretch_the_warmup() -> None:
    times = [6.0, 3.0] + [1.0] * 10 + [4.0] + [1.0] * 10  # a checkpoint at step 12
    assert warmup_from_series(times, WarmupPolicy("auto", 1, 30, 3, 0.05)) == (2, True)


def test_a_series_that_never_settles_stops_at_the_cap() -> None:
    times = [float(i % 2 * 10 + 1) for i in range(40)]  # 1, 11, 1, 11 ... with a floor of 3
    assert warmup_from_series(times, WarmupPolicy("auto", 3, 10, 3, 0.05)) == (3, True)
    slow_start = [50.0 - i for i in range(30)] + [1.0] * 10  # still slowing down at the cap
    assert warmup_from_series(slow_start, WarmupPolicy("auto", 3, 12, 3, 0.05)) == (12, False)
    # too short to judge: the floor, unsettled
    assert warmup_from_series([5.0, 1.0, 1.0, 1.0], WarmupPolicy("auto", 3, 30, 3, 0.05)) == (3,
                                                                                              False)


def test_fixed_drops_the_count() -> None:
    times = [9.0] * 5 + [1.0] * 20
    assert warmup_from_series(times, WarmupPolicy("fixed", 3)) == (3, True)


def test_a_warmup_longer_than_asked_for_never_fails_the_trial() -> None:
    """A command asked for its 3 warm-up and 10 measured steps whose compile ran 8 steps: the
    detected warm-up stops where MIN_MEASURED steps are left, unsettled and said so, instead of
    failing the trial (a failed arm would be rejected on a harness problem)."""
    from orchestrator.core.logparse import StepRecord
    from orchestrator.worker.external import MIN_MEASURED, check_steps

    times = [9.0] * 8 + [4.0, 2.0] + [1.0] * 3  # 13 lines: still slowing down after 10
    recs = [StepRecord(step=i + 1, step_time_s=t) for i, t in enumerate(times)]
    got = check_steps(recs, 3, AUTO)
    assert sum(r.steps for r in got.measured) == MIN_MEASURED and len(got.warmup) == 10
    assert got.warmup_settled is False and any("had not settled" in n for n in got.notes)
    # the fixed policy is unchanged: its count only
    fixed = check_steps(recs, 3, WarmupPolicy("fixed", 3))
    assert len(fixed.warmup) == 3 and fixed.warmup_settled is True
