"""python -m orchestrator.autopilot: a budgeted loop of profile, advise, campaign, promote.

    python -m orchestrator.autopilot workload=gpt_tiny [protocol=quick ...] [--dir DIR]
        [--max-campaigns N] [--budget-min M] [--min-effect X] [--sweeps DIR]
        [--only NAME,...] [--baselines-dir DIR]

Each iteration profiles the ledger's latest version, ranks the sweeps (python -m
orchestrator.advise), runs the top one against that version, and on a retain runs the
confirmation campaign and promotes it. It stops when the campaigns or the wall time are spent,
or when no sweep's Amdahl bound reaches min_effect. A workload without a ledger gets v0 first.
Started again with the same arguments and --dir, it resumes where it stopped; the log is
DIR/decisions.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.campaign.advise.load import load_sweeps
from orchestrator.campaign.autopilot import LOG, Autopilot, Settings
from orchestrator.cli.baseline import cmd_init
from orchestrator.spec.ledger import Ledger, display_path
from orchestrator.cli.main import compose, end_logging, setup_logging
from orchestrator.spec.config import Config
from orchestrator.core.errors import ConfigError
from orchestrator.cli.tools._cli import make_parser, number, positive_number, run, writable_dir
from orchestrator.spec.bounds import Bound


# a sweep campaign is minutes to hours: a thousand is past any budget, and a typo otherwise
MAX_CAMPAIGNS = Bound(1, 1000, integer=True, why="a thousand campaigns")


def run_campaign_logged(cfg: Config, run_dir: Path) -> Any:
    """One campaign with its campaign.log, as ``python -m orchestrator`` runs it."""
    # start-up cost: the campaign imports torch and pandas; --help needs neither
    from orchestrator.campaign.run import run_campaign

    run_dir.mkdir(parents=True, exist_ok=True)
    handler = setup_logging(run_dir)
    try:
        return run_campaign(cfg, run_dir, overrides=["(python -m orchestrator.autopilot)"])
    finally:
        end_logging(handler, run_dir, cfg)


def _compose(overrides: list[str], need_sweep: bool) -> Config:
    return compose(overrides, need_sweep)  # type: ignore[no-any-return]


def main(a: argparse.Namespace) -> int:
    workload = [x for x in a.overrides if x.startswith("workload=")]
    if len(workload) != 1:
        raise ConfigError("workload", "name the workload once, e.g. workload=gpt_tiny")
    name = workload[0].split("=", 1)[1]
    overrides = [x for x in a.overrides if not x.startswith(("workload=", "baseline=",
                                                            "baselines_dir=", "+sweep"))]
    if any(x.startswith("workload.") for x in overrides):
        raise ConfigError("workload.*", "the autopilot measures the ledger's versions; set "
                          "workload keys in v0 (python -m orchestrator.baseline init "
                          "workload=NAME workload.KEY=VALUE) and drop them here")
    number("--max-campaigns", a.max_campaigns, MAX_CAMPAIGNS)
    budget_s = positive_number("--budget-min", a.budget_min, hi=7 * 24 * 60.0,
                               why="a week") * 60.0
    min_effect = None if a.min_effect is None else positive_number(
        "--min-effect", a.min_effect, hi=10.0, why="protocol.min_effect's most")
    if a.dir:
        writable_dir("--dir", Path(a.dir))
    only = [x for x in (a.only or "").split(",") if x]
    if only:
        names = [s.name for s in load_sweeps([Path(d) for d in a.sweeps])]
        for x in only:
            if x not in names:
                raise ConfigError("--only", f"{x!r} is not a sweep; choose from: "
                                  f"{', '.join(names)}")
    root = Path(a.baselines_dir)
    if Ledger(root, name).latest() is None:
        cmd_init(root, [f"workload={name}", *overrides])
    stamp = _dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
    out = Path(a.dir) if a.dir else Path("outputs") / "autopilot" / stamp
    settings = Settings(name, overrides, [str(d) for d in a.sweeps], str(root),
                        a.max_campaigns, budget_s, min_effect, only)
    pilot = Autopilot(out, settings, _compose, run_campaign_logged)
    reason = pilot.run()
    latest = Ledger(root, name).latest()
    print(f"autopilot stopped: {reason}; latest {latest.label() if latest else '-'}; "
          f"log {display_path(out / LOG)}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = make_parser("python -m orchestrator.autopilot", __doc__.split("\n\n")[0])
    p.add_argument("overrides", nargs="*", help="workload=NAME and protocol/launcher/device "
                   "overrides for every campaign")
    p.add_argument("--dir", default=None, help="the autopilot's directory (default "
                   "outputs/autopilot/<time>); an existing one is resumed")
    p.add_argument("--max-campaigns", type=int, default=3, help="sweep campaigns at most "
                   "(confirmations not counted; default 3)")
    p.add_argument("--budget-min", type=float, default=60.0, help="wall time of the steps in "
                   "minutes, over every invocation (default 60)")
    p.add_argument("--min-effect", type=float, default=None, help="a sweep whose bound is "
                   "under 1 + this is not run (default: protocol.min_effect)")
    p.add_argument("--sweeps", action="append", default=[], metavar="DIR",
                   help="a config directory whose sweep/*.yaml are user sweeps (repeatable)")
    p.add_argument("--baselines-dir", default="baselines", help="the ledgers' root")
    p.add_argument("--only", default=None, metavar="NAME,...",
                   help="consider only these sweeps (the others are listed, not run)")
    return p


def entry(argv: Sequence[str] | None = None) -> int:
    setup_logging()
    return run(main, parser(), sys.argv[1:] if argv is None else argv)
