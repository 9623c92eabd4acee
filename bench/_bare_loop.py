"""The same recipe in a bare hand-written loop (no orchestrator timing code): the reference
that bench/overhead.py compares the orchestrator's trials against."""

import json
import os
import sys
import time

import torch

from orchestrator.spec.config import BucketConfig
from orchestrator.core.convert import from_dict
from recipes.registry import workload_from_dict
from recipes.gpt.recipe import build

spec = json.load(open(sys.argv[1]))
workload = workload_from_dict(spec["workload"])
bucket = from_dict(BucketConfig, spec["bucket"])
trainer = build(workload, bucket, "cpu")
it = trainer.batches()
times = []
first = None
for i in range(spec["warmup_steps"] + spec["measured_steps"]):
    t0 = time.perf_counter()
    if first is None:
        first = time.time()
    loss = trainer.train_step(next(it))
    times.append(time.perf_counter() - t0)
times = times[spec["warmup_steps"]:]
times.sort()
print(json.dumps({
    "median": times[len(times) // 2],
    "startup": first - float(os.environ["ORCHESTRATOR_LAUNCH_T0"]),
    "torch": torch.__version__,
}))
