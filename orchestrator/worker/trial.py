"""The trial runner: one trial process (or in-process for tests), its records written.

A timed trial measures one arm, or its round's arms paired, the way
orchestrator.worker.pairing picks (the timing protocol's machinery: orchestrator.worker.timing);
a profiled trial and a microbenchmark trial run their own loops. A failure of the workload is
the record's status, never a lost row.

Run as ``python -m orchestrator.worker.trial SPEC.json``. The process imports torch, the recipe and
this module only, so its fixed cost stays close to ``python -c "import torch"``.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path

from orchestrator.core.trial_record import TrialBase, TrialRecordDict
from orchestrator.core.errors import BackendUnavailable
from orchestrator.core.records import Status, TrialKind
from orchestrator.core.results import atomic_write_json, trial_record
from orchestrator.platform import compile_stats
from orchestrator.platform import device as devmod
from orchestrator.platform import distributed as distmod
from orchestrator.platform.environment import record_facts
from orchestrator.spec.jobs import LAUNCH_T0_VAR, TrialSpec
from orchestrator.worker import pairing
from orchestrator.worker import nodes
from orchestrator.worker.bootstrap import worker_main
from orchestrator.worker.microbench import run_microbench
from orchestrator.worker.profile.runner import run_profiled
from orchestrator.worker.timing import MAX_MEASURED_STEPS, compile_hint, one_line  # noqa: F401

# MAX_MEASURED_STEPS, one_line: where their users looked for them before the timing machinery
# moved to orchestrator.worker.timing


def run_trial(spec: TrialSpec, launch_t0: float | None = None) -> TrialRecordDict:
    """Run the trial and write trial.json and steps.csv atomically. Never raises for a failure
    of the workload itself: the failure becomes the record's status."""
    tdir = Path(spec.trial_dir)
    tdir.mkdir(parents=True, exist_ok=True)
    pinned = pin(spec.cpu_affinity)  # before anything runs: what it starts inherits it
    base = _base_fields(spec)
    base["cpu_affinity"] = cpu_set()
    rank, world, _ = distmod.env_rank()
    if world > 1:
        base["rank"] = rank
    elif nodes.env_node_rank() > 0:  # a command's node k > 0: its node<k>.json is its
        rank = -nodes.env_node_rank()  # report (orchestrator.worker.nodes); node 0 writes
    try:
        record, records = _run_kind(spec, base, launch_t0)
    except BackendUnavailable as exc:
        record, records = trial_record(**base, status="unavailable", error=str(exc)), []
    except BaseException as exc:  # the workload failed: a status, not a lost row
        # stopped from outside (Ctrl-C; SIGTERM from the launcher, a command's run turns it
        # into SystemExit): no record, so a resume runs the trial again
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        base["failed_at"] = time.time()  # distributed: the earliest failing rank is the cause
        status = "oom" if devmod.is_oom(exc) else "failed"
        tb = traceback.format_exc(limit=8)
        record = trial_record(**base, status=status, error=compile_hint(exc, one_line(exc)),
                              traceback=tb)
        records = []
    finally:
        if world > 1:
            distmod.shutdown()
        if pinned is not None:  # an inline trial runs in the campaign's process
            os.sched_setaffinity(0, pinned)
    if spec.paired_arms and not records:  # the process failed before any arm's block: all arms
        records = [(trial_record(**{**base, "trial_id": a.trial_id, "arm_id": a.arm_id,
                                    "arm_label": a.arm_label, "is_baseline": a.is_baseline},
                                 **{k: v for k, v in record.items() if k not in base
                                    and k not in ("schema_version",)}), a.trial_dir)
                   for a in spec.paired_arms]
        record = records[0][0]
    _write_records(spec, records or [(record, str(tdir))], rank)
    return record


