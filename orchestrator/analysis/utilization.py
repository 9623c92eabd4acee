"""MFU/HFU of a campaign: per bucket x arm and for the mixture, against every peak the
trials reported (pure over trial records and the analysis), and their rendering for
decisions.md and results.csv. The FLOP kinds and the per-trial counting live in
:mod:`orchestrator.platform.flops`."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.core.records import TrialKind
from orchestrator.platform.flops import utilization
from orchestrator.core.logparse import TRAINER_MFU_LABEL
from orchestrator.core.results import Status
from orchestrator.core.trial_record import PeakRefDict, TrialRecordDict

if TYPE_CHECKING:  # start-up cost: analyze imports pandas; only its row type is used here
    from orchestrator.analysis.analyze import ComparisonRow


@dataclass
class PeakSummary:
    label: str
    kind: str
    dtype: str
    hardware: str
    peak_tflops: float | None
    source: str
    note: str | None
    trials: int = 0
    spread_tflops: tuple[float, float] | None = None  # min, max over trials (measured)


@dataclass
class UtilizationRow:
    bucket: str  # a bucket name, or "mixture"
    arm_id: str
    label: str
    step_time_s: float | None
    useful_flops_per_step: float | None
    executed_flops_per_step: float | None
    executed_coverage_time: float | None
    mfu: dict[str, float | None] = field(default_factory=dict)  # peak label -> MFU
    hfu: dict[str, float | None] = field(default_factory=dict)


def summarize_peaks(records: Sequence[TrialRecordDict]) -> list[PeakSummary]:
    """One peak per label over the ok trials. A measured peak is the best over the trials'
    calibrations (each the best of its runs): a trial that calibrated on a busy machine must
    not lower the peak, which would inflate MFU."""
    by_label: dict[str, list[PeakRefDict]] = defaultdict(list)
    for r in records:
        if r.get("status") == Status.OK and isinstance(r.get("peaks"), list):
            for p in r["peaks"]:
                by_label[p["label"]].append(p)
    out = []
    for label, ps in by_label.items():
        vals = [float(p["peak_tflops"]) for p in ps if p.get("peak_tflops")]  # type: ignore[arg-type]  # filtered: a number
        first = ps[0]
        notes: list[str] = sorted({p["reason"] for p in ps if p.get("reason")})  # type: ignore[misc]  # filtered: text
        out.append(PeakSummary(
            label, first["kind"], first["dtype"], first["hardware"],
            (max(vals) if first["kind"] == "measured" else statistics.median(vals)) if vals else None,
            first["source"], "; ".join(notes) or None,
            len(ps), (min(vals), max(vals)) if vals and first["kind"] == "measured" else None,
        ))
    return out


def _median(values: Iterable[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    return statistics.median(vals) if vals else None


def campaign_utilization(records: Sequence[TrialRecordDict], analysis: Any) -> tuple[list[PeakSummary], list[UtilizationRow]]:
    """MFU/HFU per bucket x arm (median step time of the arm) and per arm for the mixture."""
    peaks = summarize_peaks(records)
    ok = [r for r in records if r.get("status") == Status.OK and r.get("kind", TrialKind.TIMED) == TrialKind.TIMED]
    rows: list[UtilizationRow] = []
    for arm in analysis.arms:
        work: list[tuple[float, float | None, float | None, float | None]] = []
        for bucket in analysis.buckets:
            s = analysis.summaries[(bucket, arm.arm_id)]
            mine = [r for r in ok if r.get("bucket") == bucket and r.get("arm_id") == arm.arm_id]
            fl = [r["flops"] if isinstance(r.get("flops"), dict) else {} for r in mine]
            useful = _median(f.get("useful_per_step") for f in fl) or s.useful_flops_per_step
            executed = _median(f.get("executed_per_step") for f in fl)
            row = UtilizationRow(bucket, arm.arm_id, arm.label, s.step_time_median_s, useful, executed,
                                 _median(f.get("executed_coverage_time") for f in fl))
            _fill(row, peaks, useful, executed, s.step_time_median_s)
            rows.append(row)
            work.append((analysis.bucket_weights.get(bucket, 1.0), s.step_time_median_s, useful, executed))
        if len(analysis.buckets) > 1:
            rows.append(_mixture_row(arm, work, peaks))
    return peaks, rows


def _fill(row: UtilizationRow, peaks: Sequence[PeakSummary], useful: float | None,
          executed: float | None, t: float | None) -> None:
    for p in peaks:
        ok = p.peak_tflops is not None and t is not None and t > 0
        row.mfu[p.label] = utilization(useful, t, p.peak_tflops) if ok and useful is not None else None  # type: ignore[arg-type]
        row.hfu[p.label] = utilization(executed, t, p.peak_tflops) if ok and executed is not None else None  # type: ignore[arg-type]


def _mixture_row(arm: Any, work: Sequence[tuple[float, float | None, float | None, float | None]],
                 peaks: Sequence[PeakSummary]) -> UtilizationRow:
    """Step-weighted mean FLOPs and time of one arm's buckets: total work over total time."""
    total_w = sum(w for w, *_ in work) or 1.0

    def mean(i: int) -> float | None:
        vals = [x[i] for x in work]
        if any(v is None for v in vals):
            return None
        return sum(x[0] * float(v) for x, v in zip(work, vals) if v is not None) / total_w

    t_mix = mean(1)
    row = UtilizationRow("mixture", arm.arm_id, arm.label, t_mix, mean(2), mean(3), None)
    _fill(row, peaks, row.useful_flops_per_step, row.executed_flops_per_step, t_mix)
    return row


