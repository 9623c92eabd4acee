"""Planted effects: does the A/B protocol find known effects, and at what cost?

For each planted effect (A/A = 0, +/-2 %, +/-5 %, +/-10 % speedup of the variant) it runs
several campaigns of the calibrated synthetic recipe with the default protocol (adaptive rounds)
and with a fixed protocol of max_rounds rounds, interleaved (adaptive, fixed, next effect, ...)
so that load changes on the machine hit both alike, and prints a confusion table of verdicts and
the trials spent per campaign and per decisive verdict.

A planted speedup s is made by giving the variant (1/s - 1) extra work (rounded to whole work
units; the fraction actually planted is printed). Correct: retain for s > 1, reject for s < 1,
equivalent for A/A (and, inside the +-min_effect band, for any planted effect). Wrong
direction: retain for s < 1 or reject for s > 1; a retain or reject of A/A is a false decision.

    python bench/planted_effects.py                       # inline launcher (trials in-process)
    python bench/planted_effects.py --launcher local      # each trial a fresh process
    python bench/planted_effects.py --launcher local --pairing process,steps
        # also every arm of a round in one process, switching every few steps
        # (protocol.pairing=steps): each cell's processes and wall time per campaign shown
    python bench/planted_effects.py --workload command --launcher local --protocols adaptive \
        --effects 0,-9.0909 --campaigns 10
        # a plain command (~5 ms steps, no client): A/A and 10 % more work per step
    python bench/planted_effects.py --workload client --launcher local --protocols adaptive \
        --pairing process,steps --effects 0,5,-5 --campaigns 10
    python bench/planted_effects.py --workload own_offset --launcher local --pairing steps \
        --protocols adaptive --effects 0 --campaigns 20
        # a null variant with its own per-process offset (log SD 5 %): neither retain nor reject
    python bench/planted_effects.py --workload command --launcher local --protocols fixed \
        --pairing process,duet --effects 0,5,-5 --campaigns 10 protocol.aa_arm=false
        # a plain command that cannot switch between steps: one arm per process against both
        # arms side by side on their own cores (protocol.pairing=duet), the same trials
        # the same script using orchestrator.client: one run per round switching arms block
        # by block (steps), beside one arm per run read from its log (process)

With --out DIR, results.json there is rewritten after every campaign, and a run
started again with the same --out (and arguments) goes on where the last one stopped.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.campaign.run import run_campaign
from orchestrator.cli.main import compose
from orchestrator.analysis.simulate import correct


def planted_fraction(effect_pct: float) -> float:
    """Extra work for a planted speedup; A/A gets 1e-9, which rounds to zero extra work units
    (a sweep may not repeat the baseline's value)."""
    return 1 / (1 + effect_pct / 100) - 1 if effect_pct else 1e-9


# --workload command: recipes/examples/busy_steps.py, a ~5 ms step of BUSY_UNITS work units
BUSY_UNITS = 180


def busy_units(effect_pct: float) -> int:
    """The variant's work units per step for a planted speedup (whole units)."""
    return round(BUSY_UNITS / (1 + effect_pct / 100))


def sweep_overrides(effect_pct: float, workload: str) -> list[str]:
    # A/A: the variant may not share the baseline's label (calibrate's is planted+0%)
    label = (f"sweep.labels=[planted{effect_pct:+g}%]" if effect_pct else
             "sweep.labels=[planted+0%-aa]")
    if workload == "synthetic":
        return ["workload=synthetic", "+sweep=calibrate",
                f"sweep.values=[{planted_fraction(effect_pct)!r}]", label]
    if workload == "own_offset":  # a null variant with its own per-process offset
        if effect_pct:
            raise SystemExit("--workload own_offset plants no effect: use --effects 0")
        return ["workload=own_offset", "+sweep=own_offset", "sweep.labels=[own-offset-5%]"]
    sweep = "+sweep=planted_client" if workload == "client" else "+sweep=planted_command"
    if effect_pct == 0:  # A/A: the variant differs in a label the trainer ignores
        return [sweep, "sweep.variable=workload.params.label",
                "sweep.baseline=base", "sweep.values=[variant]", label]
    return [sweep, f"sweep.values=[{busy_units(effect_pct)}]", label]


def run_one(effect_pct: float, protocol: str, launcher: str, run_dir: Path, seed: int,
            extra: list[str], pairing: str = "process",
            workload: str = "synthetic") -> dict[str, Any]:
    overrides = [
        *sweep_overrides(effect_pct, workload), "protocol=default", f"launcher={launcher}",
        f"protocol.seed={seed}", f"protocol.pairing={pairing}",
        # every campaign its own A/A check (a campaign.calibration record would drop later
        # campaigns' A/A arms and change what this script measures)
        "protocol.calibration_max_age_h=0", *extra,
    ]
    if protocol == "fixed":
        overrides += ["protocol.repeats=${protocol.max_rounds}"]
    cfg = compose(overrides)
    t0 = time.time()
    result = run_campaign(cfg, run_dir)
    records = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")]
    # a re-run (infrastructure, interference, contamination) is a trial spent too: its
    # earlier attempts are kept in the record that replaced them
    earlier = [a for r in records for a in r.get("earlier_attempts") or []]
    trials = len(records) + len(earlier)
    processes = len({r.get("pid") for r in records if r.get("pid")})  # the standing attempts
    v = result.verdicts[0]
    c = result.analysis.comparisons[(result.analysis.buckets[0], v.arm_id)]
    nf = c.noise_floor
    measured = [r.get("measured_s") or r["measured_steps"] * r["step_time_median_s"]
                for r in records
                if r.get("kind", "timed") == "timed" and r.get("step_time_median_s")]
    return {"effect_pct": effect_pct, "workload": workload,
            "measured_s_per_trial": sorted(measured)[len(measured) // 2] if measured else None,
            "protocol": protocol if pairing == "process" else f"{protocol}, pairing={pairing}",
            "verdict": v.verdict, "trials": trials, "processes": processes, "wall_s": time.time() - t0, "noise_floor": nf,
            "speedup": c.estimate.speedup if c.estimate else None,
            "low": c.estimate.low if c.estimate else None,
            "high": c.estimate.high if c.estimate else None,
            "rounds": c.paired_rounds}


def outcome(effect_pct: float, verdict: str, min_effect: float = 0.02) -> str:
    """correct | wrong-direction | false-decision | undecided (orchestrator.analysis.simulate.correct)."""
    return correct(1 + effect_pct / 100 if effect_pct else 1.0, verdict, min_effect)


def _median_of(rows: list[dict[str, Any]], key: str) -> str:
    got = sorted(r[key] for r in rows if r.get(key) is not None)
    return f"{got[len(got) // 2]:.2f}" if got else "—"


def table(rows: list[dict[str, Any]]) -> list[str]:
    groups: dict[tuple[str, float], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["protocol"], r["effect_pct"])].append(r)
    out = [("| protocol | planted speedup | campaigns | retain | reject | equivalent | inconclusive "
            "| invalid | correct | wrong direction | false decision | trials/campaign "
            "| trials/decision | processes/campaign | wall s/campaign | measured s/trial |"),
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (proto, eff), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], abs(kv[0][1]), kv[0][1])):
        n = Counter(r["verdict"] for r in rs)
        o = Counter(outcome(eff, r["verdict"]) for r in rs)
        trials = sum(r["trials"] for r in rs)
        decided = n["retain"] + n["reject"] + n["equivalent"]
        label = "A/A" if eff == 0 else f"{eff:+g}%"
        out.append(
            f"| {proto} | {label} | {len(rs)} | {n['retain']} | {n['reject']} | "
            f"{n['equivalent']} | {n['inconclusive']} | {n['invalid']} | "
            f"{o['correct']}/{len(rs)} | {o['wrong-direction']} | {o['false-decision']} | "
            f"{trials / len(rs):.1f} | {f'{trials / decided:.1f}' if decided else '—'} | "
            f"{sum(r.get('processes') or r['trials'] for r in rs) / len(rs):.1f} | "
            f"{sum(r['wall_s'] for r in rs) / len(rs):.0f} | "
            f"{_median_of(rs, 'measured_s_per_trial')} |")
    for proto in sorted({r["protocol"] for r in rows}):
        rs = [r for r in rows if r["protocol"] == proto]
        acc = sum(outcome(r["effect_pct"], r["verdict"]) == "correct" for r in rs)
        out.append(f"\n{proto}: {acc}/{len(rs)} correct overall, "
                   f"{sum(r['trials'] for r in rs)} trials in all, "
                   f"{sum(r['trials'] for r in rs) / len(rs):.1f} per campaign")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--campaigns", type=int, default=6, help="campaigns per effect and protocol")
    ap.add_argument("--effects", default="0,2,-2,5,-5,10,-10", help="planted speedups in %%")
    ap.add_argument("--launcher", default="inline", choices=["inline", "local"])
    ap.add_argument("--workload", default="synthetic",
                    choices=["synthetic", "command", "client", "own_offset"],
                    help="synthetic: the calibrated in-process load; command: a plain command "
                         "(recipes/examples/busy_steps.py, ~5 ms steps, read from its log), the "
                         "planted effect as more work units per step; client: the same script "
                         "with its units switched through orchestrator.client (pairing=steps: "
                         "one run of it per round; pairing=process: one arm per run, its log); "
                         "own_offset: a kind: custom recipe whose null variant has its own "
                         "per-process offset (log SD 5 %%; --effects 0; recipes/examples/"
                         "own_offset.py)")
    ap.add_argument("--protocols", default="adaptive,fixed")
    ap.add_argument("--pairing", default="process",
                    help="process, steps, duet, or several (process,duet): protocol.pairing of each cell")
    ap.add_argument("--out", default=None, help="keep run dirs and results.json here")
    ap.add_argument("--table-from", default=None,
                    help="print the table from a results.json of an earlier run and exit")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. protocol.max_rounds=7")
    args = ap.parse_args(argv)
    if args.table_from:
        print("\n".join(table(json.loads(Path(args.table_from).read_text()))))
        return 0
    logging.basicConfig(level=logging.WARNING)
    effects = [float(x) for x in args.effects.split(",")]
    protocols = args.protocols.split(",")
    out = Path(args.out or tempfile.mkdtemp(prefix="planted-"))
    print(f"planted effects: {args.campaigns} campaigns x {len(effects)} effects x "
          f"{protocols}; launcher={args.launcher}"
          + (" (trials run in this process, not fresh processes)" if args.launcher == "inline"
             else " (each trial a fresh process)") + f"; run dirs under {out}", flush=True)
    probe = compose([*sweep_overrides(effects[0] if effects else 0.0, args.workload),
                     "protocol=default", *args.overrides])
    p = probe.protocol
    print(f"protocol: default ({p.warmup_policy} warm-up, {p.measured_steps} measured steps, "
          f"{p.repeats} rounds adaptive up to {p.max_rounds}, A/A arm {p.aa_arm}, clock {p.clock}, min_effect "
          f"{p.min_effect}, confidence {p.confidence}); fixed = {p.max_rounds} rounds",
          flush=True)
    if args.workload in ("command", "client"):
        how = ("a plain command read from its log" if args.workload == "command" else
               "switched through orchestrator.client")
        for eff in effects:
            u = busy_units(eff)
            print(f"  planted {eff:+g}%: variant work {u} units vs {BUSY_UNITS} (true speedup of "
                  f"the work {BUSY_UNITS / u:.4f}x), {how}", flush=True)
    elif args.workload == "own_offset":
        print("  a null variant: the baseline's work, scaled in each process by its own "
              "exp(N(0, 0.05)) (recipes/examples/own_offset.py)", flush=True)
    else:
        from recipes.synthetic.recipe import SyntheticTrainer
        w, b = probe.workload, probe.workload.buckets[0]
        for eff in effects:
            w.extra_work_fraction = planted_fraction(eff)
            t = SyntheticTrainer(w, b, "cpu")
            print(f"  planted {eff:+g}%: variant work {t.units} units vs {t.base_units} "
                  f"(true speedup of the work {t.base_units / t.units:.4f}x)", flush=True)
    rows: list[dict[str, Any]] = []
    done: set[str] = set()
    if (out / "results.json").exists():  # --out of an interrupted run: go on where it stopped
        rows = json.loads((out / "results.json").read_text())
        done = {r["run"] for r in rows if "run" in r}
        print(f"resuming: {len(done)} campaigns already in {out / 'results.json'}", flush=True)
    started = time.time()
    pairings = args.pairing.split(",")
    for i in range(args.campaigns):
        for eff in effects:
            for proto, pairing in ((p_, q_) for p_ in protocols for q_ in pairings):
                name = f"{proto}_{eff:+g}_{i}" + ("" if pairing == "process" else f"_{pairing}")
                if name in done:
                    continue
                run_dir = out / name
                if run_dir.exists():  # a campaign cut short: run it again from scratch
                    shutil.rmtree(run_dir)
                r = run_one(eff, proto, args.launcher, run_dir, seed=i, extra=args.overrides,
                            pairing=pairing, workload=args.workload)
                r["run"] = name
                rows.append(r)
                sp = f"{r['speedup']:.3f} [{r['low']:.3f}, {r['high']:.3f}]" if r["speedup"] else "-"
                print(f"[{len(rows)}] {proto:8s} {pairing:7s} planted {eff:+5g}%: {r['verdict']:12s} "
                      f"speedup {sp} floor {r['noise_floor'] or 0:.3f} rounds {r['rounds']} "
                      f"trials {r['trials']} (measured {r['measured_s_per_trial'] or 0:.2f}s per trial, "
                      f"{r['wall_s']:.0f}s, total {time.time() - started:.0f}s, "
                      f"load avg {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)",
                      flush=True)
                (out / "results.json").write_text(json.dumps(rows, indent=1))
    print(f"machine: {os.cpu_count()} cores, load average at the end {os.getloadavg()}",
          flush=True)
    print("\n".join(table(rows)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
