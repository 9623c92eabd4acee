"""The "Sensitivity" section of decisions.md (pure): what this machine and protocol can resolve.

From the A/A control: the noise floor and the per-round spread of log speedups, hence the
minimum detectable effect (95 % two-sided at the protocol's confidence, 80 % power) at the rounds
run and at ``max_rounds``. For the calibration sweep (variable ``workload.extra_work_fraction``)
it also sets each planted effect beside the measured one.
"""

from __future__ import annotations

from typing import Any

from orchestrator import stats
from orchestrator.analyze import Analysis

PLANTED_VARIABLE = "workload.extra_work_fraction"


def sensitivity_lines(analysis: Analysis, protocol: Any, variable: str) -> list[str]:
    if analysis.control is None:
        return [("No A/A control arm ran (protocol.aa_arm=false): noise floor and minimum "
                "detectable effect not measured.")]
    max_rounds = max(protocol.max_rounds, protocol.repeats)
    out = [("| bucket | A/A rounds | noise floor | per-round spread (SD of log speedup) "
           f"| min detectable effect now | at {max_rounds} rounds | retain needs at least |"),
           "|---|---:|---:|---:|---:|---:|---:|"]
    for key, c in analysis.noise.items():
        e = c.estimate
        if e is None or e.round_log_sd is None or c.noise_floor is None:
            out.append(f"| {key} | {c.paired_rounds} | — | — | — | — | — |")
            continue
        now = stats.min_detectable_effect(e.round_log_sd, e.rounds, e.confidence)
        cap = stats.min_detectable_effect(e.round_log_sd, max_rounds, e.confidence)
        need = max(protocol.min_effect, c.noise_floor)
        out.append(f"| {key} | {e.rounds} | {c.noise_floor:.1%} | {e.round_log_sd:.3f} | "
                   f"{now:.1%} | {cap:.1%} | {need:.1%} |")
    out += ["", ("Minimum detectable effect: exp((z_conf + z_0.8) * SD / sqrt(rounds)) - 1 from "
            "the A/A rounds (80 % power); the retain threshold adds the noise floor on top.")]
    if variable == PLANTED_VARIABLE:
        out += ["", ("| variant | bucket | planted extra work | expected speedup | measured speedup "
                "[CI] |"), "|---|---|---:|---:|---|"]
        for arm in analysis.arms[1:]:
            f = float(arm.value)
            for b in analysis.buckets:
                cmp = analysis.comparisons.get((b, arm.arm_id))
                got = (f"{cmp.estimate.speedup:.3f}x [{cmp.estimate.low:.3f}, {cmp.estimate.high:.3f}]"
                       if cmp and cmp.estimate else "—")
                out.append(f"| {arm.label} | {b} | {f:+.1%} | {1 / (1 + f):.3f}x | {got} |")
        out += ["", ("Expected speedup = 1 / (1 + planted fraction), before rounding to whole work "
                "units and ignoring fixed per-step costs.")]
    return out
