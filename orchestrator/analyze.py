"""From trial records to per-bucket and mixture comparisons (pure over DataFrames)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import pandas as pd

from orchestrator import stats
from orchestrator.config import ProtocolConfig
from orchestrator.sweep import Arm


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


@dataclass
class Comparison:
    arm_id: str
    bucket: str  # a bucket name, or "mixture"
    estimate: stats.SpeedupEstimate | None
    paired_rounds: int
    note: str = ""


@dataclass
class Analysis:
    buckets: list[str]
    arms: list[Arm]
    summaries: dict[tuple[str, str], ArmSummary] = field(default_factory=dict)  # (bucket, arm)
    comparisons: dict[tuple[str, str], Comparison] = field(default_factory=dict)  # (bucket, arm)
    bucket_weights: dict[str, float] = field(default_factory=dict)


def _timed(trials: pd.DataFrame) -> pd.DataFrame:
    if trials.empty:
        return trials
    return trials[trials.get("kind", "timed") == "timed"]


def summarize_arm(rows: pd.DataFrame, steps: pd.DataFrame, arm: Arm, bucket: str) -> ArmSummary:
    statuses = rows["status"].value_counts().to_dict() if not rows.empty else {}
    ok = rows[rows["status"] == "ok"] if not rows.empty else rows
    errors = sorted({str(e) for e in rows.get("error", pd.Series(dtype=str)).dropna() if e})
    s = ArmSummary(arm.arm_id, arm.label, bucket, len(rows), len(ok), statuses, errors)
    if ok.empty:
        return s
    meds = ok["step_time_median_s"].astype(float)
    s.step_time_median_s = stats.median(meds)
    s.step_time_mad_s = stats.median(ok["step_time_mad_s"].astype(float))
    s.trial_median_min_s, s.trial_median_max_s = float(meds.min()), float(meds.max())
    s.tokens_per_s = float(ok["tokens_per_step"].iloc[0]) / s.step_time_median_s
    s.peak_mem_bytes = float(ok["peak_mem_bytes"].max())
    s.peak_mem_source = str(ok["peak_mem_source"].iloc[0])
    flops = ok["useful_flops_per_step"].dropna() if "useful_flops_per_step" in ok else []
    s.useful_flops_per_step = float(flops.iloc[0]) if len(flops) else None
    return s


def measured_steps(steps: pd.DataFrame, trial_id: str) -> list[float]:
    sel = steps[(steps["trial_id"] == trial_id) & (steps["phase"] == "measured")]
    return [float(x) for x in sel["step_time_s"]]


def paired_rounds(
    trials: pd.DataFrame, steps: pd.DataFrame, bucket: str, base: str, var: str
) -> tuple[list[list[float]], list[list[float]]]:
    """Per round where both arms succeeded: (baseline step times, variant step times)."""
    ok = trials[(trials["status"] == "ok") & (trials["bucket"] == bucket)]
    b = ok[ok["arm_id"] == base].set_index("round")["trial_id"]
    v = ok[ok["arm_id"] == var].set_index("round")["trial_id"]
    rounds = sorted(set(b.index) & set(v.index))
    return (
        [measured_steps(steps, b[r]) for r in rounds],
        [measured_steps(steps, v[r]) for r in rounds],
    )


def analyze(
    trials: pd.DataFrame,
    steps: pd.DataFrame,
    arms: Sequence[Arm],
    buckets: Sequence[str],
    bucket_weights: dict[str, float],
    protocol: ProtocolConfig,
) -> Analysis:
    trials = _timed(trials)
    out = Analysis(list(buckets), list(arms), bucket_weights=dict(bucket_weights))
    base = arms[0]
    for bucket in buckets:
        for arm in arms:
            rows = trials[(trials["bucket"] == bucket) & (trials["arm_id"] == arm.arm_id)] if (
                not trials.empty
            ) else trials
            out.summaries[(bucket, arm.arm_id)] = summarize_arm(rows, steps, arm, bucket)
    for arm in arms[1:]:
        mix_b, mix_v, mix_w = [], [], []
        for bucket in buckets:
            if trials.empty:
                pb, pv = [], []
            else:
                pb, pv = paired_rounds(trials, steps, bucket, base.arm_id, arm.arm_id)
            est, note = None, ""
            if len(pb) >= 2:
                est = stats.bootstrap_speedup(
                    [pb], [pv], confidence=protocol.confidence,
                    resamples=protocol.bootstrap_resamples, seed=protocol.seed,
                )
                mix_b.append(pb)
                mix_v.append(pv)
                mix_w.append(bucket_weights[bucket])
            else:
                note = f"{len(pb)} paired round(s); an interval needs at least 2"
            out.comparisons[(bucket, arm.arm_id)] = Comparison(arm.arm_id, bucket, est, len(pb), note)
        mix = None
        note = ""
        if len(buckets) > 1 and len(mix_b) == len(buckets):
            mix = stats.bootstrap_speedup(
                mix_b, mix_v, weights=mix_w, confidence=protocol.confidence,
                resamples=protocol.bootstrap_resamples, seed=protocol.seed,
            )
        elif len(buckets) > 1:
            note = "not every bucket has paired rounds"
        if len(buckets) > 1:
            rounds = min((len(x) for x in mix_b), default=0)
            out.comparisons[("mixture", arm.arm_id)] = Comparison(arm.arm_id, "mixture", mix, rounds, note)
    return out


def comparison_rows(analysis: Analysis) -> list[dict[str, Any]]:
    """Flat rows (one per bucket x arm) for results.csv."""
    rows = []
    for (bucket, arm_id), s in analysis.summaries.items():
        c = analysis.comparisons.get((bucket, arm_id))
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
                "tokens_per_s": s.tokens_per_s,
                "peak_mem_bytes": s.peak_mem_bytes,
                "speedup": e.speedup if e else None,
                "speedup_low": e.low if e else None,
                "speedup_high": e.high if e else None,
                "paired_rounds": c.paired_rounds if c else None,
            }
        )
    return rows
