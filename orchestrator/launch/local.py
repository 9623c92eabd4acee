"""Local launcher: every trial in a fresh subprocess, in plan order, on its own device slot.

Sequential by default (``launcher.max_parallel=1``) so that one trial's timing is never disturbed
by another. With ``max_parallel > 1`` the unit of parallelism is a (round, bucket) group: it
takes one device set and runs its arms on it one after another in plan order (A/B fairness);
distinct groups run side by side on disjoint devices. A distributed trial (``workload.world_size > 1``) starts through
``python -m torch.distributed.run --standalone --nproc-per-node G``. A trial that raises,
segfaults, is killed or hangs past its time limit becomes a record with a status and the tail of
its stderr; the campaign goes on. If the orchestrator itself dies, its trial process is taken
down with it (parent-death signal), so a resumed campaign never races an orphan.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from orchestrator.launch.base import (
    Launcher,
    OnDone,
    OnStart,
    mark_infrastructure,
    record_or_failure,
    status_from_returncode,
    stderr_tail,
    world_size,
)
from orchestrator.launch.slots import DeviceSlots, Inventory, inventory
from orchestrator.paths import package_root
from orchestrator.processes import die_with_parent, ignore_job_signals, run_child
from orchestrator.results import atomic_write_json, atomic_write_text
from orchestrator.jobs import LAUNCH_T0_VAR, TrialSpec

log = logging.getLogger(__name__)


def trial_command(python: str, spec_path: Path, nproc: int) -> list[str]:
    if nproc <= 1:
        return [python, "-m", "orchestrator.trial", str(spec_path)]
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "orchestrator.trial", str(spec_path)]


def run_trial_process(
    spec: TrialSpec,
    timeout_s: float,
    python: str,
    extra_env: Optional[dict[str, str]] = None,
    launch_t0: Optional[float] = None,
    nproc: Optional[int] = None,
    log_suffix: str = "",
    write_failure: bool = True,
    annotate: Optional[dict[str, Any]] = None,
    ignore_sigterm: bool = False,
) -> dict[str, Any]:
    """Run one trial (or one rank of it, with ``extra_env`` carrying RANK etc.) as a process.

    Used by the local launcher and, inside each Slurm job, by the Slurm launcher. Writes
    trial.json (the trial's own, or a failure record) unless ``write_failure`` is False.

    ``ignore_sigterm``: inside a Slurm job, preemption and scancel send SIGTERM to every process
    of the job; the trial ignores it (and submitit's SIGUSR2) so that the job (submitit)
    decides: requeue on preemption (the trial is then killed and re-run), or SIGKILL after the
    cancel's grace period."""
    tdir = Path(spec.trial_dir)
    tdir.mkdir(parents=True, exist_ok=True)
    spec_path = tdir / "spec.json"
    if not log_suffix:
        atomic_write_text(spec_path, spec.to_json())
        for stale in [tdir / "trial.json", *tdir.glob("trial.rank*.json")]:
            stale.unlink(missing_ok=True)  # an interrupted attempt: never mix its record in
    nproc = world_size(spec) if nproc is None else nproc
    env = dict(os.environ)
    env.update(spec.env)
    env.update(extra_env or {})
    root = package_root()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env[LAUNCH_T0_VAR] = repr(launch_t0 if launch_t0 is not None else time.time())
    cmd = trial_command(python, spec_path, nproc)
    err_path = tdir / f"stderr{log_suffix}.log"
    with open(tdir / f"stdout{log_suffix}.log", "wb") as out, open(err_path, "wb") as err:
        # Ctrl-C or SIGTERM while it runs: the child goes down with us, nothing else is lost
        rc = run_child(cmd, stdout=out, stderr=err, env=env, timeout_s=timeout_s,
                       preexec_fn=ignore_job_signals if ignore_sigterm else die_with_parent)
    tail = stderr_tail(err_path)
    status, error = status_from_returncode(rc, timeout_s, (tdir / "trial.json").exists())
    record = mark_infrastructure(spec, record_or_failure(spec, status, error, tail))
    record["returncode"] = rc
    record.update(annotate or {})
    if write_failure:
        atomic_write_json(tdir / "trial.json", record)
    return record


class LocalLauncher(Launcher):
    name = "local"

    def __init__(
        self,
        python: Optional[str] = None,
        device: str = "auto",
        devices: Optional[list[int]] = None,
        max_parallel: int = 1,
        inv: Optional[Inventory] = None,
    ) -> None:
        self.python = python or sys.executable
        self.device = device
        self.devices = devices
        self.max_parallel = max_parallel
        self._inv = inv

    def run_one(self, spec: TrialSpec, timeout_s: float) -> dict[str, Any]:
        """One trial in a fresh process, outside the slot bookkeeping (benchmarks, tools)."""
        return run_trial_process(spec, timeout_s, self.python, annotate={"launcher": "local"})

    def slots(self) -> DeviceSlots:
        inv = self._inv or inventory(self.device, self.devices)
        return DeviceSlots(inv, self.max_parallel)

    def run(
        self,
        specs: Sequence[TrialSpec],
        on_done: OnDone,
        timeout_s: float,
        on_start: Optional[OnStart] = None,
    ) -> None:
        """Sequential (``max_parallel=1``): every trial in plan order on the same devices.
        In parallel: one device set per (round, bucket) group, whose arms run on it one after
        another in plan order; only distinct groups run at the same time, on disjoint devices
        (A/B fairness: the arms compared in a round never straddle devices)."""
        slots = self.slots()
        lock = threading.Lock()

        def group(members: Sequence[TrialSpec]) -> None:
            taken: Optional[list[int]] = None
            try:
                for spec in members:
                    n = world_size(spec)
                    if not slots.fits(n):
                        record = record_or_failure(
                            spec, "unavailable",
                            f"needs {n} devices, the launcher has {len(slots.inv.devices)}", "")
                        atomic_write_json(Path(spec.trial_dir) / "trial.json", record)
                        with lock:
                            on_done(spec, record)
                        continue
                    if taken is None:  # the group's device set: enough for its widest arm
                        taken = slots.acquire(max(world_size(s) for s in members
                                                  if slots.fits(world_size(s))))
                    mine = taken[:n] if slots.inv.devices else taken
                    if on_start is not None:
                        with lock:
                            on_start(spec)
                    record = run_trial_process(spec, timeout_s, self.python, slots.env(mine),
                                               annotate={"launcher": "local", "devices": mine})
                    with lock:
                        on_done(spec, record)
            finally:
                if taken is not None:
                    slots.release(taken)

        if self.max_parallel <= 1:
            for spec in specs:  # plan order; the free devices are the same ones every time
                group([spec])
            return
        _run_parallel(round_groups(specs), group, self.max_parallel)


def round_groups(specs: Sequence[TrialSpec]) -> list[list[TrialSpec]]:
    """Consecutive specs of one (round, bucket), in plan order: the unit of A/B fairness."""
    groups: list[list[TrialSpec]] = []
    for s in specs:
        if groups and (groups[-1][0].round, groups[-1][0].bucket["name"]) == (
                s.round, s.bucket["name"]):
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def _run_parallel(groups: Sequence[Sequence[TrialSpec]],
                  one: Callable[[Sequence[TrialSpec]], None], n: int) -> None:
    """Start groups in plan order, up to ``n`` at once (device slots permitting)."""
    with ThreadPoolExecutor(max_workers=n) as pool:
        for fut in [pool.submit(one, g) for g in groups]:
            fut.result()
