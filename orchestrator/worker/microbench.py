"""A microbenchmark trial: one operation alone (e.g. attention, forward and backward) at one
bucket's shapes with one arm's settings, in its own trial process (``kind == "microbench"``).

The recipe supplies the operation (``Recipe.microbenchmarks``); the orchestrator times it the
do_bench way (:mod:`orchestrator.platform.kernel_bench`): ``warmup_calls`` untimed calls, then
at least ``calls`` calls, each after a cache flush and timed by device events (the host clock
on the CPU), until the median's relative standard error is under ``target_rel_se`` or
``time_cap_s``. The record carries the per-call times, the median and quantiles, the clock and
why it stopped; it never enters timing statistics.
"""

from __future__ import annotations

from typing import Any

from orchestrator.core.trial_record import TrialBase, TrialRecordDict
from orchestrator.platform import kernel_bench
from orchestrator.spec.config import BucketConfig
from orchestrator.core.convert import from_dict
from orchestrator.core.errors import BackendUnavailable
from orchestrator.core.results import trial_record, Status
from orchestrator.worker.bootstrap import start_worker


def run_microbench(spec: Any, base: TrialBase) -> TrialRecordDict:
    """Time the sweep's microbenchmark for this arm and bucket; returns the trial's record."""
    m = spec.microbench
    name = str(m["name"])
    worker = start_worker(spec.workload, spec.device)
    offered = worker.recipe.microbenchmarks
    if name not in offered:
        raise BackendUnavailable(
            f"recipe {worker.workload.recipe!r} offers no microbenchmark {name!r} (it offers: "
            f"{', '.join(sorted(offered)) or 'none'}); set sweep.microbench to one of them or null")
    dev = worker.device
    assert dev is not None
    bucket = from_dict(BucketConfig, spec.bucket)
    call = offered[name](worker.workload, bucket, dev.torch_device)
    # do_bench's way (orchestrator.platform.kernel_bench): events per call on a GPU, the
    # cache flushed before each, repeated until the median is tight or the cap
    timing = kernel_bench.bench(call, dev, warmup_calls=int(m.get("warmup_calls", 3)),
                                min_calls=int(m.get("calls", 10)),
                                max_calls=int(m.get("max_calls", 1000)),
                                target_rel_se=float(m.get("target_rel_se", 0.005)),
                                time_cap_s=float(m.get("time_cap_s", 2.0)),
                                graph=bool(m.get("graph", False)))
    return trial_record(**base, status=Status.OK, microbench=name, **timing.fields(),
                        device={"kind": dev.kind, "name": dev.name, "count": dev.count})
