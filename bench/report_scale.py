"""How report time grows with the number of campaigns.

Writes 100 and 1,000 synthetic campaign run directories (the artifact contract, fixed numbers),
then times ``python -m orchestrator.report ROOT --no-plots`` over each tree: cold (every
summary rendered) and warm (summaries up to date, only the decision log rebuilt). Prints the
times and the 1000/100 ratio (linear growth = 10x; target: no worse than linear). Plots are
left out because they are rendered once per campaign at campaign end and cached.

Usage: python bench/report_scale.py [--sizes 100 1000]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.cli.report import main as report_main  # noqa: E402
from tests.helpers.rundirs import write_campaign  # noqa: E402


def make_tree(root: Path, n: int) -> None:
    for i in range(n):
        write_campaign(
            root / f"sweep{i % 7}" / f"run{i:05d}",
            sweep=f"sweep{i % 7}", variable=f"var{i % 13}", workload=f"w{i % 3}",
            decided_at=1_780_000_000.0 + 3600 * i,
            variants=(("v1", "retain", 1.1), ("v2", "reject", 0.9), ("v3", "inconclusive", 1.0)),
        )


def timed(root: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process): on a shared machine CPU time is the
    steadier figure of the two."""
    t0, c0 = time.perf_counter(), time.process_time()
    assert report_main([str(root), "--no-plots"]) == 0
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    args = ap.parse_args()
    logging.disable(logging.INFO)
    results = {}
    with tempfile.TemporaryDirectory(prefix="report-scale-") as tmp:
        for n in args.sizes:
            root = Path(tmp) / f"n{n}"
            make_tree(root, n)
            cold = timed(root)
            warm = timed(root)
            results[n] = (cold, warm)
            print(f"{n:6d} campaigns: cold {cold[0]:7.2f} s wall {cold[1]:7.2f} s cpu "
                  f"({cold[1] / n * 1e3:6.2f} ms cpu/campaign)   warm {warm[0]:7.2f} s wall "
                  f"{warm[1]:7.2f} s cpu ({warm[1] / n * 1e3:6.2f} ms cpu/campaign)")
    if len(args.sizes) >= 2:
        a, b = args.sizes[0], args.sizes[-1]
        for i, kind in enumerate(("cold", "warm")):
            for j, clock in enumerate(("wall", "cpu")):
                ratio = results[b][i][j] / results[a][i][j]
                verdict = "no worse than linear" if ratio <= b / a * 1.1 else "WORSE than linear"
                print(f"{kind} {clock}: time({b}) / time({a}) = {ratio:.2f}  "
                      f"(linear = {b / a:.0f}; {verdict})")


if __name__ == "__main__":
    main()
