"""python -m orchestrator.advise: the next hypothesis from a profile of the baseline.

    python -m orchestrator.advise RUN_DIR [--sweeps DIR ...]
    python -m orchestrator.advise --workload gpt_tiny [protocol=quick ...] [--run-dir DIR]

RUN_DIR is a campaign run with profile=framework (its baseline arm is read) or a baseline
profile. --workload profiles the current baseline first (the ledger's latest version when the
workload has a ledger, else the workload as declared), then ranks. Every shipped sweep and every
sweep of each --sweeps config directory (DIR/sweep/*.yaml) is listed: those whose declared
evidence the profile shows, by the Amdahl bound of that share of the step, then the others with
the reason they rank low.
"""

from __future__ import annotations

import argparse
import datetime as _dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.campaign.advise.load import Profile, load_sweeps, read_profile
from orchestrator.campaign.advise.profile import profile_baseline
from orchestrator.analysis.rank import Advice, rank, render
from orchestrator.spec.ledger import Ledger, display_path
from orchestrator.cli.main import compose, setup_logging
from orchestrator.core.errors import ConfigError
from orchestrator.core.results import atomic_write_json
from orchestrator.cli.tools._cli import emit, make_parser, run, writable_dir


def header(p: Profile) -> list[str]:
    """Where the figures come from: the profile, its steps and weights, min_effect."""
    steps = ", ".join(f"{b.name} {b.step_s * 1e3:.1f} ms (weight {b.weight:g})" for b in p.buckets)
    against = f" at baseline {p.baseline}" if p.baseline else ""
    first = (f"Profile of {p.workload.get('name')}{against} ({p.device or 'device ?'}), "
             f"{display_path(p.run_dir)}: profiled step {steps}; protocol.min_effect "
             f"{p.min_effect:g}. Bounds are Amdahl's: the most a sweep can give if the time it "
             "addresses dropped to zero.")
    lines = [first, ""]
    if p.failed:
        lines[1:1] = [f"Not profiled: {'; '.join(p.failed)}"]
    return lines


def advise(p: Profile, user_dirs: Sequence[Path] = (),
           tried: dict[str, str] | None = None) -> list[Advice]:
    return rank(load_sweeps(user_dirs), p.buckets, p.workload, p.min_effect, tried)


def profile_current(workload: str, overrides: Sequence[str], run_dir: Path | None) -> Path:
    """Profile the workload's current baseline (its ledger's latest version, if any)."""
    base = [f"workload={workload}", *[o for o in overrides if not o.startswith("baseline=")]]
    cfg = compose(base, need_sweep=False)
    if not any(o.startswith("baseline=") for o in overrides):
        if Ledger(Path(cfg.baselines_dir), cfg.workload.name).latest() is not None:
            cfg = compose([*base, "baseline=latest"], need_sweep=False)
    else:
        cfg = compose([f"workload={workload}", *overrides], need_sweep=False)
    stamp = _dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
    out = run_dir or Path("outputs") / "advise" / stamp
    return profile_baseline(cfg, out)


def main(a: argparse.Namespace) -> int:
    extra = list(a.args)
    if a.workload:
        if extra and "=" not in extra[0]:
            raise ConfigError("RUN_DIR", "give a run directory or --workload, not both")
        given = writable_dir("--run-dir", Path(a.run_dir)) if a.run_dir else None
        run_dir = profile_current(a.workload, extra, given)
    else:
        if len(extra) != 1 or "=" in extra[0]:
            raise ConfigError("RUN_DIR", "give one run directory (a campaign with "
                              "profile=framework, or a baseline profile), or --workload NAME "
                              "to profile the current baseline first")
        run_dir = Path(extra[0])
    p = read_profile(run_dir)
    advice = advise(p, [Path(d) for d in a.sweeps])
    lines = render(advice, header(p))
    data: dict[str, Any] = {"run_dir": display_path(run_dir), "workload": p.workload.get("name"),
                            "baseline": p.baseline, "min_effect": p.min_effect,
                            "advice": [x.to_dict() for x in advice]}
    if a.workload:  # the profile run is ours: keep the advice beside it
        atomic_write_json(run_dir / "advice.json", data)
        (run_dir / "advice.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    emit(data, lines, a.json)
    return 0


def parser() -> argparse.ArgumentParser:
    p = make_parser("python -m orchestrator.advise", __doc__.split("\n\n")[0])
    p.add_argument("args", nargs="*", help="RUN_DIR, or with --workload: overrides "
                   "(protocol=quick launcher=... baseline=vN)")
    p.add_argument("--workload", default=None, help="profile this workload's current "
                   "baseline first (a new run directory), then rank")
    p.add_argument("--run-dir", default=None, help="with --workload: the profile's run "
                   "directory (default outputs/advise/<time>)")
    p.add_argument("--sweeps", action="append", default=[], metavar="DIR",
                   help="a config directory whose sweep/*.yaml are user sweeps (repeatable)")
    return p


def entry(argv: Sequence[str] | None = None) -> int:
    setup_logging()
    return run(main, parser(), argv)
