"""Verdict rules with numbers worked out by hand (pure: no trials run).

Every case uses 3 looks at 95 %: alpha' = 0.05 / 3, 8 residual degrees of freedom, so the
two-sided 1 - alpha' interval is log s +- 3.0158 SE and the two one-sided tests' (TOST)
1 - 2 alpha' interval is log s +- 2.5660 SE (t quantiles from scipy.stats.t.ppf). The band is
+-2 % (log 1.02 = 0.0198), the non-inferiority margin 5 % (log 0.95 = -0.0513).
"""

from __future__ import annotations

import math

from orchestrator.core import paired
from orchestrator.core import stats
from orchestrator.analysis.analyze import Analysis, ArmSummary, Comparison
from orchestrator.analysis.decide import RULE, Gate, Rule, aa_calibration, decide
from orchestrator.spec.plan import control_arm
from orchestrator.spec.sweep import Arm

ARMS = [Arm("a0", "base", 0, True), Arm("a1", "var", 1, False)]
ALPHA = 0.05 / 3
RULE7 = Rule(min_effect=0.02, ni_margin=0.05, max_rounds=7, final=True)


def _cmp(key: str, log_s: float, se: float, arm: str = "a1", df: int = 8) -> Comparison:
    eff = paired.Effect(arm, log_s, se, df, 3)
    lo, hi = eff.interval(ALPHA)
    return Comparison(arm, key, stats.SpeedupEstimate(eff.speedup, lo, hi, 1 - ALPHA, 3), 3,
                      effect=eff)


def _analysis(scopes: dict[str, tuple[float, float]], aa: dict[str, tuple[float, float]]
              | None = None) -> Analysis:
    buckets = [k for k in scopes if k != "mixture"]
    a = Analysis(buckets, ARMS, bucket_weights={b: 1.0 for b in buckets})
    a.alpha_look, a.looks = ALPHA, 3
    for b in buckets:
        for arm in ARMS:
            a.summaries[(b, arm.arm_id)] = ArmSummary(arm.arm_id, arm.label, b, 3, 3, {"ok": 3}, [])
    for k, (log_s, se) in scopes.items():
        a.comparisons[(k, "a1")] = _cmp(k, log_s, se)
    if aa is not None:
        a.control = control_arm(ARMS[0])
        for k, (log_s, se) in aa.items():
            c = _cmp(k, log_s, se, arm="aa")
            c.noise_floor = stats.noise_floor(c.estimate)
            a.noise[k] = c
    return a


def test_retain_a_significant_gain() -> None:
    # 0.10 +- 3.0158 x 0.02 = [0.0397, 0.1603]: above 0 -> 1.040x at the low end
    (v,) = decide(_analysis({"s": (0.10, 0.02)}), RULE7)
    assert v.verdict == "retain" and v.timing_based
    assert v.headline.startswith("retain: 1.11x faster 1.105x [1.040, 1.174]")


def test_equivalent_inside_the_band_and_not_just_outside() -> None:
    # 0.002 +- 2.566 x 0.005 = [-0.0108, 0.0148] inside +-0.0198 -> equivalent
    (v,) = decide(_analysis({"s": (0.002, 0.005)}), RULE7)
    assert v.verdict == "equivalent"
    assert "no difference that matters" in v.headline
    # 0.008 + 0.0128 = 0.0208 > 0.0198: not equivalent, and 0.008 - 3.0158 x 0.005 < 0: not
    # significant either -> inconclusive
    (v,) = decide(_analysis({"s": (0.008, 0.005)}), RULE7)
    assert v.verdict == "inconclusive"
    # the lower side: -0.008 - 0.0128 = -0.0208 < -0.0198
    (v,) = decide(_analysis({"s": (-0.008, 0.005)}), RULE7)
    assert v.verdict == "inconclusive"
    (v,) = decide(_analysis({"s": (-0.006, 0.005)}), RULE7)  # -0.0188: inside
    assert v.verdict == "equivalent"


def test_reject_a_significant_slowdown() -> None:
    # -0.05 +- 3.0158 x 0.01 = [-0.0802, -0.0198]: below 0
    (v,) = decide(_analysis({"s": (-0.05, 0.01)}), RULE7)
    assert v.verdict == "reject" and v.timing_based
    assert v.headline.startswith("reject: 1.05x slower at s")


