"""The "Sensitivity" section of decisions.md (pure): what this machine and protocol can resolve.

From the A/A control's contrast in the block fit (orchestrator.core.paired): its effect, its standard
error and residual degrees of freedom, hence the minimum detectable effect (two-sided at the
per-look level, 80 % power) at the rounds run and at ``max_rounds``. For the calibration sweep (variable ``workload.extra_work_fraction``)
it also sets each planted effect beside the measured one.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

from orchestrator.core import paired
from orchestrator.analysis.analyze import Analysis

PLANTED_VARIABLE = "workload.extra_work_fraction"


def sensitivity_lines(analysis: Analysis, protocol: Any, variable: str) -> list[str]:
    if analysis.control is None:
        return [("No A/A control arm ran (protocol.aa_arm=false): calibration and minimum "
                "detectable effect not measured.")]
    max_rounds = max(protocol.max_rounds, protocol.repeats)
    a = analysis.alpha_look
    out = [("| scope | A/A rounds | A/A effect | SE of a contrast (log) | residual df "
           f"| min detectable effect now | at {max_rounds} rounds |"),
           "|---|---:|---:|---:|---:|---:|---:|"]
    for key, c in analysis.noise.items():
        eff = c.effect
        if eff is None or eff.se is None or c.noise_floor is None:
            out.append(f"| {key} | {c.paired_rounds} | — | — | — | — | — |")
            continue
        z = paired.t_quantile(1 - a / 2, eff.df) + NormalDist().inv_cdf(0.8)
        now = math.exp(z * eff.se) - 1
        cap = math.exp(z * eff.se * math.sqrt(eff.rounds / max_rounds)) - 1
        out.append(f"| {key} | {eff.rounds} | {c.noise_floor:.1%} | {eff.se:.4f} | {eff.df} | "
                   f"{now:.1%} | {cap:.1%} |")
    out += ["", ("Minimum detectable effect: exp((t_(1-alpha'/2, df) + z_0.8) * SE) - 1 of the A/A "
            "contrast (80 % power at the per-look level alpha'); at the cap the SE shrinks as "
            "sqrt(rounds / max_rounds). An effect within the equivalence band "
            f"(±{protocol.min_effect:.0%}) is a difference that does not matter.")]
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
