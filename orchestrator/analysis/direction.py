"""Does a kernel-level change move the operation it changes in the same direction as the whole
step? (pure: records and verdicts in, checks and decisions.md lines out)

Per bucket and round, the microbenchmark's ratio is the baseline's median call time over the
variant's (above 1: the variant's op is faster), the bucket's ratio the median over rounds,
and the arm's ratio their geometric mean at the buckets' weights. A ratio within
``1 +- tolerance`` (protocol.min_effect) is ``same``. The end-to-end direction is the verdict's:
retain is faster, a timing-based reject slower, equivalent the same; an inconclusive or invalid
verdict has none, and then nothing is checked.
"""

from __future__ import annotations

import math
import statistics
from orchestrator.core.records import TrialKind, VerdictKind
from orchestrator.core.results import Status
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict, cast

FASTER, SLOWER, SAME = "faster", "slower", "same"


class DirectionCheckDict(TypedDict):
    """A :class:`DirectionCheck` as plain data (decisions.jsonl ``direction_check``)."""

    arm_id: str
    label: str
    microbench: str
    buckets: dict[str, float]
    ratio: float | None
    micro: str | None
    e2e: str | None
    verdict: str
    agrees: bool | None
    summary: str


@dataclass
class DirectionCheck:
    arm_id: str
    label: str
    microbench: str
    buckets: dict[str, float] = field(default_factory=dict)  # bucket -> baseline / variant
    ratio: float | None = None
    micro: str | None = None  # faster | slower | same; None: no ratio
    e2e: str | None = None  # faster | slower | same; None: the verdict decides no direction
    verdict: str = ""
    agrees: bool | None = None  # None: nothing to compare
    summary: str = ""

    def to_dict(self) -> DirectionCheckDict:
        return cast("DirectionCheckDict", asdict(self))


def direction(ratio: float, tolerance: float) -> str:
    if ratio > 1.0 + tolerance:
        return FASTER
    if ratio < 1.0 - tolerance:
        return SLOWER
    return SAME


def e2e_direction(verdict: str, timing_based: bool = True) -> str | None:
    if verdict == VerdictKind.RETAIN:
        return FASTER
    if verdict == VerdictKind.REJECT and timing_based:
        return SLOWER
    if verdict == VerdictKind.EQUIVALENT:
        return SAME
    return None


def bucket_ratios(records: Sequence[Mapping[str, Any]], base_arm: str,
                  arm_id: str) -> dict[str, float]:
    """bucket -> median over rounds of (baseline call median / variant call median)."""
    times: dict[tuple[str, int, str], float] = {}
    for r in records:
        if r.get("kind") == TrialKind.MICROBENCH and r.get("status") == Status.OK:
            times[(str(r["bucket"]), int(r["round"]), str(r["arm_id"]))] = \
                float(r["call_time_median_s"])
    out: dict[str, list[float]] = {}
    for (bucket, rnd, arm), t in times.items():
        if arm != arm_id or t <= 0:
            continue
        base = times.get((bucket, rnd, base_arm))
        if base:
            out.setdefault(bucket, []).append(base / t)
    return {b: statistics.median(v) for b, v in out.items()}


def _x(r: float) -> str:
    return f"{r:.2f}x"


def check_arm(records: Sequence[Mapping[str, Any]], microbench: str, base_arm: str,
              arm_id: str, label: str, weights: Mapping[str, float], verdict: str,
              timing_based: bool, tolerance: float) -> DirectionCheck:
    c = DirectionCheck(arm_id, label, microbench, verdict=verdict)
    c.buckets = bucket_ratios(records, base_arm, arm_id)
    if c.buckets:
        w = {b: float(weights.get(b, 1.0)) for b in c.buckets}
        c.ratio = math.exp(sum(w[b] * math.log(r) for b, r in c.buckets.items()) / sum(w.values()))
        c.micro = direction(c.ratio, tolerance)
    c.e2e = e2e_direction(verdict, timing_based)
    if c.micro is not None and c.e2e is not None:
        c.agrees = c.micro == c.e2e
    per = ", ".join(f"{b} {_x(r)}" for b, r in c.buckets.items())
    micro = (f"{microbench} alone {c.micro} ({_x(c.ratio)}: {per})" if c.ratio is not None
             else f"{microbench} alone: no ratio (a microbenchmark trial failed)")
    e2e = f"end to end {c.e2e} ({verdict})" if c.e2e else f"end to end {verdict}: no direction"
    tail = ("agree" if c.agrees else "DISAGREE") if c.agrees is not None else "not compared"
    c.summary = f"{micro}; {e2e}: {tail}"
    return c


def section(checks: Sequence[DirectionCheck], microbench: str, tolerance: float) -> list[str]:
    """decisions.md's Direction check section."""
    out = [(f"The sweep's microbenchmark `{microbench}` times that operation alone for every "
            "arm and bucket (trials of kind microbench, in their own processes, one per round, "
            "never in the timing statistics). Ratio = baseline / variant call time (above 1: "
            f"the variant's op is faster), median over rounds; within ±{tolerance:.0%} it is "
            "`same`. The end-to-end direction is the verdict's."), "",
           (f"| variant | {microbench} alone, per bucket | {microbench} alone | end to end | "
           "agree? |"), "|---|---|---|---|---|"]
    for c in checks:
        per = ", ".join(f"{b} {_x(r)}" for b, r in c.buckets.items()) or "—"
        micro = f"**{c.micro}** {_x(c.ratio)}" if c.ratio is not None else "—"
        e2e = f"**{c.e2e}** ({c.verdict})" if c.e2e else f"— ({c.verdict})"
        agree = {True: "yes", False: "**no**", None: "not compared"}[c.agrees]
        out.append(f"| {c.label} | {per} | {micro} | {e2e} | {agree} |")
    flagged = [c for c in checks if c.verdict == VerdictKind.RETAIN and c.agrees is False]
    for c in flagged:
        out += ["", (f"**Flagged:** `{c.label}` is retained end to end, but `{microbench}` alone "
                     f"is {c.micro} ({_x(c.ratio or 0.0)}): the step may be faster for another "
                     "reason than the kernel (or the microbenchmark's shapes miss the step's). "
                     "`python -m orchestrator.baseline promote` refuses it without `--force`.")]
    return out