def pin(cpus: list[int] | None) -> set[int] | None:
    """Pin this process to ``cpus`` (launcher.cpu_affinity); the set it had, to restore, or
    None where nothing was pinned."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        return None
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    return before


def cpu_set() -> list[int] | None:
    """The cores this process may run on (None where the platform cannot tell)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def _base_fields(spec: TrialSpec) -> TrialBase:
    """The fields every record of this trial starts from."""
    base: TrialBase = {
        "trial_id": spec.trial_id, "kind": spec.kind, "bucket": spec.bucket["name"],
        "seq_len": spec.bucket["seq_len"], "micro_batch": spec.bucket["micro_batch"],
        "bucket_weight": spec.bucket.get("weight", 1.0), "arm_id": spec.arm_id,
        "arm_label": spec.arm_label, "is_baseline": spec.is_baseline, "round": spec.round,
        "position": spec.position, "pid": os.getpid(), "started_at": time.time(),
        "warmup_steps": spec.warmup_steps, "measured_steps": spec.measured_steps,
    }
    if spec.kind == TrialKind.PROFILE:
        base["layer"] = spec.profile.get("layer")
    if spec.code:  # the user's code it ran (orchestrator.campaign.revisions)
        base["code"] = spec.code
    return base


def _run_kind(spec: TrialSpec, base: TrialBase, launch_t0: float | None,
              ) -> tuple[TrialRecordDict, list[tuple[TrialRecordDict, str]]]:
    """(the process's record, each paired arm's (record, trial dir) or []) by trial kind."""
    records: list[tuple[TrialRecordDict, str]] = []
    if spec.kind == TrialKind.PROFILE:
        record = run_profiled(spec, base)
    elif spec.kind == TrialKind.MICROBENCH:
        record = run_microbench(spec, base)
    else:
        fills = _cache_fills(spec)  # before the trial compiles into them
        with compile_stats.cache_scope(spec.compile_cache, spec.cache_env):
            records = pairing.measure(spec, base, launch_t0)
        record = records[0][0]
        if not spec.paired_arms:  # one arm: the process's own record
            records = []
    if spec.kind == TrialKind.TIMED:
        for r in [record, *(r for r, _ in records)]:
            r["compile_cache"] = spec.compile_cache
            if r.get("arm_id") in fills:
                r["compile_cache_fill"] = fills[r["arm_id"]]
    return record, records


def _cache_fills(spec: TrialSpec) -> dict[str, str]:
    """compile_cache=arm: per arm, whether its cache folders held anything as the trial
    started (compile_stats.REUSES) or this trial fills them (FILLS: the arm's first trial)."""
    if spec.compile_cache != "arm":
        return {}
    envs = {a.arm_id: a.env for a in spec.paired_arms} or {spec.arm_id: spec.env}
    return {arm: compile_stats.fill_state({**os.environ, **env}, spec.cache_env)
            for arm, env in envs.items()}


def _write_records(spec: TrialSpec, records: list[tuple[TrialRecordDict, str]], rank: int) -> None:
    """Each record with its facts, the first last: the launcher reads it as the process's own;
    distributed, rank 0 is the only writer and other ranks leave only their failures (a
    command's node k > 0, ``rank`` -k, leaves its node report instead)."""
    for i, (rec, rdir) in reversed(list(enumerate(records))):
        Path(rdir).mkdir(parents=True, exist_ok=True)
        # after the timed steps, so neither the timing nor start-to-first-step pays for it
        if rank == 0:
            record_facts(rec, spec.device, Path(rdir), full=spec.env_report and i == 0)
        rec["finished_at"] = time.time()
        if rank == 0:
            atomic_write_json(Path(rdir) / "trial.json", rec)
        elif rec["status"] != Status.OK and rank > 0:  # < 0: a command's other node
            atomic_write_json(Path(rdir) / f"trial.rank{rank}.json", rec)


def _run_file(path: str) -> TrialRecordDict:
    t0 = os.environ.get(LAUNCH_T0_VAR)
    return run_trial(TrialSpec.from_file(path), float(t0) if t0 else None)


def main(argv: list[str] | None = None) -> int:
    return worker_main(argv, "orchestrator.worker.trial", _run_file, "trial", "trial_id",
                       (Status.OK, Status.UNAVAILABLE))


if __name__ == "__main__":
    sys.exit(main())
