"""The block-design estimator, the sequential looks and the planner, with numbers by hand."""

from __future__ import annotations

import math

import pytest

from orchestrator.core import paired


def test_t_distribution_against_tabulated_values() -> None:
    # Student-t quantiles from printed tables (two-sided 95 %: 12.706, 4.303, 2.776, 2.306)
    for df, q in ((1, 12.706), (2, 4.303), (4, 2.776), (8, 2.306)):
        assert paired.t_quantile(0.975, df) == pytest.approx(q, abs=5e-4)
    assert paired.t_cdf(0.0, 5) == 0.5
    assert paired.t_cdf(1.0, 1) == pytest.approx(0.75)  # Cauchy: 1/2 + atan(1)/pi
    assert paired.t_cdf(-1.0, 1) == pytest.approx(0.25)
    # df = 2: P(T <= x) = 1/2 + x / (2 sqrt(2 + x^2))
    assert paired.t_cdf(1.5, 2) == pytest.approx(0.5 + 1.5 / (2 * math.sqrt(2 + 2.25)))
    with pytest.raises(ValueError):
        paired.t_quantile(1.0, 3)


def test_two_rounds_two_arms_is_the_paired_t() -> None:
    # log times: base 1.0, 1.2; variant 0.9, 1.0 -> differences 0.1, 0.2: mean 0.15,
    # SD 0.0707, SE 0.05, df 1
    cells = {(0, "a0"): 1.0, (1, "a0"): 1.2, (0, "a1"): 0.9, (1, "a1"): 1.0}
    fit = paired.fit_blocks(cells, "a0")
    e = fit.effects["a1"]
    assert e.log_speedup == pytest.approx(0.15) and e.se == pytest.approx(0.05)
    assert e.df == 1 and e.rounds == 2
    lo, hi = e.interval(0.05)
    q = 12.7062047
    assert math.log(lo) == pytest.approx(0.15 - q * 0.05, rel=1e-6)
    assert math.log(hi) == pytest.approx(0.15 + q * 0.05, rel=1e-6)


def test_round_effects_cancel_and_variance_is_pooled_over_arms() -> None:
    # 3 rounds x 3 arms; round shifts +0, +0.5, -0.3 cancel; residuals +-0.01 pattern
    shift = {0: 0.0, 1: 0.5, 2: -0.3}
    arm = {"a0": 0.0, "aa": 0.0, "a1": -0.1}  # a1 is exp(0.1) = 1.105x faster
    noise = {(0, "a0"): 0.01, (0, "aa"): -0.01, (0, "a1"): 0.0,
             (1, "a0"): -0.01, (1, "aa"): 0.0, (1, "a1"): 0.01,
             (2, "a0"): 0.0, (2, "aa"): 0.01, (2, "a1"): -0.01}
    cells = {(r, a): 1 + shift[r] + arm[a] + noise[(r, a)] for r in shift for a in arm}
    fit = paired.fit_blocks(cells, "a0")
    assert fit.df == 4  # (3 - 1) x (3 - 1)
    # the noise is a Latin square with zero row and column means: residuals are the noise,
    # SSE = 6 x 0.01^2, s^2 = 1.5e-4, SE of a contrast = sqrt(2 s^2 / 3) = 0.01
    assert fit.resid_sd == pytest.approx(math.sqrt(6e-4 / 4))
    assert fit.effects["a1"].log_speedup == pytest.approx(0.1)
    assert fit.effects["a1"].se == pytest.approx(0.01)
    assert fit.effects["aa"].log_speedup == pytest.approx(0.0, abs=1e-12)