def _pct(x: float | None) -> str:
    return "—" if x is None else (f"{x * 100:.2f}%" if x >= 1e-3 else f"{x * 100:.2g}%")


def _gflop(x: float | None) -> str:
    return "—" if x is None else f"{x / 1e9:.4g}"


def trainer_reported_lines(records: Sequence[TrialRecordDict]) -> list[str]:
    """The MFU a trainer logged itself, per arm, labelled as its claim (pure): the median over
    an arm's ok trials of each trial's median over its measured steps."""
    ok = [r for r in records if r.get("status") == Status.OK and r.get("kind", TrialKind.TIMED) == TrialKind.TIMED
          and "trainer_reported_mfu_label" in r]
    if not ok:
        return []
    by_arm: dict[str, list[TrialRecordDict]] = defaultdict(list)
    for r in sorted(ok, key=lambda r: str(r.get("arm_id"))):
        by_arm[str(r.get("arm_label"))].append(r)
    cells = ", ".join(f"`{arm}` {_pct(_median(r.get('trainer_reported_mfu_median') for r in rs))}"
                      for arm, rs in by_arm.items())
    left = sum(int(r.get("trainer_reported_mfu_left_out") or 0) for r in ok)
    note = (f"; {left} negative step value(s) left out (a 'not measured yet' sentinel such as "
            "nanoGPT's -100.00%)" if left else "")
    return [(f"- **{TRAINER_MFU_LABEL}**: {cells} — median over trials of each trial's median "
             f"over its measured steps{note}. Not comparable with the MFU below, which names its "
             "FLOPs and its peak.")]