def test_the_mixture_decides_and_every_bucket_must_be_non_inferior() -> None:
    # mixture 0.3 +- 0.0603: faster. s128 0 +- 2.566 x 0.03 -> lower bound exp(-0.077) = 0.926
    # < 0.95: a slowdown beyond the margin is not ruled out -> inconclusive
    scopes = {"s128": (0.0, 0.03), "s512": (0.6, 0.03), "mixture": (0.3, 0.02)}
    (v,) = decide(_analysis(scopes), RULE7)
    assert v.verdict == "inconclusive"
    assert "s128 too noisy to rule out a slowdown" in v.headline
    assert "1.82x faster at s512" in v.headline
    # s128 with SE 0.015: lower bound exp(-0.0385) = 0.962 > 0.95 -> retain on the mixture
    scopes["s128"] = (0.0, 0.015)
    (v,) = decide(_analysis(scopes), RULE7)
    assert v.verdict == "retain"
    assert v.headline.startswith("retain: 1.35x faster on the mixture")
    # a bucket slower but within the margin: -0.03 - 2.566 x 0.005 = -0.0428 -> 0.958 > 0.95
    scopes["s128"] = (-0.03, 0.005)
    assert decide(_analysis(scopes), RULE7)[0].verdict == "retain"


def test_a_bucket_significantly_slower_beyond_the_margin_rejects() -> None:
    # s128: -0.15 + 2.566 x 0.02 = -0.0987 -> upper bound 0.906 < 0.95, whatever the mixture
    scopes = {"s128": (-0.15, 0.02), "s512": (0.6, 0.03), "mixture": (0.3, 0.02)}
    (v,) = decide(_analysis(scopes), RULE7)
    assert v.verdict == "reject"
    assert any(r.startswith("s128: slower beyond the non-inferiority margin") for r in v.reasons)


def test_equivalence_needs_every_bucket_in_the_band() -> None:
    scopes = {"s128": (0.0, 0.004), "s512": (0.0, 0.02), "mixture": (0.0, 0.004)}
    assert decide(_analysis(scopes), RULE7)[0].verdict == "inconclusive"
    scopes["s512"] = (0.0, 0.004)
    assert decide(_analysis(scopes), RULE7)[0].verdict == "equivalent"


def test_the_aa_control_checks_calibration_and_does_not_set_a_threshold() -> None:
    # the check is a test of its own at aa_alpha = 1 %: 0.03 +- 3.3554 x 0.02 covers 0:
    # calibrated; no threshold moves
    a = _analysis({"s": (0.10, 0.02)}, aa={"s": (0.03, 0.02)})
    assert aa_calibration(a) == ""
    assert decide(a, RULE7)[0].verdict == "retain"
    # 0.08 +- 0.0671 = [0.0129, 0.1471]: two identical arms apart -> invalid at the last look
    a = _analysis({"s": (0.10, 0.02)}, aa={"s": (0.08, 0.02)})
    assert "not calibrated" in aa_calibration(a)
    (v,) = decide(a, RULE7)
    assert v.verdict == "invalid" and "A/A control" in v.headline
    # at an earlier look it does not decide the verdict (the campaign adds rounds instead)
    early = Rule(0.02, 0.05, 7, final=False)
    assert decide(a, early)[0].verdict == "retain"


def test_the_aa_check_controls_its_own_error_rate_over_its_scopes() -> None:
    # 0.065 +- 0.0671 = [-0.0021, 0.1321] covers 0 at 99 %, though the decisions' own 95 %/3
    # interval (0.065 +- 3.0158 x 0.02 = [0.0047, ...]) would not: no false alarm
    a = _analysis({"s": (0.10, 0.02)}, aa={"s": (0.065, 0.02)})
    assert aa_calibration(a) == ""
    assert "not calibrated" in aa_calibration(a, aa_alpha=0.05 / 3)
    # two scopes share the 1 %: each at 99.5 %, 0.075 +- 3.8325 x 0.02 = [-0.0017, 0.1517]
    # covers 0, while one scope alone at 99 % (0.075 - 0.0671 = 0.0079) would not
    two = _analysis({"s": (0.10, 0.02), "t": (0.10, 0.02)}, aa={"s": (0.075, 0.02)})
    assert "not calibrated" in aa_calibration(two)
    two = _analysis({"s": (0.10, 0.02), "t": (0.10, 0.02)},
                    aa={"s": (0.075, 0.02), "t": (0.0, 0.02)})
    assert aa_calibration(two) == ""
    msg = aa_calibration(_analysis({"s": (0.10, 0.02)}, aa={"s": (0.08, 0.02)}))
    assert "s 1.083x [1.013, 1.158] (99.0% intervals)" in msg


