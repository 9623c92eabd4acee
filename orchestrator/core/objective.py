"""What a trial's (or a block's) step times are summarised by: the objective is time.

A campaign decides on training time, so a trial is summarised by its lightly trimmed mean step
time (``protocol.trial_summary``: ``trimmed_mean``, the default; ``mean``; or ``median``, the
rule before issue 28): the mean charges a variant for every step it runs, the light trimming
(one step in fifty at each end, none below fifty steps) keeps one stray step of a long trial
from deciding it. The median alone is blind to a variant whose steps are slower one time in
five. On this project's own run directories (678 arms of three or more one-arm-per-process
trials) the mean and this trimmed mean also vary least between trials: between-trial SD of the
log summary 0.094 (mean), 0.096 (2 % trimmed), 0.098 (5 %), 0.101 (10 %), 0.107 (median);
docs/protocol.md, "What a trial is summarised by".

**Recurring steady-state tags are charged.** A step the recipe tags (``compile``,
``epoch_boundary``, ``checkpoint``, ``validation`` ...) is excluded from the measured steps, so a
one-off event (the recompile at a new shape, the loader's first epoch boundary) does not swing
a trial. A tag that recurs in a trial's steady state (at least ``RECUR`` steps after its first
measured step) is a cost of running the arm: those steps are charged, each counted at its own
time in the trial's time per step:

    time = (summary(measured) * n + sum(charged)) / (n + m)

with n measured and m charged steps. Steps the harness tags itself (the excluded steps after an
arm switch, the profiler's) are never charged.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from orchestrator.core.blocks import SWITCH_TAG

SUMMARIES = ("trimmed_mean", "mean", "median")
TRIM = 0.02  # trimmed_mean: this share of the steps left out at each end (floor; none below 50)
RECUR = 2  # a steady-state tag on at least this many of a trial's steps is charged
HARNESS_TAGS = frozenset({SWITCH_TAG, "profiler"})  # the orchestrator's own, never charged


def trimmed_mean(times: Sequence[float], trim: float | None = None) -> float:
    xs = sorted(times)
    trim = TRIM if trim is None else trim
    k = math.floor(len(xs) * trim + 1e-9)
    kept = xs[k:len(xs) - k] if len(xs) - 2 * k > 0 else xs
    return sum(kept) / len(kept)


def summarize(times: Sequence[float], how: str = "trimmed_mean",
              charged: Sequence[float] = ()) -> float:
    """One time per step for ``times`` (the measured steps) by ``how``, with the ``charged``
    steps counted at their own times (module docstring)."""
    if not times:
        raise ValueError("no measured steps to summarise")
    if how == "median":
        s = statistics.median(times)
    elif how == "mean":
        s = sum(times) / len(times)
    elif how == "trimmed_mean":
        s = trimmed_mean(times)
    else:
        raise ValueError(f"unknown trial summary {how!r} (one of {', '.join(SUMMARIES)})")
    if not charged:
        return s
    return (s * len(times) + sum(charged)) / (len(times) + len(charged))


def charge_factor(times: Sequence[float], how: str, charged: Sequence[float]) -> float:
    """summary with the charged steps / summary without them (1.0 with none)."""
    if not charged or not times:
        return 1.0
    return summarize(times, how, charged) / summarize(times, how)


def _tags(row: Mapping[str, Any]) -> list[str]:
    raw = row.get("tags")
    if not isinstance(raw, str):  # NaN from a csv's empty cell
        return []
    return [t for t in raw.split(";") if t]


def charged_rows(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows of one trial's steps (steps.csv, in step order) to charge: excluded steps
    after its first measured step whose tags include one that recurs there (at least
    ``RECUR`` such steps) and none of the harness's own."""
    seen_measured = False
    steady: list[tuple[Mapping[str, Any], list[str]]] = []
    for r in rows:
        phase = r.get("phase")
        if phase == "measured":
            seen_measured = True
        elif phase == "excluded" and seen_measured:
            tags = _tags(r)
            if tags and not HARNESS_TAGS.intersection(tags):
                steady.append((r, tags))
    counts: dict[str, int] = {}
    for _, tags in steady:
        for t in set(tags):
            counts[t] = counts.get(t, 0) + 1
    return [r for r, tags in steady if any(counts[t] >= RECUR for t in tags)]


def charged_tag_counts(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """tag -> how many of the charged rows carried it."""
    out: dict[str, int] = {}
    for r in rows:
        for t in _tags(r):
            out[t] = out.get(t, 0) + 1
    return out


__all__ = ["HARNESS_TAGS", "RECUR", "SUMMARIES", "TRIM", "charge_factor", "charged_rows",
           "charged_tag_counts", "summarize", "trimmed_mean"]