def test_one_contaminated_trial_is_left_out() -> None:
    """A contaminated baseline cell shifts every arm's contrast of its round: left out. A
    variant's own outlier is kept: it widens that variant's interval only (no false
    decision), and a variant's natural spread must never pass for contamination."""
    cells = {}
    for r in range(5):
        for i, (a, eff) in enumerate((("a0", 0.0), ("aa", 0.0), ("a1", -0.1))):
            cells[(r, a)] = 1 + 0.1 * r + eff + 0.002 * ((r * 7 + i * 3) % 5 - 2)
    clean = paired.fit_blocks(cells, "a0")
    assert clean.dropped == ()
    base_hit = dict(cells)
    base_hit[(2, "a0")] += 0.5  # another job ran during the baseline's trial
    fit = paired.fit_blocks(base_hit, "a0")
    assert fit.dropped == ((2, "a0"),)
    assert fit.effects["a1"].log_speedup == pytest.approx(0.1, abs=0.005)
    kept = paired.fit_blocks(base_hit, "a0", drop_outliers=False)
    assert kept.effects["a1"].se > 10 * fit.effects["a1"].se
    var_hit = dict(cells)
    var_hit[(2, "a1")] += 0.5
    fit = paired.fit_blocks(var_hit, "a0")
    assert fit.dropped == () and fit.effects["a1"].se > 10 * clean.effects["a1"].se
    # the earlier pooled rule dropped it
    assert paired.fit_blocks(var_hit, "a0", per_arm=False).dropped == ((2, "a1"),)


def test_unbalanced_rounds_after_a_variant_dropped_out() -> None:
    cells = {(r, a): 1.0 + (0.05 if a == "a2" else 0.0) + 0.01 * ((r + len(a)) % 2)
             for r in range(3) for a in ("a0", "a1", "a2")}
    cells.update({(r, a): 1.0 + 0.01 * ((r + len(a)) % 2) for r in (3, 4) for a in ("a0", "a1")})
    fit = paired.fit_blocks(cells, "a0")
    assert fit.effects["a1"].rounds == 5 and fit.effects["a2"].rounds == 3
    assert fit.effects["a2"].log_speedup == pytest.approx(-0.05, abs=0.02)


def test_mixture_is_total_work_over_total_time() -> None:
    per = {"s": {(0, "a0"): 1.0, (0, "a1"): 0.5}, "l": {(0, "a0"): 3.0, (0, "a1"): 3.0,
                                                       (1, "a0"): 9.9}}
    mix = paired.mixture_cells(per, {"s": 1.0, "l": 1.0})
    assert set(mix) == {(0, "a0"), (0, "a1")}  # round 1 lacks bucket s
    assert math.exp(mix[(0, "a0")] - mix[(0, "a1")]) == pytest.approx(4.0 / 3.5)


def test_looks_and_alpha_per_look() -> None:
    assert paired.looks(3, 7, 2) == [3, 5, 7]
    assert paired.looks(3, 8, 2) == [3, 5, 7, 8]
    assert paired.looks(3, 3, 2) == [3]
    assert paired.alpha_per_look(0.05, 3) == pytest.approx(0.05 / 3)


def test_rounds_for_by_hand() -> None:
    a = 0.05 / 3
    # effect 0.05, SE 0.02 at 3 rounds with 4 df: at 4 rounds df 6, t 3.29 x 0.0173 = 0.057
    # > 0.05; at 5 rounds df 8, t 3.016 x 0.0155 = 0.0467 < 0.05
    assert paired.rounds_for(0.05, 0.02, 3, 4, a, math.log(1.02), 21) == 5
    # an effect inside the band resolves by equivalence: 0.002 + t_one x se_R < 0.0198
    r = paired.rounds_for(0.002, 0.01, 3, 4, a, math.log(1.02), 21)
    assert r is not None and r > 3
    # on the band's edge nothing within the cap decides (at 15 rounds: SE 0.0089, df 28,
    # t 2.56 -> 0.0229 > 0.0198, and no room for equivalence)
    assert paired.rounds_for(math.log(1.02), 0.02, 3, 4, a, math.log(1.02), 15) is None


def test_the_planner_never_shortens_the_protocols_window() -> None:
    # 0.5 s of 6 ms steps is 84 steps (83.3 rounded up); 10 steps alone when that is more
    assert paired.window_floor(10, 0.5, 0.006) == 84
    assert paired.window_floor(10, 0.5, 0.2) == 10
    assert paired.window_floor(10, 0.0, 0.006) == 10
    c = paired.Components(0.05, 0.2, 84, 0.006, 3.0)  # between-process noise dominates
    n, why = paired.optimal_steps(c, paired.window_floor(10, 0.5, c.step_s), 2000)
    # n* = sqrt(3 x pi/2 x 0.0025 / (0.006 x 0.04)) = 7.0, but the window holds 84
    assert n == 84 and "= 7;" in why and "kept within [84, 2000]" in why


