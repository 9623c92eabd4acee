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
        # Slurm jobs spawn their workers: the job's own fork server did not survive preemption
        # and requeue (tests/launch/test_slurm.py::test_preempted_job_is_requeued_and_finishes)
        return SlurmLauncher(cfg.slurm, folder=folder, python=cfg.python, ledger=ledger,
                             start_method="spawn")
    raise ConfigError("launcher.name", f"{cfg.name!r} is not available; use inline, local or slurm")
