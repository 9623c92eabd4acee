"""In-process launcher: for tests and debugging. Same contract, no isolation.

It cannot survive a segfault, cannot enforce ``protocol.trial_timeout_s`` and cannot run a
distributed trial (those need a process of their own: use ``launcher=local``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional, Sequence

from orchestrator.envvars import env_overrides
from orchestrator.launch.base import Launcher, OnDone, OnStart, record_or_failure, world_size
from orchestrator.results import atomic_write_json
from orchestrator.jobs import TrialSpec
from orchestrator.trial import run_trial


class InlineLauncher(Launcher):
    name = "inline"

    def run(
        self,
        specs: Sequence[TrialSpec],
        on_done: OnDone,
        timeout_s: float,
        on_start: Optional[OnStart] = None,
    ) -> None:
        for spec in specs:
            if on_start is not None:
                on_start(spec)
            if world_size(spec) > 1:
                record = record_or_failure(
                    spec, "unavailable",
                    f"world_size={world_size(spec)} needs processes; use launcher=local", "")
                atomic_write_json(Path(spec.trial_dir) / "trial.json", record)
                on_done(spec, record)
                continue
            with env_overrides(spec.env):
                record = run_trial(spec, launch_t0=time.time())
            on_done(spec, record)
