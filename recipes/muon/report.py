"""decisions.md section for ``muon_tp`` campaigns (pure formatting over trial records)."""

from __future__ import annotations

import math
import statistics
from typing import Any, Optional

from orchestrator.core.section import Section


def _ms(x: Optional[float]) -> str:
    return "—" if x is None or math.isnan(x) else f"{x * 1e3:.2f}"


def sections(records: list[dict[str, Any]]) -> list[Section]:
    ok = [r for r in records if r.get("status") == "ok" and isinstance(r.get("muon_tp"), dict)]
    if not ok:
        return []
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for r in ok:
        by_arm.setdefault(str(r["arm_label"]), []).append(r)
    lines = [
        "Per tp_mode: median training-step time over its trials (the orchestrator's timing; "
        "the Newton-Schulz optimizer step is part of every step), the tensor-parallel group, "
        "and for `auto` the mode chosen per distinct weight shape with the model's predicted "
        "per-mode optimizer cost (for `measured` profiles: calibrated on the group at start).",
        "",
        "| arm | tp_mode | G | median step (ms) | trials | auto: profile / domain |",
        "|---|---|---:|---:|---:|---|",
    ]
    choice_lines: list[str] = []
    for label, recs in by_arm.items():
        info = recs[0]["muon_tp"]
        med = statistics.median(r["step_time_median_s"] for r in recs)
        extra = "—"
        if info.get("mode") == "auto":
            extra = (f"{info.get('profile')}; crosses_domain={info.get('crosses_domain')} "
                     f"({info.get('domain_basis')})")
            for c in info.get("choices", []):
                pred = c.get("predicted_s") or {}
                choice_lines.append(
                    f"| {label} | [{c['m']}, {c['n']}] | {c['partition_dim']} | **{c['mode']}** | "
                    f"{_ms(pred.get('duplicated'))} | {_ms(pred.get('distributed'))} | "
                    f"{c['basis']} |")
        lines.append(f"| {label} | {info.get('mode')} | {info.get('group_size')} | {_ms(med)} | "
                     f"{len(recs)} | {extra} |")
    if choice_lines:
        lines += ["", "| arm | global shape | partition dim | chosen | predicted duplicated (ms) "
                  "| predicted distributed (ms) | basis |", "|---|---|---:|---|---:|---:|---|",
                  *choice_lines]
    for label, recs in by_arm.items():
        if recs[0]["muon_tp"].get("mode") == "auto":
            lines += consistency_lines(label, recs)
    return [Section("Muon tp_mode", lines)]


def consistency_lines(label: str, recs: list[dict[str, Any]]) -> list[str]:
    """Whether every trial of an ``auto`` arm chose the same mode per shape (each trial fits
    its own measured profile, so on a noisy machine they may not): the per-shape counts when
    they differ, since the arm's step time then mixes different mode assignments."""
    seen: dict[tuple[Any, Any, Any], dict[str, int]] = {}
    for r in recs:
        for c in r["muon_tp"].get("choices", []):
            key = (c["m"], c["n"], c["partition_dim"])
            seen.setdefault(key, {})
            seen[key][c["mode"]] = seen[key].get(c["mode"], 0) + 1
    differing = {k: v for k, v in seen.items() if len(v) > 1}
    if not seen:
        return []
    if not differing:
        return ["", f"`{label}`: all {len(recs)} trials chose the same mode for every shape."]
    out = ["", f"**`{label}`: trials chose differently** (the arm's step time mixes mode "
           f"assignments; {len(recs)} trials):"]
    for (m, n, pd), counts in sorted(differing.items(), key=lambda kv: str(kv[0])):
        split = ", ".join(f"{mode} in {k}" for mode, k in sorted(counts.items()))
        out.append(f"- [{m}, {n}] dim {pd}: {split}")
    return out
