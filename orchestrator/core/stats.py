"""Statistics (pure functions over arrays; times in seconds, effects as ratios).

Each process launch is the unit of replication: a trial is summarised by the median of its
measured steps, and arms are compared over rounds. ``speedup`` = baseline time / variant time
(the inverse of the ratio of medians variant/baseline), so > 1 means the variant is faster.

- the speedup and its interval come from the block fit in :mod:`orchestrator.core.paired`.
- :func:`mann_whitney_u`: a rank test as a second opinion (normal approximation with tie and
  continuity corrections; matches ``scipy.stats.mannwhitneyu(method="asymptotic")``).
- :func:`noise_floor`: the effect an A/A comparison (baseline against itself) shows.
- :func:`stability_warnings`: high spread, outliers, drift, a trial far from the others.
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


# --------------------------------------------------------------------------- noise


def noise_floor(aa: SpeedupEstimate | None) -> float | None:
    """The effect the A/A comparison shows: |A/A speedup - 1|, the difference two identical
    arms ran at on this machine (a position or process effect the variant's own interval cannot
    see). Not the end of the A/A interval: the variant's interval already carries the sampling
    noise, and counting it twice made retain unreachable (a 5 % gain needed a 5 % half-width
    *and* a 5 % A/A floor)."""
    if aa is None:
        return None
    return abs(aa.speedup - 1)


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
