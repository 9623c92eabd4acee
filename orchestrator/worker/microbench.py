"""A microbenchmark trial: one operation alone (e.g. attention, forward and backward) at one
bucket's shapes with one arm's settings, in its own trial process (``kind == "microbench"``).

The recipe supplies the operation (``Recipe.microbenchmarks``); the orchestrator times it:
``warmup_calls`` untimed calls, then ``calls`` calls, each ended by a device synchronisation.
The record carries the per-call times and their median; it never enters timing statistics.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from orchestrator.platform import device as devmod
from orchestrator.spec.config import BucketConfig
from orchestrator.core.convert import from_dict
from orchestrator.core.errors import BackendUnavailable
from orchestrator.core.results import trial_record, Status
from orchestrator.worker.bootstrap import start_worker


def run_microbench(spec: Any, base: dict[str, Any]) -> dict[str, Any]:
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
    for _ in range(int(m.get("warmup_calls", 3))):
        call()
    devmod.synchronize(dev)
    times = []
    clock = time.perf_counter
    for _ in range(int(m.get("calls", 10))):
        t0 = clock()
        call()
        devmod.synchronize(dev)
        times.append(clock() - t0)
    return trial_record(**base, status=Status.OK, microbench=name,
                        call_time_median_s=statistics.median(times), call_times_s=times,
                        device={"kind": dev.kind, "name": dev.name, "count": dev.count})
