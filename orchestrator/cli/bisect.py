"""python -m orchestrator.bisect: the first commit that made training slower.

    python -m orchestrator.bisect workload=NAME --good REV --bad REV [--margin X]
        [--retries N] [--dir DIR] [--config-dir DIR] [protocol=... launcher=...]

Walks the bad revision's first-parent history after the good one: the bad end is first
confirmed slower than the good end beyond the margin, then each step compares the midpoint with
the good end, one campaign each (docs/revisions.md). An inconclusive comparison is repeated up
to --retries times, never guessed; each runs at the confidence that keeps the whole
bisection's error rate at the protocol's. Prints one line; exit code 0 culprit found, 5 no
regression between the ends, 3 stopped inconclusive, 4 invalid, 2 bad input. DIR/decisions.md
is the log; the same command with the same --dir resumes a killed bisection.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from orchestrator.campaign.regress import BISECT_EXIT, LOG, Bisection
from orchestrator.campaign.revisions import repo_of
from orchestrator.cli.autopilot import run_campaign_logged
from orchestrator.cli.check import (
    check_margin,
    comparison,
    comparison_arguments,
    default_dir,
    margin_of,
)
from orchestrator.cli.main import setup_logging
from orchestrator.cli.tools._cli import emit, intermixed, make_parser, number, run, writable_dir
from orchestrator.spec.bounds import Bound
from orchestrator.spec.config import Config
from orchestrator.spec.ledger import display_path

# Each retry is a whole campaign, and the bisection's error rate is split over every
# comparison it may run, (1 + halvings) x (1 + retries): at 10 retries each comparison already
# runs at a confidence 11 times stricter, and far beyond it the intervals cannot be computed
RETRIES = Bound(0, 10, integer=True, why="each retry is a campaign, and splits the error rate "
                "further")


def main(a: argparse.Namespace) -> int:
    number("--retries", a.retries, RETRIES)
    if a.margin is not None:
        check_margin(a.margin)
    out = writable_dir("--dir", Path(a.dir) if a.dir else default_dir("bisect"))
    # the ends checked as one comparison would be (repository, revisions, a clean checkout)
    first = comparison(a.overrides, a.config_dir, a.good, a.bad, out / "check")
    repo = repo_of(first)
    assert repo is not None  # comparison() refused a workload outside a repository
    margin = margin_of(first, a.margin)

    def compose(base: str, head: str, run_dir: Path, confidence: float) -> Config:
        return comparison(a.overrides, a.config_dir, base, head, run_dir, confidence)

    b = Bisection(out, repo, a.good, a.bad, margin, first.protocol.confidence, a.retries,
                  compose, run_campaign_logged)
    res = b.run()
    emit({**res, "dir": display_path(out)},
         [f"bisect: {res['line']}; log {display_path(out / LOG)}"], a.json)
    return BISECT_EXIT[res["outcome"]]


def parser() -> argparse.ArgumentParser:
    p = make_parser("python -m orchestrator.bisect", __doc__.split("\n\n")[0])
    comparison_arguments(p, "bisect", "bisection's directory")
    p.add_argument("--good", required=True, help="a revision that trains at the old speed")
    p.add_argument("--bad", required=True, help="a later revision that trains slower")
    p.add_argument("--retries", type=int, default=1, help="times an inconclusive comparison "
                   "is repeated before the bisection stops there (default 1)")
    return intermixed(p)


def entry(argv: Sequence[str] | None = None) -> int:
    setup_logging()
    return run(main, parser(), sys.argv[1:] if argv is None else argv)
