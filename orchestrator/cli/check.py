"""python -m orchestrator.check: did the head revision make training slower than the base?

    python -m orchestrator.check workload=NAME (--base REV | --against vN) --head REV
        [--margin X] [--dir DIR] [--config-dir DIR] [protocol=... launcher=... device=...]

One campaign compares two revisions of the repository the command workload runs from
(``source.revision``: each arm from its own worktree, the checkout untouched; docs/revisions.md)
and prints one line. The exit code is for a CI job: 0 no regression (faster, equivalent or
non-inferior within the margin), 1 regression (slower beyond the margin, or the head fails), 3
inconclusive, 4 invalid, 2 bad input. DIR/decisions.md holds the evidence; the same command
with the same --dir resumes a killed check. The repository must be clean (the check measures
commits), unless --head WORKTREE measures the uncommitted changes.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
from collections.abc import Sequence
from pathlib import Path

from orchestrator.campaign.regress import head_decision, judge, revision_sweep
from orchestrator.campaign.validate import validate
from orchestrator.cli.autopilot import run_campaign_logged
from orchestrator.cli.main import compose, setup_logging
from orchestrator.cli.tools._cli import emit, intermixed, make_parser, positive_number, run
from orchestrator.core.errors import ConfigError
from orchestrator.platform import rundir
from orchestrator.spec.config import WORKTREE, Config
from orchestrator.spec.ledger import display_path


def comparison(overrides: Sequence[str], config_dirs: Sequence[str], base: str, head: str,
               run_dir: Path, confidence: float | None = None) -> Config:
    """The validated configuration of one comparison of ``base`` and ``head``."""
    if any(o.lstrip("+").startswith(("sweep=", "sweep.")) for o in overrides):
        raise ConfigError("+sweep", "the check builds its own sweep over source.revision "
                          "(--base, --head); drop +sweep=")
    if any(o.startswith("source.revision=") for o in overrides):
        raise ConfigError("source.revision", "is what --base and --head set; drop it")
    cfg: Config = compose(list(overrides), need_sweep=False, config_dirs=list(config_dirs))
    cfg.sweep = revision_sweep(base, head)
    cfg.run_dir, cfg.resume = str(run_dir), None
    cfg.source.require_clean = WORKTREE not in (base, head)
    if confidence is not None:
        cfg.protocol.confidence = confidence
    validate(cfg)
    return cfg


def default_dir(kind: str) -> Path:
    return Path("outputs") / kind / _dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")


def check_margin(given: float) -> float:
    """--margin: a fraction of the base's time, so above 1 a head twice as slow would pass."""
    return positive_number("--margin", given, hi=1.0, why="a slowdown of 100 %, twice the time")


def margin_of(cfg: Config, given: float | None) -> float:
    return cfg.protocol.min_effect if given is None else check_margin(given)


def against(a: argparse.Namespace) -> tuple[list[str], str]:
    """(the overrides, the base revision): --base, or the commit a ledger version records
    (--against vN|latest: the version's configuration and code revision)."""
    if (a.base is None) == (a.against is None):
        raise ConfigError("--base", "give the revision to compare against: --base REV, or "
                          "--against vN|latest (a baseline ledger version), not both")
    if a.base is not None:
        return list(a.overrides), a.base
    overrides = [*a.overrides, f"baseline={a.against}"]
    pre: Config = compose(overrides, need_sweep=False, config_dirs=list(a.config_dir))
    if not pre.source.revision:
        raise ConfigError("--against", f"{pre.baseline} of workload {pre.workload.name} "
                          "records no code revision (it was not promoted from a "
                          "source.revision sweep); compare against a commit with --base")
    return overrides, str(pre.source.revision)


def main(a: argparse.Namespace) -> int:
    if a.margin is not None:
        check_margin(a.margin)  # before any work: composing reads git and the ledger
    out = Path(a.dir) if a.dir else default_dir("check")
    # the campaign's run directory: a file, a path under one, a directory no campaign wrote
    # or one that cannot be written is refused before any work (writes nothing)
    rundir.check_target(out, key="--dir")
    overrides, base = against(a)
    a.base = base
    cfg = comparison(overrides, a.config_dir, base, a.head, out)
    margin = margin_of(cfg, a.margin)
    run_campaign_logged(cfg, out)
    j = judge(head_decision(out), margin)
    line = f"check: {j.outcome}: {a.head} against {a.base}: {j.line}; evidence " \
           f"{display_path(out / 'decisions.md')}"
    emit({**j.to_dict(), "base": a.base, "head": a.head, "margin": margin,
          "run_dir": display_path(out)}, [line], a.json)
    return j.exit_code


def comparison_arguments(p: argparse.ArgumentParser, kind: str, what: str) -> None:
    """The arguments check and bisect share: the overrides, --margin, --dir, --config-dir."""
    p.add_argument("overrides", nargs="*", help="workload=NAME and protocol/launcher/device/"
                   "source overrides")
    p.add_argument("--margin", type=float, default=None, help="a slowdown up to this fraction "
                   "is no regression (default: protocol.min_effect)")
    p.add_argument("--dir", default=None, help=f"the {what} (default outputs/{kind}/<time>); "
                   "an existing one is resumed")
    p.add_argument("--config-dir", action="append", default=[], metavar="DIR",
                   help="a config directory of your own workloads (repeatable)")


def parser() -> argparse.ArgumentParser:
    p = make_parser("python -m orchestrator.check", __doc__.split("\n\n")[0])
    comparison_arguments(p, "check", "campaign's run directory")
    p.add_argument("--base", default=None, help="the revision to compare against (a commit, "
                   "branch or tag, e.g. origin/main)")
    p.add_argument("--against", default=None, metavar="vN|latest", help="instead of --base: "
                   "a version of the workload's baseline ledger promoted from a revision "
                   "sweep (its configuration and its commit)")
    p.add_argument("--head", required=True, help=f"the revision under test (e.g. HEAD; "
                   f"{WORKTREE}: the uncommitted changes)")
    return intermixed(p)


def entry(argv: Sequence[str] | None = None) -> int:
    setup_logging()
    return run(main, parser(), sys.argv[1:] if argv is None else argv)
