"""Statistics (pure functions over arrays; times in seconds, effects as ratios).

Each process launch is the unit of replication: a trial is summarised by the median of its
measured steps, and arms are compared over rounds. ``speedup`` = baseline time / variant time
(the inverse of the ratio of medians variant/baseline), so > 1 means the variant is faster.

- :func:`bootstrap_speedup`: ratio of medians with a two-level bootstrap interval paired by
  round (rounds are resampled together for both arms, so a slow round hurts both; then the steps
  inside each picked trial are resampled). Several buckets give the weighted mixture: total
  work over total time, never a mean of per-bucket speedups.
- :func:`mann_whitney_u`: a rank test as a second opinion (normal approximation with tie and
  continuity corrections; matches ``scipy.stats.mannwhitneyu(method="asymptotic")``).
- :func:`noise_floor`: the effect an A/A comparison (baseline against itself) shows.
- :func:`stability_warnings`: high spread, outliers, drift, a trial far from the others.
- :func:`rounds_to_resolve` / :func:`min_detectable_effect`: how many rounds an effect needs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Union

import numpy as np

MAD_TO_SD = 1.4826  # scales a normal sample's MAD to its standard deviation

Values = Union[Sequence[float], np.ndarray]  # noqa: UP007


def median(values: Values) -> float:
    return float(np.median(np.asarray(values, dtype=float)))


def mad(values: Values) -> float:
    """Median absolute deviation (unscaled)."""
    a = np.asarray(values, dtype=float)
    return float(np.median(np.abs(a - np.median(a))))


def robust_cv(values: Values) -> float:
    """1.4826 * MAD / median: a coefficient of variation that one outlier cannot inflate."""
    m = median(values)
    return MAD_TO_SD * mad(values) / m if m else 0.0


def z_value(confidence: float) -> float:
    """Two-sided normal quantile: 1.96 for 0.95."""
    return NormalDist().inv_cdf(1 - (1 - confidence) / 2)


@dataclass(frozen=True)
class SpeedupEstimate:
    speedup: float  # baseline time / variant time: > 1 means the variant is faster
    low: float
    high: float
    confidence: float
    rounds: int
    # SD over rounds of log(per-round speedup); None with fewer than 2 rounds
    round_log_sd: float | None = None

    @property
    def time_ratio(self) -> float:
        """Ratio of medians variant / baseline (< 1 means faster)."""
        return 1 / self.speedup


def _trial_median_draws(steps: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    picks = rng.integers(0, steps.size, size=(resamples, steps.size))
    return np.median(steps[picks], axis=1)  # type: ignore[no-any-return]


def _group_draws(
    trials: list[np.ndarray], round_idx: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Per bootstrap row: the median over the picked rounds of each picked trial's resampled
    step median. ``round_idx`` is (B, R) indices into ``trials``."""
    b = round_idx.shape[0]
    draws = np.stack([_trial_median_draws(t, b, rng) for t in trials])  # (R, B)
    return np.median(draws[round_idx, np.arange(b)[:, None]], axis=1)  # type: ignore[no-any-return]


