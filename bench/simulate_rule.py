"""The verdict rule's error rates under a measured noise model, over simulated campaigns
(orchestrator.analysis.simulate): the default protocol (adaptive, 3 rounds then 2 at a time up to 7)
beside a fixed protocol of 7 rounds, one table each.

    python bench/simulate_rule.py tests/data/noise_synthetic_documented_quiet.json --campaigns 300
    python bench/simulate_rule.py bench/noise_models/synthetic_local_2026-12-01.json \
        --pairing process,steps --steps 100     # one arm per process beside pairing by steps
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.analysis.simulate import NoiseModel, Protocol, error_table, format_table  # noqa: E402

PLANTED = [1.0, 1.02, 1 / 1.02, 1.05, 1 / 1.05, 1.10, 1 / 1.10]


def _default_paired_min_s() -> float:
    import yaml

    conf = Path(__file__).resolve().parents[1] / "conf" / "protocol" / "default.yaml"
    return float(yaml.safe_load(conf.read_text()).get("paired_min_s", 0.0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--campaigns", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pairing", default="process",
                    help="process, steps or process,steps (protocol.pairing of the campaigns)")
    ap.add_argument("--steps", type=int, default=None,
                    help="measured steps per arm and round (default: the noise model's)")
    ap.add_argument("--paired-min-s", type=float, default=None,
                    help="pairing=steps: measured seconds per arm and process, at least "
                         "(protocol.paired_min_s; default: conf/protocol/default.yaml's)")
    args = ap.parse_args()
    if args.paired_min_s is None:
        args.paired_min_s = _default_paired_min_s()
    model = NoiseModel.load(args.model)
    print(f"noise model {model.name}: {model.source}")
    cells_to_run = [(f"{name}, pairing={pairing}", Protocol(**kw, pairing=pairing, steps=args.steps,
                                                                  paired_min_s=args.paired_min_s))
                    for pairing in args.pairing.split(",")
                    for name, kw in (("adaptive (default: 3 rounds, +2 up to 7)", {}),
                                     ("fixed (7 rounds)", {"repeats": 7, "max_rounds": 7}))]
    for name, proto in cells_to_run:
        t0 = time.time()
        cells = error_table(model, proto, PLANTED, args.campaigns, args.seed)
        print(f"\n{name}, {args.campaigns} campaigns per cell ({time.time() - t0:.1f} s):")
        print("\n".join(format_table(cells)))


if __name__ == "__main__":
    main()
