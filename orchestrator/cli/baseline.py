"""``python -m orchestrator.baseline``: the baseline ledger of a workload (docs/baselines.md).

    init [workload=NAME ...]                 v0 from the workload's configuration
    promote RUN_DIR [--variant L] [--confirm]   check a retained change; --confirm runs the
                                             confirmation campaign and writes the next version
    show [vN] [workload=NAME]                one version and its lineage
    log [workload=NAME]                      every version, the experimental changes, verifies
    diff vA vB [workload=NAME]               the keys two versions set differently
    verify [workload=NAME protocol=...]      the latest version against v0, end to end

Bad input and refused promotions: one line naming the problem and the fix, exit 2. A change
whose confirmation campaign does not agree: recorded as experimental, exit 1.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import sys
from pathlib import Path
from typing import Any, cast

from orchestrator.spec.ledger import (
    Ledger,
    StepSpeedup,
    Throughput,
    Version,
    VersionDoc,
    flatten,
    fmt_speedup,
    lineage,
    lineage_lines,
    lineage_path,
    utc_now,
)
from orchestrator.campaign.promote import (
    check_promotable,
    confirm,
    read_campaign,
    verify,
)
from orchestrator.cli.main import compose, end_logging, setup_logging
from orchestrator.core.convert import to_dict
from orchestrator.core.errors import ConfigError
from orchestrator.cli.tools._cli import quiet_broken_pipe

log = logging.getLogger("orchestrator.baseline")


def _stamp() -> str:
    return _dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")


def _run(cfg: Any, run_dir: Path) -> Any:
    """One campaign with its campaign.log, as ``python -m orchestrator`` runs it."""
    # start-up cost: the campaign imports torch and pandas; show/log/diff need neither
    from orchestrator.campaign.run import run_campaign

    run_dir.mkdir(parents=True, exist_ok=True)
    handler = setup_logging(run_dir)
    try:
        return run_campaign(cfg, run_dir, overrides=list(_ARGV))
    finally:
        end_logging(handler, run_dir, cfg)


_ARGV: list[str] = []


def _split(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """(key=value overrides, the other positionals)."""
    kv, rest = {}, []
    for a in args:
        if "=" in a and not a.startswith("-"):
            k, _, v = a.partition("=")
            kv[k.lstrip("+~")] = v
        else:
            rest.append(a)
    return kv, rest


def _ledger(root: Path, kv: dict[str, str]) -> Ledger:
    name = kv.get("workload")
    if name is None:
        found = sorted(p.name for p in root.glob("*/") if p.is_dir()
                       and any(p.glob("v*.json"))) if root.is_dir() else []
        if len(found) != 1:
            have = f"one of: {', '.join(found)}" if found else f"none under {root}/"
            raise ConfigError("workload", f"name the ledger with workload=NAME ({have})")
        name = found[0]
    return Ledger(root, name)


def cmd_init(root: Path, overrides: list[str]) -> int:
    cfg = compose([o for o in overrides if not o.startswith(("baseline=", "+sweep"))],
                  need_sweep=False)
    ledger = Ledger(root, cfg.workload.name)
    data: VersionDoc = {"schema_version": 1, "workload": cfg.workload.name, "version": "v0",
            "parent": None, "created_at": utc_now(), "status": "declared",
            "change": None, "overrides": flatten(to_dict(cfg.workload)),
            "justification": [], "step_speedup": None, "throughput": None,
            "fingerprint": None,
            "note": "v0 is the workload as declared, not measured: campaigns against it "
                    "measure it; verify measures the latest version against it"}
    existing = ledger.versions()
    if existing:
        v0 = existing[0]
        if v0.overrides == data["overrides"]:
            print(f"{ledger.dir / 'v0.json'} exists (same configuration); latest is "
                  f"{existing[-1].id}")
            return 0
        raise ConfigError("workload", f"the ledger {ledger.dir} already has v0 with other "
                          "values; run against it with baseline=latest, or start a new ledger "
                          "with baselines_dir=DIR")
    v = ledger.write_version(data)
    print(f"v0 of {ledger.workload}: {v.path} ({len(v.overrides)} keys); run a sweep against "
          f"it with baseline=latest")
    return 0


def cmd_promote(root: Path, a: argparse.Namespace) -> int:
    run_dir = Path(a.run_dir)
    if not a.confirm:
        ev = read_campaign(run_dir)
        ledger = Ledger(root, ev.workload)
        if ledger.latest() is None:
            raise ConfigError("baseline", f"no ledger for {ev.workload} under {root}/; create v0 "
                              f"with: python -m orchestrator.baseline init workload={ev.workload}")
        d, gate = check_promotable(ev, ledger, a.variant, a.force)
        sp = d.get("speedups") or {}
        head = sp.get("mixture") or next((e for e in sp.values() if e), None)
        print(f"{d.label!r}: retain {fmt_speedup(head)} against {ev.against}, correctness "
              f"gate {gate}: promotable. It becomes {ledger.next_id()} only if it repeats: "
              f"add --confirm to run the confirmation campaign")
        return 0
    out = Path(a.out) if a.out else Path("outputs") / "baseline_confirm" / _stamp()
    ev = read_campaign(run_dir)
    if Ledger(root, ev.workload).latest() is None:
        raise ConfigError("baseline", f"no ledger for {ev.workload} under {root}/; create v0 "
                          f"with: python -m orchestrator.baseline init workload={ev.workload}")
    res = confirm(run_dir, root, a.variant, out, runner=_run, force=a.force)
    if res.promoted is None:
        print(f"not promoted: the confirmation campaign ({res.confirmation}) did not agree: "
              f"{res.reason}; recorded as experimental in {res.record}")
        return 1
    v = res.promoted
    print(f"promoted {v.label()}: step {fmt_speedup(v.step)} over {v.parent} (confirmed in "
          f"{res.confirmation}); {v.path}")
    return 0


def _version_lines(v: Version) -> list[str]:
    lines = [(f"{v.label()}  parent={v.parent}  created={v.data.get('created_at')}  "
              f"digest={v.digest}")]
    ch = v.change
    if ch:
        lines.append("  change: " + ", ".join(f"{k}={json.dumps(x)}"
                                              for k, x in ch["overrides"].items()))
    if v.step:
        lines.append(f"  step over {v.parent}: {fmt_speedup(v.step)} ({v.step.get('scope')})")
    tp = cast(Throughput, v.data.get("throughput") or {}).get("mixture")
    if tp:
        lines.append(f"  throughput (mixture): {tp['tokens_per_s']:,.0f} tokens/s")
    for j in v.data.get("justification") or []:
        lines.append(f"  {j['role']}: {j['run_dir']} variant={j['variant']} "
                     f"verdict={j['verdict']} against={j['against']}")
    return lines


def cmd_show(ledger: Ledger, ref: str) -> int:
    v = ledger.get(ref, key="VERSION")
    print("\n".join(_version_lines(v)))
    print()
    print("\n".join(lineage_lines(lineage(ledger, v.id))))
    return 0


def cmd_log(ledger: Ledger) -> int:
    latest = ledger.get("latest")
    doc = lineage(ledger, latest.id)
    print(f"{ledger.workload}: {lineage_path(doc)}")
    for v in ledger.versions()[::-1]:
        print("\n".join(_version_lines(v)))
    for r in ledger.records("experimental"):
        print(f"experimental (on top of {r.get('on_top_of')}): +{r['change']['label']}: "
              f"{r.get('why')} [{r['file']}]")
    for r in ledger.records("verify"):
        print(f"verify {r.get('at')}: {r.get('version')} against v0: "
              f"{fmt_speedup(r.get('speedup'))} ({r.get('verdict')}) in {r.get('run_dir')}")
    return 0


def cmd_diff(ledger: Ledger, a: str, b: str) -> int:
    va, vb = ledger.get(a, key="VERSION"), ledger.get(b, key="VERSION")
    keys = sorted(k for k in set(va.overrides) | set(vb.overrides)
                  if va.overrides.get(k) != vb.overrides.get(k))
    for k in keys:
        print(f"{k}: {json.dumps(va.overrides.get(k))} -> {json.dumps(vb.overrides.get(k))}")
    if not keys:
        print(f"{va.id} and {vb.id} set the same values")
    return 0


def cmd_verify(root: Path, overrides: list[str], out_arg: str | None) -> int:
    cfg = compose([o for o in overrides if not o.startswith("baseline=")], need_sweep=False)
    out = Path(out_arg) if out_arg else Path("outputs") / "baseline_verify" / _stamp()
    path, rec = verify(cfg, root, out, runner=_run)
    print(f"verify: {rec['version']} against v0: {fmt_speedup(rec['speedup'])} "
          f"({cast(StepSpeedup, rec['speedup'] or {}).get('scope')}, {rec['verdict']}) "
          f"measured in {out}; "
          f"recorded in {path}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m orchestrator.baseline",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--baselines-dir", default=None,
                   help="the ledgers' root (default: baselines_dir=, else ./baselines)")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("init", help="v0 from the workload's configuration")
    s.add_argument("overrides", nargs="*", help="workload=NAME and workload.* overrides")
    s = sub.add_parser("promote", help="promote a retained change of a campaign")
    s.add_argument("run_dir", metavar="RUN_DIR")
    s.add_argument("--variant", default=None, help="the variant's label")
    s.add_argument("--confirm", action="store_true",
                   help="run the confirmation campaign; the next version is written only if "
                        "it agrees")
    s.add_argument("--run-dir", dest="out", default=None,
                   help="the confirmation campaign's run dir (default outputs/baseline_confirm/...)")
    s.add_argument("--force", action="store_true",
                   help="promote a retain whose microbenchmark disagrees in direction")
    s = sub.add_parser("show", help="one version (default: the latest) and its lineage")
    s.add_argument("args", nargs="*", help="[vN] [workload=NAME]")
    s = sub.add_parser("log", help="every version, the experimental changes and verifies")
    s.add_argument("args", nargs="*", help="[workload=NAME]")
    s = sub.add_parser("diff", help="the keys two versions set differently")
    s.add_argument("args", nargs="*", help="vA vB [workload=NAME]")
    s = sub.add_parser("verify", help="the latest version against v0, end to end")
    s.add_argument("overrides", nargs="*", help="workload=NAME protocol=... launcher=...")
    s.add_argument("--run-dir", dest="out", default=None,
                   help="the verify campaign's run dir (default outputs/baseline_verify/...)")
    return p


def _main(argv: list[str]) -> int:
    a = parser().parse_args(argv)
    _ARGV[:] = ["(python -m orchestrator.baseline)", *argv]
    args = list(getattr(a, "args", None) or getattr(a, "overrides", None) or [])
    kv, rest = _split(args)
    root = Path(a.baselines_dir or kv.pop("baselines_dir", None) or "baselines")
    overrides = [x for x in args if not x.startswith("baselines_dir=")]
    try:
        if a.cmd == "init":
            return cmd_init(root, overrides)
        if a.cmd == "promote":
            return cmd_promote(root, a)
        if a.cmd == "verify":
            return cmd_verify(root, overrides, a.out)
        ledger = _ledger(root, kv)
        if a.cmd == "show":
            return cmd_show(ledger, rest[0] if rest else "latest")
        if a.cmd == "log":
            return cmd_log(ledger)
        if len(rest) != 2:
            raise ConfigError("diff", "needs two versions, e.g. diff v0 v2")
        return cmd_diff(ledger, rest[0], rest[1])
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    setup_logging()
    return quiet_broken_pipe(lambda: _main(argv)) or 0
