"""From trial records to per-bucket and mixture comparisons (pure over DataFrames).

Per bucket and arm: a summary (median and MAD of step time, spread of trial medians, warm-up
and stability warnings). Per bucket and variant: the speedup over the baseline from the block
fit of log trial medians over rounds (orchestrator.core.paired: rounds are blocks, the residual
variance pooled over every arm, the A/A control included, one contaminated trial left out),
a Mann-Whitney U rank test shown as a second opinion, and the A/A control's own effect. With
several buckets, the same for the weighted mixture (total work over total time), which is the
objective a verdict decides on (orchestrator.analysis.decide).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import pandas as pd

from orchestrator.core.records import Pairing, TrialKind
from orchestrator.core import blocks
from orchestrator.core import objective
from orchestrator.core import paired
from orchestrator.core import stats
from orchestrator.core.reference import normalise
from orchestrator.spec.config import ProtocolConfig
from orchestrator.spec.sweep import Arm
from orchestrator.core.results import Status

MIXTURE = "mixture"


@dataclass
class ArmSummary:
    arm_id: str
    label: str
    bucket: str
    trials: int
    ok: int
    statuses: dict[str, int]
    errors: list[str]
    step_time_median_s: float | None = None
    step_time_mad_s: float | None = None  # median over trials of each trial's MAD
    trial_median_min_s: float | None = None
    trial_median_max_s: float | None = None
    tokens_per_s: float | None = None
    peak_mem_bytes: float | None = None
    peak_mem_source: str | None = None
    useful_flops_per_step: float | None = None
    warmup_steps_used: float | None = None  # median over trials
    excluded_steps: int = 0  # tagged steps (compile, epoch boundary, ...) left out, all trials
    excluded_tags: dict[str, int] = field(default_factory=dict)  # tag -> excluded steps with it
    warnings: list[str] = field(default_factory=list)
    # what the ok trials' steps ran, where the recipe resolves it at run time (the trial
    # record's ``executes``, recipes.base.Trainer.executes): each distinct description once,
    # as canonical JSON; ok trials that did not describe it are counted apart
    executes: list[str] = field(default_factory=list)
    executes_missing: int = 0
    # the settings every described trial says its description covers (the record's
    # ``executes_covers``, recipes.base.Trainer.executes_covers)
    executes_covers: list[str] = field(default_factory=list)
    # the trials' mean step (their charged steps included) over their median, the median over
    # trials: where it is far from 1 the median hides time the mean (the objective) counts
    mean_to_median: float | None = None
    charged_steps: int = 0  # recurring steady-state tagged steps counted in the time, all trials
    charged_tags: dict[str, int] = field(default_factory=dict)
    # which clock timed the ok trials' measured steps (the record's ``timed_by``: "device
    # events" or "host clock") -> trials; the median of their device/host agreement (None
    # without device events) and, where none had events, why (e.g. "no device events on cpu")
    timed_by: dict[str, int] = field(default_factory=dict)
    device_host_agreement: float | None = None
    timed_by_why: str = ""


@dataclass
class Comparison:
    arm_id: str
    bucket: str  # a bucket name, or "mixture"
    estimate: stats.SpeedupEstimate | None
    paired_rounds: int
    note: str = ""
    rank: stats.RankTest | None = None  # Mann-Whitney U over the paired rounds' steps
    # the effect the A/A control shows in this bucket, |A/A speedup - 1| (0.012 = 1.2 %); None without A/A
    noise_floor: float | None = None
    effect: paired.Effect | None = None  # the block fit's estimate (orchestrator.core.paired)


@dataclass
class Analysis:
    buckets: list[str]
    arms: list[Arm]  # baseline first, then the variants; the A/A control is not among them
    summaries: dict[tuple[str, str], ArmSummary] = field(default_factory=dict)  # (bucket, arm)
    comparisons: dict[tuple[str, str], Comparison] = field(default_factory=dict)  # (bucket, arm)
    bucket_weights: dict[str, float] = field(default_factory=dict)
    control: Arm | None = None  # the A/A arm, when the protocol runs one
    noise: dict[str, Comparison] = field(default_factory=dict)  # bucket or "mixture" -> A/A
    # speedups, intervals and the noise floor use host-speed-normalised step times
    # (orchestrator.core.reference); trial medians in summaries stay raw
    speed_normalised: bool = False
    alpha_look: float = 0.05  # the error rate this look spends (orchestrator.core.paired.alpha_spent)
    looks: int = 1  # planned looks (initial rounds, then each adaptive extension)
    # the frozen schedule (plan.json's "spending") has nothing left for this look: a campaign
    # extended past its last planned look cannot decide more on its data
    alpha_exhausted: bool = False
    carryover: dict[str, str] = field(default_factory=dict)  # bucket -> what the check found
    # bucket or "mixture" -> BlockFit (None: too few arms or no baseline cell to fit)
    fits: dict[str, paired.BlockFit | None] = field(default_factory=dict)
    # no A/A arm ran: the calibration record the campaign relied on instead, in words
    calibration_note: str = ""


def _timed(trials: pd.DataFrame) -> pd.DataFrame:
    if trials.empty:
        return trials
    return trials[trials.get("kind", TrialKind.TIMED) == TrialKind.TIMED]


def step_times_by_trial(steps: pd.DataFrame) -> dict[str, list[float]]:
    """trial_id -> measured step times, in step order."""
    if steps.empty:
        return {}
    sel = steps[steps["phase"] == "measured"]
    return {str(k): [float(x) for x in g["step_time_s"]] for k, g in sel.groupby("trial_id")}


def charged_by_trial(steps: pd.DataFrame
                     ) -> tuple[dict[str, list[tuple[int, float]]], dict[str, dict[str, int]]]:
    """(trial_id -> (cycle, seconds) of each step charged to it, trial_id -> tag -> its
    charged steps): the recurring steady-state tagged steps
    (orchestrator.core.objective.charged_rows; cycle -1 outside a block)."""
    if steps.empty or "tags" not in steps or "phase" not in steps:
        return {}, {}
    cols = [c for c in ("phase", "tags", "step_time_s", "block") if c in steps]
    out: dict[str, list[tuple[int, float]]] = {}
    tags: dict[str, dict[str, int]] = {}
    for tid, g in steps[cols + ["trial_id"]].groupby("trial_id", sort=False):
        if not (g["phase"] == "excluded").any():
            continue
        got = objective.charged_rows(g[cols].to_dict("records"))
        if got:
            out[str(tid)] = [(_cycle(r.get("block")), float(r["step_time_s"])) for r in got]
            tags[str(tid)] = objective.charged_tag_counts(got)
    return out, tags


def _cycle(v: Any) -> int:
    """A steps.csv row's block (cycle); -1 where it has none (an empty cell, NaN)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return -1
    return int(f) if math.isfinite(f) else -1


