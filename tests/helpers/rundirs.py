"""Synthetic campaign run directories with fixed numbers: golden-text report tests and the
report scaling benchmark. They follow the artifact contract the campaign writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

SCHEMA = 1


def write_campaign(
    run_dir: Path,
    *,
    sweep: str = "fa2",
    workload: str = "gpt_test",
    variable: str = "attention_backend",
    decided_at: float = 1_780_000_000.0,
    variants: tuple[tuple[str, str, float], ...] = (("sdpa-flash", "retain", 1.25), ("tiled", "reject", 0.8)),
    buckets: tuple[str, ...] = ("s32", "s64"),
    schema_version: int = SCHEMA,
    commit: str | None = "0123456789abcdef0123",
) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    arms = [{"arm_id": "a0", "label": "sdpa-math", "is_baseline": True}]
    arms += [{"arm_id": f"a{i + 1}", "label": v[0], "is_baseline": False} for i, v in enumerate(variants)]
    plan = {"schema_version": schema_version, "sweep": sweep, "arms": arms,
            "buckets": [{"name": b, "seq_len": 32, "micro_batch": 2, "weight": 1.0} for b in buckets],
            "trials": []}
    (run_dir / "plan.json").write_text(json.dumps(plan))
    (run_dir / "config.json").write_text(json.dumps({
        "schema_version": schema_version,
        "workload": {"name": workload},
        "sweep": {"name": sweep, "variable": variable, "hypothesis": "fused kernels are faster"},
        "protocol": {"min_effect": 0.02},
    }))
    lines = []
    for i, (label, verdict, sp) in enumerate(variants):
        speedups: dict[str, Any] = {b: {"speedup": sp, "low": sp - 0.05, "high": sp + 0.05,
                                        "confidence": 0.95} for b in buckets}
        if len(buckets) > 1:
            speedups["mixture"] = {"speedup": sp, "low": sp - 0.03, "high": sp + 0.03,
                                   "confidence": 0.95}
        lines.append(json.dumps({"schema_version": schema_version, "sweep": sweep,
                                 "workload": workload, "variable": variable,
                                 "decided_at": decided_at, "arm_id": f"a{i + 1}", "label": label,
                                 "verdict": verdict, "reasons": [f"{buckets[0]}: planted {verdict}"],
                                 "speedups": speedups}))
    (run_dir / "decisions.jsonl").write_text("\n".join(lines) + "\n")
    rows = []
    for b in buckets:
        for j, a in enumerate(arms):
            sp = None if a["is_baseline"] else variants[j - 1][2]
            rows.append({"bucket": b, "arm_id": a["arm_id"], "arm_label": a["label"], "trials": 3,
                         "ok": 3, "step_time_median_s": 0.01 / (sp or 1.0), "step_time_mad_s": 1e-4,
                         "tokens_per_s": 6400.0 * (sp or 1.0), "peak_mem_bytes": 300 * 2**20,
                         "speedup": sp, "speedup_low": None if sp is None else sp - 0.05,
                         "speedup_high": None if sp is None else sp + 0.05, "paired_rounds": 3})
    pd.DataFrame(rows).to_csv(run_dir / "results.csv", index=False)
    if commit:
        (run_dir / "source.txt").write_text(f"commit: {commit}\nbranch: main\ndirty: false\n")
    return run_dir


def steps_cells(trial_dir: str | Path) -> list[dict[str, str]]:
    """A trial's steps.csv as one dict of strings per row (the header's names)."""
    rows = (Path(trial_dir) / "steps.csv").read_text().splitlines()
    head = rows[0].split(",")
    return [dict(zip(head, row.split(","))) for row in rows[1:]]
