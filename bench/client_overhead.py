"""What orchestrator.client costs a training loop per step, measured side by side in one run.

A child process runs the four client calls around an empty step (nothing to train, so all
that is left is the client) twice: once outside a campaign (no channel: every call a no-op),
once inside one, talking to a real trial-process channel (orchestrator.worker.pairing.client)
that pairs two arms by steps. Printed per step:

- outside a campaign: the no-op calls;
- inside a campaign, all included: the calls plus each block's round trip to the channel
  (one per ``block_steps + switch_warmup_steps`` steps), i.e. the wall time a trainer loses;
- inside the timed window: what the client adds to every measured step time (the clock reads
  alone: no device sync), the bias a measurement could carry (the same for every arm).

    .venv/bin/python bench/client_overhead.py [--steps 20000] [--block-steps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.spec.jobs import PairedArm, TrialSpec  # noqa: E402
from orchestrator.worker.pairing.steps import StepsPart, part as steps_part  # noqa: E402
from orchestrator.worker.pairing.client import Channel, Plan  # noqa: E402

LOOP = """
import json, sys, time
from orchestrator import client
n = int(sys.argv[1])
t0 = time.perf_counter()
k = 0
for step in client.steps(n):
    p = client.params({"units": 1})
    with client.timed():
        pass
    client.report(loss=1.0)
    k += 1
print(json.dumps({"steps": k, "s": time.perf_counter() - t0}))
"""


def child(steps: int, env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", LOOP, str(steps)], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True, timeout=600).stdout
    return json.loads(out.splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20000, help="measured steps per arm")
    ap.add_argument("--block-steps", type=int, default=3)
    ap.add_argument("--switch-steps", type=int, default=1)
    a = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_CLIENT")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory() as tmp:
        arms = [PairedArm(f"a{i}", f"a{i}", i == 0, f"t{i}", str(Path(tmp) / f"t{i}"),
                          {"params": {"units": 1 + i}}) for i in range(2)]
        spec = TrialSpec(trial_id="t0", trial_dir=arms[0].trial_dir,
                         bucket={"name": "b", "seq_len": 1, "micro_batch": 1}, arm_id="a0",
                         arm_label="a0", is_baseline=True, round=0, position=0,
                         workload={}, warmup_steps=3, measured_steps=a.steps,
                         paired=steps_part(arms, StepsPart(a.block_steps, a.switch_steps,
                                                           "balanced", "bench")))
        plan = Plan(spec, {x.arm_id: {"units": 1 + i} for i, x in enumerate(arms)}, "a0",
                    ["units"])
        channel = Channel(plan, 1)
        try:
            inside = child(a.steps, {**env, **channel.env()})
        finally:
            channel.close()
        outside = child(inside["steps"], env)
    rows = plan.rows()
    window = [r["step_time_s"] for r in rows if r["phase"] == "measured"]
    assert plan.done and inside["steps"] == len(rows), "the plan did not finish"
    per_in = inside["s"] / inside["steps"] * 1e6
    per_out = outside["s"] / outside["steps"] * 1e6
    print(f"steps: {inside['steps']} ({len(plan.blocks)} blocks, block_steps={a.block_steps}, "
          f"switch_warmup_steps={a.switch_steps}, 2 arms); {threading.active_count()} thread(s)")
    print(f"outside a campaign (no-op calls):        {per_out:8.2f} us/step")
    print(f"inside a campaign, all included:         {per_in:8.2f} us/step "
          f"({per_in / max(per_out, 1e-9):.1f}x the no-op loop; target < 20 us)")
    print(f"inside the timed window (median):        {statistics.median(window) * 1e6:8.2f} us/step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
