"""The trial runner: one arm on one bucket, in its own process (or in-process for tests).

The orchestrator owns the timing protocol here: warm-up steps are run and excluded, the device
is synchronised at every step boundary, each step's wall time, data wait, loss and tokens are
kept raw in steps.csv so trimming can be redone in analysis. Recipes never time themselves.

Run as ``python -m orchestrator.worker.trial SPEC.json``. The process imports torch, the recipe and
this module only, so its fixed cost stays close to ``python -c "import torch"``.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.core.records import Status, TrialKind
from orchestrator.core import blocks
from orchestrator.platform import compile_stats
from orchestrator.platform import device as devmod
from orchestrator.platform import distributed as distmod
from orchestrator.core import reference as refmod
from orchestrator.platform.environment import record_facts
from orchestrator.core.errors import BackendUnavailable
from orchestrator.worker.alternate import measure_alternated
from orchestrator.worker.duet import measure_duet
from orchestrator.worker.client_paired import measure_client_paired
from orchestrator.worker.external import measure_external
from orchestrator.platform.flops import trial_flops
from orchestrator.platform.interference import CpuWindow
from orchestrator.spec.jobs import LAUNCH_T0_VAR, TrialSpec
from orchestrator.platform.children import die_with_parent
from orchestrator.worker.microbench import run_microbench
from orchestrator.worker.profile.runner import run_profiled
from orchestrator.core.results import (INFRA_STATUS, atomic_write_json, excluded_tags, trial_record,
                                       write_csv)
from orchestrator.core.steady import warmup_complete
from orchestrator.worker.bootstrap import start_worker
from recipes.registry import workload_from_dict

# the most measured steps protocol.measured_min_s may ask for
MAX_MEASURED_STEPS = 2000


def one_line(exc: BaseException) -> str:
    """The exception in one line; one without a message (a bare ``assert``) says where it
    was raised: file, line, function and the line's source."""
    text = str(exc).strip().splitlines()
    if text:
        return f"{type(exc).__name__}: {text[0]}"
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return type(exc).__name__
    f = frames[-1]
    return (f"{type(exc).__name__} at {Path(f.filename).name}:{f.lineno} in {f.name}"
            + (f": {f.line.strip()}" if f.line else ""))


def _compile_hint(exc: BaseException, error: str) -> str:
    """torch.compile(fullgraph=True) raises dynamo's Unsupported at a graph break: add its
    explanation line and the fix to the one-line error."""
    if type(exc).__name__ != "Unsupported" or not type(exc).__module__.startswith("torch._dynamo"):
        return error
    why = next((ln.strip() for ln in str(exc).splitlines() if ln.strip().startswith("Explanation:")), "")
    return (f"{error} ({why + '; ' if why else ''}fullgraph=True makes a graph break an error: "
            "remove the break, or compile with fullgraph off)")


def _mad(values: list[float]) -> float:
    med = statistics.median(values)
    return statistics.median(abs(v - med) for v in values)


