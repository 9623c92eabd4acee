"""The launcher a campaign's ``launcher=`` names (inline, local or slurm)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from orchestrator.spec.config import LauncherConfig
from orchestrator.core.errors import ConfigError
from orchestrator.launch.base import Launcher
from orchestrator.launch.inline import InlineLauncher
from orchestrator.launch.local import LocalLauncher
from orchestrator.launch.slurm import SlurmLauncher
from orchestrator.launch.slurm_alloc import (
    CAMPAIGN,
    MODES,
    SlurmAllocationLauncher,
    allocation_mode,
)


def make_launcher(cfg: LauncherConfig, device: str = "auto",
                  run_dir: Optional[Path] = None) -> Launcher:
    if cfg.name == "inline":
        return InlineLauncher()
    if cfg.name == "local":
        return LocalLauncher(python=cfg.python, device=device, devices=cfg.devices,
                             max_parallel=cfg.max_parallel, start_method=cfg.start_method)
    if cfg.name == "slurm":
        folder = cfg.slurm.folder or (str(run_dir / "slurm") if run_dir else "slurm")
        ledger = run_dir / "slurm" / "jobs.json" if run_dir else None
        mode = allocation_mode(cfg.slurm)
        if mode not in MODES:
            raise ConfigError("launcher.slurm.allocation",
                              f"{mode!r} is not an allocation mode; use per_job (one Slurm job "
                              "per round and bucket) or campaign (one allocation held for the "
                              "whole campaign)")
        # one allocation for the campaign, each trial group a job step in it
        cls = SlurmAllocationLauncher if mode == CAMPAIGN else SlurmLauncher
        # Slurm jobs spawn their workers: the job's own fork server did not survive preemption
        # and requeue (tests/launch/test_slurm.py::test_preempted_job_is_requeued_and_finishes)
        return cls(cfg.slurm, folder=folder, python=cfg.python, ledger=ledger,
                   start_method="spawn")
    raise ConfigError("launcher.name", f"{cfg.name!r} is not available; use inline, local or slurm")