def utilization_section(records: Sequence[TrialRecordDict], peaks: Sequence[PeakSummary],
                        rows: Sequence[UtilizationRow]) -> list[str]:
    """Markdown lines for decisions.md: definitions, peaks with their kind, the table, and
    beside it any MFU the trainer logged itself, labelled as its own claim."""
    claimed = trainer_reported_lines(records)
    ok = [r for r in records if r.get("status") == Status.OK and isinstance(r.get("flops"), dict)]
    if not ok:
        if claimed:
            return [*claimed, ("- no MFU of ours: declare workload.flops_per_step (useful FLOPs of "
                               "one step on one device) for one against a stated peak")]
        return ["No successful trial reported FLOPs."]
    f0 = ok[0]["flops"]
    covs: list[float] = [r["flops"].get("executed_coverage_time") for r in ok if r["flops"].get("executed_coverage_time") is not None]  # type: ignore[misc]  # filtered: a number
    lines = [
        f"- **useful FLOPs** (MFU numerator): {f0.get('useful_definition')}",
        (f"- **executed FLOPs** (HFU numerator): {f0.get('executed_definition')}"
         + (f"; coverage: {min(covs) * 100:.0f}–{max(covs) * 100:.0f}% of op time had a FLOP "
            "formula" if covs else f"; {f0.get('executed_note', 'not counted')}"))
        if f0.get("executed_definition") else  # a host-only recipe: nothing counted, say why
        f"- **executed FLOPs** (HFU numerator): {f0.get('executed_note') or 'not counted'}",
        ("- utilization = FLOPs per device-step / (median step time x peak per device); the "
         "mixture is total FLOPs over total time at the buckets' step weights"),
        f"- matmul precision: {ok[0].get('matmul_dtype') or 'none'} "
        f"({ok[0].get('matmul_dtype_why') or 'not reported'})",
        *claimed,
    ]
    for p in peaks:
        if p.peak_tflops is None:
            lines.append(f"- peak `{p.label}` ({p.kind} entry `{p.hardware}`, {p.dtype}): "
                         f"**none** — {p.note}; source: {p.source}")
            continue
        what = ("relative to a **measured** peak" if p.kind == "measured"
                else "relative to a **datasheet** peak")
        spread = (f"; the best over {p.trials} trials (range {p.spread_tflops[0]:.4g}–"
                  f"{p.spread_tflops[1]:.4g})" if p.spread_tflops else "")
        lines.append(f"- peak `{p.label}` ({what}): {p.peak_tflops:.4g} TFLOP/s {p.dtype}, "
                     f"{p.hardware}; source: {p.source}{spread}" + (f"; note: {p.note}" if p.note else ""))
    labels = [p.label for p in peaks]
    # every column names its FLOP kind (MFU: useful, HFU: executed) and its peak's kind
    head = "| " + " | ".join(["bucket", "arm", "useful GFLOP/step", "executed GFLOP/step", *(
        f"MFU vs {p.label} ({p.kind}) | HFU vs {p.label} ({p.kind})" for p in peaks)]) + " |"
    lines += ["", ("MFU = useful FLOPs, HFU = executed FLOPs (definitions above), each against "
                   "the peak named in its column (kind in brackets, source above)."), "", head, "|" + "---|---|" + "---:|---:|" + "---:|---:|" * len(labels)]
    for r in rows:
        cells = [f"{_pct(r.mfu.get(lb))} | {_pct(r.hfu.get(lb))}" for lb in labels]
        lines.append("| " + " | ".join([r.bucket, r.label, _gflop(r.useful_flops_per_step),
                                        _gflop(r.executed_flops_per_step), *cells]) + " |")
    return lines


def add_utilization_columns(rows: list[ComparisonRow], peaks: Sequence[PeakSummary],
                            util: Sequence[UtilizationRow]) -> list[dict[str, Any]]:
    """results.csv rows (bucket x arm) with FLOPs, and per peak label its figure, its kind
    (datasheet / measured), MFU (useful FLOPs) and HFU (executed FLOPs), appended."""
    by_key = {(u.bucket, u.arm_id): u for u in util}
    labels = [p.label for p in peaks]
    by_label = {p.label: p for p in peaks}
    out = []
    for row in rows:
        u = by_key.get((row["bucket"], row["arm_id"]))
        extra: dict[str, float | str | None] = {
            "useful_flops_per_step": u.useful_flops_per_step if u else None,
            "executed_flops_per_step": u.executed_flops_per_step if u else None,
            "executed_flop_coverage_time": u.executed_coverage_time if u else None,
        }
        for lb in labels:
            extra[f"peak_tflops_{lb}"] = by_label[lb].peak_tflops
            extra[f"peak_kind_{lb}"] = by_label[lb].kind
            extra[f"mfu_vs_{lb}"] = u.mfu.get(lb) if u else None
            extra[f"hfu_vs_{lb}"] = u.hfu.get(lb) if u else None
        out.append({**row, **extra})
    return out
