"""In-process launcher: for tests and debugging. Same contract, no isolation."""

from __future__ import annotations

import os
import time
from typing import Sequence

from orchestrator.launch.base import Launcher, OnDone
from orchestrator.trial import TrialSpec, run_trial


class InlineLauncher(Launcher):
    name = "inline"

    def run(self, specs: Sequence[TrialSpec], on_done: OnDone, timeout_s: float) -> None:
        for spec in specs:
            saved = {k: os.environ.get(k) for k in spec.env}
            os.environ.update(spec.env)
            try:
                record = run_trial(spec, launch_t0=time.time())
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            on_done(spec, record)
