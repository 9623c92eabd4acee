"""Baseline vs variant: what changed between two saved framework traces."""

from __future__ import annotations

import os
from typing import Any, TypedDict

from orchestrator.analysis.profile import trace_stats as A
from orchestrator.analysis.profile.trace import events_frame, load_trace
from orchestrator.analysis.profile.trace_stats import OpChange, PhaseChange


class TraceDiff(TypedDict):
    """Baseline vs variant of two framework traces (the Profiles section's operator changes)."""

    ops: list[OpChange]
    phases: list[PhaseChange]
    temporal_delta: dict[str, float]  # <category>_us: variant minus baseline


def diff_frames(base: Any, variant: Any, top: int | None = None) -> TraceDiff:
    """Operator/kernel and phase differences of two event frames (pure)."""
    nb = max(len(A.step_windows(base)), 1)
    nv = max(len(A.step_windows(variant)), 1)
    ops = A.op_diff(A.op_breakdown(base, nb), A.op_breakdown(variant, nv), top)
    phases = A.phase_diff(A.phase_breakdown(base), A.phase_breakdown(variant))
    tb, tv = A.temporal_breakdown(base), A.temporal_breakdown(variant)
    temporal = {k: tv[k] - tb[k] for k in tb if k.endswith("_us")}
    return {"ops": ops.to_dict("records"), "phases": phases.to_dict("records"),
            "temporal_delta": temporal}


def diff_traces(base_path: str | os.PathLike[str], variant_path: str | os.PathLike[str],
                top: int | None = None) -> TraceDiff:
    return diff_frames(events_frame(load_trace(base_path)), events_frame(load_trace(variant_path)),
                       top)
