"""Microbenchmark trials in a campaign (sweep.microbench): planned after the timed trials, one
per round, bucket and arm, arms interleaved with the order reversed every other round, run
through the campaign's launcher like profiled trials, skipped on resume once final."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.core.section import Section
from orchestrator.spec.config import Config
from orchestrator.spec.jobs import make_specs
from orchestrator.core.trial_record import TrialRecordDict
from orchestrator.launch.base import Launcher
from orchestrator.analysis.direction import DirectionCheck, check_arm, section
from orchestrator.spec.plan import PlannedTrial, slug
from orchestrator.spec.sweep import ResolvedArm, selected_buckets

log = logging.getLogger(__name__)

CALLS = 10  # timed calls per microbenchmark trial
WARMUP_CALLS = 3


def microbench_trial_id(bucket: str, arm_id: str, rnd: int) -> str:
    return f"mb-{slug(bucket)}-{arm_id}-r{rnd}"


def run_microbenchmarks(cfg: Config, run_dir: Path, arms: Sequence[ResolvedArm],
                        launcher: Launcher, done: set[str]) -> None:
    sweep = cfg.sweep
    if sweep is None or not sweep.microbench or not cfg.protocol.direction_check:
        return
    planned = []
    pos = 200_000  # after the timed and profiled trials in plan order
    for rnd in range(cfg.protocol.repeats):
        order = list(arms) if rnd % 2 == 0 else list(reversed(arms))
        for b in selected_buckets(cfg):
            for a in order:
                planned.append(PlannedTrial(microbench_trial_id(b["name"], a.arm_id, rnd), pos,
                                            rnd, b["name"], a.arm_id))
                pos += 1
    settings = {"name": sweep.microbench, "calls": CALLS, "warmup_calls": WARMUP_CALLS,
                "graph": bool(sweep.microbench_graph)}
    specs = [dataclasses.replace(s, kind="microbench", microbench=dict(settings))
             for s in make_specs(cfg, run_dir, list(arms), planned) if s.trial_id not in done]
    if not specs:
        return
    n = 0

    def on_done(spec: Any, record: TrialRecordDict) -> None:
        nonlocal n
        n += 1
        t = record.get("call_time_median_s")
        log.info("[microbench %d/%d] %s %s r%d: %s", n, len(specs), spec.bucket["name"],
                 spec.arm_label, spec.round,
                 f"{t * 1e3:.3f} ms/call" if t else f"{record['status']} {record.get('error')}")

    log.info("microbenchmark %r: %d trial(s), never part of the timing statistics",
             sweep.microbench, len(specs))
    launcher.run(specs, on_done, cfg.protocol.trial_timeout_s)


def direction_checks(cfg: Config, arms: Sequence[Any], verdicts: Sequence[Any],
                     records: Sequence[TrialRecordDict]) -> dict[str, DirectionCheck]:
    """arm_id -> its direction check (no entry without sweep.microbench)."""
    sweep = cfg.sweep
    if sweep is None or not sweep.microbench or not cfg.protocol.direction_check:
        return {}
    weights = {b["name"]: float(b.get("weight", 1.0)) for b in selected_buckets(cfg)}
    return {v.arm_id: check_arm(records, sweep.microbench, arms[0].arm_id, v.arm_id, v.label,
                                weights, v.verdict, v.timing_based, cfg.protocol.min_effect)
            for v in verdicts}


def direction_section(cfg: Config, checks: dict[str, DirectionCheck]
                      ) -> list[Section]:
    if not checks or cfg.sweep is None or not cfg.sweep.microbench:
        return []
    return [Section("Direction check", section(list(checks.values()), cfg.sweep.microbench,
                                        cfg.protocol.min_effect))]