def _scaled(charged: dict[str, list[tuple[int, float]]], raw: dict[str, list[float]],
            normed: dict[str, list[float]]) -> dict[str, list[tuple[int, float]]]:
    """Charged steps in the units of the host-speed-normalised measured steps: each scaled by
    its trial's median normalised / raw ratio."""
    out = {}
    for t, v in charged.items():
        r, n = raw.get(t), normed.get(t)
        f = (stats.median([b / a for a, b in zip(r, n) if a > 0]) if r and n and r is not n
             else 1.0)
        out[t] = [(c, x * f) for c, x in v]
    return out


def reference_times_by_trial(steps: pd.DataFrame) -> dict[str, list[float]]:
    """trial_id -> the host-speed reference time before each measured step (trials that
    recorded one)."""
    if steps.empty or "reference_s" not in steps:
        return {}
    sel = steps[(steps["phase"] == "measured") & steps["reference_s"].notna()]
    return {str(k): [float(x) for x in g["reference_s"]] for k, g in sel.groupby("trial_id")}


def summarize_arm(
    rows: pd.DataFrame, by_trial: dict[str, list[float]], arm: Arm, bucket: str, cv_warn: float,
    charged: dict[str, list[tuple[int, float]]] | None = None,
    charged_tags: dict[str, dict[str, int]] | None = None,
) -> ArmSummary:
    statuses = rows["status"].value_counts().to_dict() if not rows.empty else {}
    ok = rows[rows["status"] == Status.OK] if not rows.empty else rows
    errors = sorted({str(e) for e in rows.get("error", pd.Series(dtype=str)).dropna() if e})
    s = ArmSummary(arm.arm_id, arm.label, bucket, len(rows), len(ok), statuses, errors)
    if ok.empty:
        return s
    ok = ok.sort_values("round")
    meds = ok["step_time_median_s"].astype(float)
    s.step_time_median_s = stats.median(meds)
    s.step_time_mad_s = stats.median(ok["step_time_mad_s"].astype(float))
    s.trial_median_min_s, s.trial_median_max_s = float(meds.min()), float(meds.max())
    tokens = ok["tokens_per_step"].dropna() if "tokens_per_step" in ok else ok.iloc[0:0]
    if len(tokens):
        s.tokens_per_s = float(tokens.iloc[0]) / s.step_time_median_s
    else:  # a command whose work per step nobody stated: no tokens/s rather than a guess
        why = next((x for x in ok.get("tokens_source", []) if isinstance(x, str)), "unknown")
        s.warnings.append(f"tokens/s not given: tokens per step {why}")
    s.peak_mem_bytes = float(ok["peak_mem_bytes"].max())
    s.peak_mem_source = str(ok["peak_mem_source"].iloc[0])
    flops = ok["useful_flops_per_step"].dropna() if "useful_flops_per_step" in ok else None
    s.useful_flops_per_step = float(flops.iloc[0]) if flops is not None and len(flops) else None
    if "warmup_steps_used" in ok:
        used = ok["warmup_steps_used"].dropna()
        s.warmup_steps_used = stats.median(used.astype(float)) if len(used) else None
        s.excluded_steps = int(ok["excluded_steps"].fillna(0).sum())
        for tags in ok.get("excluded_tags", []):
            for tag, n in (tags.items() if isinstance(tags, dict) else ()):
                s.excluded_tags[tag] = s.excluded_tags.get(tag, 0) + int(n)
        unsettled = ok[ok["warmup_settled"] == False]
        if len(unsettled):
            s.warnings.append(
                f"warm-up did not settle within protocol.warmup_max_steps in {len(unsettled)} "
                "trial(s): raise it or loosen protocol.warmup_tolerance")
    described = [x for x in ok["executes"]] if "executes" in ok else []
    described = [x for x in described if isinstance(x, (dict, list))]
    s.executes = sorted({json.dumps(x, sort_keys=True) for x in described})
    s.executes_missing = len(ok) - len(described)
    covers = [set(x) for x, d in zip(ok["executes_covers"], ok["executes"])
              if isinstance(x, list) and isinstance(d, (dict, list))] \
        if "executes_covers" in ok and "executes" in ok else []
    s.executes_covers = sorted(set.intersection(*covers)) if covers else []
    _clock_summary(s, ok)
    ids = [str(t) for t in ok["trial_id"]]
    charged, charged_tags = charged or {}, charged_tags or {}
    ratios = []
    for t in ids:
        xs = by_trial.get(t)
        if xs:
            extra = [x for _, x in charged.get(t, [])]
            ratios.append(objective.summarize(xs, "mean", extra) / stats.median(xs))
        s.charged_steps += len(charged.get(t, []))
        for tag, n in charged_tags.get(t, {}).items():
            s.charged_tags[tag] = s.charged_tags.get(tag, 0) + n
    s.mean_to_median = stats.median(ratios) if ratios else None
    s.warnings += stats.stability_warnings(
        [by_trial.get(t, []) for t in ids], [f"trial {t}" for t in ids], cv_warn=cv_warn
    )
    return s