def test_inconclusive_promises_rounds_only_within_reach() -> None:
    # 0.012 +- 0.0151 (SE 0.005) straddles 0, and 0.012 + 0.0128 > 0.0198: inconclusive;
    # significance needs t x 0.005 sqrt(3 / R) < 0.012: within 21 rounds
    (v,) = decide(_analysis({"s": (0.012, 0.005)}), RULE7)
    assert v.verdict == "inconclusive" and v.rounds_to_resolve is not None
    assert v.rounds_to_resolve <= 21 and f"~{v.rounds_to_resolve} rounds in all" in v.headline
    # the last look: a new campaign, never a resume (the frozen spending has nothing left)
    assert f"plan a new campaign with protocol.max_rounds={v.rounds_to_resolve}" in v.headline
    assert "a resume of this one would not decide more" in v.headline
    # exactly on the band's edge with a wide interval: out of reach -> what would help instead
    (v,) = decide(_analysis({"s": (math.log(1.02), 0.05)}), RULE7)
    assert v.verdict == "inconclusive" and v.rounds_to_resolve is None
    assert "quiet the machine" in v.headline and "rounds" not in v.headline.split(";")[0]


def test_failures_and_gates() -> None:
    a = _analysis({"s": (0.10, 0.02)})
    a.summaries[("s", "a1")] = ArmSummary("a1", "var", "s", 3, 2, {"ok": 2, "oom": 1},
                                          ["CUDA out of memory"])
    (v,) = decide(a, RULE7)
    assert v.verdict == "reject" and not v.timing_based and "1 oom of 3" in v.headline
    a = _analysis({"s": (0.10, 0.02)})
    (v,) = decide(a, RULE7, {"a1": [Gate("correctness", "fail", "grads differ")]})
    assert v.verdict == "reject" and "correctness gate failed" in v.headline
    (v,) = decide(a, RULE7, {"a1": [Gate("correctness", "error", "no baseline probe")]})
    assert v.verdict == "invalid"
    assert v.headline == "invalid: correctness gate could not be evaluated: no baseline probe"
    # the gate could not run the variant because its backend is missing: that leads
    (v,) = decide(a, RULE7, {"a1": [Gate("correctness", "error", "unavailable here: sdpa kernel "
                                         "'cudnn' cannot run on cpu")]})
    assert v.verdict == "invalid" and v.headline == (
        "invalid: unavailable here: sdpa kernel 'cudnn' cannot run on cpu (the correctness "
        "gate could not run it)")
    # a harness failure (ranks out of step) is never a reject
    a.summaries[("s", "a1")] = ArmSummary("a1", "var", "s", 3, 2, {"ok": 2, "infra_failed": 1},
                                          ["rank 1: Connection reset by peer"])
    (v,) = decide(a, RULE7)
    assert v.verdict == "invalid" and "harness" in v.headline
    # the baseline with no measurement
    a = _analysis({"s": (0.10, 0.02)})
    a.summaries[("s", "a0")] = ArmSummary("a0", "base", "s", 3, 0, {"failed": 3}, ["boom"])
    assert decide(a, RULE7)[0].verdict == "invalid"


def test_the_rule_is_stated_in_one_line() -> None:
    assert "\n" not in RULE and "mixture decides" in RULE and "equivalent" in RULE
    assert "non-inferiority" in RULE


def test_warnings_are_grouped_and_deduplicated() -> None:
    a = _analysis({"s": (0.10, 0.02)})
    a.summaries[("s", "a1")].warnings = ["steps vary 20%", "steps vary 20%"]
    (v,) = decide(a, RULE7)
    assert v.warnings == ["s: steps vary 20%"]
    assert all("warning" not in r for r in v.reasons)


TP_ARMS = [Arm("a0", "duplicated", "duplicated", True, {"workload.tp.mode": "duplicated"}),
           Arm("a1", "auto", "auto", False, {"workload.tp.mode": "auto"})]


def _executes(a: Analysis, base: list[str] | None, var: list[str] | None, missing: int = 0,
              arms: list[Arm] = TP_ARMS, covers: tuple[str, ...] = ("workload.tp.mode",)
              ) -> Analysis:
    import json

    a.arms = list(arms)
    for (b, arm_id), s in a.summaries.items():
        modes = base if arm_id == "a0" else var
        if modes is not None:
            s.executes = [json.dumps({"newton_schulz": modes}, sort_keys=True)]
            s.executes_covers = list(covers)
        s.executes_missing = missing if arm_id == "a1" else 0
    return a


