"""Trace analysis: pure functions over the event DataFrame of :func:`.trace.events_frame`.

Times are microseconds, as in Chrome traces (columns end in ``_us``). The device timeline is
the device's kernels, copies and sets when the trace has them (CUDA, MUSA); on a CPU-only trace
the host operators stand in for it, and host gaps have no meaning (the device is the host).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypedDict

import numpy as np
import pandas as pd

from orchestrator.analysis.profile import patterns
from orchestrator.core import phases

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


# --------------------------------------------------------------------------- records


class PhaseTime(TypedDict):
    """A row of :func:`phase_breakdown` before its share is added."""

    phase: str
    time_us: float


class PhaseCheck(TypedDict):
    """Whether the named phases add up to the step (framework summary ``phase_check``)."""

    named_phases_us: float
    step_us: float
    covered: float
    tolerance: float
    ok: bool


class RegionTime(TypedDict):
    """One marked region per step (framework summary ``regions.<region>``)."""

    time_s: float
    share: float | None
    ranges_per_step: float


class AllocatorCalls(TypedDict, total=False):
    """Driver-level allocator calls per step (framework summary ``allocator``); a CPU trace
    has only ``applicable`` (false) and ``note``."""

    applicable: bool
    note: str
    calls_per_step: float
    time_us_per_step: float
    share: float | None


class HostGaps(TypedDict, total=False):
    """The device waiting for the host (framework summary ``host_gaps``); a CPU trace has
    only ``applicable`` (false) and ``note``."""

    applicable: bool
    note: str
    min_gap_us: float
    gaps_per_step: float
    idle_us_per_step: float
    largest_gap_us: float


class OpRow(TypedDict):
    """A row of :func:`op_breakdown` (framework summary ``top_ops``)."""

    name: str
    category: str
    count_per_step: float
    self_us_per_step: float
    total_us_per_step: float
    share: float


class SyncRow(TypedDict):
    """A row of :func:`synchronisations` (framework summary ``synchronisations``)."""

    name: str
    phase: str
    count: int


class MemoryRow(TypedDict):
    """A row of :func:`memory_by_phase` (framework summary ``memory_by_phase``)."""

    phase: str
    device_type: Any  # the trace's ``Device Type`` argument, as the profiler wrote it
    peak_allocated_bytes: float


class OpChange(TypedDict):
    """A row of :func:`op_diff` (a trace diff's ``ops``)."""

    name: str
    category: str
    self_us_per_step_base: float
    self_us_per_step_variant: float
    count_per_step_base: float
    count_per_step_variant: float
    delta_us: float
    change: str  # changed | added | removed


class PhaseChange(TypedDict):
    """A row of :func:`phase_diff` (a trace diff's ``phases``)."""

    phase: str
    time_us_base: float
    share_base: float
    time_us_variant: float
    share_variant: float
    delta_us: float


class PhaseShare(TypedDict):
    """One phase per profiled step (framework summary ``phases.<phase>``)."""

    time_s: float
    share: float


class UsefulFlops(TypedDict, total=False):
    """The recipe's analytic FLOPs per step (framework summary ``flops.useful``); every key is
    written, read back as possibly absent."""

    kind: str
    per_step: float | None
    definition: str


class ProfilerFlops(TypedDict, total=False):
    """The profiler-attributed FLOPs (framework summary ``flops.profiler_attributed``); every
    key is written, read back as possibly absent."""

    kind: str
    per_step: float
    definition: str
    utilization_name: str
    ratio_to_useful: float | None
    coverage_time: float
    coverage_time_basis: str
    ops_with_formula: list[str]
    steps: int


class FlopsSummary(TypedDict, total=False):
    """A profiled trial's FLOPs by kind (framework summary ``flops``)."""

    useful: UsefulFlops
    profiler_attributed: ProfilerFlops | None
    profiler_attributed_note: str


class ProfileDevice(TypedDict):
    """The device of a profiled trial (framework summary ``device``)."""

    kind: str
    name: str


class ProfileSchedule(TypedDict):
    """The profiler's schedule (framework summary ``schedule``)."""

    protocol_warmup_steps: int
    wait: int
    warmup: int
    active: int


class FrameworkSummary(TypedDict, total=False):
    """A framework-layer profiled trial's summary (``profiles/framework/<trial>.summary.json``),
    written by orchestrator.worker.profile.framework."""

    steps_in_trace: int
    phases: dict[str, PhaseShare]
    trace_step_s: float
    phase_check: PhaseCheck
    top_ops: list[OpRow]
    # :func:`temporal_breakdown`: per-category times and shares, the timeline's name, steps
    temporal: dict[str, float | str | None]
    host_gaps: HostGaps
    regions: dict[str, RegionTime]
    allocator: AllocatorCalls
    synchronisations: list[SyncRow]
    memory_by_phase: list[MemoryRow]
    flops: FlopsSummary
    per_rank: list[dict[str, float | str | None]]  # rank, temporal_breakdown, skew_vs_fastest
    world_size: int
    schema_version: int
    trial_id: str
    arm_id: str
    arm_label: str
    bucket: str
    layer: str
    device: ProfileDevice
    schedule: ProfileSchedule
    trace: str
    profiled_step_median_s: float


# --------------------------------------------------------------------------- selections


def step_windows(df: pd.DataFrame) -> pd.DataFrame:
    """The profiled steps (``ProfilerStep#N`` ranges): step, ts, end, dur (us)."""
    sel = df[(df["ph"] == "X") & df["name"].str.match(STEP_RE.pattern)]
    out = pd.DataFrame({
        "step": sel["name"].str.extract(STEP_RE.pattern, expand=False).astype(int),
        "ts": sel["ts"], "end": sel["end"], "dur": sel["dur"],
    })
    return out.drop_duplicates("step").sort_values("step").reset_index(drop=True)


def device_events(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["ph"] == "X") & df["cat"].isin(patterns.DEVICE_EVENT_CATS)]


