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
one measured under interference, and leaves it out only if the re-run is clean: the re-run
stands and the flagged attempt is kept aside; a re-run flagged too leaves the first attempt
standing (campaign.trials). Nothing measured is lost, and decisions.md says what was left out
and why.

It needs three ok trials of an arm and four deviations to pool (before that nothing is
flagged), so it acts from the first look on.

Paired by steps (:func:`screen_paired`) a round's arms share a run of the host, so the host's
drift between rounds is no contamination: what is screened is each arm's contrast with its
round's baseline (the median over cycles of the log ratio of its block to the baseline's), and
what stands out is a process of one arm (a per-process offset: memory layout, a cold page
cache, an allocator state) or of the baseline (every arm's contrast moves in that round). The
same limit holds, with the contrast's own standard error from its cycles; a flagged round is
re-run whole. Contamination is rare by definition: where more
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

from orchestrator.core.records import Pairing, TrialKind
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
    # median: the trial's median against its arm's; contrast: paired by steps, its round's
    # contrast with the baseline against its arm's other rounds'
    measure: str = "median"

    def why(self) -> str:
        lo, hi = math.expm1(-self.limit), math.expm1(self.limit)
        if self.measure == "contrast":
            return (f"contaminated: its contrast with its round's baseline was {self.off:+.0%} "
                    f"off its other rounds' (flagged outside {lo:+.0%} to {hi:+.0%}; its "
                    f"cycles explain ±{self.own_se:.1%}); its round re-run")
        return (f"contaminated: its median was {self.off:+.0%} off its arm's median (flagged "
                f"outside {lo:+.0%} to {hi:+.0%}; its own steps explain ±{self.own_se:.1%})")


def own_se(record: Mapping[str, Any]) -> float:
    """A trial's log median's standard error from its own steps (0 when unknown)."""
    med, mad, n = (record.get("step_time_median_s"), record.get("step_time_mad_s"),
                   record.get("measured_steps"))
    if not med or not mad or not n or med <= 0 or n < 2:
        return 0.0
    return 1.2533 * 1.4826 * float(mad) / float(med) / math.sqrt(float(n))


def _outliers(devs: list[tuple[float, float]], floor: float) -> list[tuple[int, float]] | None:
    """(index, limit) of each log deviation beyond max(K x sqrt(S^2 + se^2), floor), S pooled
    robustly over ``devs`` [(deviation, its own standard error)]; None with too few to pool."""
    nonzero = [abs(d) for d, _ in devs if d != 0.0]
    if len(nonzero) < MIN_DEVIATIONS:
        return None
    scale = 1.4826 * statistics.median(nonzero)
    limits = [max(K * math.hypot(scale, se), floor) for _, se in devs]
    return [(i, lim) for i, ((d, _), lim) in enumerate(zip(devs, limits)) if abs(d) > lim]


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
        if r.get("status") != Status.OK or r.get("kind", TrialKind.TIMED) != TrialKind.TIMED or not med or med <= 0:
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
        hits = _outliers([(d, own_se(t)) for t, d in devs], floor)
        if hits is None:
            continue
        got = [Flag(str(devs[i][0]["trial_id"]), bucket, str(devs[i][0]["arm_id"]),
                    math.expm1(devs[i][1]), limit, own_se(devs[i][0])) for i, limit in hits]
        if _too_many([f.arm_id for f in got], arms, len(got), len(devs)):
            notes.append(f"{bucket}: {len(got)} of {len(devs)} trials lie far outside their "
                         "arm's median: too many to be contamination (the host's speed "
                         "switches between states?), so none is re-run; longer trials "
                         "(protocol.measured_min_s) average over such states")
            continue
        out += got
    return out, notes


def _too_many(flagged_arms: list[str], arms: Iterable[str], hit: int, total: int) -> bool:
    """Whether the flags are too many to be contamination: more than one of an arm's, or more
    than MAX_SHARE of the trials (rounds), at least one allowed."""
    per_arm = max((flagged_arms.count(a) for a in arms), default=0)
    return per_arm > 1 or hit > max(1, MAX_SHARE * total)


def contrasts(records: Iterable[Mapping[str, Any]]
              ) -> dict[tuple[str, int], dict[str, tuple[float, float, str]]]:
    """Paired by steps: (bucket, round) -> arm -> (its contrast with the round's baseline: the
    median over common cycles of log(arm block / baseline block), that median's standard error
    from the cycles' spread, its trial id); ok timed records with cycle blocks only."""
    rounds: dict[tuple[str, int], dict[str, Mapping[str, Any]]] = {}
    bases: dict[tuple[str, int], Mapping[str, Any]] = {}
    for r in records:
        if (r.get("status") != Status.OK or r.get("kind", TrialKind.TIMED) != TrialKind.TIMED
                or r.get("pairing") != Pairing.steps or not isinstance(r.get("blocks"), list)):
            continue
        key = (str(r["bucket"]), int(r["round"]))
        if r.get("is_baseline"):
            bases[key] = r
        else:
            rounds.setdefault(key, {})[str(r["arm_id"])] = r
    out: dict[tuple[str, int], dict[str, tuple[float, float, str]]] = {}
    for key, arms in rounds.items():
        base = bases.get(key)
        if base is None:
            continue
        b = {int(x["cycle"]): float(x["median_s"]) for x in base["blocks"] if x["median_s"] > 0}
        for arm, r in arms.items():
            v = {int(x["cycle"]): float(x["median_s"]) for x in r["blocks"] if x["median_s"] > 0}
            d = [math.log(v[c] / b[c]) for c in sorted(set(v) & set(b))]
            if not d:
                continue
            mid = statistics.median(d)
            se = (1.2533 * 1.4826 * statistics.median(abs(x - mid) for x in d) / math.sqrt(len(d))
                  if len(d) > 1 else 0.0)
            out.setdefault(key, {})[arm] = (mid, se, str(r["trial_id"]))
    return out


def screen_paired(records: Iterable[Mapping[str, Any]], min_effect: float
                  ) -> tuple[list[Flag], list[str]]:
    """Paired by steps: (the arms' trials whose round contrast stands out, a note per bucket
    where too many do to be contamination). An arm's contrasts need three rounds; the flagged
    trials' rounds are what a re-run repeats (:func:`flagged_rounds`)."""
    by_bucket: dict[str, dict[str, list[tuple[int, float, float, str]]]] = {}
    for (bucket, rnd), round_arms in contrasts(records).items():
        for arm, (d, se, tid) in round_arms.items():
            by_bucket.setdefault(bucket, {}).setdefault(arm, []).append((rnd, d, se, tid))
    floor = math.log1p(2 * min_effect)
    out: list[Flag] = []
    notes: list[str] = []
    for bucket, arms in by_bucket.items():
        devs: list[tuple[str, int, float, float, str]] = []
        for arm, got in arms.items():
            if len(got) < MIN_TRIALS:
                continue
            centre = statistics.median(d for _, d, _, _ in got)
            devs += [(arm, rnd, d - centre, se, tid) for rnd, d, se, tid in got]
        hits = _outliers([(dev, se) for _, _, dev, se, _ in devs], floor)
        if hits is None:
            continue
        got_flags = [(devs[i][1], Flag(devs[i][4], bucket, devs[i][0], math.expm1(devs[i][2]),
                                       limit, devs[i][3], "contrast")) for i, limit in hits]
        rounds = {rnd for _, rnd, _, _, _ in devs}
        hit = {rnd for rnd, _ in got_flags}
        if _too_many([f.arm_id for _, f in got_flags], arms, len(hit), len(rounds)):
            notes.append(f"{bucket}: {len(hit)} of {len(rounds)} rounds have an arm whose "
                         "contrast with the baseline lies far outside its other rounds': too "
                         "many to be contamination (the processes' own spread), so none is "
                         "re-run")
            continue
        out += [f for _, f in got_flags]
    return out, notes


def screen_any(records: Iterable[Mapping[str, Any]], min_effect: float
               ) -> tuple[list[Flag], list[str]]:
    """The screen a campaign's records call for: round contrasts where its arms were paired by
    steps (:func:`screen_paired`), else trial medians (:func:`screen`)."""
    records = list(records)
    if any(r.get("pairing") == Pairing.steps for r in records):
        return screen_paired(records, min_effect)
    return screen(records, min_effect)