def run_trial(spec: TrialSpec, launch_t0: float | None = None) -> dict[str, Any]:
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
        record = trial_record(**base, status=status, error=_compile_hint(exc, one_line(exc)),
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


def _base_fields(spec: TrialSpec) -> dict[str, Any]:
    """The fields every record of this trial starts from."""
    base: dict[str, Any] = {
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


def _run_kind(spec: TrialSpec, base: dict[str, Any], launch_t0: float | None,
              ) -> tuple[dict[str, Any], list[tuple[dict[str, Any], str]]]:
    """(the process's record, each paired arm's (record, trial dir) or []) by trial kind."""
    records: list[tuple[dict[str, Any], str]] = []
    if spec.kind == TrialKind.PROFILE:
        record = run_profiled(spec, base)
    elif spec.paired_arms and spec.kind == TrialKind.TIMED:
        with compile_stats.cache_scope(spec.compile_cache):
            records = _measure_paired(spec, base, launch_t0)
        record = records[0][0]
    elif spec.kind == TrialKind.MICROBENCH:
        record = run_microbench(spec, base)
    else:
        with compile_stats.cache_scope(spec.compile_cache):
            record = _measure(spec, base, launch_t0)
    if spec.kind == TrialKind.TIMED:
        for r in [record, *(r for r, _ in records)]:
            r["compile_cache"] = spec.compile_cache
    return record, records


def _write_records(spec: TrialSpec, records: list[tuple[dict[str, Any], str]], rank: int) -> None:
    """Each record with its facts, the first last: the launcher reads it as the process's own;
    distributed, rank 0 is the only writer and other ranks leave only their failures."""
    for i, (rec, rdir) in reversed(list(enumerate(records))):
        Path(rdir).mkdir(parents=True, exist_ok=True)
        # after the timed steps, so neither the timing nor start-to-first-step pays for it
        if rank == 0:
            record_facts(rec, spec.device, Path(rdir), full=spec.env_report and i == 0)
        rec["finished_at"] = time.time()
        if rank == 0:
            atomic_write_json(Path(rdir) / "trial.json", rec)
        elif rec["status"] != Status.OK:
            atomic_write_json(Path(rdir) / f"trial.rank{rank}.json", rec)


class _Stepper:
    """Runs and times one training step at a time, the orchestrator's way: the host-speed
    reference before the clock starts, the device synchronised at the step boundary, the
    recipe's tags and any compile activity noted, and (distributed) the slowest rank's time and
    every rank's tags agreed on after the clock stopped."""

    def __init__(self, spec: TrialSpec, worker: Any, trainer: Any, batches: Any) -> None:
        dev = worker.device
        self.dev, self.trainer, self.batches = dev, trainer, batches
        self.clock = time.perf_counter
        if spec.clock == "cpu":
            if dev.kind != "cpu":
                raise BackendUnavailable(
                    f"protocol.clock=cpu times host CPU work only, not {dev.kind}")
            self.clock = time.process_time
        torch_mod = None if worker.host_only else sys.modules.get("torch")
        pool = torch_mod.get_num_threads() if torch_mod is not None else 1
        self.ref_on, self.ref_why = refmod.resolve(spec.speed_reference, dev.kind,
                                                   worker.world_size, pool)
        self.ref = refmod.host_reference(self.clock) if self.ref_on else None
        self.agree = (distmod.StepAgreement(dev.torch_device) if worker.group is not None
                      else None)
        self.compiled_before = compile_stats.activity()
        # GPU: the device-side span of train_step (Event timing), beside the host's times
        self.timer = devmod.device_timer(dev)
        self.rows: list[dict[str, Any]] = []
        self.losses: list[Any] = []
        self.first_step_at: float | None = None
        devmod.synchronize(dev)

    def step(self, **fields: Any) -> tuple[float, list[str], dict[str, Any]]:
        """(the time decisions use, the agreed tags, the row) of one step; the caller sets the
        row's phase. ``fields`` go into the row (e.g. the arm and block)."""
        clock, i = self.clock, len(self.rows)
        ref_s = self.ref() if self.ref is not None else None  # outside the timed window
        t0 = clock()
        if self.first_step_at is None:
            self.first_step_at = time.time()
        batch = next(self.batches)
        t1 = clock()
        timer = self.timer
        if timer is not None:
            timer.start()
        loss = self.trainer.train_step(batch)
        if i == 0:  # e.g. workload.model.compile.visit_buckets: the other buckets' shapes
            self.trainer.visit_shapes()
        if timer is not None:
            timer.stop()
            t_launched = clock()  # the host is done launching; the device may still run
        devmod.synchronize(self.dev)
        t2 = clock()
        tags = list(self.trainer.step_tags())
        compiled_now = compile_stats.activity()  # this step compiled or recompiled: not steady
        if compiled_now != self.compiled_before:
            self.compiled_before = compiled_now
            if "compile" not in tags:
                tags.append("compile")
        decide_s, tags = self.agree(t2 - t0, tags) if self.agree is not None else (t2 - t0, tags)
        row = {"step": i, "phase": "", "step_time_s": t2 - t0, "data_wait_s": t1 - t0,
               "tokens": self.trainer.tokens_per_step, "samples": self.trainer.samples_per_step,
               "batch_index": getattr(batch, "index", i), "tags": ";".join(tags), **fields,
               **({"reference_s": ref_s} if self.ref is not None else {})}
        if timer is not None:  # read after the clock stopped (the device is synchronised)
            row["host_launch_s"], row["device_time_s"] = t_launched - t1, timer.elapsed_s()
        self.rows.append(row)
        self.losses.append(loss)
        return decide_s, tags, row

    def finish(self, ctx: Any) -> dict[str, Any]:
        """After the last timed step: losses read, and (distributed) every rank's step times
        gathered into rank 0's rows (the slowest rank's time per step); the distributed
        summary fields."""
        for row, loss in zip(self.rows, self.losses):  # read outside the timed window
            row["loss"] = float(loss.float().item()) if hasattr(loss, "item") else float(loss)
        if ctx is None:
            return {}
        rows = self.rows
        per_rank = distmod.gather_step_times(ctx, [r["step_time_s"] for r in rows])
        if per_rank is None:
            return {}
        slowest, skew, who = distmod.combine(per_rank)  # rank 0
        for i, row in enumerate(rows):
            for r, times in enumerate(per_rank):
                row[f"step_time_rank{r}_s"] = times[i]
            row["step_time_s"], row["rank_skew_s"] = slowest[i], skew[i]
            row["slowest_rank"] = who[i]
        measured_idx = [i for i, r in enumerate(rows) if r["phase"] == "measured"]
        return distmod.summary(ctx, [skew[i] for i in measured_idx],
                               [who[i] for i in measured_idx],
                               self.agree.cost_s if self.agree is not None else None)


def _build(spec: TrialSpec, worker: Any) -> tuple[Any, Any, float]:
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:  # inline trials share a process: compile cold, as a fresh one does
        dynamo.reset()
    build_t0 = time.perf_counter()
    trainer = worker.trainer(spec.bucket)
    build_s = time.perf_counter() - build_t0
    devmod.reset_peak_memory(worker.device)
    return trainer, trainer.batches(), build_s


def _measure(spec: TrialSpec, base: dict[str, Any], launch_t0: float | None) -> dict[str, Any]:
    worker = start_worker(spec.workload, spec.device)
    if worker.external:  # another program trains; its log gives the steps
        return measure_external(spec, base, worker.trainer(spec.bucket))
    trainer, batches, build_s = _build(spec, worker)
    policy = spec.warmup()
    # time-based floor on the measured window (protocol.measured_min_s): short steps get more
    # of them, up to a cap. Distributed: every decision below that changes how many steps run
    # is taken on the numbers all ranks agree on after each step (distmod.StepAgreement)
    min_s = spec.measured_min_s
    cap = max(spec.measured_steps, MAX_MEASURED_STEPS) if min_s > 0 else spec.measured_steps
    # a bound on tagged (excluded) steps, so a recipe that tags every step cannot loop forever
    max_steps = policy.max_steps + 3 * spec.measured_steps + cap + 10
    warm_times: list[float] = []
    warm_done, settled = warmup_complete(warm_times, policy)
    measured_n = 0
    cs_start = cs_warm = compile_stats.snapshot()
    warm_snapped = False
    window = CpuWindow()
    st = _Stepper(spec, worker, trainer, batches)
    measured_s = 0.0
    while measured_n < spec.measured_steps or (measured_s < min_s and measured_n < cap):
        if len(st.rows) >= max_steps:
            raise RuntimeError(
                f"{len(st.rows)} steps run but only {measured_n} of {spec.measured_steps} "
                "measured: the recipe tags too many steps for exclusion")
        if warm_done and not warm_snapped:  # compile counters at the end of the warm-up
            cs_warm, warm_snapped = compile_stats.snapshot(), True
            window.start()  # other processes' CPU time over the measured steps
        decide_s, tags, row = st.step()
        if tags:
            row["phase"] = "excluded"
        elif not warm_done:
            row["phase"] = "warmup"
            warm_times.append(decide_s)
            warm_done, settled = warmup_complete(warm_times, policy)
        else:
            row["phase"] = "measured"
            measured_n += 1
            measured_s += decide_s
    cs_end = compile_stats.snapshot()
    interference = _interference(window, worker.world_size)
    dist_fields = st.finish(worker.group)
    built = _Built(spec, worker, st, trainer, batches, launch_t0, build_s, policy)
    return _record(built, base, _Arm(st.rows, warm_times, settled,
                                     compile_stats.trial_fields(cs_start, cs_warm, cs_end),
                                     interference, dist_fields, close=True))


def _measure_paired(spec: TrialSpec, base: dict[str, Any],
                    launch_t0: float | None) -> list[tuple[dict[str, Any], str]]:
    """protocol.pairing=steps: every arm of ``spec.paired_arms`` in this one process (see
    orchestrator.core.blocks). Each arm warms up to its own steady state; then cycles of one block
    per arm (order reversed every cycle, an even number of cycles), each block
    ``switch_warmup_steps`` excluded steps after the switch and ``block_steps`` measured ones,
    until every arm has its measured_steps / measured_min_s. One (record, trial_dir) per arm,
    in the spec's order; an arm that raises (one rank) is recorded failed (``unavailable``
    for a backend missing here) and leaves the rotation, the others go on. The process is
    built with the baseline's workload, so a variant that cannot run here never takes the
    baseline's measurement with it."""
    if spec.duet:  # protocol.pairing=duet: the arms side by side, each on its slice
        return measure_duet(spec, base)
    if spec.alternate:  # a plain command: the arms' own processes take turns
        return measure_alternated(spec, base)
    base_arm = next((a for a in spec.paired_arms if a.is_baseline), spec.paired_arms[0])
    worker = start_worker(base_arm.workload, spec.device)
    if worker.external:  # a command whose trainer switches arms through orchestrator.client
        trainer = worker.trainer(spec.bucket)
        if not getattr(trainer.workload, "switchable", None):
            raise BackendUnavailable("protocol.pairing=steps for a command whose trainer does "
                                     "not switch arms through orchestrator.client alternates "
                                     "its arms' processes (the campaign plans it so)")
        return measure_client_paired(spec, base, trainer)
    run = _PairedRun(spec, worker)
    cs_start = compile_stats.snapshot()
    run.warm_up_all()
    cs_warm = compile_stats.snapshot()
    window = CpuWindow()
    window.start()
    run.cycles()
    cs_end = compile_stats.snapshot()
    interference = _interference(window, worker.world_size)
    dist_fields = run.st.finish(worker.group)
    run.running.unlink(missing_ok=True)
    compile_fields = compile_stats.trial_fields(cs_start, cs_warm, cs_end)
    return [run.arm_record(i, base, launch_t0, compile_fields, interference, dist_fields)
            for i in range(len(spec.paired_arms))]


class _PairedRun:
    """The state of one paired process: each arm's warm-up, measured steps and seconds so far,
    allocator peaks, and failure (an arm that raised leaves the rotation)."""

    def __init__(self, spec: TrialSpec, worker: Any) -> None:
        self.spec, self.worker = spec, worker
        self.arms = spec.paired_arms
        self.ids = [str(a.arm_id) for a in self.arms]
        self.baseline = next((str(a.arm_id) for a in self.arms if a.is_baseline),
                             self.ids[0])
        self.trainer, self.batches, self.build_s = _build(spec, worker)
        self.workloads = {a.arm_id: workload_from_dict(a.workload) for a in self.arms}
        self.policy = spec.warmup()
        self.st = _Stepper(spec, worker, self.trainer, self.batches)
        self.one_rank = worker.group is None  # several ranks: a failure anywhere fails all
        self.failed: dict[str, dict[str, Any]] = {}
        self.warm: dict[str, tuple[list[float], bool]] = {}
        self.running = Path(spec.trial_dir) / "running.json"  # which arm, should it die
        self.running.unlink(missing_ok=True)  # an earlier attempt's
        self.min_s = spec.measured_min_s
        self.cap = (max(spec.measured_steps, MAX_MEASURED_STEPS) if self.min_s > 0
                    else spec.measured_steps)
        self.bound = (self.policy.max_steps + 3 * spec.measured_steps + self.cap + 10) * len(
            self.arms) * (1 + spec.switch_warmup_steps)
        self.n = dict.fromkeys(self.ids, 0)
        self.got_s = dict.fromkeys(self.ids, 0.0)
        self.arm_mem: dict[str, dict[str, int]] = {}  # each arm's own allocator peaks (GPU)
        self.cycle = 0
        self.prev = ""  # the arm of the block before (each block records its predecessor)

    def guarded(self, arm: str, fn: Any) -> None:
        """Run ``fn`` as ``arm``'s: its peaks read after it; on one rank a failure is recorded
        and the others go on."""
        if self.worker.rank == 0:  # no fsync: it only has to outlive this process
            self.running.write_text(json.dumps({"arm_id": arm}), encoding="utf-8")
        devmod.reset_peak_memory(self.st.dev)  # the peaks read after fn are this arm's
        if not self.one_rank:
            self._run(arm, fn)
            return
        try:
            self._run(arm, fn)
        except BackendUnavailable as exc:  # e.g. a kernel this device cannot run: a status
            self.failed[arm] = {"status": "unavailable", "error": str(exc)}
        except Exception as exc:  # this arm failed: recorded, the others go on
            self.failed[arm] = {"status": "oom" if devmod.is_oom(exc) else "failed",
                                "error": _compile_hint(exc, one_line(exc)),
                                "traceback": traceback.format_exc(limit=8)}

    def _run(self, arm: str, fn: Any) -> None:
        fn()
        _fold_memory(self.arm_mem.setdefault(arm, {}), devmod.memory_figures(self.st.dev))

    def check_bound(self) -> None:
        if len(self.st.rows) >= self.bound:
            raise RuntimeError(f"{len(self.st.rows)} steps run in the paired process: the "
                               "recipe tags too many steps for exclusion")

    def warm_up(self, arm: str) -> None:
        self.trainer.switch(self.workloads[arm])
        times: list[float] = []
        done, settled = warmup_complete(times, self.policy)
        while not done:
            self.check_bound()
            decide_s, tags, row = self.st.step(arm_id=arm, block=-1)
            if tags:
                row["phase"] = "excluded"
            else:
                row["phase"] = "warmup"
                times.append(decide_s)
                done, settled = warmup_complete(times, self.policy)
        self.warm[arm] = (times, settled)

    def warm_up_all(self) -> None:
        for arm in self.ids:
            self.guarded(arm, lambda arm=arm: self.warm_up(arm))
            if self.baseline in self.failed:
                break

    def block(self, arm: str, cycle: int) -> None:
        spec = self.spec
        self.trainer.switch(self.workloads[arm])  # every block, the same arm's too: alike
        for _ in range(spec.switch_warmup_steps):
            _, tags, row = self.st.step(arm_id=arm, block=cycle, prev_arm=self.prev)
            row["phase"], row["tags"] = "excluded", ";".join([*tags, blocks.SWITCH_TAG])
        k = 0
        while k < spec.block_steps:
            self.check_bound()
            decide_s, tags, row = self.st.step(arm_id=arm, block=cycle, prev_arm=self.prev)
            if tags:
                row["phase"] = "excluded"
                continue
            row["phase"] = "measured"
            k += 1
            self.n[arm] += 1
            self.got_s[arm] += decide_s

    def alive(self) -> list[str]:
        return blocks.live_arms(self.ids, self.baseline, self.failed)

    def short(self, a: str) -> bool:
        return blocks.needs_more(self.n[a], self.got_s[a], self.spec.measured_steps,
                                 self.min_s, self.cap)

    def cycles(self) -> None:
        """Cycles of one block per live arm until each has its measured steps and seconds
        (an even number of cycles: every arm as often first as last)."""
        while self.alive() and (self.cycle % 2 or any(self.short(a) for a in self.alive())):
            for arm in self.order():
                self.guarded(arm, lambda arm=arm: self.block(arm, self.cycle))
                self.prev = arm
            self.cycle += 1

    def order(self) -> list[str]:
        """This cycle's block order (a seeded Williams design by default)."""
        return blocks.ordered(self.alive(), self.cycle, self.spec.order, self.spec.order_seed)

    def arm_record(self, i: int, base: dict[str, Any], launch_t0: float | None,
                   compile_fields: dict[str, Any], interference: dict[str, Any],
                   dist_fields: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """Arm ``i``'s (record, trial dir): failed, not measured (the baseline failed), or its
        measured steps with their blocks."""
        spec, a = self.spec, self.arms[i]
        arm = str(a.arm_id)
        own = {**base, "trial_id": a.trial_id, "arm_id": arm, "arm_label": a.arm_label,
               "is_baseline": a.is_baseline, "position": spec.position + i}
        session = {"pairing": "steps", "paired_process": spec.trial_id, "paired_arms": self.ids,
                   "block_steps": spec.block_steps,
                   "switch_warmup_steps": spec.switch_warmup_steps, "cycles": self.cycle}
        if arm in self.failed:
            return trial_record(**own, **self.failed[arm], **session), a.trial_dir
        ok_arms = self.alive()
        if arm not in ok_arms:  # the baseline failed: nothing to pair this arm's steps with
            return (trial_record(**own, status=INFRA_STATUS, **session,
                                 infra_reason=f"the baseline failed in the paired process "
                                 f"({self.failed[self.baseline]['error']})",
                                 error="not measured: the baseline failed first"),
                    a.trial_dir)
        self.trainer.switch(self.workloads[arm])  # the counted step and the facts: this arm's
        Path(a.trial_dir).mkdir(parents=True, exist_ok=True)
        rows = [r for r in self.st.rows if r["arm_id"] == arm]
        times, settled = self.warm[arm]
        measured = [r for r in rows if r["phase"] == "measured"]
        meds = blocks.block_medians([r["step_time_s"] for r in measured],
                                    [r["block"] for r in measured])
        built = _Built(spec, self.worker, self.st, self.trainer, self.batches, launch_t0,
                       self.build_s, self.policy)
        rec = _record(built, own, _Arm(rows, times, settled, compile_fields, interference,
                                       dist_fields, close=arm == ok_arms[-1],
                                       trial_dir=a.trial_dir, memory=self.arm_mem.get(arm)),
                      **session,
                      blocks=[{"cycle": c, "median_s": m} for c, m in sorted(meds.items())])
        return rec, a.trial_dir


def _fold_memory(acc: dict[str, int], figures: dict[str, int] | None) -> None:
    """One block's allocator figures into its arm's: the peaks' maximum, the latest reserved."""
    for k, v in (figures or {}).items():
        acc[k] = v if k == "reserved_mem_bytes" else max(acc.get(k, 0), v)


def _memory_fields(dev: Any, memory: dict[str, int] | None,
                   paired: bool) -> tuple[int, str, dict[str, int]]:
    """(peak bytes, its source, the other allocator figures) of a record: the arm's own figures
    in a paired process (``memory``), else the process's since the trainer was built. On the
    CPU the peak is the process's peak RSS, which cannot be reset per arm."""
    figures = memory if memory else devmod.memory_figures(dev)
    peak, source = devmod.peak_memory_bytes(dev)
    if figures and "peak_mem_bytes" in figures:
        peak = figures["peak_mem_bytes"]
        source = f"{dev.kind} allocator peak" + (" (this arm's blocks)" if paired else "")
    elif paired:
        source += " (the paired process, all arms)"
    return peak, source, {k: v for k, v in (figures or {}).items() if k != "peak_mem_bytes"}


def _interference(window: CpuWindow, world: int) -> dict[str, Any]:
    if world <= 1:
        return window.stop()
    return {"others_cpu_s": None, "others_cores": None,
            "note": "not measured for multi-rank trials (the other ranks are not others)"}


@dataclass
class _Built:
    """One process's trainer and what built it: shared by every arm the process measures."""

    spec: TrialSpec
    worker: Any
    st: _Stepper
    trainer: Any
    batches: Any
    launch_t0: float | None
    build_s: float
    policy: Any


@dataclass
class _Arm:
    """One arm's measurement in that process: its steps and what was sampled around them."""

    rows: list[dict[str, Any]]
    warm_times: list[float]
    settled: bool
    compile_fields: dict[str, Any]
    interference: dict[str, Any]
    dist_fields: dict[str, Any]
    close: bool  # the batch stream is done with (stops DataLoader workers)
    trial_dir: str | None = None
    memory: dict[str, int] | None = None  # this arm's allocator figures in a paired process


def _record(b: _Built, base: dict[str, Any], arm: _Arm, **more: Any) -> dict[str, Any]:
    """The trial record of ``arm.rows`` (one arm's steps; all of them for a one-arm trial),
    after the timed steps: steps.csv, FLOPs and utilization (an extra counted step), the
    recipe's extra facts."""
    spec, worker, st, trainer = b.spec, b.worker, b.st, b.trainer
    dev, ctx = worker.device, worker.group
    rows = arm.rows
    peak, peak_source, mem_more = _memory_fields(dev, arm.memory, "pairing" in more)
    measured = [r["step_time_s"] for r in rows if r["phase"] == "measured"]
    mem_more = {**mem_more, **_device_time_fields(rows)}
    median = statistics.median(measured)
    # one-off cost: warm-up steps and the steps that compiled (excluded from the steady state)
    warmup = [r["step_time_s"] for r in rows if r["phase"] == "warmup"
              or (r["phase"] == "excluded" and "compile" in r["tags"].split(";"))]
    writer = ctx is None or ctx.is_writer  # other ranks' times live in rank 0's steps.csv
    if writer:
        write_csv(Path(arm.trial_dir or spec.trial_dir) / "steps.csv", rows)
    flops = trainer.useful_flops_per_step()
    utilization = _utilization(b, flops, median)  # an extra counted step
    stream_close = getattr(b.batches, "close", None)
    if arm.close and stream_close is not None:  # after the FLOP count's extra step
        stream_close()
    extra = _extra_facts(trainer)
    if not writer:  # every rank ran the counted step above (it may hold collectives)
        return trial_record(**base, status=Status.OK)
    nonfinite = [r["step"] for r in rows if r["loss"] != r["loss"] or abs(r["loss"]) == float("inf")]
    torch_mod = sys.modules.get("torch")  # recorded only when the recipe really used torch
    first = st.first_step_at
    return trial_record(
        **base,
        status=Status.OK,
        device={"kind": dev.kind, "name": dev.name, "count": dev.count},
        torch_version=getattr(torch_mod, "__version__", None),
        python_version=platform.python_version(),
        startup_to_first_step_s=(first - b.launch_t0) if b.launch_t0 and first else None,
        trainer_build_s=b.build_s,
        **_step_fields(b, arm, measured, median),
        tokens_per_step=trainer.tokens_per_step,
        tokens_per_s=trainer.tokens_per_step / median,
        peak_mem_bytes=peak,
        peak_mem_source=peak_source,
        **mem_more,
        useful_flops_per_step=flops,
        final_loss=rows[-1]["loss"],
        nonfinite_loss_steps=nonfinite,
        env=dict(spec.env),
        **utilization,
        torch_threads=torch_mod.get_num_threads() if torch_mod is not None else None,
        # one-off cost of the warm-up steps above steady state (compile, autotune, workers ...)
        warmup_excess_s=sum(warmup) - len(warmup) * median,
        data_wait_share=sum(r["data_wait_s"] for r in rows if r["phase"] == "measured")
        / sum(measured),
        **arm.compile_fields,
        interference=arm.interference,
        **arm.dist_fields,
        **extra,
        **more,
    )


def _step_fields(b: _Built, arm: _Arm, measured: list[float], median: float) -> dict[str, Any]:
    """The measured window: its median and spread, the clock, the speed reference, the
    warm-up and the excluded steps."""
    rows, st = arm.rows, b.st
    return {
        "step_time_median_s": median, "step_time_mad_s": _mad(measured), "clock": b.spec.clock,
        "measured_steps_run": len(measured), "speed_reference": st.ref_on,
        "speed_reference_why": st.ref_why,
        "reference_median_s": (statistics.median(r["reference_s"] for r in rows
                                                 if r["phase"] == "measured")
                               if st.ref_on else None),
        "warmup_policy": b.policy.policy, "warmup_steps_used": len(arm.warm_times),
        "warmup_settled": arm.settled,
        "excluded_steps": sum(1 for r in rows if r["phase"] == "excluded"),
        "excluded_tags": excluded_tags(rows),
        "compile_steps": sum(1 for r in rows if "compile" in r["tags"].split(";")),
    }


def _device_time_fields(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """GPU: the device-side span and the host's launch time, beside the wall time."""
    timed = [r for r in rows if r["phase"] == "measured" and "device_time_s" in r]
    if not timed:
        return {}
    return {"device_time_median_s": statistics.median(r["device_time_s"] for r in timed),
            "host_launch_median_s": statistics.median(r["host_launch_s"] for r in timed)}


def _utilization(b: _Built, flops: float | None, median: float) -> dict[str, Any]:
    """FLOPs and utilization after the timed steps (an extra counted step); a host-only
    (numpy) recipe: torch's FLOP counter and peak table do not apply, torch stays out."""
    if b.worker.host_only:
        return {"flops": {"useful_per_step": flops,
                          "useful_definition": b.trainer.useful_flops_definition,
                          "executed_per_step": None,
                          "executed_note": "not counted: host-only recipe (no torch)"},
                "matmul_dtype": None, "matmul_dtype_why": "host-only recipe (no torch)",
                "peaks": [], "utilization": []}
    return trial_flops(b.trainer, b.batches, b.worker.device, b.spec.hardware,
                       b.worker.workload.precision, median)


def _extra_facts(trainer: Any) -> dict[str, Any]:
    """Recipe-specific data for the report (never timings), e.g. muon_tp's auto choices, and
    what the step ran where the recipe resolves it at run time."""
    extra = trainer.extra_record()
    executes = trainer.executes()
    if executes is not None:
        extra = {**extra, "executes": executes, "executes_covers": list(trainer.executes_covers)}
    return dict(extra)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m orchestrator.worker.trial SPEC.json", file=sys.stderr)
        return 2
    if "TORCHELASTIC_RUN_ID" in os.environ:  # a torchrun worker: die with the agent
        die_with_parent()
    import logging

    # warnings from anything, and the recipes' one-off INFO facts (e.g. muon_tp's "tp_mode
    # auto:" choice per shape, rank 0) reach the trial's stderr.log
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("recipes").setLevel(logging.INFO)
    spec = TrialSpec.from_file(argv[0])
    t0 = os.environ.get(LAUNCH_T0_VAR)
    record = run_trial(spec, float(t0) if t0 else None)
    if record["status"] != Status.OK:
        print(f"trial {spec.trial_id}: {record['status']}: {record.get('error')}", file=sys.stderr)
        if record.get("traceback"):
            print(record["traceback"], file=sys.stderr)
    return 0 if record["status"] in (Status.OK, Status.UNAVAILABLE) else 1


if __name__ == "__main__":
    sys.exit(main())