def host_ops(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["ph"] == "X") & df["cat"].isin(patterns.HOST_OP_CATS)]


def timeline(df: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """(events of the device timeline, its name): device kernels when present, else host ops."""
    dev = device_events(df)
    return (dev, "device") if len(dev) else (host_ops(df), "host")


def _in_windows(ev: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """Events clipped to the windows (each event to the first window it overlaps)."""
    if ev.empty or windows.empty:
        return ev.iloc[0:0].assign(step=pd.Series(dtype=int))
    parts = []
    for w in windows.itertuples():
        sel = ev[(ev["end"] > w.ts) & (ev["ts"] < w.end)].copy()
        sel["ts"] = sel["ts"].clip(lower=w.ts)
        sel["end"] = sel["end"].clip(upper=w.end)
        sel["dur"] = sel["end"] - sel["ts"]
        sel["step"] = w.step
        parts.append(sel)
    return pd.concat(parts).drop_duplicates(subset=["name", "ts", "pid", "tid"]) if parts else ev


# --------------------------------------------------------------------------- phases


def phase_breakdown(df: pd.DataFrame, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Time per marked phase per step (mean over the profiled steps) and its share of the step.

    The remainder of the step (the loop, the step-boundary sync, profiler bookkeeping) is the
    ``unattributed`` row; a last ``step`` row holds the step itself. Nested or overlapping phase
    ranges would make the named phases add up to more than the step: :func:`phase_sum_check`
    catches that."""
    steps = step_windows(df) if steps is None else steps
    n = max(len(steps), 1)
    step_us = float(steps["dur"].sum()) / n if len(steps) else 0.0
    marks = df[(df["ph"] == "X") & df["cat"].isin(patterns.ANNOTATION_CATS)
               & df["name"].str.startswith(phases.PREFIX)]
    clipped = _in_windows(marks, steps)
    per = clipped.groupby("name")["dur"].sum() / n if len(clipped) else pd.Series(dtype=float)
    rows: list[PhaseTime] = [{"phase": phases.short(p), "time_us": float(per.get(p, 0.0))}
            for p in [*phases.ALL, *sorted(set(per.index) - set(phases.ALL))]
            if p in per.index or p in phases.ALL[:5]]
    named = sum(r["time_us"] for r in rows)
    rows.append({"phase": phases.UNATTRIBUTED, "time_us": step_us - named})
    rows.append({"phase": "step", "time_us": step_us})
    out = pd.DataFrame(rows)
    out["share"] = out["time_us"] / step_us if step_us > 0 else np.nan
    return out


def phase_sum_check(breakdown: pd.DataFrame, tolerance: float) -> PhaseCheck:
    """Do the named phases add up to the step? They must cover at least ``1 - tolerance`` of it
    and never exceed it (more than the step means overlapping ranges)."""
    step = float(breakdown.loc[breakdown["phase"] == "step", "time_us"].iloc[0])
    named = float(breakdown.loc[~breakdown["phase"].isin(["step", phases.UNATTRIBUTED]),
                                "time_us"].sum())
    covered = named / step if step > 0 else 0.0
    return {"named_phases_us": named, "step_us": step, "covered": covered,
            "tolerance": tolerance, "ok": 1 - tolerance <= covered <= 1 + 1e-6}


def _union_us(starts: np.ndarray, ends: np.ndarray) -> float:
    """Length of the union of intervals (a region nested in itself counts once)."""
    total, edge = 0.0, -np.inf
    for ts, te in sorted(zip(starts, ends)):
        if te <= edge:
            continue
        total += te - max(ts, edge)
        edge = te
    return float(total)


def region_breakdown(df: pd.DataFrame, steps: pd.DataFrame | None = None) -> dict[str, RegionTime]:
    """Time per marked region (``region/*``: one operation, forward and backward) per step
    (mean over the profiled steps) and its share of the step. Regions overlap the phases, so
    they are not part of :func:`phase_breakdown`; each region's ranges are merged first."""
    steps = step_windows(df) if steps is None else steps
    n = max(len(steps), 1)
    step_us = float(steps["dur"].sum()) / n if len(steps) else 0.0
    marks = df[(df["ph"] == "X") & df["cat"].isin(patterns.ANNOTATION_CATS)
               & df["name"].str.startswith(phases.REGION_PREFIX)]
    out: dict[str, RegionTime] = {}
    if marks.empty or steps.empty:
        return out
    clipped = _in_windows(marks, steps)
    for name, grp in clipped.groupby("name"):
        per_step = sum(_union_us(g["ts"].to_numpy(float), g["end"].to_numpy(float))
                       for _, g in grp.groupby("step")) / n
        out[phases.short_region(str(name))] = {
            "time_s": per_step / 1e6, "share": per_step / step_us if step_us > 0 else None,
            "ranges_per_step": len(grp) / n}
    return out


def allocator_calls(df: pd.DataFrame, steps: pd.DataFrame | None = None) -> AllocatorCalls:
    """Device allocator calls that reach the driver (cudaMalloc/cudaFree, musaMalloc/musaFree):
    the caching allocator's churn, per step. Not applicable to a CPU-only trace."""
    steps = step_windows(df) if steps is None else steps
    if device_events(df).empty:
        return {"applicable": False,
                "note": "no device timeline in this trace (CPU run: no device caching allocator)"}
    calls = df[(df["ph"] == "X") & df["name"].map(patterns.is_allocator_call)]
    clipped = _in_windows(calls, steps)
    n = max(len(steps), 1)
    step_us = float(steps["dur"].sum()) / n if len(steps) else 0.0
    time_us = float(clipped["dur"].sum()) / n if len(clipped) else 0.0
    return {"applicable": True, "calls_per_step": len(clipped) / n,
            "time_us_per_step": time_us,
            "share": time_us / step_us if step_us > 0 else None}


# --------------------------------------------------------------------------- operators / kernels


def self_times(ops: pd.DataFrame) -> pd.Series:
    """Self time of nested host ranges: duration minus direct children, per (pid, tid)."""
    self_us = ops["dur"].astype(float).copy()
    for _, grp in ops.sort_values(["ts", "end"], ascending=[True, False]).groupby(["pid", "tid"]):
        stack: list[tuple[Any, float]] = []
        for idx, ts, end, dur in zip(grp.index, grp["ts"], grp["end"], grp["dur"]):
            while stack and stack[-1][1] <= ts:
                stack.pop()
            if stack:
                self_us[stack[-1][0]] -= dur
            stack.append((idx, end))
    return self_us.clip(lower=0.0)


def op_breakdown(df: pd.DataFrame, n_steps: int = 1) -> pd.DataFrame:
    """Kernels (device trace) or host operators (CPU trace) by self time per step.

    Columns: name, category, count_per_step, self_us_per_step, total_us_per_step, share
    (of all self time on that timeline), sorted by self time."""
    ev, where = timeline(df)
    cols = ["name", "category", "count_per_step", "self_us_per_step", "total_us_per_step", "share"]
    if ev.empty:
        return pd.DataFrame(columns=cols)
    ev = ev.assign(self_us=ev["dur"] if where == "device" else self_times(ev))
    g = ev.groupby("name").agg(count=("dur", "size"), self_us=("self_us", "sum"),
                               total_us=("dur", "sum"), cat=("cat", "first")).reset_index()
    n = max(n_steps, 1)
    out = pd.DataFrame({
        "name": g["name"],
        "category": [patterns.classify(nm, c) for nm, c in zip(g["name"], g["cat"])],
        "count_per_step": g["count"] / n,
        "self_us_per_step": g["self_us"] / n,
        "total_us_per_step": g["total_us"] / n,
    })
    total = float(out["self_us_per_step"].sum())
    out["share"] = out["self_us_per_step"] / total if total > 0 else np.nan
    return out.sort_values("self_us_per_step", ascending=False, kind="stable").reset_index(drop=True)


# --------------------------------------------------------------------------- temporal breakdown


def _sweep(ev: pd.DataFrame, start: float, end: float) -> dict[str, float]:
    """Time in [start, end) by category (an instant goes to the first active category in
    patterns.PRECEDENCE), idle time, and communication overlapped with compute."""
    cats = list(patterns.PRECEDENCE)
    out = {f"{c}_us": 0.0 for c in cats}
    out.update(idle_us=max(end - start, 0.0), comm_overlap_us=0.0)
    if ev.empty or end <= start:
        return out
    kind = np.array([cats.index(patterns.classify(n, c)) for n, c in zip(ev["name"], ev["cat"])])
    ts = np.clip(ev["ts"].to_numpy(float), start, end)
    te = np.clip(ev["end"].to_numpy(float), start, end)
    keep = te > ts
    ts, te, kind = ts[keep], te[keep], kind[keep]
    points = np.concatenate([ts, te, [start, end]])
    order = np.unique(points)
    delta = np.zeros((len(order), len(cats)))
    np.add.at(delta, (np.searchsorted(order, ts), kind), 1)
    np.add.at(delta, (np.searchsorted(order, te), kind), -1)
    active = np.cumsum(delta, axis=0)[:-1] > 0
    seg = np.diff(order)
    busy = active.any(axis=1)
    first = np.argmax(active, axis=1)
    for i, c in enumerate(cats):
        out[f"{c}_us"] = float(seg[busy & (first == i)].sum())
    out["idle_us"] = float(seg[~busy].sum())
    ci, mi = cats.index(patterns.COMMUNICATION), cats.index(patterns.COMPUTE)
    out["comm_overlap_us"] = float(seg[active[:, ci] & active[:, mi]].sum())
    return out


def temporal_breakdown(df: pd.DataFrame, steps: pd.DataFrame | None = None) -> dict[str, Any]:
    """Per-step mean of compute, communication, memory and idle time on the device timeline,
    their shares, and how much communication overlaps compute (HTA's temporal breakdown)."""
    steps = step_windows(df) if steps is None else steps
    ev, where = timeline(df)
    per_step = [_sweep(ev[(ev["end"] > w.ts) & (ev["ts"] < w.end)], w.ts, w.end)
                for w in steps.itertuples()]
    n = max(len(per_step), 1)
    keys = [f"{c}_us" for c in patterns.PRECEDENCE] + ["idle_us", "comm_overlap_us"]
    out: dict[str, Any] = {k: sum(p[k] for p in per_step) / n for k in keys}
    span = float(steps["dur"].mean()) if len(steps) else 0.0
    out.update(timeline=where, steps=len(per_step), step_us=span)
    for c in [*patterns.PRECEDENCE, "idle"]:
        out[f"{c}_share"] = out[f"{c}_us"] / span if span > 0 else None
    comm = out["communication_us"] + out["comm_overlap_us"]
    out["comm_overlap_share"] = out["comm_overlap_us"] / comm if comm > 0 else None
    return out


def per_rank(frames: Mapping[int, pd.DataFrame]) -> pd.DataFrame:
    """One temporal-breakdown row per rank plus each rank's step time relative to the fastest
    (rank skew)."""
    rows = [{"rank": r, **temporal_breakdown(df)} for r, df in sorted(frames.items())]
    out = pd.DataFrame(rows)
    if len(out):
        out["skew_vs_fastest"] = out["step_us"] / out["step_us"].min()
    return out


# --------------------------------------------------------------------------- host gaps, syncs, memory


def host_gaps(df: pd.DataFrame, steps: pd.DataFrame | None = None,
              min_gap_us: float = 10.0) -> HostGaps:
    """Time the device sat idle waiting for the host inside the profiled steps: gaps of at
    least ``min_gap_us`` between device work. Not applicable to a CPU-only trace."""
    steps = step_windows(df) if steps is None else steps
    dev = device_events(df)
    if dev.empty:
        return {"applicable": False,
                "note": "no device timeline in this trace (CPU run: the device is the host)"}
    gaps = []
    for w in steps.itertuples():
        sel = dev[(dev["end"] > w.ts) & (dev["ts"] < w.end)].sort_values("ts")
        edge = w.ts
        for ts, end in zip(sel["ts"].clip(lower=w.ts), sel["end"].clip(upper=w.end)):
            if ts - edge >= min_gap_us:
                gaps.append(ts - edge)
            edge = max(edge, end)
        if w.end - edge >= min_gap_us:
            gaps.append(w.end - edge)
    n = max(len(steps), 1)
    return {"applicable": True, "min_gap_us": min_gap_us, "gaps_per_step": len(gaps) / n,
            "idle_us_per_step": float(sum(gaps)) / n,
            "largest_gap_us": float(max(gaps)) if gaps else 0.0}


def _phase_of(ts: pd.Series, marks: pd.DataFrame) -> list[str]:
    out = []
    for t in ts:
        hit = marks[(marks["ts"] <= t) & (marks["end"] >= t)]
        out.append(phases.short(hit["name"].iloc[-1]) if len(hit) else "outside phases")
    return out


def _phase_marks(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["ph"] == "X") & df["cat"].isin(patterns.ANNOTATION_CATS)
              & df["name"].str.startswith(phases.PREFIX)]


def synchronisations(df: pd.DataFrame) -> pd.DataFrame:
    """Host read-backs (``.item()``, ``.cpu()`` of a scalar, ``nonzero``) and explicit device
    syncs found in the trace, counted by name and by the phase they happened in."""
    sel = df[(df["ph"] == "X") & df["name"].map(
        lambda n: patterns.is_host_readback(n) or patterns.is_device_sync(n))]
    cols = ["name", "phase", "count"]
    if sel.empty:
        return pd.DataFrame(columns=cols)
    sel = sel.assign(phase=_phase_of(sel["ts"], _phase_marks(df)))
    return sel.groupby(["name", "phase"]).size().rename("count").reset_index()[cols]


def memory_by_phase(df: pd.DataFrame) -> pd.DataFrame:
    """Peak of the profiler's 'Total Allocated' per phase and device type, from ``[memory]``
    events. On CPU the profiler counts only what is allocated while it records, so the figure
    is relative to the profiler's start; on CUDA/MUSA it is the allocator's total."""
    mem = df[(df["name"] == "[memory]") & df["ph"].isin(["i", "I"])]
    cols = ["phase", "device_type", "peak_allocated_bytes"]
    if mem.empty:
        return pd.DataFrame(columns=cols)
    mem = mem.assign(
        total=[a.get("Total Allocated") for a in mem["args"]],
        device_type=[a.get("Device Type") for a in mem["args"]],
        phase=_phase_of(mem["ts"], _phase_marks(df)),
    ).dropna(subset=["total"])
    g = mem.groupby(["phase", "device_type"])["total"].max().rename("peak_allocated_bytes")
    return g.reset_index()[cols]


# --------------------------------------------------------------------------- diff


def op_diff(base: pd.DataFrame, variant: pd.DataFrame, top: int | None = None) -> pd.DataFrame:
    """What changed between two :func:`op_breakdown` tables: self time per step in each,
    the difference, and whether an operator/kernel appeared or disappeared."""
    key = ["name", "category"]
    m = base[key + ["self_us_per_step", "count_per_step"]].merge(
        variant[key + ["self_us_per_step", "count_per_step"]], on=key, how="outer",
        suffixes=("_base", "_variant"))
    for c in ("self_us_per_step_base", "self_us_per_step_variant",
              "count_per_step_base", "count_per_step_variant"):
        m[c] = m[c].astype(float).fillna(0.0)
    m["delta_us"] = m["self_us_per_step_variant"] - m["self_us_per_step_base"]
    m["change"] = np.select(
        [m["count_per_step_base"] == 0, m["count_per_step_variant"] == 0],
        ["added", "removed"], default="changed")
    m = m.reindex(m["delta_us"].abs().sort_values(ascending=False, kind="stable").index)
    m = m.reset_index(drop=True)
    return m.head(top) if top else m


def phase_diff(base: pd.DataFrame, variant: pd.DataFrame) -> pd.DataFrame:
    """Two :func:`phase_breakdown` tables side by side with the difference per phase."""
    m = base[["phase", "time_us", "share"]].merge(
        variant[["phase", "time_us", "share"]], on="phase", how="outer",
        suffixes=("_base", "_variant"), sort=False).fillna({"time_us_base": 0.0,
                                                             "time_us_variant": 0.0})
    m["delta_us"] = m["time_us_variant"] - m["time_us_base"]
    return m