def _clock_summary(s: ArmSummary, ok: pd.DataFrame) -> None:
    """The clock that timed the ok trials' steps, and how device and host agreed."""
    if "timed_by" not in ok:
        return
    for word in ok["timed_by"]:
        if isinstance(word, str):
            s.timed_by[word] = s.timed_by.get(word, 0) + 1
    agree = (ok["device_host_agreement"].dropna().astype(float)
             if "device_host_agreement" in ok else [])
    s.device_host_agreement = stats.median(list(agree)) if len(agree) else None
    if s.device_host_agreement is None:
        s.timed_by_why = next((w for w in ok.get("timed_by_why", []) if isinstance(w, str)), "")


def paired_rounds(
    trials: pd.DataFrame, by_trial: dict[str, list[float]], bucket: str, base: str, var: str
) -> tuple[list[list[float]], list[list[float]]]:
    """Per round where both arms succeeded: (baseline step times, variant step times)."""
    if trials.empty:
        return [], []
    ok = trials[(trials["status"] == Status.OK) & (trials["bucket"] == bucket)]
    b = ok[ok["arm_id"] == base].set_index("round")["trial_id"]
    v = ok[ok["arm_id"] == var].set_index("round")["trial_id"]
    rounds = sorted(set(b.index) & set(v.index))
    return [by_trial[str(b[r])] for r in rounds], [by_trial[str(v[r])] for r in rounds]


