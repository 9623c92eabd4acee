"""One arm per process (``protocol.pairing=process``): this process measures the trial's one
arm. An embedded recipe runs its steps here, timed by the stepper
(orchestrator.worker.timing); a ``command`` workload's own program trains, and its log gives
the steps (orchestrator.worker.external)."""

from __future__ import annotations

from typing import Any

from orchestrator.core.steady import warmup_complete
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
)


def measure_one(spec: TrialSpec, base: dict[str, Any], launch_t0: float | None) -> dict[str, Any]:
    worker = start_worker(spec.workload, spec.device)
    if worker.external:  # another program trains; its log gives the steps
        return measure_external(spec, base, worker.trainer(spec.bucket))
    trainer, batches, build_s = build_trainer(spec, worker)
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
    st = Stepper(spec, worker, trainer, batches)
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
    interference = interference_fields(window, worker.world_size)
    dist_fields = st.finish(worker.group)
    built = Built(spec, worker, st, trainer, batches, launch_t0, build_s, policy)
    return measured_record(built, base, ArmSteps(st.rows, warm_times, settled,
                                     compile_stats.trial_fields(cs_start, cs_warm, cs_end),
                                     interference, dist_fields, close=True))


