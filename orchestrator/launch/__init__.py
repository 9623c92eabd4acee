"""Launchers: run trial specs and hand back their records, whatever the scheduler."""

from __future__ import annotations

from orchestrator.config import LauncherConfig
from orchestrator.launch.base import Launcher


def make_launcher(cfg: LauncherConfig) -> Launcher:
    if cfg.name == "inline":
        from orchestrator.launch.inline import InlineLauncher

        return InlineLauncher()
    if cfg.name == "local":
        from orchestrator.launch.local import LocalLauncher

        return LocalLauncher(python=cfg.python)
    from orchestrator.errors import ConfigError

    raise ConfigError("launcher.name", f"{cfg.name!r} is not available; use inline or local")