def trial_medians(trials: pd.DataFrame, by_trial: dict[str, list[float]], bucket: str,
                  arm_ids: Sequence[str], how: str = "median",
                  charged: dict[str, list[tuple[int, float]]] | None = None
                  ) -> dict[tuple[int, str], float]:
    """(round, arm) -> the trial's time per step: its measured (normalised, when the
    reference is on) step times summarised by ``how`` (protocol.trial_summary), its
    ``charged`` steps counted (orchestrator.core.objective), for the ok timed trials of a
    bucket."""
    charged = charged or {}
    if trials.empty:
        return {}
    ok = trials[(trials["status"] == Status.OK) & (trials["bucket"] == bucket)
                & trials["arm_id"].isin(list(arm_ids))]
    out = {}
    for _, row in ok.iterrows():
        steps = by_trial.get(str(row["trial_id"]))
        if steps:
            extra = [x for _, x in charged.get(str(row["trial_id"]), [])]
            out[(int(row["round"]), str(row["arm_id"]))] = objective.summarize(steps, how, extra)
    return out


def paired_steps(trials: pd.DataFrame, steps: pd.DataFrame, by_trial: dict[str, list[float]],
                 bucket: str, arm_ids: Sequence[str] | None = None
                 ) -> dict[tuple[int, str], list[tuple[int, float]]]:
    """protocol.pairing=steps: (round, arm) -> its measured steps as (cycle, time), in step
    order (times from ``by_trial``), for the bucket's ok trials run paired by steps; {} when
    none were."""
    if trials.empty or "pairing" not in trials or steps.empty or "block" not in steps:
        return {}
    ok = trials[(trials["status"] == Status.OK) & (trials["bucket"] == bucket)
                & (trials["pairing"] == Pairing.steps)]
    if arm_ids is not None:
        ok = ok[ok["arm_id"].isin(list(arm_ids))]
    if ok.empty:
        return {}
    # only the paired trials' steps (a command's pilot, one arm alone, has no cycles)
    sel = steps[(steps["phase"] == "measured")
                & steps["trial_id"].astype(str).isin(ok["trial_id"].astype(str))]
    cycles = {str(k): [int(x) for x in g["block"]] for k, g in sel.groupby("trial_id")}
    per: dict[tuple[int, str], list[tuple[int, float]]] = {}
    for _, row in ok.iterrows():
        t = str(row["trial_id"])
        if by_trial.get(t) and len(cycles.get(t, [])) == len(by_trial[t]):
            per[(int(row["round"]), str(row["arm_id"]))] = list(zip(cycles[t], by_trial[t]))
    return per


def paired_blocks(trials: pd.DataFrame, steps: pd.DataFrame, by_trial: dict[str, list[float]],
                  bucket: str, arm_ids: Sequence[str] | None = None
                  ) -> dict[tuple[int, str], dict[int, float]]:
    """protocol.pairing=steps: (round, arm) -> cycle -> the arm's block median."""
    return {k: blocks.block_medians([t for _, t in v], [c for c, _ in v])
            for k, v in paired_steps(trials, steps, by_trial, bucket, arm_ids).items()}


CARRYOVER_ALPHA = 0.01  # the carry-over check's error rate, over the arms


