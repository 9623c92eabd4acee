"""Resume: a campaign re-run on its run directory keeps its final trials and runs the rest.

Only a run directory planned for the same trials may be resumed: mixing the trials of another
sweep or workload into one analysis would be silent nonsense, so it is refused (exit 2)."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from orchestrator.core.errors import ConfigError, Interrupted
from orchestrator.core.results import FINAL_STATUSES
from orchestrator.core.trial_record import TrialRecordDict
from orchestrator.launch.base import read_record
from orchestrator.core.results import read_json


def completed_on_disk(run_dir: Path) -> dict[str, TrialRecordDict]:
    """trial_id -> record of every final trial; truncated, foreign or stale files are ignored."""
    done = {}
    for path in run_dir.glob("trials/*/trial.json"):
        rec = read_record(path)
        if rec is None or rec.get("trial_id") != path.parent.name:
            continue
        if rec.get("status") in FINAL_STATUSES:
            done[rec["trial_id"]] = rec
    return done


def check_same_plan(run_dir: Path, plan_doc: dict[str, Any]) -> None:
    """Refuse to resume a run dir that was planned differently."""
    path = run_dir / "plan.json"
    if not path.exists():
        return
    try:
        old = read_json(path)
    except (OSError, ValueError):
        return  # an unreadable plan is rewritten; trials are matched by id below
    keys = ("sweep", "arms", "buckets")
    same = all(old.get(k) == plan_doc.get(k) for k in keys) and (  # trials of one pairing only
        (old.get("pairing") or {}).get("mode", "process")
        == (plan_doc.get("pairing") or {}).get("mode", "process"))
    old_ids = [t.get("trial_id") for t in old.get("trials", [])]
    new_ids = [t.get("trial_id") for t in plan_doc.get("trials", [])]
    # adaptive rounds extend a plan: one of the two trial lists is a prefix of the other
    n = min(len(old_ids), len(new_ids))
    if not same or old_ids[:n] != new_ids[:n]:
        raise ConfigError(
            "resume",
            f"{run_dir} was planned for a different sweep, arms, buckets, repeats or pairing; rerun with "
            "the same overrides, or start a new campaign with another run_dir",
        )


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C while trials run, so launchers clean up their children/jobs.

    Not inside a Slurm job (a campaign put there by Hydra's submitit launcher): there SIGTERM
    announces preemption, which submitit handles by requeueing; trial processes die with the
    campaign anyway (parent-death signal)."""
    import os

    if threading.current_thread() is not threading.main_thread() or "SLURM_JOB_ID" in os.environ:
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