def test_a_variant_that_runs_the_baselines_step_is_equivalent_by_construction() -> None:
    """auto that chose the baseline's mode on every shape: the same step. What ran is no
    evidence on its own (a description is only as complete as its recorder): with an interval
    that straddles 1 far beyond the band (0.02 +- 3.0158 x 0.05, [0.867, 1.186]) the verdict
    stays inconclusive and says why; with one whose one-sided lower bound is within the band
    (0.012 +- 0.0128: 0.999) and no significant difference, at the last look, equivalent."""
    dup = ["384x128/p0:duplicated", "128x384/p1:duplicated", "64x64/pNone:local"]
    (v,) = decide(_executes(_analysis({"s": (0.02, 0.05)}), dup, dup), RULE7)
    assert v.verdict == "inconclusive"
    assert any("not equivalent on what ran alone" in r and "below 0.980" in r
               for r in v.reasons), v.reasons
    (v,) = decide(_executes(_analysis({"s": (0.012, 0.005)}), dup, dup), RULE7)
    assert v.verdict == "equivalent" and v.timing_based
    assert v.headline.startswith("equivalent: it runs the baseline's step (newton_schulz: "
                                 "2 duplicated, 1 local); timed s 1.012x ["), v.headline
    assert "non-inferior within ±2%" in v.headline
    # never before the last planned look
    early = Rule(min_effect=0.02, ni_margin=0.05, max_rounds=7, final=False)
    (v,) = decide(_executes(_analysis({"s": (0.012, 0.005)}), dup, dup), early)
    assert v.verdict == "inconclusive"
    # significant either way voids it: 0.10 +- 0.0603 is faster (the timing stands, below)
    # one shape resolved otherwise: a different step; the timing alone decides
    other = [*dup[:1], "128x384/p1:distributed", dup[2]]
    (v,) = decide(_executes(_analysis({"s": (0.012, 0.005)}), dup, other), RULE7)
    assert v.verdict == "inconclusive"
    # a trial that did not say what it ran: no claim
    (v,) = decide(_executes(_analysis({"s": (0.012, 0.005)}), dup, dup, missing=1), RULE7)
    assert v.verdict == "inconclusive"
    # the same step, yet significantly faster (0.10 +- 0.0603): the timing stands, with a
    # warning that something other than the step differs
    (v,) = decide(_executes(_analysis({"s": (0.10, 0.02)}), dup, dup), RULE7)
    assert v.verdict == "retain"
    assert any("runs the baseline's step in every trial" in w for w in v.warnings), v.warnings
    # recipes that describe nothing: unchanged
    (v,) = decide(_executes(_analysis({"s": (0.02, 0.05)}), None, None), RULE7)
    assert v.verdict == "inconclusive"


def test_the_same_step_claim_needs_a_variant_that_differs_only_in_covered_settings() -> None:
    """The description covers tp.mode only: a variant that changes anything else (an
    environment switch, a loader setting, tp.mode and something more) runs code the
    description does not speak for, so the timing alone decides, and no warning claims the
    same step."""
    dup = ["384x128/p0:duplicated", "64x64/pNone:local"]
    omp = [Arm("a0", "1", "1", True, {}, {"OMP_NUM_THREADS": "1"}),
           Arm("a1", "2", "2", False, {}, {"OMP_NUM_THREADS": "2"})]
    for arms in (omp, [Arm("a0", "0", 0, True, {"workload.data.workers": 0}),
                       Arm("a1", "2", 2, False, {"workload.data.workers": 2})],
                 [TP_ARMS[0], Arm("a1", "auto+", "auto", False,
                                  {"workload.tp.mode": "auto", "workload.data.workers": 2})]):
        (v,) = decide(_executes(_analysis({"s": (0.012, 0.005)}), dup, dup, arms=arms), RULE7)
        assert v.verdict == "inconclusive", (arms, v.headline)
        (v,) = decide(_executes(_analysis({"s": (0.10, 0.02)}), dup, dup, arms=arms), RULE7)
        assert v.verdict == "retain" and not any("baseline's step" in w for w in v.warnings)
    # the environment switch covered: the claim holds again
    (v,) = decide(_executes(_analysis({"s": (0.012, 0.005)}), dup, dup, arms=omp,
                            covers=("env.OMP_NUM_THREADS",)), RULE7)
    assert v.verdict == "equivalent"
    # a recipe that covers nothing (an older record without executes_covers): no claim
    (v,) = decide(_executes(_analysis({"s": (0.012, 0.005)}), dup, dup, covers=()), RULE7)
    assert v.verdict == "inconclusive"


