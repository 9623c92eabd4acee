from __future__ import annotations

from orchestrator.core.steady import WarmupPolicy, steady_state_start, warmup_complete, windows_agree


def test_fixed_policy_counts_steps() -> None:
    p = WarmupPolicy("fixed", 2)
    assert warmup_complete([], p) == (False, True)
    assert warmup_complete([5.0, 1.0], p) == (True, True)
    assert warmup_complete([], WarmupPolicy("fixed", 0)) == (True, True)


def test_windows_agree_by_hand() -> None:
    # medians: last three (1.0, 1.04, 0.98) -> 1.0; previous three (1.02, 1.03, 1.01) -> 1.02
    t = [1.02, 1.03, 1.01, 1.0, 1.04, 0.98]
    assert windows_agree(t, 3, 0.02)  # |1.0 / 1.02 - 1| = 0.0196
    assert not windows_agree(t, 3, 0.01)
    assert not windows_agree(t[:5], 3, 0.5)  # needs two full windows


def test_auto_drops_slow_steps_until_the_rolling_median_settles() -> None:
    # compile-like first steps, then steady at ~1.0
    times = [9.0, 5.0, 3.0, 1.5, 1.0, 1.01, 0.99, 1.0, 1.02, 1.0, 1.0, 0.99]
    p = WarmupPolicy("auto", warmup_steps=2, max_steps=20, window=3, tolerance=0.05)
    # k warm-up steps: compare median(t[k-3:k]) with median(t[k-6:k-3])
    # k=6: 1.01 vs 5 no; k=7: 1.0 vs 3 no; k=8: 1.0 vs 1.5 no;
    # k=9: median(0.99, 1.0, 1.02) = 1.0 vs median(1.5, 1.0, 1.01) = 1.01 -> 0.99 % <= 5 %: yes
    assert steady_state_start(times, p) == (9, True)
    assert warmup_complete(times[:8], p) == (False, False)
    assert warmup_complete(times[:9], p) == (True, True)


def test_auto_stops_at_cap_unsettled() -> None:
    times = [float(2 ** (i % 2)) * (1 + i) for i in range(12)]  # never steady
    p = WarmupPolicy("auto", warmup_steps=1, max_steps=8, window=2, tolerance=0.01)
    assert steady_state_start(times, p) == (8, False)
    assert warmup_complete(times[:8], p) == (True, False)
