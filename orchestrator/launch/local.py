"""Local launcher: every trial in a fresh subprocess, one at a time, in plan order.

A trial that raises, segfaults, is killed or hangs past its time limit becomes a record with a
status and the tail of its stderr; the campaign goes on.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from orchestrator.launch.base import Launcher, OnDone, record_or_failure, stderr_tail
from orchestrator.results import atomic_write_json
from orchestrator.trial import LAUNCH_T0_VAR, TrialSpec

log = logging.getLogger(__name__)

_GRACE_S = 5.0


def package_root() -> str:
    """The directory holding the orchestrator package: children import the same code."""
    return str(Path(__file__).resolve().parents[2])


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


class LocalLauncher(Launcher):
    name = "local"

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable

    def trial_env(self, spec: TrialSpec) -> dict[str, str]:
        env = dict(os.environ)
        env.update(spec.env)
        root = package_root()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        env[LAUNCH_T0_VAR] = repr(time.time())
        return env

    def run(self, specs: Sequence[TrialSpec], on_done: OnDone, timeout_s: float) -> None:
        for spec in specs:
            on_done(spec, self.run_one(spec, timeout_s))

    def run_one(self, spec: TrialSpec, timeout_s: float) -> dict:  # type: ignore[type-arg]
        tdir = Path(spec.trial_dir)
        tdir.mkdir(parents=True, exist_ok=True)
        spec_path = tdir / "spec.json"
        spec_path.write_text(spec.to_json(), encoding="utf-8")
        stale = tdir / "trial.json"
        if stale.exists():  # a previous, interrupted attempt: never mix its record in
            stale.unlink()
        cmd = [self.python, "-m", "orchestrator.trial", str(spec_path)]
        with open(tdir / "stdout.log", "wb") as out, open(tdir / "stderr.log", "wb") as err:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=err, env=self.trial_env(spec), start_new_session=True
            )
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                rc = None
            except BaseException:  # Ctrl-C: take the child down with us, lose nothing else
                _kill_group(proc)
                raise
        tail = stderr_tail(tdir / "stderr.log")
        if rc is None:
            status, error = "timeout", f"exceeded the trial time limit of {timeout_s:g} s"
        elif rc < 0:
            name = signal.Signals(-rc).name if -rc in signal.valid_signals() else str(-rc)
            status = "killed" if -rc in (signal.SIGKILL, signal.SIGTERM) else "crashed"
            error = f"process died from signal {name}"
            if -rc == signal.SIGKILL:
                error += " (the kernel's OOM killer sends this too)"
        elif not stale.exists():
            status, error = "crashed", f"process exited with code {rc} without writing trial.json"
        else:
            status, error = "", ""
        record = record_or_failure(spec, status, error, tail)
        record["returncode"] = rc
        atomic_write_json(tdir / "trial.json", record)
        return record
