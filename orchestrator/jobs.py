"""What a launcher runs, as plain data: the trial spec, and the specs a plan turns into.

A spec is written to ``<trial dir>/spec.json`` and read back by the worker process
(``python -m orchestrator.trial SPEC.json``); it carries everything the trial needs (the arm's
resolved workload, the bucket, the protocol's numbers), so the worker imports no config
machinery beyond the schemas.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.config import Config
from orchestrator.convert import to_dict
from orchestrator.plan import PlannedTrial
from orchestrator.steady import WarmupPolicy
from orchestrator.sweep import ResolvedArm, selected_buckets

# set by the launcher just before it starts the process: start-to-first-step is measured from it
LAUNCH_T0_VAR = "ORCHESTRATOR_LAUNCH_T0"


@dataclass
class TrialSpec:
    trial_id: str
    trial_dir: str
    bucket: dict[str, Any]
    arm_id: str
    arm_label: str
    is_baseline: bool
    round: int
    position: int  # place in the plan (execution order)
    workload: dict[str, Any]
    device: str = "auto"
    warmup_steps: int = 3
    measured_steps: int = 10
    measured_min_s: float = 0.0  # keep measuring past measured_steps until this much step time
    env: dict[str, str] = field(default_factory=dict)
    kind: str = "timed"  # timed | profile (a profiled trial: never in timing statistics)
    profile: dict[str, Any] = field(default_factory=dict)  # layer and settings, kind=profile
    hardware: dict[str, Any] = field(default_factory=dict)  # HardwareConfig as a dict
    timeout_s: float | None = None  # the launcher's limit for this trial (external commands stop sooner)
    warmup_policy: str = "fixed"  # fixed | auto (see orchestrator.steady)
    warmup_max_steps: int = 30
    warmup_window: int = 3
    warmup_tolerance: float = 0.05
    clock: str = "wall"  # wall | cpu (process CPU time; host-CPU recipes only)
    speed_reference: str = "off"  # auto | host | off (orchestrator.reference)
    compile_cache: str = "warm"  # cold | warm (orchestrator.compile_stats.cache_scope)
    env_report: bool = False  # also write the full environment.json (the campaign's first trial)

    def warmup(self) -> WarmupPolicy:
        return WarmupPolicy(self.warmup_policy, self.warmup_steps, self.warmup_max_steps,
                            self.warmup_window, self.warmup_tolerance)

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=2)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> TrialSpec:
        with open(path, encoding="utf-8") as fh:
            return cls(**json.load(fh))


def make_specs(cfg: Config, run_dir: Path, arms: Sequence[ResolvedArm],
               planned: Sequence[PlannedTrial]) -> list[TrialSpec]:
    """One spec per planned trial, each carrying its arm's resolved workload."""
    by_arm = {a.arm_id: a for a in arms}
    buckets = {b["name"]: b for b in selected_buckets(cfg)}
    specs = []
    for p in planned:
        arm = by_arm[p.arm_id]
        specs.append(
            TrialSpec(
                trial_id=p.trial_id,
                trial_dir=str(run_dir / "trials" / p.trial_id),
                bucket=buckets[p.bucket],
                arm_id=arm.arm_id,
                arm_label=arm.label,
                is_baseline=arm.is_baseline,
                round=p.round,
                position=p.position,
                workload=copy.deepcopy(arm.workload),
                device=cfg.device,
                warmup_steps=cfg.protocol.warmup_steps,
                # the planner's trial length for adaptive rounds, else the protocol's
                measured_steps=p.measured_steps or cfg.protocol.measured_steps,
                measured_min_s=0.0 if p.measured_steps else cfg.protocol.measured_min_s,
                env=dict(arm.env),
                hardware=to_dict(cfg.hardware),
                timeout_s=cfg.protocol.trial_timeout_s,
                warmup_policy=cfg.protocol.warmup_policy,
                warmup_max_steps=cfg.protocol.warmup_max_steps,
                warmup_window=cfg.protocol.warmup_window,
                warmup_tolerance=cfg.protocol.warmup_tolerance,
                clock=cfg.protocol.clock,
                speed_reference=cfg.protocol.speed_reference,
                compile_cache=cfg.protocol.compile_cache,
            )
        )
    return specs
