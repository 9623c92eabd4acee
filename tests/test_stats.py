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
