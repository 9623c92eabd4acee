"""An embedded recipe's arms paired by steps in one process (``protocol.pairing=steps``,
orchestrator.core.blocks): one trainer, switched between the arms' settings block by block."""

from __future__ import annotations

import json
import traceback
from pathlib import Path
from typing import Any

from orchestrator.core.trial_record import TrialBase, TrialRecordDict
from orchestrator.core import blocks
from orchestrator.core.errors import BackendUnavailable
from orchestrator.core.results import INFRA_STATUS, trial_record
from orchestrator.platform import compile_stats
from orchestrator.platform import device as devmod
from orchestrator.platform.distributed import DistSummary
from orchestrator.platform.interference import CpuWindow, CpuWindowFigures
from orchestrator.spec.jobs import TrialSpec
from orchestrator.worker.bootstrap import start_worker
from orchestrator.worker.pairing.client import ArmFailure, PairingSession
from orchestrator.worker.pairing.steps import StepsPart
from orchestrator.worker.timing import (
    MAX_MEASURED_STEPS,
    ArmSteps,
    Built,
    Stepper,
    build_trainer,
    compile_hint,
    fold_memory,
    interference_fields,
    measured_record,
    one_line,
    run_warmup,
)
from recipes.registry import workload_from_dict


def measure_inprocess(spec: TrialSpec, base: TrialBase,
                      launch_t0: float | None) -> list[tuple[TrialRecordDict, str]]:
    """protocol.pairing=steps: every arm of ``spec.paired_arms`` in this one process (see
    orchestrator.core.blocks). Each arm warms up to its own steady state; then cycles of one block
    per arm (order reversed every cycle, an even number of cycles), each block
    ``switch_warmup_steps`` excluded steps after the switch and ``block_steps`` measured ones,
    until every arm has its measured_steps / measured_min_s. One (record, trial_dir) per arm,
    in the spec's order; an arm that raises (one rank) is recorded failed (``unavailable``
    for a backend missing here) and leaves the rotation, the others go on. The process is
    built with the baseline's workload, so a variant that cannot run here never takes the
    baseline's measurement with it."""
    base_arm = next((a for a in spec.paired_arms if a.is_baseline), spec.paired_arms[0])
    worker = start_worker(base_arm.workload, spec.device)
    run = _PairedRun(spec, worker)
    cs_start = compile_stats.snapshot()
    run.warm_up_all()
    cs_warm = compile_stats.snapshot()
    window = CpuWindow()
    window.start()
    run.cycles()
    cs_end = compile_stats.snapshot()
    interference = interference_fields(window, worker.world_size)
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
        self.part = StepsPart.of(spec)
        self.arms = spec.paired_arms
        self.ids = [str(a.arm_id) for a in self.arms]
        self.baseline = next((str(a.arm_id) for a in self.arms if a.is_baseline),
                             self.ids[0])
        self.trainer, self.batches, self.build_s = build_trainer(spec, worker)
        self.workloads = {a.arm_id: workload_from_dict(a.workload) for a in self.arms}
        self.policy = spec.warmup()
        self.st = Stepper(spec, worker, self.trainer, self.batches)
        self.one_rank = worker.group is None  # several ranks: a failure anywhere fails all
        self.failed: dict[str, ArmFailure] = {}
        self.warm: dict[str, tuple[list[float], bool]] = {}
        self.running = Path(spec.trial_dir) / "running.json"  # which arm, should it die
        self.running.unlink(missing_ok=True)  # an earlier attempt's
        self.min_s = spec.measured_min_s
        self.cap = (max(spec.measured_steps, MAX_MEASURED_STEPS) if self.min_s > 0
                    else spec.measured_steps)
        self.bound = (self.policy.max_steps + 3 * spec.measured_steps + self.cap + 10) * len(
            self.arms) * (1 + self.part.switch_warmup_steps)
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
                                "error": compile_hint(exc, one_line(exc)),
                                "traceback": traceback.format_exc(limit=8)}

    def _run(self, arm: str, fn: Any) -> None:
        fn()
        fold_memory(self.arm_mem.setdefault(arm, {}), devmod.memory_figures(self.st.dev))

    def check_bound(self) -> None:
        if len(self.st.rows) >= self.bound:
            raise RuntimeError(f"{len(self.st.rows)} steps run in the paired process: the "
                               "recipe tags too many steps for exclusion")

    def warm_up(self, arm: str) -> None:
        self.trainer.switch(self.workloads[arm])
        self.warm[arm] = run_warmup(lambda: self.st.step(arm_id=arm, block=-1),
                                    self.check_bound, self.policy)

    def warm_up_all(self) -> None:
        for arm in self.ids:
            self.guarded(arm, lambda arm=arm: self.warm_up(arm))
            if self.baseline in self.failed:
                break

    def block(self, arm: str, cycle: int) -> None:
        steps = self.part
        self.trainer.switch(self.workloads[arm])  # every block, the same arm's too: alike
        for _ in range(steps.switch_warmup_steps):
            _, tags, row = self.st.step(arm_id=arm, block=cycle, prev_arm=self.prev)
            row["phase"], row["tags"] = "excluded", ";".join([*tags, blocks.SWITCH_TAG])
        k = 0
        while k < steps.block_steps:  # on a GPU, timed by device events with no sync inside
            self.check_bound()
            for decide_s, tags, row in self.st.block(steps.block_steps - k, arm_id=arm,
                                                     block=cycle, prev_arm=self.prev):
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
        return blocks.ordered(self.alive(), self.cycle, self.part.order, self.part.order_seed)

    def arm_record(self, i: int, base: TrialBase, launch_t0: float | None,
                   compile_fields: compile_stats.CompileFields, interference: CpuWindowFigures,
                   dist_fields: DistSummary) -> tuple[TrialRecordDict, str]:
        """Arm ``i``'s (record, trial dir): failed, not measured (the baseline failed), or its
        measured steps with their blocks."""
        spec, a = self.spec, self.arms[i]
        arm = str(a.arm_id)
        own: TrialBase = {**base, "trial_id": a.trial_id, "arm_id": arm, "arm_label": a.arm_label,
               "is_baseline": a.is_baseline, "position": spec.position + i}
        session: PairingSession = {"pairing": "steps", "paired_process": spec.trial_id, "paired_arms": self.ids,
                   "block_steps": self.part.block_steps,
                   "switch_warmup_steps": self.part.switch_warmup_steps, "cycles": self.cycle}
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
        built = Built(spec, self.worker, self.st, self.trainer, self.batches, launch_t0,
                       self.build_s, self.policy)
        rec = measured_record(built, own, ArmSteps(rows, times, settled, compile_fields, interference,
                                       dist_fields, close=arm == ok_arms[-1],
                                       trial_dir=a.trial_dir, memory=self.arm_mem.get(arm)),
                      **session,
                      blocks=[{"cycle": c, "median_s": m} for c, m in sorted(meds.items())])
        return rec, a.trial_dir