def block_cells(per: dict[tuple[int, str], list[tuple[int, float]]], baseline: str,
                carry_alpha: float = CARRYOVER_ALPHA, how: str = "median",
                charged: dict[tuple[int, str], list[float]] | None = None
                ) -> tuple[dict[tuple[int, str], float], str]:
    """The round cells of block-paired steps (orchestrator.core.blocks.round_cells) and a note.

    Each block is summarised by ``how`` (protocol.trial_summary). An arm's ``charged`` steps
    in a round (its recurring steady-state tagged steps, orchestrator.core.objective) scale its
    cell by its time per step with them over its time without them, over all its blocks of
    the round: the cycles' median ratio stays robust, and a cost that lands in a few blocks is
    charged in full rather than outvoted.

    Carry-over: per arm, the first measured step after each switch against the median of the
    rest of its block (orchestrator.core.blocks.carryover), compared with the baseline's by
    Welch's t test at ``carry_alpha`` over the arms. Where an arm's differs, a switch costs
    that arm something it would not pay in a run without switches: the first measured step
    of every block is left out (for every arm alike, as if switch_warmup_steps were one more)
    and the note says so."""
    values: dict[str, list[float]] = {}
    for (_, arm), v in per.items():
        values.setdefault(arm, []).extend(blocks.carryover(v))
    others = [a for a in values if a != baseline]
    hits = []
    for arm in others:
        d, pv = paired.welch_p(values[arm], values.get(baseline, []))
        if pv < carry_alpha / max(1, len(others)):
            hits.append(f"{arm} {d:+.1%} (p={pv:.1g})")
    note = ""
    if hits:
        trimmed = {k: [x for x, first in zip(v, blocks.block_starts(v)) if not first]
                   for k, v in per.items()}
        if all(trimmed.values()):
            per = trimmed
            note = ("carry-over: the first measured step after a switch differs from the rest "
                    f"of its block against the baseline's ({', '.join(hits)}); the first "
                    "measured step of every block was left out (raise "
                    "protocol.switch_warmup_steps to exclude it in the trials)")
        else:
            note = (f"carry-over: the first measured step after a switch differs ({', '.join(hits)}) "
                    "and blocks are too short to leave it out; raise "
                    "protocol.switch_warmup_steps or protocol.block_steps")
    def summary(xs: list[float]) -> float:
        return objective.summarize(xs, how)

    medians = {k: blocks.block_medians([t for _, t in v], [c for c, _ in v], summary)
               for k, v in per.items()}
    cells = blocks.round_cells(medians, baseline)
    for k, extra in (charged or {}).items():
        if k in cells and k in per and extra:
            cells[k] *= objective.charge_factor([t for _, t in per[k]], how, extra)
    return cells, note


def block_paired(trials: pd.DataFrame, steps: pd.DataFrame, by_trial: dict[str, list[float]],
                 bucket: str, arm_ids: Sequence[str], baseline: str, how: str = "median",
                 charged: dict[str, list[tuple[int, float]]] | None = None
                 ) -> tuple[dict[tuple[int, str], float], str]:
    """protocol.pairing=steps: (round, arm) -> a time whose ratio to the baseline's is the
    round's block-paired effect, and the carry-over note (:func:`block_cells`); ({}, "") when
    the bucket's trials were not run paired by steps."""
    per = paired_steps(trials, steps, by_trial, bucket, arm_ids)
    if not per:
        return {}, ""
    keyed: dict[tuple[int, str], list[float]] = {}
    if charged:
        sel = trials[(trials["bucket"] == bucket) & trials["trial_id"].astype(str).isin(
            list(charged))]
        for _, row in sel.iterrows():
            k = (int(row["round"]), str(row["arm_id"]))
            if k in per:
                keyed[k] = [x for _, x in charged[str(row["trial_id"])]]
    return block_cells(per, baseline, how=how, charged=keyed)


def block_paired_medians(trials: pd.DataFrame, steps: pd.DataFrame,
                         by_trial: dict[str, list[float]], bucket: str, arm_ids: Sequence[str],
                         baseline: str) -> dict[tuple[int, str], float]:
    return block_paired(trials, steps, by_trial, bucket, arm_ids, baseline)[0]