def test_variance_components_and_the_optimal_trial_length() -> None:
    # within: log steps cycle -0.05, 0, +0.05 around the median -> MAD 0.05, robust SD
    # 1.4826 x 0.05
    steps = [[math.exp(0.05 * (i % 3 - 1)) * 0.01 for i in range(99)]] * 4
    c = paired.variance_components(0.02, steps, fixed_s=2.0)
    w = 1.4826 * 0.05
    assert c.sigma_within == pytest.approx(w, rel=1e-3)
    between2 = 0.02 ** 2 - (math.pi / 2) * w ** 2 / 99
    assert c.sigma_between == pytest.approx(math.sqrt(between2), rel=1e-3)
    n, why = paired.optimal_steps(c, floor=10, cap=2000)
    expect = math.sqrt(2.0 * (math.pi / 2) * w ** 2 / (c.step_s * between2))
    assert n == round(expect) and "n* =" in why
    # all process noise, no step noise: the floor; all step noise: the cap
    assert paired.optimal_steps(paired.Components(0.0, 0.1, 100, 0.01, 2.0), 10, 2000)[0] == 10
    assert paired.optimal_steps(paired.Components(0.1, 0.0, 100, 0.01, 2.0), 10, 2000)[0] == 2000


def test_alpha_spending_by_hand() -> None:
    plan = [3, 5, 7]
    # rho 3: cumulative (3/7)^3 = 0.0787, (5/7)^3 = 0.3644, 1 -> shares 0.0787, 0.2857, 0.6356
    got = [paired.alpha_spent(0.05, plan, r, 3.0) for r in plan]
    assert got == pytest.approx([0.05 * 27 / 343, 0.05 * (125 - 27) / 343, 0.05 * (343 - 125) / 343])
    assert sum(got) == pytest.approx(0.05)
    # rho 0: Bonferroni, the same share at every look
    assert [paired.alpha_spent(0.05, plan, r, 0.0) for r in plan] == pytest.approx([0.05 / 3] * 3)
    # a fixed protocol has one look: all of alpha
    assert paired.alpha_spent(0.05, [7], 7, 3.0) == pytest.approx(0.05)


def test_frozen_spending_is_never_spent_twice() -> None:
    """plan.json freezes the looks' shares; a resume to more rounds keeps what the looks on
    disk spent and shares only what is left, so the total stays alpha."""
    frozen = paired.spending_schedule(0.05, [3, 5, 7], 3.0)
    assert abs(sum(a for _, a in frozen) - 0.05) < 1e-12
    # the campaign reached its last look: an extension gets nothing
    ext = paired.extend_spending(frozen, 0.05, [3, 5, 7, 9, 11], 7, 3.0)
    assert ext[:3] == frozen and [a for _, a in ext[3:]] == [0.0, 0.0]
    assert paired.spend_at(ext, 9) == 0.0 and paired.spend_at(ext, 12) == 0.0
    # stopped after round 4 (look 3 taken): the same plan spends as frozen ...
    same = paired.extend_spending(frozen, 0.05, [3, 5, 7], 4, 3.0)
    assert all(abs(a - b) < 1e-12 for (_, a), (_, b) in zip(same, frozen))
    # ... and a longer one shares the rest, still alpha in all
    longer = paired.extend_spending(frozen, 0.05, [3, 5, 7, 9], 4, 3.0)
    assert longer[0] == frozen[0] and abs(sum(a for _, a in longer) - 0.05) < 1e-12


def test_an_interval_at_a_tiny_error_rate_does_not_overflow() -> None:
    """Issue 51: bisect --retries 1000000000 spent so little error rate per look that the t
    quantile at one degree of freedom overflowed exp(); the bounds are 0 and inf instead."""
    eff = paired.Effect("a1", 0.05, 0.01, 1, 2)
    lo, hi = eff.interval(1e-9)
    assert lo == 0.0 and hi == math.inf
