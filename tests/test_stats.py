from __future__ import annotations

import math

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


def _analysis(speedups: dict[str, tuple[float, float, float]], statuses: dict | None = None):  # type: ignore[no-untyped-def]
    from orchestrator.analyze import Analysis, ArmSummary, Comparison
    from orchestrator.sweep import Arm

    arms = [Arm("a0", "base", 0, True), Arm("a1", "var", 1, False)]
    a = Analysis(list(speedups), arms, bucket_weights={b: 1.0 for b in speedups})
    for b, (sp, lo, hi) in speedups.items():
        for arm in arms:
            st = (statuses or {}).get((b, arm.arm_id), {"ok": 3})
            a.summaries[(b, arm.arm_id)] = ArmSummary(arm.arm_id, arm.label, b, 3, st.get("ok", 0), st, [])
        a.comparisons[(b, "a1")] = Comparison("a1", b, stats.SpeedupEstimate(sp, lo, hi, 0.95, 3), 3)
    return a


def test_verdict_rule_by_hand() -> None:
    from orchestrator.decide import Gate, decide

    assert decide(_analysis({"s": (1.10, 1.05, 1.15)}), 0.02)[0].verdict == "retain"
    assert decide(_analysis({"s": (1.10, 1.01, 1.15)}), 0.02)[0].verdict == "inconclusive"
    assert decide(_analysis({"s": (0.90, 0.85, 0.95)}), 0.02)[0].verdict == "reject"
    # a regression in one bucket blocks retention even when the other clears
    v = decide(_analysis({"s": (1.2, 1.1, 1.3), "l": (0.9, 0.85, 0.97)}), 0.02)[0]
    assert v.verdict == "reject" and any(r.startswith("l: slower") for r in v.reasons)
    g = {"a1": [Gate("correctness", "fail", "loss differs by 3e-2")]}
    v = decide(_analysis({"s": (1.10, 1.05, 1.15)}), 0.02, g)[0]
    assert v.verdict == "reject" and "correctness gate failed: loss differs by 3e-2" in v.reasons
    g = {"a1": [Gate("correctness", "error", "probe crashed")]}
    assert decide(_analysis({"s": (1.10, 1.05, 1.15)}), 0.02, g)[0].verdict == "invalid"
    crashed = {("s", "a1"): {"ok": 2, "crashed": 1}}
    assert decide(_analysis({"s": (1.10, 1.05, 1.15)}, crashed), 0.02)[0].verdict == "reject"


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


def test_rounds_to_resolve_by_hand() -> None:
    # z = 1.95996; sd 0.02; |log(1.05 / 1.02)| = 0.028988 -> (1.95996 * 0.02 / 0.028988)^2 = 1.83
    assert stats.rounds_to_resolve(1.05, 0.02, 1.02, 0.95) == 2
    # |log(1.03 / 1.02)| = 0.0097562 -> (0.0391992 / 0.0097562)^2 = 16.14 -> 17
    assert stats.rounds_to_resolve(1.03, 0.02, 1.02, 0.95) == 17
    assert stats.rounds_to_resolve(1.02, 0.02, 1.02, 0.95) is None


def test_min_detectable_effect_by_hand() -> None:
    # (1.95996 + 0.84162) * 0.02 / sqrt(4) = 0.0280158 -> exp(.) - 1 = 0.028412
    assert stats.min_detectable_effect(0.02, 4, 0.95) == pytest.approx(0.028412, abs=1e-5)


def test_round_log_sd_is_sd_of_per_round_log_speedups() -> None:
    base = [[2.0] * 3, [2.0] * 3, [2.0] * 3]
    var = [[1.0] * 3, [2.0] * 3, [4.0] * 3]  # per-round speedups 2, 1, 0.5
    e = stats.bootstrap_speedup([base], [var], resamples=200)
    assert e.speedup == 1.0
    assert e.round_log_sd == pytest.approx(math.log(2))  # log speedups ln2, 0, -ln2
    assert e.time_ratio == 1.0


def test_pairing_by_round_cancels_shared_slow_rounds() -> None:
    # round 2 is 3x slower for both arms (a noisy neighbour); the variant is 10% faster
    base = [[1.0] * 3, [1.2] * 3, [3.0] * 3, [1.0] * 3]  # steady inside each trial
    var = [[x / 1.1 for x in t] for t in base]
    e = stats.bootstrap_speedup([base], [var], resamples=1000)
    assert e.low == pytest.approx(1.1, rel=1e-6) and e.high == pytest.approx(1.1, rel=1e-6)


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


def test_rounds_for_median_interval_by_hand() -> None:
    # 1 - 2**(1-n) >= confidence: n=5 gives 0.9375 < 0.95, n=6 gives 0.96875
    assert stats.rounds_for_median_interval(0.95) == 6
    assert stats.rounds_for_median_interval(0.9375) == 5  # exactly reached at 5
    assert stats.rounds_for_median_interval(0.99) == 8  # 1 - 2**-7 = 0.992
    assert stats.rounds_for_median_interval(0.5) == 2
    with pytest.raises(ValueError, match="confidence"):
        stats.rounds_for_median_interval(1.0)


def test_three_round_bootstrap_interval_is_the_range_of_the_rounds() -> None:
    # why decisive verdicts need more rounds: with 3 rounds of steady trials the percentile
    # interval of the median spans (almost exactly) the smallest to the largest round
    base = [[1.00] * 5, [1.00] * 5, [1.00] * 5]
    var = [[0.95] * 5, [0.99] * 5, [0.90] * 5]
    e = stats.bootstrap_speedup([base], [var], resamples=4000)
    assert e.low == pytest.approx(1 / 0.99) and e.high == pytest.approx(1 / 0.90)
