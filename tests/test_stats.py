from __future__ import annotations

import pytest

from orchestrator import stats


def test_median_and_mad_by_hand() -> None:
    assert stats.median([3, 1, 2]) == 2
    assert stats.median([4, 1, 2, 3]) == 2.5
    # |x - 3| = 2,1,0,1,7 -> median 1
    assert stats.mad([1, 2, 3, 4, 10]) == 1


def test_identical_arms_give_speedup_one() -> None:
    rounds = [[1.0, 1.0, 1.0]] * 4
    e = stats.bootstrap_speedup([rounds], [rounds], resamples=200)
    assert e.speedup == 1.0 and e.low == 1.0 and e.high == 1.0


def test_clear_speedup_interval_excludes_one() -> None:
    base = [[2.0, 2.02, 1.98, 2.01], [2.03, 2.0, 1.99, 2.0], [1.97, 2.0, 2.02, 2.01]]
    var = [[1.0, 1.01, 0.99, 1.0], [1.0, 1.02, 0.98, 1.0], [1.01, 1.0, 0.99, 1.0]]
    e = stats.bootstrap_speedup([base], [var], resamples=500)
    assert e.speedup == pytest.approx(2.0, rel=0.01)
    assert 1.9 < e.low <= e.speedup <= e.high < 2.1


def test_mixture_is_total_time_not_mean_of_speedups() -> None:
    # bucket A: 1.0 -> 0.5 (2x), bucket B: 9.0 -> 9.0 (1x); equal weights
    a_b, a_v = [[1.0] * 3] * 2, [[0.5] * 3] * 2
    b_b, b_v = [[9.0] * 3] * 2, [[9.0] * 3] * 2
    e = stats.bootstrap_speedup([a_b, b_b], [a_v, b_v], weights=[1, 1], resamples=100)
    assert e.speedup == pytest.approx(10.0 / 9.5)  # not (2 + 1) / 2