def test_the_non_inferiority_line_shows_the_bounds_its_test_used() -> None:
    """A retain says every bucket is non-inferior: the bounds it prints there are the
    one-sided ones the test compared with 1 - ni_margin, and each bucket line carries its
    one-sided bound beside its two-sided interval, so no displayed number contradicts the
    claim (the quick start once printed 'non-inferior (above 0.950)' beside [0.948, ...])."""
    import re

    # s128: 0.001 +- 3.0158 x 0.0165 -> two-sided low 0.951..., one-sided (2.566) higher
    a = _analysis({"s64": (0.25, 0.02), "s128": (0.001, 0.0165), "mixture": (0.12, 0.01)})
    (v,) = decide(a, RULE7)
    assert v.verdict == "retain", v.reasons
    line = next(r for r in v.reasons if "non-inferior" in r)
    shown = dict(re.findall(r"(s\d+) (\d\.\d{3})", line.split("lower bounds")[1]))
    for k, low in shown.items():
        tost_low = a.comparisons[(k, "a1")].effect.interval(2 * ALPHA)[0]
        assert float(low) == round(tost_low, 3) and float(low) > 0.95
    s128 = next(r for r in v.reasons if r.startswith("s128:"))
    assert re.search(r"one-sided 98\.3% lower bound 0\.9\d\d", s128), s128
    two_low = float(re.search(r"\[(\d\.\d+),", s128).group(1))
    one_low = float(re.search(r"lower bound (\d\.\d+)", s128).group(1))
    assert one_low >= two_low  # the test's bound, never the wider interval's


def test_per_arm_intervals_ignore_a_quiet_control() -> None:
    """The variant's interval comes from its own round contrasts (R - 1 df): a quiet A/A arm
    lends it neither degrees of freedom nor a smaller variance."""
    import numpy as np

    rng = np.random.default_rng(1)
    cells = {}
    for r in range(5):
        day = rng.normal(0, 0.05)
        cells[(r, "a0")] = day
        cells[(r, "aa")] = day + rng.normal(0, 0.001)
        cells[(r, "a1")] = day + rng.normal(0, 0.04)  # its own per-process offset
    fit = paired.fit_blocks(cells, "a0", drop_outliers=False)
    pooled = paired.fit_blocks(cells, "a0", drop_outliers=False, per_arm=False)
    d = [cells[(r, "a0")] - cells[(r, "a1")] for r in range(5)]
    e = fit.effects["a1"]
    assert e.df == 4 and pooled.effects["a1"].df == 8
    assert math.isclose(e.log_speedup, float(np.mean(d)))
    assert math.isclose(e.se, float(np.std(d, ddof=1)) / math.sqrt(5))
    assert e.se > pooled.effects["a1"].se  # the pooled term was too narrow for this arm


def test_under_load_thin_evidence_does_not_retain_or_reject() -> None:
    """Issue 51: under detected load, fewer than three rounds or trials of a few steps with no
    time floor cannot retain or reject on their own (a no-op variant was once retained at
    1.61x on the quick protocol); three rounds of trials with a floor still decide."""
    from dataclasses import replace

    def two_rounds(log_s: float) -> Analysis:
        a = _analysis({"s": (log_s, 0.02)})
        c = a.comparisons[("s", "a1")]
        a.comparisons[("s", "a1")] = replace(c, effect=replace(c.effect, rounds=2))
        return a

    load = "other processes took 1.90 of 2 cores over 0.5 s"
    for log_s, quiet in ((0.10, "retain"), (-0.10, "reject")):
        (v,) = decide(two_rounds(log_s), RULE7)
        assert v.verdict == quiet
        (v,) = decide(two_rounds(log_s), replace(RULE7, load=load))
        assert v.verdict == "inconclusive" and v.rounds_to_resolve == 3
        assert v.reasons[0].startswith("s 1.105x [1.040, 1.174] looked faster" if log_s > 0
                                       else "s 0.905x [0.852, 0.961] looked slower")
        assert f"load was detected ({load}), with 2 round(s)" in v.reasons[0]
        assert "under load, with 2 round(s): not decided on its own" in v.headline
    # three rounds: the load alone does not hold a decision back ...
    (v,) = decide(_analysis({"s": (0.10, 0.02)}), replace(RULE7, load=load))
    assert v.verdict == "retain"
    # ... but trials of a few steps with no time floor do
    short = "3 measured step(s) a trial and no time floor"
    (v,) = decide(_analysis({"s": (0.10, 0.02)}), replace(RULE7, load=load, short_trials=short))
    assert v.verdict == "inconclusive" and f"with {short}" in v.reasons[0]
    # and short trials on a quiet machine decide as before
    (v,) = decide(_analysis({"s": (0.10, 0.02)}), replace(RULE7, short_trials=short))
    assert v.verdict == "retain"
