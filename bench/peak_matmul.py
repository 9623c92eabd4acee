"""Print the measured matmul peak of this machine's device (what hardware=measured uses).

    python bench/peak_matmul.py [--size N] [--min-s S] [--device auto|cpu|cuda|musa]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# run as a script (python bench/peak_matmul.py): the repository root is not on sys.path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.platform import device as devmod  # noqa: E402
from orchestrator.platform.hardware import calibrate_peak, lookup  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=0)
    ap.add_argument("--min-s", type=float, default=1.0)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    dev = devmod.resolve(args.device)
    entry = lookup(dev.name, dev.kind)
    print(f"device: {dev.kind} '{dev.name}' (x{dev.count}); registry entry: "
          f"{entry.name if entry else 'none'}")
    for dtype in ("fp32", "bf16"):
        cal = calibrate_peak(dev, dtype, args.size, args.min_s)
        sheet = entry.peak(dtype) if entry else None
        print(f"{dtype}: measured {cal['tflops']:.4g} TFLOP/s (best), {cal['median_tflops']:.4g} "
              f"(median) over {cal['runs']} runs of {cal['matmul']}; datasheet: "
              f"{'—' if sheet is None else f'{sheet:g} TFLOP/s'}")


if __name__ == "__main__":
    main()
