"""Contaminated trials: a trial whose median sits far outside its arm's others (pure).

One trial that ran at half speed (a host hiccup, another job's burst, a cold cache) decides the
interval of its arm when an arm has three trials. Its own steps say whether its median moved
by noise: the standard error of a trial's log median is about 1.2533 x 1.4826 x MAD / median
/ sqrt(n). A trial is flagged when its log median lies further from its arm's median (in that
bucket) than

    max(K x sqrt(S^2 + se^2), floor)

where S is the between-trial spread of the bucket, robustly pooled over its arms (1.4826 x the
median absolute deviation of every trial from its own arm's median; a screening scale only:
no interval uses it), se the trial's own standard error, and ``floor`` the smallest shift worth
a re-run (twice protocol.min_effect). The campaign re-runs a flagged trial once, as it re-runs
one measured under interference; the re-run stands and the flagged attempt is kept aside, so
nothing measured is lost and decisions.md says what was left out and why.

It needs three ok trials of an arm and four deviations to pool (before that nothing is
flagged), so it acts from the first look on. Contamination is rare by definition: where more
than one trial of an arm, or more than MAX_SHARE of a bucket's trials, would be flagged, the
spread is the host's own (a machine whose speed switches between states: the robust scale of
the many near-median trials understates it), nothing is re-run, and the note says so; re-runs
there would replace the minority state's trials by the majority's, biasing the arm.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.core.results import Status

K = 5.0  # robust z beyond which a trial is contamination rather than spread
MIN_TRIALS = 3  # ok trials of an arm before its trials are screened
MIN_DEVIATIONS = 4  # non-zero deviations a bucket's scale is pooled from
MAX_SHARE = 0.125  # more flags than this share of a bucket's trials: the host's own spread


@dataclass(frozen=True)
class Flag:
    trial_id: str
    bucket: str
    arm_id: str
    off: float  # the trial's median over its arm's median, minus 1
    limit: float  # the log shift beyond which it was flagged
    own_se: float  # its own log median's standard error (relative)

    def why(self) -> str:
        lo, hi = math.expm1(-self.limit), math.expm1(self.limit)
        return (f"contaminated: its median was {self.off:+.0%} off its arm's median (flagged "
                f"outside {lo:+.0%} to {hi:+.0%}; its own steps explain ±{self.own_se:.1%})")


def own_se(record: Mapping[str, Any]) -> float:
    """A trial's log median's standard error from its own steps (0 when unknown)."""
    med, mad, n = (record.get("step_time_median_s"), record.get("step_time_mad_s"),
                   record.get("measured_steps"))
    if not med or not mad or not n or med <= 0 or n < 2:
        return 0.0
    return 1.2533 * 1.4826 * float(mad) / float(med) / math.sqrt(float(n))


def flag(records: Iterable[Mapping[str, Any]], min_effect: float) -> list[Flag]:
    """The contaminated trials among ``records`` (ok timed trials; others are ignored)."""
    return screen(records, min_effect)[0]


def screen(records: Iterable[Mapping[str, Any]], min_effect: float
           ) -> tuple[list[Flag], list[str]]:
    """(the contaminated trials, a note per bucket whose outliers are too many to be
    contamination: the host's own spread, not re-run)."""
    groups: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
    for r in records:
        med = r.get("step_time_median_s")
        if r.get("status") != Status.OK or r.get("kind", "timed") != "timed" or not med or med <= 0:
            continue
        groups.setdefault(str(r["bucket"]), {}).setdefault(str(r["arm_id"]), []).append(r)
    floor = math.log1p(2 * min_effect)
    out: list[Flag] = []
    notes: list[str] = []
    for bucket, arms in groups.items():
        devs: list[tuple[Mapping[str, Any], float]] = []
        for trials in arms.values():
            if len(trials) < MIN_TRIALS:
                continue
            centre = statistics.median(math.log(t["step_time_median_s"]) for t in trials)
            devs += [(t, math.log(t["step_time_median_s"]) - centre) for t in trials]
        nonzero = [abs(d) for _, d in devs if d != 0.0]
        if len(nonzero) < MIN_DEVIATIONS:
            continue
        scale = 1.4826 * statistics.median(nonzero)
        got = []
        for t, d in devs:
            se = own_se(t)
            limit = max(K * math.hypot(scale, se), floor)
            if abs(d) > limit:
                got.append(Flag(str(t["trial_id"]), bucket, str(t["arm_id"]), math.expm1(d),
                                limit, se))
        per_arm = max((sum(1 for f in got if f.arm_id == a) for a in arms), default=0)
        if per_arm > 1 or len(got) > max(1, MAX_SHARE * len(devs)):
            notes.append(f"{bucket}: {len(got)} of {len(devs)} trials lie far outside their "
                         "arm's median: too many to be contamination (the host's speed "
                         "switches between states?), so none is re-run; longer trials "
                         "(protocol.measured_min_s) average over such states")
            continue
        out += got
    return out, notes