def _comparison(fit: paired.BlockFit | None, arm_id: str, key: str, alpha: float,
                rank: stats.RankTest | None = None) -> Comparison:
    eff = fit.effects.get(arm_id) if fit is not None else None
    if eff is None:
        return Comparison(arm_id, key, None, 0, "no paired round with the baseline")
    if eff.se is None:
        return Comparison(arm_id, key, None, eff.rounds,
                          f"{eff.rounds} paired round(s); an interval needs at least 2", rank=rank,
                          effect=eff)
    low, high = eff.interval(alpha)
    est = stats.SpeedupEstimate(eff.speedup, low, high, 1 - alpha, eff.rounds,
                                eff.se * math.sqrt(max(eff.rounds, 1) / 2))
    dropped = [f"r{r} {a}" for r, a in fit.dropped] if fit is not None else []
    note = (f"left out as contaminated (studentized residual beyond its Bonferroni limit): "
            f"{', '.join(dropped)}") if dropped else ""
    return Comparison(arm_id, key, est, eff.rounds, note, rank=rank, effect=eff)


def analyze(
    trials: pd.DataFrame,
    steps: pd.DataFrame,
    arms: Sequence[Arm],
    buckets: Sequence[str],
    bucket_weights: dict[str, float],
    protocol: ProtocolConfig,
    control: Arm | None = None,
    spending: Sequence[Sequence[float]] | None = None,
) -> Analysis:
    """``arms``: baseline first, then the variants; ``control``: the A/A arm, if one ran.

    Per bucket, one block fit over every arm (orchestrator.core.paired); with several buckets, one
    more over the weighted mixture. Intervals are at the per-look level
    (orchestrator.core.paired.alpha_spent: this look's share of the error rate over the protocol's
    planned looks; ``spending``: the schedule plan.json froze, which a resume extends)."""
    trials = _timed(trials)
    out = Analysis(list(buckets), list(arms), bucket_weights=dict(bucket_weights), control=control)
    _spend(out, trials, protocol, spending)
    by_trial = step_times_by_trial(steps)
    how = str(getattr(protocol, "trial_summary", "median"))
    charged, tags = (charged_by_trial(steps) if getattr(protocol, "charge_recurring_tags", False)
                     else ({}, {}))
    refs = reference_times_by_trial(steps) if protocol.speed_reference != "off" else {}
    if refs:
        raw, by_trial = by_trial, normalise(by_trial, refs)
        charged = _scaled(charged, raw, by_trial)
        out.speed_normalised = True
    base = arms[0]
    everyone = list(arms) + ([control] if control else [])
    ids = [a.arm_id for a in everyone]
    for bucket in buckets:
        for arm in everyone:
            rows = trials[(trials["bucket"] == bucket) & (trials["arm_id"] == arm.arm_id)] if (
                not trials.empty
            ) else trials
            out.summaries[(bucket, arm.arm_id)] = summarize_arm(
                rows, by_trial, arm, bucket, protocol.warn_cv, charged, tags)
    medians = {}
    for b in buckets:
        cells, note = block_paired(trials, steps, by_trial, b, ids, base.arm_id, how, charged)
        medians[b] = cells or trial_medians(trials, by_trial, b, ids, how, charged)
        if note:
            out.carryover[b] = note
    fits: dict[str, paired.BlockFit | None] = {}
    where = duet_placement(trials)
    for b in buckets:
        fits[b] = _fit(paired.trial_cells(medians[b]), base.arm_id, where.get(b))
    if len(buckets) > 1:
        mix = paired.mixture_cells(medians, bucket_weights)
        first = where.get(buckets[0])  # a round's placement is the same in every bucket
        fits[MIXTURE] = _fit(mix, base.arm_id, first)
    out.fits = fits
    a = out.alpha_look
    for key, fit in fits.items():
        for arm in everyone[1:]:
            rank = None
            if key != MIXTURE:
                pb, pv = paired_rounds(trials, by_trial, key, base.arm_id, arm.arm_id)
                if pb:
                    rank = stats.mann_whitney_u([x for t in pb for x in t],
                                                [x for t in pv for x in t])
            c = _comparison(fit, arm.arm_id, key, a, rank)
            if control is not None and arm.arm_id == control.arm_id:
                c.noise_floor = stats.noise_floor(c.estimate)
                out.noise[key] = c
            else:
                out.comparisons[(key, arm.arm_id)] = c
    for key, c in out.noise.items():
        for arm in arms[1:]:
            if (key, arm.arm_id) in out.comparisons:
                out.comparisons[(key, arm.arm_id)].noise_floor = c.noise_floor
    return out


