"""Paired comparison over rounds (pure, numpy and the standard library only).

A campaign is a randomized complete block design: each round runs every arm once, in fresh
processes, interleaved, so a round is a block. Summarise each trial by the log of its median
step time (log: effects are ratios) and fit the additive model

    log t[round, arm] = mu + rho[round] + alpha[arm] + e,   e ~ (0, sigma^2)

by least squares over the cells present. The fit finds contaminated cells (below) and gives the
planner a residual SD; the intervals do not come from its pooled residual variance. A variant
often varies its own way: a per-process autotune pick, code or data layout (Mytkowicz et al.
2009), allocator state that depends on the arm, an arm x process interaction the baseline and
the A/A control (the baseline's own code) lack. A pooled variance (about sigma^2 + tau^2 / 3
with one variant and the A/A arm, where the variant's is sigma^2 + tau^2) would make its
interval too narrow at up to twice the degrees of freedom it has. So each arm's effect is
inferred from its own paired contrasts (the default, ``per_arm``): per round r,
d_r = log t[r, baseline] - log t[r, arm]; the log speedup is their mean, its standard error
sd(d) / sqrt(R), with R - 1 degrees of freedom. The round is the unit, and no arm lends
degrees of freedom to another. (With both arms in every round this is the additive model
fitted to the baseline and that arm alone.)

One contaminated trial (a stall, another job) would widen every interval of its bucket: the
cell with the largest externally studentized residual is dropped when it is beyond the
Bonferroni-corrected t quantile (:func:`fit_blocks`), and reported so the campaign re-runs it.

Sequential looks (:func:`looks`, :func:`alpha_per_look`): a campaign decides after its first
rounds and after each adaptive extension; the error rate is split evenly over the planned looks
(Bonferroni), so it holds over all of them whatever their dependence.

Variance components and the trial length (:func:`variance_components`,
:func:`optimal_steps`): after Kalibera and Jones ("Rigorous Benchmarking in Reasonable Time",
ISMM 2013), the variance of a trial's summary is sigma_b^2 + sigma_w^2 / n (between processes,
within a process over n steps); with a fixed cost c0 per trial and t per step, the wall time to
reach a given precision is least at n* = sqrt(c0 sigma_w^2 / (t sigma_b^2)).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

# --------------------------------------------------------------------------- Student t


def t_cdf(x: float, df: int) -> float:
    """P(T <= x) for Student's t with integer ``df`` >= 1 (closed form, Abramowitz and Stegun
    26.7.3/26.7.4)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    theta = math.atan2(abs(x), math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    if df % 2 == 1:
        term, total = c, c if df > 1 else 0.0
        for k in range(3, df - 1, 2):
            term *= c * c * (k - 1) / k
            total += term
        a = (2 / math.pi) * (theta + s * total) if df > 1 else 2 * theta / math.pi
    else:
        term = total = 1.0
        for k in range(2, df - 1, 2):
            term *= c * c * (k - 1) / k
            total += term
        a = s * total
    a = min(1.0, max(0.0, a))  # P(|T| < |x|)
    return 0.5 + a / 2 if x >= 0 else 0.5 - a / 2


@functools.lru_cache(maxsize=4096)  # a pure function the analysis and the simulator call
def t_quantile(p: float, df: int) -> float:  # with the same few (p, df) thousands of times
    """The p-quantile of Student's t with integer ``df`` (bisection on :func:`t_cdf`)."""
    if not 0 < p < 1:
        raise ValueError(f"p must lie in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2
        if hi > 1e12:
            return math.inf
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2


# --------------------------------------------------------------------------- the block fit


@dataclass(frozen=True)
class Effect:
    """One arm against the baseline: log speedup = log(baseline time / arm time)."""

    arm: str
    log_speedup: float
    se: float | None  # None: no residual degrees of freedom (one round)
    df: int
    rounds: int  # rounds in which both the arm and the baseline have a cell

    @property
    def speedup(self) -> float:
        return math.exp(self.log_speedup)

    def interval(self, alpha: float) -> tuple[float, float]:
        """Two-sided 1 - alpha interval on the speedup; (0, inf) without an error estimate."""
        if self.se is None or self.df < 1:
            return 0.0, math.inf
        q = t_quantile(1 - alpha / 2, self.df) * self.se
        return _exp(self.log_speedup - q), _exp(self.log_speedup + q)


def _exp(x: float) -> float:
    """exp without OverflowError: an interval bound past a float's range is 0 or inf (a
    t quantile at a tiny error rate and one degree of freedom is astronomically large)."""
    return math.exp(x) if x < 700 else math.inf


@dataclass(frozen=True)
class BlockFit:
    baseline: str
    effects: dict[str, Effect]  # every arm but the baseline
    resid_sd: float | None
    df: int
    cells: int
    dropped: tuple[tuple[int, str], ...] = ()  # (round, arm) cells left out as contaminated
    residuals: dict[tuple[int, str], float] = field(default_factory=dict)
    # arm -> round -> d_r = log t[r, baseline] - log t[r, arm] (the per-arm inference's data)
    contrasts: dict[str, dict[int, float]] = field(default_factory=dict)
    per_arm: bool = True  # effects from each arm's own contrasts (else the pooled fit's)


def contrast_effect(arm: str, d: Mapping[int, float],
                    covariates: Mapping[int, Sequence[float]] | None = None) -> Effect:
    """An arm's effect from its per-round contrasts alone: mean, sd / sqrt(R), R - 1 df.

    ``covariates`` (round -> values): the contrasts are fitted as d_r = delta + x_r . gamma + e
    and the effect is delta, its standard error from the residuals, R - 1 - k df. A duet's
    placement (orchestrator.platform.slices): x_r[j] = [baseline on slice j] - [arm on slice
    j], so a faster slice is estimated and taken out instead of widening the interval; the
    rotation keeps x balanced, so delta is the arm's own effect."""
    rounds = sorted(d)
    y = np.array([d[r] for r in rounds], dtype=float)
    n = int(y.size)
    if n == 0:
        return Effect(arm, 0.0, None, 0, 0)
    if covariates and all(r in covariates for r in rounds):
        x = np.array([[1.0, *covariates[r]] for r in rounds], dtype=float)
        rank = int(np.linalg.matrix_rank(x))
        if rank == x.shape[1] and n - rank >= 1:
            xtx_inv = np.linalg.inv(x.T @ x)
            beta = xtx_inv @ x.T @ y
            resid = y - x @ beta
            s2 = float(resid @ resid) / (n - rank)
            return Effect(arm, float(beta[0]), math.sqrt(max(s2 * xtx_inv[0, 0], 0.0)),
                          n - rank, n)
    se = float(np.std(y, ddof=1)) / math.sqrt(n) if n >= 2 else None
    return Effect(arm, float(y.mean()), se, n - 1, n)


def placement_covariates(placement: Mapping[tuple[int, str], int], baseline: str, arm: str,
                         rounds: Sequence[int]) -> dict[int, list[float]] | None:
    """round -> x_r for :func:`contrast_effect` from a duet's ``placement`` ((round, arm) ->
    slice); None when any of ``rounds`` lacks one or every arm kept its slice throughout."""
    if not all((r, baseline) in placement and (r, arm) in placement for r in rounds):
        return None
    slices = sorted({placement[(r, a)] for r in rounds for a in (baseline, arm)})
    if len(slices) < 2:
        return None
    out = {}
    for r in rounds:
        b, v = placement[(r, baseline)], placement[(r, arm)]
        out[r] = [float(b == j) - float(v == j) for j in slices[1:]]
    return out


def _design(keys: Sequence[tuple[int, str]], rounds: Sequence[int],
            arms: Sequence[str]) -> np.ndarray:
    """Columns: intercept, one per round but the first, one per arm but the baseline (arms[0])."""
    x = np.zeros((len(keys), 1 + len(rounds) - 1 + len(arms) - 1))
    x[:, 0] = 1
    for i, (r, a) in enumerate(keys):
        ri = rounds.index(r)
        if ri > 0:
            x[i, ri] = 1
        ai = arms.index(a)
        if ai > 0:
            x[i, len(rounds) - 1 + ai] = 1
    return x


def _ols(cells: Mapping[tuple[int, str], float], baseline: str) -> tuple[
        list[tuple[int, str]], list[str], np.ndarray, np.ndarray, np.ndarray, int, np.ndarray]:
    keys = sorted(cells)
    rounds = sorted({r for r, _ in keys})
    arms = [baseline] + sorted({a for _, a in keys} - {baseline})
    x = _design(keys, rounds, arms)
    y = np.array([cells[k] for k in keys], dtype=float)
    xtx_inv = np.linalg.pinv(x.T @ x)
    beta = xtx_inv @ x.T @ y
    resid = y - x @ beta
    rank = int(np.linalg.matrix_rank(x))
    df = len(keys) - rank
    return keys, arms, beta, resid, xtx_inv, df, x


def fit_blocks(cells: Mapping[tuple[int, str], float], baseline: str, *,
               outlier_alpha: float = 0.01, drop_outliers: bool = True,
               per_arm: bool = True,
               placement: Mapping[tuple[int, str], int] | None = None) -> BlockFit:
    """Fit log trial summaries ``cells[(round, arm)]`` (see the module docstring); each arm's
    effect from its own contrasts (``per_arm``), or from the pooled fit (the earlier rule,
    kept for the simulator's before/after comparison).

    With ``drop_outliers`` the cell with the largest externally studentized residual is left
    out when it exceeds the t quantile at ``outlier_alpha`` / (2 x cells) (Bonferroni over the
    cells), if at least 3 residual degrees of freedom remain; at most one cell per fit.
    ``placement``: a duet's (round, arm) -> slice; each arm's contrasts are then fitted with
    its slice covariates (:func:`contrast_effect`)."""
    if baseline not in {a for _, a in cells}:
        raise ValueError(f"no cell of the baseline {baseline!r}")
    keys, arms, beta, resid, xtx_inv, df, x = _ols(cells, baseline)
    dropped: tuple[tuple[int, str], ...] = ()
    if drop_outliers and df >= 4:
        h = np.einsum("ij,jk,ik->i", x, xtx_inv, x)
        sse = float(resid @ resid)
        best, best_t = None, 0.0
        for i, k in enumerate(keys):
            if h[i] >= 1 - 1e-9:
                continue
            s2_i = (sse - resid[i] ** 2 / (1 - h[i])) / (df - 1)
            if s2_i <= 0:
                continue
            t_i = abs(resid[i]) / math.sqrt(s2_i * (1 - h[i]))
            if t_i > best_t:
                best, best_t = k, t_i
        limit = t_quantile(1 - outlier_alpha / (2 * len(keys)), df - 1)
        if best is not None and best_t > limit and per_arm:
            # a variant's own spread is not contamination, and a variant's outlier only widens
            # its own interval (never a false decision): only a baseline cell that stands out
            # in the contrasts of every arm is left out (it would shift all of them)
            tail = outlier_alpha / (2 * len(keys))
            if best[1] != baseline or not all(
                    _stands_out(cells, baseline, a, best[0], tail) for a in arms[1:]):
                best = None
        if best is not None and best_t > limit:
            rest = {k: v for k, v in cells.items() if k != best}
            if baseline in {a for _, a in rest}:
                dropped = (best,)
                keys, arms, beta, resid, xtx_inv, df, x = _ols(rest, baseline)
    s2 = float(resid @ resid) / df if df > 0 else None
    n_rounds = len({r for r, _ in keys})
    kept = set(keys)
    effects, contrasts = {}, {}
    for ai, arm in enumerate(arms[1:], start=1):
        both = sorted({r for r, a in kept if a == arm} & {r for r, a in kept if a == baseline})
        contrasts[arm] = {r: cells[(r, baseline)] - cells[(r, arm)] for r in both}
        if per_arm:
            cov = placement_covariates(placement, baseline, arm, both) if placement else None
            effects[arm] = contrast_effect(arm, contrasts[arm], cov)
            continue
        col = n_rounds - 1 + ai
        se = math.sqrt(max(s2 * xtx_inv[col, col], 0.0)) if s2 is not None else None
        effects[arm] = Effect(arm, -float(beta[col]), se, df, len(both))
    return BlockFit(baseline, effects, math.sqrt(s2) if s2 is not None else None, df, len(keys),
                    dropped, {k: float(e) for k, e in zip(keys, resid)}, contrasts, per_arm)


def _stands_out(cells: Mapping[tuple[int, str], float], baseline: str, arm: str, round_: int,
                tail: float) -> bool:
    """Whether ``round_``'s contrast of ``arm`` lies beyond the t quantile at ``tail`` from the
    arm's other contrasts (leave one out; needs three others)."""
    rounds = sorted({r for r, a in cells if a == arm} & {r for r, a in cells if a == baseline})
    if round_ not in rounds or len(rounds) < 4:
        return False
    d = {r: cells[(r, baseline)] - cells[(r, arm)] for r in rounds}
    rest = np.array([v for r, v in d.items() if r != round_])
    sd = float(np.std(rest, ddof=1))
    if sd <= 0:
        return True
    t = abs(d[round_] - float(rest.mean())) / (sd * math.sqrt(1 + 1 / rest.size))
    return t > t_quantile(1 - tail, rest.size - 1)


def trial_cells(medians: Mapping[tuple[int, str], float]) -> dict[tuple[int, str], float]:
    """Log of each trial's median step time (non-positive medians are left out)."""
    return {k: math.log(v) for k, v in medians.items() if v and v > 0}


def mixture_cells(per_bucket: Mapping[str, Mapping[tuple[int, str], float]],
                  weights: Mapping[str, float]) -> dict[tuple[int, str], float]:
    """Per (round, arm) present in every bucket: log of the weighted total time
    sum_b w_b * median[b] (total work over total time, the throughput a mixed run sees)."""
    common = set.intersection(*(set(c) for c in per_bucket.values())) if per_bucket else set()
    return {k: math.log(sum(weights[b] * per_bucket[b][k] for b in per_bucket))
            for k in common}


def welch_p(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(mean(a) - mean(b), two-sided p) of Welch's t test; p = 1 with fewer than two of
    either or no spread."""
    if len(a) < 2 or len(b) < 2:
        return 0.0, 1.0
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    d = float(x.mean() - y.mean())
    va, vb = float(x.var(ddof=1)) / x.size, float(y.var(ddof=1)) / y.size
    if va + vb <= 0:
        return d, 1.0
    df = (va + vb) ** 2 / ((va ** 2) / (x.size - 1) + (vb ** 2) / (y.size - 1))
    t = abs(d) / math.sqrt(va + vb)
    return d, 2 * (1 - t_cdf(t, max(1, int(df))))


# --------------------------------------------------------------------------- sequential looks


def looks(repeats: int, max_rounds: int, step: int) -> list[int]:
    """The round counts at which a campaign decides: after its first ``repeats`` rounds, then
    after each adaptive extension of ``step`` rounds, up to ``max_rounds``."""
    out = [repeats]
    while out[-1] < max_rounds and step > 0:
        out.append(min(max_rounds, out[-1] + step))
    return out


def alpha_per_look(alpha: float, n_looks: int) -> float:
    """Bonferroni: each of ``n_looks`` looks spends alpha / n_looks, so the chance of any
    false decision over all looks stays under alpha."""
    return alpha / max(1, n_looks)


def alpha_spent(alpha: float, plan: Sequence[int], rounds: int, rho: float = 0.0) -> float:
    """The error rate the look after ``rounds`` rounds may spend, from a power-family spending
    function alpha * (rounds / max)^rho over the planned looks ``plan`` (Lan and DeMets; rho = 0
    spends alpha / looks at each, Bonferroni; rho = 2 to 3 keeps early looks strict and leaves
    most of alpha to the last, like O'Brien-Fleming). The amounts sum to alpha over the looks,
    so by Bonferroni's inequality the chance of any false decision over them stays under
    alpha, whatever their dependence. A look off the plan spends as the plan's next one."""
    if not plan:
        return alpha
    k = next((i for i, r in enumerate(plan) if rounds <= r), len(plan) - 1)
    if rho <= 0:
        return alpha / len(plan)
    frac = [(r / plan[-1]) ** rho for r in plan]
    return alpha * (frac[k] - (frac[k - 1] if k else 0.0))


def spending_schedule(alpha: float, plan: Sequence[int], rho: float) -> list[list[float]]:
    """[[rounds, alpha spent at that look], ...] over the planned looks (:func:`alpha_spent`),
    frozen in plan.json when a campaign is first planned."""
    return [[int(r), alpha_spent(alpha, plan, r, rho)] for r in plan]


def extend_spending(frozen: Sequence[Sequence[float]], alpha: float, plan: Sequence[int],
                    taken: int, rho: float) -> list[list[float]]:
    """The schedule of a resumed campaign whose plan may differ from the frozen one (a larger
    protocol.max_rounds): the frozen looks at or before ``taken`` rounds (the rounds already
    on disk: those looks may have been taken) keep what they spent; the plan's later looks
    share only what is left, alpha minus that, by the same power family renormalised over
    them. So however a campaign is extended, the looks spend at most alpha in all: a campaign
    that reached its last planned look has spent everything, and more rounds cannot decide."""
    kept = [[int(r), float(a)] for r, a in frozen if r <= taken]
    left = max(alpha - sum(a for _, a in kept), 0.0)
    start = kept[-1][0] if kept else 0
    later = [r for r in plan if r > start]
    if not later:
        return kept
    top = later[-1]
    base = (start / top) ** rho if rho > 0 else 0.0
    out = list(kept)
    prev = base
    for i, r in enumerate(later):
        frac = (r / top) ** rho if rho > 0 else (i + 1) / len(later)
        share = (frac - prev) / (1 - base) if rho > 0 else 1 / len(later)
        out.append([int(r), left * share])
        prev = frac
    return out


def spend_at(schedule: Sequence[Sequence[float]], rounds: int) -> float:
    """What the look after ``rounds`` rounds may spend under a frozen schedule: the first
    look at or after ``rounds``; 0 beyond the last (nothing is left)."""
    for r, a in schedule:
        if rounds <= r:
            return float(a)
    return 0.0


# --------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class Components:
    """Variance components of a bucket's log trial medians (see the module docstring)."""

    sigma_within: float  # SD of log step time within a trial (robust)
    sigma_between: float  # SD between processes, beyond what the steps' noise explains
    steps: float  # median measured steps per trial
    step_s: float  # median step time
    fixed_s: float  # per-trial fixed cost: start-up, warm-up, what follows the steps


def variance_components(resid_sd: float, trial_steps: Sequence[Sequence[float]],
                        fixed_s: float) -> Components:
    """From the block fit's residual SD (a cell's total noise; a contrast's residual carries
    both the arm's and the round's share, hence the factor (A-1)/A is ignored here: small
    campaigns make it a few percent) and the measured steps of the bucket's trials."""
    logs = [np.log(np.asarray(t, dtype=float)) for t in trial_steps if len(t) >= 2]
    if not logs:
        raise ValueError("no trial with at least two measured steps")
    within = float(np.median([1.4826 * np.median(np.abs(x - np.median(x))) for x in logs]))
    n = float(np.median([len(x) for x in logs]))
    step_s = float(np.median([np.exp(np.median(x)) for x in logs]))
    # the median of n steps has ~ pi/2 times the variance of their mean
    var_within_summary = (math.pi / 2) * within ** 2 / n
    between2 = max(resid_sd ** 2 - var_within_summary, 0.0)
    return Components(within, math.sqrt(between2), n, step_s, fixed_s)


def window_floor(measured_steps: int, measured_min_s: float, step_s: float) -> int:
    """The fewest measured steps the protocol's window allows: ``measured_steps``, and enough
    steps of ``step_s`` to fill ``measured_min_s``. The planner only lengthens trials: a
    shorter window than the protocol's is at the mercy of the host's speed changes (spans of
    0.3 s to seconds on a shared VM), a variance that longer windows average out but that the
    process-to-process component cannot tell apart."""
    need = math.ceil(measured_min_s / step_s) if measured_min_s > 0 and step_s > 0 else 0
    return max(int(measured_steps), need)


def optimal_steps(c: Components, floor: int, cap: int) -> tuple[int, str]:
    """Measured steps per trial that reach a given precision in the least wall time, with the
    reason. n* = sqrt(c0 * k * sigma_w^2 / (t * sigma_b^2)), k = pi/2 (a median's efficiency)."""
    k = math.pi / 2
    if c.sigma_within <= 0:
        return floor, "steps do not vary within a trial: more steps add nothing"
    n: float
    if c.sigma_between <= 1e-12:
        n = cap
        why = ("the trials' spread is all step noise (no process-to-process variance seen): "
               "longer trials are the cheapest precision")
    else:
        n = math.sqrt(c.fixed_s * k * c.sigma_within ** 2 / (c.step_s * c.sigma_between ** 2))
        why = (f"n* = sqrt(fixed {c.fixed_s:.2f} s x {k:.2f} x within {c.sigma_within:.3f}^2 / "
               f"(step {c.step_s * 1e3:.2f} ms x between {c.sigma_between:.3f}^2)) = {n:.0f}")
    chosen = int(min(cap, max(floor, round(n))))
    if chosen != round(n):
        why += f"; kept within [{floor}, {cap}]"
    return chosen, why


def rounds_for(log_effect: float, se: float, rounds: int, df: int, alpha: float, band: float,
               cap: int) -> int | None:
    """Rounds in all (at most ``cap``) after which, the effect and the per-round noise holding,
    a decision is reached: the 1 - alpha interval excludes 0 (significance), or the effect lies
    inside the band and the 1 - 2 alpha interval fits in it (equivalence). The standard error
    shrinks as sqrt(rounds / R) and the residual degrees of freedom grow as (R - 1) / (rounds -
    1) (R - 1 for an arm's own contrasts). None when no R up to ``cap`` decides."""
    a = abs(log_effect)
    per_round = max(df, 1) / max(rounds - 1, 1)
    for r in range(rounds + 1, cap + 1):
        d = max(1, int(per_round * (r - 1)))
        se_r = se * math.sqrt(rounds / r)
        if a > t_quantile(1 - alpha / 2, d) * se_r:
            return r
        if a + t_quantile(1 - alpha, d) * se_r < band:
            return r
    return None


# futility is judged only at a look whose critical t is at most this multiple of the last
# look's (orchestrator.analysis.decide): an early look's strict error share on few degrees of
# freedom has too little power to call anything hopeless
FUTILITY_T_RATIO = 2.0


def critical_t(alpha: float, df: int) -> float:
    """The two-sided 1 - alpha critical value of Student's t on ``df`` (>= 1)."""
    return t_quantile(1 - alpha / 2, max(1, df))


def look_power(alpha_look: float, df: int, rounds: int, alpha_last: float,
               max_rounds: int) -> tuple[bool, float, float]:
    """(whether futility may be judged at this look, its critical t, the last look's). The
    last look's degrees of freedom grow from this look's as (max_rounds - 1) / (rounds - 1)
    (R - 1 for an arm's own contrasts)."""
    per_round = max(df, 1) / max(rounds - 1, 1)
    now = critical_t(alpha_look, df)
    last = critical_t(alpha_last, int(per_round * (max(max_rounds, rounds) - 1)))
    return now <= FUTILITY_T_RATIO * last, now, last


__all__ = ["FUTILITY_T_RATIO", "critical_t", "look_power", "BlockFit", "Components", "Effect", "contrast_effect", "extend_spending", "spend_at",
           "spending_schedule", "alpha_per_look", "alpha_spent", "fit_blocks", "looks",
           "mixture_cells", "optimal_steps", "window_floor", "rounds_for", "t_cdf", "t_quantile", "trial_cells",
           "variance_components", "welch_p"]
