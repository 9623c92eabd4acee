"""The verdict rule's error rates under a measured noise model, over simulated campaigns
(orchestrator.simulate): the default protocol (adaptive, 3 rounds then 2 at a time up to 7)
beside a fixed protocol of 7 rounds, one table each.

    python bench/simulate_rule.py tests/data/noise_synthetic_documented_quiet.json --campaigns 300
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.simulate import NoiseModel, Protocol, error_table, format_table  # noqa: E402

PLANTED = [1.0, 1.02, 1 / 1.02, 1.05, 1 / 1.05, 1.10, 1 / 1.10]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--campaigns", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    model = NoiseModel.load(args.model)
    print(f"noise model {model.name}: {model.source}")
    for name, proto in (("adaptive (default: 3 rounds, +2 up to 7)", Protocol()),
                        ("fixed (7 rounds)", Protocol(repeats=7, max_rounds=7))):
        t0 = time.time()
        cells = error_table(model, proto, PLANTED, args.campaigns, args.seed)
        print(f"\n{name}, {args.campaigns} campaigns per cell ({time.time() - t0:.1f} s):")
        print("\n".join(format_table(cells)))


if __name__ == "__main__":
    main()
