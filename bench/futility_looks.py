"""Futility only at a look with power (issue 35), by simulation: the default protocol's error
rates and trials with futility judged at every look (the earlier rule) beside futility judged
only where a look's critical t is at most FUTILITY_T_RATIO x the last look's
(orchestrator.core.paired.look_power), over measured noise models.

    python bench/futility_looks.py --campaigns 400
    python bench/futility_looks.py bench/noise_models/command_busy_2026-12-03.json --campaigns 400
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.analysis.simulate import NoiseModel, Protocol, error_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODELS = [ROOT / "tests/data/noise_synthetic_documented_quiet.json",
          ROOT / "tests/data/noise_synthetic_loaded.json"]
PLANTED = [1.0, 1 / 1.05, 1 / 1.10, 1.05]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", type=Path, default=MODELS)
    ap.add_argument("--campaigns", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print("| noise model | planted | futility | correct | false decisions | wrong direction "
          "| inconclusive | trials/campaign |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for path in args.models:
        model = NoiseModel.load(path)
        t0 = time.time()
        for name, power in (("every look", False), ("looks with power", True)):
            cells = error_table(model, Protocol(futility_power=power), PLANTED, args.campaigns,
                                args.seed)
            for c in cells:
                o, n = c.kinds, c.n
                label = "A/A" if c.planted == 1.0 else f"{(c.planted - 1) * 100:+.1f}%"
                print(f"| {model.name} | {label} | {name} | {o['correct'] / n:.1%} | "
                      f"{o['false-decision']} | {o['wrong-direction']} | "
                      f"{c.outcomes['inconclusive'] / n:.1%} | {c.trials / n:.1f} |", flush=True)
        print(f"<!-- {model.name}: {time.time() - t0:.0f} s -->", flush=True)


if __name__ == "__main__":
    main()
