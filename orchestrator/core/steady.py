"""Steady state (pure, stdlib only: trial processes import it and must start fast).

A trial's first steps are slow for reasons that have nothing to do with the variable under
test (compilation, autotuning, allocator and cache warm-up). Two warm-up policies:

- ``fixed``: exclude the first ``warmup_steps`` steps;
- ``auto``: exclude at least ``warmup_steps``, then keep excluding until the median of the last
  ``window`` warm-up steps is within ``tolerance`` (relative) of the median of the ``window``
  steps before them, or until ``max_steps`` (then the trial records ``warmup_settled = False``
  and the analysis warns).

A command's trial (orchestrator.worker.external) has its whole step series only after the run,
and no tags: :func:`warmup_from_series` finds its warm-up from the steps after it, so a run of
equally slow compile steps (which agree with each other) is not taken for a steady state.

Steps a recipe tags (compile, autotune, epoch_boundary, checkpoint, validation, profiler) are
always excluded and do not count towards warm-up or measurement. Raw per-step rows are kept in
``steps.csv`` so :func:`steady_state_start` can redo the trimming offline.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

WARMUP_POLICIES = ("fixed", "auto")
# step tags that always take a step out of the statistics
EXCLUDED_TAGS = ("compile", "autotune", "epoch_boundary", "checkpoint", "validation", "profiler")


@dataclass(frozen=True)
class WarmupPolicy:
    policy: str = "fixed"  # fixed | auto
    warmup_steps: int = 3  # fixed: steps excluded; auto: the least excluded
    max_steps: int = 30  # auto: cap on warm-up steps
    window: int = 3  # auto: steps per rolling-median window
    tolerance: float = 0.05  # auto: relative difference allowed between two window medians


def windows_agree(times: Sequence[float], window: int, tolerance: float) -> bool:
    """True when the median of the last ``window`` values is within ``tolerance`` (relative)
    of the median of the ``window`` values before them."""
    if window < 1 or len(times) < 2 * window:
        return False
    last = statistics.median(times[-window:])
    prev = statistics.median(times[-2 * window:-window])
    return prev > 0 and abs(last / prev - 1) <= tolerance


def warmup_complete(times: Sequence[float], p: WarmupPolicy) -> tuple[bool, bool]:
    """(done, settled) after the warm-up steps ``times`` (tagged steps left out).

    ``settled`` is False when an ``auto`` warm-up stopped at its cap without settling."""
    n = len(times)
    if p.policy == "fixed":
        return n >= p.warmup_steps, True
    if n < p.warmup_steps:
        return False, False
    if windows_agree(times, p.window, p.tolerance):
        return True, True
    return n >= p.max_steps, False


def steady_state_start(times: Sequence[float], p: WarmupPolicy) -> tuple[int, bool]:
    """Offline re-trim: how many leading (untagged) steps the policy excludes from ``times``,
    and whether it settled. Returns ``(len(times), False)`` when the steps never settle."""
    if p.policy == "fixed":
        return min(p.warmup_steps, len(times)), len(times) > p.warmup_steps
    for k in range(max(p.warmup_steps, 1), min(p.max_steps, len(times)) + 1):
        done, settled = warmup_complete(times[:k], p)
        if done:
            return k, settled
    return len(times), False


def warmup_from_series(times: Sequence[float], p: WarmupPolicy) -> tuple[int, bool]:
    """A finished series' warm-up: how many leading steps to drop, and whether they settled.

    ``fixed``: ``warmup_steps``. ``auto``: at least ``warmup_steps`` (the floor), then up to the
    first ``window`` steps in a row none of which is slow. A slow step is slower than the
    steady level (the median of the later half of the steps after the floor) by more than
    ``tolerance`` of it or three robust standard deviations of that half (1.4826 x its MAD),
    whichever is more: compile, autotune and first-collective steps, not noise.
    At most ``max_steps`` steps, and a window is left to judge by; else the cap and
    ``settled = False`` (the floor, when the series is too short to judge)."""
    n = len(times)
    floor = min(max(p.warmup_steps, 0), n)
    if p.policy == "fixed":
        return floor, n > floor
    window = max(p.window, 1)
    cap = min(max(p.max_steps, floor), n - window)
    if cap < floor:
        return floor, False
    late = times[floor:][(n - floor) // 2:]  # the steady state, if any
    steady = statistics.median(late)
    spread = 1.4826 * statistics.median(abs(t - steady) for t in late)
    limit = steady + max(p.tolerance * abs(steady), 3 * spread)
    run = 0  # steps in a row, up to the current one, that are not slow
    for i in range(floor, n):
        run = run + 1 if times[i] <= limit else 0
        start = i - window + 1
        if start > cap:
            break
        if run >= window:
            return start, True
    return cap, False
