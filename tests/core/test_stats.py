from __future__ import annotations


import pytest

from orchestrator.core import stats


def test_median_and_mad_by_hand() -> None:
    assert stats.median([3, 1, 2]) == 2
    assert stats.median([4, 1, 2, 3]) == 2.5
    # |x - 3| = 2,1,0,1,7 -> median 1
    assert stats.mad([1, 2, 3, 4, 10]) == 1


# --------------------------------------------------------------------------- rank test


def test_rankdata_averages_ties_by_hand() -> None:
    assert list(stats.rankdata([10, 20, 20, 5])) == [2, 3.5, 3.5, 1]


def test_mann_whitney_by_hand_no_ties() -> None:
    # x = [1, 2], y = [3, 4, 5]: every x is below every y -> U_x = 0
    # var = 2*3/12 * 6 = 3; z = (|0 - 3| - 0.5) / sqrt(3) = 1.4434; p = erfc(z / sqrt 2) = 0.1489
    r = stats.mann_whitney_u([1, 2], [3, 4, 5])
    assert r.u == 0 and r.prob_x_greater == 0
    assert r.p_value == pytest.approx(0.14891467, abs=1e-6)


def test_mann_whitney_matches_scipy_with_ties() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    x = [1.0, 2.0, 2.0, 3.0, 5.0, 5.0, 7.0]
    y = [2.0, 4.0, 5.0, 6.0, 8.0, 9.0]
    ours = stats.mann_whitney_u(x, y)
    ref = scipy_stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic")
    assert ours.u == pytest.approx(ref.statistic)
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-9)


def test_mann_whitney_identical_samples_p_one() -> None:
    assert stats.mann_whitney_u([1.0, 1.0], [1.0, 1.0]).p_value == 1.0


# --------------------------------------------------------------------------- noise, rounds


def test_robust_cv_and_noise_floor_by_hand() -> None:
    # median 10, |x - 10| = 1,0,1 -> MAD 1 -> 1.4826 / 10
    assert stats.robust_cv([9, 10, 11]) == pytest.approx(0.14826)
    # the A/A effect itself, on either side of 1; its interval's width does not enter
    assert stats.noise_floor(stats.SpeedupEstimate(1.02, 0.97, 1.07, 0.95, 5)) == pytest.approx(0.02)
    assert stats.noise_floor(stats.SpeedupEstimate(0.96, 0.90, 1.01, 0.95, 5)) == pytest.approx(0.04)
    assert stats.noise_floor(stats.SpeedupEstimate(1.0, 0.8, 1.2, 0.95, 5)) == 0
    assert stats.noise_floor(None) is None


# --------------------------------------------------------------------------- warnings


def test_no_warnings_on_steady_trials() -> None:
    trials = [[1.0, 1.01, 0.99, 1.0, 1.0]] * 5
    assert stats.stability_warnings(trials) == []


def test_each_warning_fires_with_advice() -> None:
    noisy = [[1.0, 1.3, 0.8, 1.2, 0.9, 1.0]] * 3
    assert any("within a trial" in w and "measured_steps" in w
               for w in stats.stability_warnings(noisy))
    between = [[1.0] * 5, [1.3] * 5, [0.8] * 5, [1.15] * 5]
    assert any("between processes" in w for w in stats.stability_warnings(between))
    outliers = [[1.0, 1.01, 0.99, 1.0, 5.0, 1.0, 1.0, 1.0, 1.01, 0.99]] * 2
    assert any("outliers" in w and "stalls" in w for w in stats.stability_warnings(outliers))
    drift = [[1.0] * 5, [1.0] * 5, [1.1] * 5, [1.1] * 5]
    assert any("drifted +10.0%" in w for w in stats.stability_warnings(drift))
    far = [[1.0] * 5, [1.0] * 5, [1.01] * 5, [1.4] * 5, [0.99] * 5]
    ws = stats.stability_warnings(far, ["r0", "r1", "r2", "r3", "r4"])
    assert any(w.startswith("r3 is +40%") and "rerun" in w for w in ws)


