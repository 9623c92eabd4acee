"""Profile the current baseline alone: one framework-profiled trial per bucket, no timed trials.

The run directory has the layout a profiled campaign's has for its baseline arm
(``config.json``, ``trials/prof-framework-<bucket>-a0/``, ``profiles/framework/``), plus
``profile.json`` naming what was profiled; :func:`orchestrator.campaign.advise.load.read_profile` reads
both kinds. A killed profile run is finished by running it again in the same directory: trials
with a final record are kept.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from orchestrator.spec.config import Config, ProfileMode
from orchestrator.core.convert import to_dict
from orchestrator.launch.base import Launcher
from orchestrator.launch.factory import make_launcher
from orchestrator.campaign.profiles import run_profiled_trials
from orchestrator.core.results import SCHEMA_VERSION, atomic_write_json
from orchestrator.campaign.resume import completed_on_disk
from orchestrator.core.sanitize import Sanitizer, reserve_run_dir, sanitize_run_dir
from orchestrator.spec.sweep import Arm, ResolvedArm

log = logging.getLogger(__name__)

PROFILE_FILE = "profile.json"


def baseline_arm(cfg: Config) -> ResolvedArm:
    """The workload as configured (``baseline=vN`` already applied) as the one arm ``a0``."""
    label = cfg.baseline or "baseline"
    return ResolvedArm.of(Arm("a0", label, None, True), to_dict(cfg.workload), cfg.workload)


def profile_baseline(cfg: Config, run_dir: Path, launcher: Launcher | None = None) -> Path:
    """Run the framework profiler on the baseline, one trial per bucket; returns ``run_dir``."""
    cfg = dataclasses.replace(cfg, sweep=None,
                              profile=dataclasses.replace(cfg.profile, mode=ProfileMode.framework))
    run_dir.mkdir(parents=True, exist_ok=True)
    sanitizer = Sanitizer.from_config(cfg.sanitize)
    reserve_run_dir(run_dir, sanitizer)
    atomic_write_json(run_dir / "config.json", {"schema_version": SCHEMA_VERSION, **to_dict(cfg)})
    arm = baseline_arm(cfg)
    own = launcher is None
    launcher = launcher or make_launcher(cfg.launcher, device=cfg.device, run_dir=run_dir)
    try:
        log.info("profiling the baseline (%s of %s) -> %s", arm.label, cfg.workload.name, run_dir)
        run_profiled_trials(cfg, run_dir, [arm], launcher, set(completed_on_disk(run_dir)))
    finally:
        if own:
            launcher.close()
    atomic_write_json(run_dir / PROFILE_FILE, {
        "schema_version": SCHEMA_VERSION, "kind": "baseline_profile",
        "workload": cfg.workload.name, "baseline": cfg.baseline, "arm_id": arm.arm_id})
    sanitize_run_dir(run_dir, sanitizer)
    return run_dir
