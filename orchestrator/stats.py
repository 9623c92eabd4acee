"""Statistics (pure functions over arrays; times in seconds).

Each process launch is the unit of replication: a trial is summarised by the median of its
measured steps, and arms are compared over rounds. The speedup interval comes from a two-level
bootstrap: rounds are resampled in pairs (baseline and variant of the same round stay together,
so a slow round hurts both), then the steps inside each picked trial are resampled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


def median(values: Sequence[float]) -> float:
    return float(np.median(np.asarray(values, dtype=float)))


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation (unscaled)."""
    a = np.asarray(values, dtype=float)
    return float(np.median(np.abs(a - np.median(a))))


@dataclass(frozen=True)
class SpeedupEstimate:
    speedup: float  # baseline time / variant time: > 1 means the variant is faster
    low: float
    high: float
    confidence: float
    rounds: int


def _resampled_medians(
    steps: Sequence[np.ndarray], round_idx: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """For each bootstrap row, the median over the picked rounds of each trial's resampled
    step median. ``round_idx`` is (B, R) indices into ``steps``."""
    b, r = round_idx.shape
    trial_medians = np.empty((b, r))
    for j in range(r):
        for i, arr in enumerate(steps):
            rows = np.nonzero(round_idx[:, j] == i)[0]
            if rows.size == 0:
                continue
            picks = rng.integers(0, arr.size, size=(rows.size, arr.size))
            trial_medians[rows, j] = np.median(arr[picks], axis=1)
    return np.median(trial_medians, axis=1)  # type: ignore[no-any-return]


def bootstrap_speedup(
    baseline_steps: Sequence[Sequence[float]],
    variant_steps: Sequence[Sequence[float]],
    *,
    weights: Sequence[float] | None = None,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> SpeedupEstimate:
    """Speedup of the variant over the baseline with a paired two-level bootstrap interval.

    ``baseline_steps[g][r]`` / ``variant_steps[g][r]`` are not used directly; instead pass, per
    group g (a bucket), a list over rounds of per-step time arrays. For one bucket pass a
    one-element ``weights``. The mixture over groups is total work over total time:
    sum_g w_g * t_g(baseline) / sum_g w_g * t_g(variant), never a mean of per-bucket speedups.
    """
    groups_b = [[np.asarray(x, dtype=float) for x in g] for g in baseline_steps]  # type: ignore[union-attr]
    groups_v = [[np.asarray(x, dtype=float) for x in g] for g in variant_steps]  # type: ignore[union-attr]
    if len(groups_b) != len(groups_v) or not groups_b:
        raise ValueError("baseline and variant need the same, non-zero number of groups")
    w = np.ones(len(groups_b)) if weights is None else np.asarray(weights, dtype=float)
    rng = np.random.default_rng(seed)
    point_b = sum(wg * median([median(t) for t in g]) for wg, g in zip(w, groups_b))
    point_v = sum(wg * median([median(t) for t in g]) for wg, g in zip(w, groups_v))
    tot_b = np.zeros(resamples)
    tot_v = np.zeros(resamples)
    rounds = min(len(g) for g in groups_b)
    for wg, gb, gv in zip(w, groups_b, groups_v):
        if len(gb) != len(gv):
            raise ValueError("baseline and variant need one trial per round (paired)")
        idx = rng.integers(0, len(gb), size=(resamples, len(gb)))
        tot_b += wg * _resampled_medians(gb, idx, rng)
        tot_v += wg * _resampled_medians(gv, idx, rng)
    ratios = tot_b / tot_v
    alpha = (1 - confidence) / 2
    low, high = np.quantile(ratios, [alpha, 1 - alpha])
    return SpeedupEstimate(float(point_b / point_v), float(low), float(high), confidence, rounds)