def _spend(out: Analysis, trials: pd.DataFrame, protocol: ProtocolConfig,
           spending: Sequence[Sequence[float]] | None) -> None:
    """Set ``out``'s error rate for this look and its planned looks: the protocol's schedule
    (orchestrator.core.paired.alpha_spent), or the frozen ``spending`` when given."""
    plan = paired.looks(protocol.repeats, max(protocol.max_rounds, protocol.repeats),
                        protocol.adaptive_step_rounds)
    rounds_done = int(trials["round"].max()) + 1 if not trials.empty else protocol.repeats
    out.alpha_look = paired.alpha_spent(1 - protocol.confidence, plan, rounds_done,
                                        protocol.alpha_spending)
    out.looks = len(plan)
    if spending:  # frozen at the first plan: an extension spends only what is left
        out.alpha_look = paired.spend_at(spending, rounds_done)
        out.looks = len(spending)
        if out.alpha_look <= 0:
            out.alpha_look, out.alpha_exhausted = 1e-9, True


def _fit(cells: dict[tuple[int, str], float], baseline: str,
         placement: dict[tuple[int, str], int] | None = None) -> paired.BlockFit | None:
    if not any(a == baseline for _, a in cells) or len({a for _, a in cells}) < 2:
        return None
    return paired.fit_blocks(cells, baseline, placement=placement)


def duet_placement(trials: pd.DataFrame) -> dict[str, dict[tuple[int, str], int]]:
    """bucket -> (round, arm) -> the slice a duet trial ran on (protocol.pairing=duet)."""
    if trials.empty or "duet_slice" not in trials:
        return {}
    out: dict[str, dict[tuple[int, str], int]] = {}
    for _, row in trials[trials["duet_slice"].notna()].iterrows():
        out.setdefault(str(row["bucket"]), {})[(int(row["round"]), str(row["arm_id"]))] = int(
            row["duet_slice"])
    return out


class ComparisonRow(TypedDict):
    """A row of results.csv before the utilization columns: one bucket x arm."""

    bucket: str
    arm_id: str
    arm_label: str
    trials: int
    ok: int
    step_time_median_s: float | None
    step_time_mad_s: float | None
    mean_to_median: float | None
    charged_steps: int
    tokens_per_s: float | None
    peak_mem_bytes: float | None
    peak_mem_source: str | None
    speedup: float | None
    speedup_low: float | None
    speedup_high: float | None
    paired_rounds: int | None
    rank_test_p: float | None
    noise_floor: float | None
    warnings: str


def comparison_rows(analysis: Analysis) -> list[ComparisonRow]:
    """Flat rows (one per bucket x arm, the A/A control included) for results.csv."""
    rows: list[ComparisonRow] = []
    for (bucket, arm_id), s in analysis.summaries.items():
        c = analysis.comparisons.get((bucket, arm_id))
        if analysis.control and arm_id == analysis.control.arm_id:
            c = analysis.noise.get(bucket)
        e = c.estimate if c else None
        rows.append(
            {
                "bucket": bucket,
                "arm_id": arm_id,
                "arm_label": s.label,
                "trials": s.trials,
                "ok": s.ok,
                "step_time_median_s": s.step_time_median_s,
                "step_time_mad_s": s.step_time_mad_s,
                "mean_to_median": s.mean_to_median,
                "charged_steps": s.charged_steps,
                "tokens_per_s": s.tokens_per_s,
                "peak_mem_bytes": s.peak_mem_bytes,
                "peak_mem_source": s.peak_mem_source,
                "speedup": e.speedup if e else None,
                "speedup_low": e.low if e else None,
                "speedup_high": e.high if e else None,
                "paired_rounds": c.paired_rounds if c else None,
                "rank_test_p": c.rank.p_value if c and c.rank else None,
                "noise_floor": c.noise_floor if c else None,
                "warnings": " | ".join(s.warnings),
            }
        )
    return rows
