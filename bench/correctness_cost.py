"""What the correctness gate costs: seconds per probe process, per variant, for one sweep.

    python bench/correctness_cost.py [overrides...]     # default: +sweep=fa2 workload=gpt_tiny

Runs only the gate (no timed trials), each probe in a fresh process as in a campaign, into a
temporary run directory, and prints the figures recorded in correctness.json.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.cli.main import compose  # noqa: E402
from orchestrator.campaign.gate import run_gate  # noqa: E402
from orchestrator.spec.sweep import resolve_arms, selected_buckets  # noqa: E402


def main(argv: list[str]) -> None:
    overrides = argv or ["+sweep=fa2", "workload=gpt_tiny"]
    cfg = compose(["launcher=local", *overrides])
    arms = resolve_arms(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        doc = run_gate(cfg, Path(tmp), arms, selected_buckets(cfg))
    print(f"workload {cfg.workload.name} ({cfg.workload.precision}), buckets "
          f"{[b['name'] for b in selected_buckets(cfg)]}, {cfg.protocol.correctness.steps} "
          f"probe steps, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    for name, secs in doc["probe_seconds"].items():
        p = doc["probes"][name]
        print(f"  probe {name:<10} {p['status']:<8} {secs:6.1f} s")
    for g in doc["arms"].values():
        print(f"  gate {g['label']:<12} {g['status']:<5} {g['reasons'][:2]}")
    print(f"gate total {doc['gate_seconds']:.1f} s for {len(arms) - 1} variants; "
          f"{doc['seconds_per_variant']:.1f} s per variant (fresh process, start-up included)")


if __name__ == "__main__":
    main(sys.argv[1:])
