"""One arm per process (``protocol.pairing=process``): this process measures the trial's one
arm. An embedded recipe runs its steps here, timed by the stepper
(orchestrator.worker.timing); a ``command`` workload's own program trains, and its log gives
the steps (orchestrator.worker.external)."""

from __future__ import annotations

from typing import Any

from orchestrator.core.trial_record import TrialBase, TrialRecordDict
from orchestrator.platform import compile_stats
from orchestrator.platform.interference import CpuWindow
from orchestrator.spec.jobs import TrialSpec
from orchestrator.worker.bootstrap import start_worker
from orchestrator.worker.external import measure_external
from orchestrator.worker.timing import (
    MAX_MEASURED_STEPS,
    ArmSteps,
    Built,
    Stepper,
    build_trainer,
    interference_fields,
    measured_record,
    run_warmup,
    window_block,
)


def measure_one(spec: TrialSpec, base: TrialBase, launch_t0: float | None) -> TrialRecordDict:
    worker = start_worker(spec.workload, spec.device)
    if worker.external:  # another program trains; its log gives the steps
        return measure_external(spec, base, worker.trainer(spec.bucket))
    trainer, batches, build_s = build_trainer(spec, worker)
    policy = spec.warmup()
    cs_start = compile_stats.snapshot()
    st = Stepper(spec, worker, trainer, batches)
    # Distributed: every decision below that changes how many steps run is taken on the
    # numbers all ranks agree on (distmod.StepAgreement)
    win = _Window(spec, policy)
    warm_times, settled = win.warm_up(st)
    cs_warm = compile_stats.snapshot()
    window = CpuWindow()
    window.start()  # other processes' CPU time over the measured steps
    win.measure(st)
    cs_end = compile_stats.snapshot()
    interference = interference_fields(window, worker.world_size)
    dist_fields = st.finish(worker.group)
    built = Built(spec, worker, st, trainer, batches, launch_t0, build_s, policy)
    return measured_record(built, base, ArmSteps(st.rows, warm_times, settled,
                                     compile_stats.trial_fields(cs_start, cs_warm, cs_end),
                                     interference, dist_fields, close=True))


class _Window:
    """One arm's steps in this process: the warm-up, step by step (it decides after each),
    then the measured window, ``measured_steps`` at least and, with protocol.measured_min_s,
    that much measured time (short steps get more of them, up to a cap); on a GPU the
    measured steps run in blocks timed by device events (orchestrator.worker.timing)."""

    def __init__(self, spec: TrialSpec, policy: Any) -> None:
        self.spec, self.policy = spec, policy
        self.min_s = spec.measured_min_s
        self.cap = (max(spec.measured_steps, MAX_MEASURED_STEPS) if self.min_s > 0
                    else spec.measured_steps)
        # a bound on tagged (excluded) steps, so a recipe that tags every step cannot loop forever
        self.max_steps = policy.max_steps + 3 * spec.measured_steps + self.cap + 10

    def check_bound(self, st: Stepper, measured_n: int) -> None:
        if len(st.rows) >= self.max_steps:
            raise RuntimeError(
                f"{len(st.rows)} steps run but only {measured_n} of {self.spec.measured_steps} "
                "measured: the recipe tags too many steps for exclusion")

    def warm_up(self, st: Stepper) -> tuple[list[float], bool]:
        return run_warmup(st.step, lambda: self.check_bound(st, 0), self.policy)

    def measure(self, st: Stepper) -> None:
        steps, n, got_s = self.spec.measured_steps, 0, 0.0
        while n < steps or (got_s < self.min_s and n < self.cap):
            self.check_bound(st, n)
            for decide_s, tags, row in st.block(window_block(st, n, got_s, steps, self.min_s,
                                                             self.cap)):
                if tags:
                    row["phase"] = "excluded"
                else:
                    row["phase"] = "measured"
                    n += 1
                    got_s += decide_s