def bootstrap_speedup(
    baseline_steps: Sequence[Sequence[Sequence[float]]],
    variant_steps: Sequence[Sequence[Sequence[float]]],
    *,
    weights: Sequence[float] | None = None,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> SpeedupEstimate:
    """Speedup of the variant over the baseline with a paired two-level bootstrap interval.

    ``baseline_steps[g][r]`` is the array of measured step times of the baseline trial of round
    r in group g (a bucket); same for ``variant_steps``: the rounds must be paired. For one bucket
    pass one group. The mixture over groups is total work over total time:
    sum_g w_g * t_g(baseline) / sum_g w_g * t_g(variant).
    """
    groups_b = [[np.asarray(x, dtype=float) for x in g] for g in baseline_steps]
    groups_v = [[np.asarray(x, dtype=float) for x in g] for g in variant_steps]
    if len(groups_b) != len(groups_v) or not groups_b:
        raise ValueError("baseline and variant need the same, non-zero number of groups")
    w = np.ones(len(groups_b)) if weights is None else np.asarray(weights, dtype=float)
    rng = np.random.default_rng(seed)
    point_b = point_v = 0.0
    tot_b = np.zeros(resamples)
    tot_v = np.zeros(resamples)
    for wg, gb, gv in zip(w, groups_b, groups_v):
        if len(gb) != len(gv) or not gb:
            raise ValueError("baseline and variant need one trial per round (paired)")
        point_b += wg * median([median(t) for t in gb])
        point_v += wg * median([median(t) for t in gv])
        idx = rng.integers(0, len(gb), size=(resamples, len(gb)))
        tot_b += wg * _group_draws(gb, idx, rng)
        tot_v += wg * _group_draws(gv, idx, rng)
    ratios = tot_b / tot_v
    alpha = (1 - confidence) / 2
    low, high = np.quantile(ratios, [alpha, 1 - alpha])
    rounds = min(len(g) for g in groups_b)
    # per-round speedup of the mixture (rounds paired by position across groups)
    per_round = [
        sum(wg * median(gb[r]) for wg, gb in zip(w, groups_b))
        / sum(wg * median(gv[r]) for wg, gv in zip(w, groups_v))
        for r in range(rounds)
    ]
    sd = float(np.std(np.log(per_round), ddof=1)) if rounds >= 2 else None
    return SpeedupEstimate(float(point_b / point_v), float(low), float(high), confidence, rounds, sd)


# --------------------------------------------------------------------------- rank test


@dataclass(frozen=True)
class RankTest:
    u: float  # Mann-Whitney U of x (the baseline's step times)
    p_value: float  # two-sided
    n_x: int
    n_y: int

    @property
    def prob_x_greater(self) -> float:
        """P(a baseline step is slower than a variant step), ties counted half."""
        return self.u / (self.n_x * self.n_y)


def rankdata(values: Values) -> np.ndarray:
    """Ranks 1..n, ties given their average rank."""
    a = np.asarray(values, dtype=float)
    order = np.argsort(a, kind="mergesort")
    inverse = np.empty(a.size, dtype=np.intp)
    inverse[order] = np.arange(a.size)
    s = a[order]
    first = np.r_[True, s[1:] != s[:-1]]
    dense = np.cumsum(first)[inverse]
    bounds = np.r_[np.nonzero(first)[0], a.size]
    return 0.5 * (bounds[dense] + bounds[dense - 1] + 1)  # type: ignore[no-any-return]


def mann_whitney_u(x: Values, y: Values) -> RankTest:
    """Two-sided Mann-Whitney U test, normal approximation, tie and continuity corrections."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n1, n2 = xa.size, ya.size
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need at least one value")
    both = np.concatenate([xa, ya])
    ranks = rankdata(both)
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2)
    n = n1 + n2
    _, counts = np.unique(both, return_counts=True)
    tie = float((counts**3 - counts).sum())
    var = n1 * n2 / 12 * ((n + 1) - tie / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return RankTest(u1, 1.0, n1, n2)
    z = (abs(u1 - n1 * n2 / 2) - 0.5) / math.sqrt(var)
    p = min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2)))
    return RankTest(u1, p, n1, n2)


# --------------------------------------------------------------------------- noise, rounds


def noise_floor(aa: SpeedupEstimate | None) -> float | None:
    """The effect the A/A comparison shows: |A/A speedup - 1|, the difference two identical
    arms ran at on this machine (a position or process effect the variant's own interval cannot
    see). Not the end of the A/A interval: the variant's interval already carries the sampling
    noise, and counting it twice made retain unreachable (a 5 % gain needed a 5 % half-width
    *and* a 5 % A/A floor)."""
    if aa is None:
        return None
    return abs(aa.speedup - 1)


def rounds_for_median_interval(confidence: float) -> int:
    """Fewest rounds whose median a percentile interval can bracket at ``confidence``.

    Any bootstrap interval of a median lies within the smallest and largest of the n round
    values, and those bracket the true median with probability 1 - 2 ** (1 - n): 75 % with 3
    rounds, 94 % with 5, 97 % with 6. So a decisive verdict needs n with
    1 - 2 ** (1 - n) >= confidence: 6 rounds at 95 %, 8 at 99 %."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    return max(2, math.ceil(1 + math.log2(1 / (1 - confidence)) - 1e-12))


def rounds_to_resolve(
    speedup: float, round_log_sd: float, boundary: float, confidence: float
) -> int | None:
    """Rounds for an interval around ``speedup`` to exclude ``boundary``, if the effect and the
    per-round spread stay as observed: ceil((z * sd / |log(speedup / boundary)|)^2), at least 2.
    None when the effect sits on the boundary (no number of rounds resolves it)."""
    d = abs(math.log(speedup / boundary))
    if d == 0:
        return None
    return max(2, math.ceil((z_value(confidence) * round_log_sd / d) ** 2))


def min_detectable_effect(
    round_log_sd: float, rounds: int, confidence: float, power: float = 0.8
) -> float:
    """Smallest relative speedup that ``rounds`` rounds resolve from 1 with the given power:
    exp((z_{1-a/2} + z_power) * sd / sqrt(rounds)) - 1."""
    z = z_value(confidence) + NormalDist().inv_cdf(power)
    return math.exp(z * round_log_sd / math.sqrt(rounds)) - 1


# --------------------------------------------------------------------------- warnings

OUTLIER_MADS = 5.0  # a step further than this many scaled MADs from its trial's median
OUTLIER_SHARE = 0.05  # warn when more steps than this are outliers
DRIFT_MIN = 0.03  # warn on a first-half/second-half shift larger than this
FAR_TRIAL_MIN = 0.05  # a trial median this far from the arm's median (and > 5 scaled MADs)


def stability_warnings(
    trial_steps: Sequence[Sequence[float]],
    trial_names: Sequence[str] | None = None,
    *,
    cv_warn: float = 0.10,
) -> list[str]:
    """Warnings about one arm's trials (in round order), each with what to do next."""
    out: list[str] = []
    trials = [np.asarray(t, dtype=float) for t in trial_steps if len(t)]
    if not trials:
        return out
    names = list(trial_names) if trial_names else [f"trial {i}" for i in range(len(trials))]
    within = median([robust_cv(t) for t in trials])
    if within > cv_warn:
        out.append(f"steps vary {within:.0%} within a trial (robust CV > {cv_warn:.0%}): quiet "
                   "the machine or raise protocol.measured_steps")
    meds = [median(t) for t in trials]
    if len(meds) >= 3:
        between = robust_cv(meds)
        if between > cv_warn:
            out.append(f"trial medians vary {between:.0%} between processes (robust CV > "
                       f"{cv_warn:.0%}): add rounds (protocol.max_rounds) or quiet the machine")
    n_out = n_all = 0
    for t in trials:
        m, s = median(t), MAD_TO_SD * mad(t)
        if s > 0:
            n_out += int((np.abs(t - m) > OUTLIER_MADS * s).sum())
        n_all += t.size
    if n_out > OUTLIER_SHARE * n_all:
        out.append(f"{n_out} of {n_all} steps are outliers (> {OUTLIER_MADS:g} MADs from their "
                   "trial's median): look for stalls (GC, data loading, other jobs)")
    if len(meds) >= 4:
        half = len(meds) // 2
        shift = median(meds[-half:]) / median(meds[:half]) - 1
        if abs(shift) > DRIFT_MIN:
            out.append(f"step time drifted {shift:+.1%} from the first to the second half of the "
                       "rounds: interleaving keeps the ratio fair, but the machine is not steady")
    if len(meds) >= 3:
        m, s = median(meds), MAD_TO_SD * mad(meds)
        for name, x in zip(names, meds):
            dev = x / m - 1
            if abs(dev) > FAR_TRIAL_MIN and abs(x - m) > OUTLIER_MADS * s:
                out.append(f"{name} is {dev:+.0%} off the arm's median: check it for "
                           "interference and rerun that round")
    return out
