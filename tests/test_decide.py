"""Verdict rules with numbers worked out by hand (pure: no trials run)."""

from __future__ import annotations

from orchestrator import stats
from orchestrator.analyze import Analysis, ArmSummary, Comparison
from orchestrator.decide import Gate, decide, rounds_needed, threshold
from orchestrator.plan import control_arm
from orchestrator.sweep import Arm

ARMS = [Arm("a0", "base", 0, True), Arm("a1", "var", 1, False)]


def _analysis(
    est: dict[str, tuple[float, float, float]],
    *,
    floor: float | None = None,
    rank_p: float | None = None,
    mixture: tuple[float, float, float] | None = None,
    sd: float | None = 0.02,
) -> Analysis:
    a = Analysis(list(est), ARMS, bucket_weights={b: 1.0 for b in est})
    a.control = control_arm(ARMS[0]) if floor is not None else None
    for b, (sp, lo, hi) in est.items():
        for arm in ARMS:
            a.summaries[(b, arm.arm_id)] = ArmSummary(arm.arm_id, arm.label, b, 3, 3, {"ok": 3}, [])
        rank = stats.RankTest(0.0, rank_p, 30, 30) if rank_p is not None else None
        a.comparisons[(b, "a1")] = Comparison(
            "a1", b, stats.SpeedupEstimate(sp, lo, hi, 0.95, 3, sd), 3, rank=rank,
            noise_floor=floor)
    if mixture:
        a.comparisons[("mixture", "a1")] = Comparison(
            "a1", "mixture", stats.SpeedupEstimate(*mixture, 0.95, 3, sd), 3, noise_floor=floor)
    return a


def test_noise_floor_raises_the_retain_threshold() -> None:
    # floor 0.04 > min_effect 0.02: threshold 1.04; [1.03, 1.09] no longer clears it
    assert decide(_analysis({"s": (1.06, 1.03, 1.09)}), 0.02)[0].verdict == "retain"
    v = decide(_analysis({"s": (1.06, 1.03, 1.09)}, floor=0.04), 0.02)[0]
    assert v.verdict == "inconclusive"
    assert "noise floor 0.040" in v.reasons[0] and "1.040" in v.reasons[0]
    assert decide(_analysis({"s": (1.10, 1.05, 1.15)}, floor=0.04), 0.02)[0].verdict == "retain"
    c = Comparison("a1", "s", None, 0, noise_floor=0.01)
    assert threshold(c, 0.02) == 1.02


def test_rank_test_must_agree() -> None:
    assert decide(_analysis({"s": (1.10, 1.05, 1.15)}, rank_p=0.001), 0.02)[0].verdict == "retain"
    v = decide(_analysis({"s": (1.10, 1.05, 1.15)}, rank_p=0.2), 0.02)[0]
    assert v.verdict == "inconclusive" and "rank test does not confirm" in v.reasons[0]
    v = decide(_analysis({"s": (0.9, 0.85, 0.95)}, rank_p=0.2), 0.02)[0]
    assert v.verdict == "inconclusive"


def test_mixture_gain_cannot_hide_a_bucket_regression() -> None:
    v = decide(_analysis({"s": (1.3, 1.2, 1.4), "l": (0.95, 0.92, 0.98)},
                         mixture=(1.1, 1.05, 1.15)), 0.02)[0]
    assert v.verdict == "reject"
    assert any(r.startswith("l: slower") for r in v.reasons)
    assert any(r.startswith("s: faster") for r in v.reasons)
    assert any(r.startswith("mixture: faster") for r in v.reasons)


def test_mixture_must_clear_too() -> None:
    v = decide(_analysis({"s": (1.1, 1.05, 1.15), "l": (1.1, 1.05, 1.15)},
                         mixture=(1.04, 1.01, 1.07)), 0.02)[0]
    assert v.verdict == "inconclusive" and any(r.startswith("mixture:") for r in v.reasons)


def test_inconclusive_states_rounds_to_resolve() -> None:
    # s = 1.03 above T = 1.02, sd 0.02 -> 17 rounds in all (see test_rounds_to_resolve_by_hand)
    v = decide(_analysis({"s": (1.03, 1.01, 1.05)}), 0.02)[0]
    assert v.verdict == "inconclusive" and v.rounds_to_resolve == 17
    assert "~17 rounds in all (have 3)" in v.reasons[0]
    assert v.to_dict()["rounds_to_resolve"] == 17
    # between 1 and T: no decisive verdict at this effect
    v = decide(_analysis({"s": (1.01, 0.99, 1.03)}), 0.02)[0]
    assert v.rounds_to_resolve is None and "under the threshold" in v.reasons[0]
    # |log 0.99| = 0.01005 -> (1.95996 * 0.02 / 0.01005)^2 = 15.2 -> 16
    assert rounds_needed(stats.SpeedupEstimate(0.99, 0.97, 1.01, 0.95, 3, 0.02), 1.02) == 16


def test_gates_and_failures_are_not_timing_verdicts() -> None:
    g = {"a1": [Gate("memory", "fail", "peak 9 GiB > budget 8 GiB")]}
    v = decide(_analysis({"s": (1.10, 1.05, 1.15)}), 0.02, g)[0]
    assert v.verdict == "reject" and not v.timing_based
    assert "memory gate failed: peak 9 GiB > budget 8 GiB" in v.reasons
    v = decide(_analysis({"s": (0.9, 0.85, 0.95)}), 0.02)[0]
    assert v.verdict == "reject" and v.timing_based


def test_control_arm_gets_no_verdict() -> None:
    a = _analysis({"s": (1.10, 1.05, 1.15)}, floor=0.01)
    assert a.control is not None and a.control.arm_id == "aa"
    assert [v.arm_id for v in decide(a, 0.02)] == ["a1"]
