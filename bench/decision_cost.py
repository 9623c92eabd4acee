"""What a decision costs: node-seconds per correct decision, before and after, side by side.

A trainer that behaves like a GPU trainer seen from the host (recipes/examples/startup_trainer.py:
a start-up of which most is a compile a warm cache skips, then steps that wait on the "device",
1 % per-process and 0.5 % per-step noise), one arm per process as on a GPU
(``protocol.pairing=process``, the local launcher, the default protocol), planted +5 %
(a slower variant: correct = reject), -5 % (faster: retain) and A/A (an inert switch: never
retain or reject). Each cell runs ``--campaigns`` campaigns of each setting, interleaved
(before, after, before, ...) so that the machine's changes hit both alike:

- before: the protocol as it was (``protocol.compile_cache=cold``: every trial compiles;
  ``calibration_max_age_h=0``: the A/A arm in every campaign);
- after: the defaults now (``compile_cache=auto``: each arm its own warm caches, kept in the
  user's compile store across campaigns that run the same arm; the A/A arm only while this
  machine, workload and pairing have no fresh calibration record: the first "after" campaign of
  a run files one, in the run's own store under --out).

Each campaign decides a variant new to the machine: before every "after" campaign the variant's
(and any A/A control's) folders are removed from the run's compile store under --out, so only the
baseline, which every campaign of the run shares as a user's sweeps share theirs, can start warm
from an earlier campaign; the run's first "after" campaign compiles it too.

Node time is every process the campaign launched (its costs.jsonl: the sizing pilot, the timed
trials, re-runs), start to end, times its nodes. It prints per cell and setting: verdicts,
node-seconds per campaign and per correct decision, the measured-step share, whether the first
prediction contained the node time spent, and the ratio of node-seconds per correct decision.

    python bench/decision_cost.py                               # 20 s start-up, 100 ms steps
    python bench/decision_cost.py --startup-s 2 --compile-s 1.2 --step-ms 10 --campaigns 10 \
        protocol.measured_min_s=0.05   # a tenth of the scale, every time constant scaled
        # (about 40 min on a 2-core VM; the orchestrator's own per-process cost does not scale,
        # so the ratios come out lower than at full scale)

With --out DIR, results.json there is rewritten after every campaign and a run started again
with the same --out goes on where it stopped. Run it on a quiet machine. At full scale a seed
(six campaigns) takes 22 to 36 min here; the full-scale run of 2026-12-07 is kept in
docs/decision_cost/full_scale_results.json: copy it to DIR/results.json to go on with it (the
stores under DIR start empty, so the first "after" campaign then calibrates again).
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.analysis.simulate import correct  # noqa: E402
from orchestrator.campaign.cost import read_spent  # noqa: E402
from orchestrator.campaign.run import run_campaign  # noqa: E402
from orchestrator.cli.main import compose  # noqa: E402

CELLS = {"+5% slower": ("factor", "1.05", 1 / 1.05), "-5% faster": ("factor", "0.95", 1 / 0.95),
         "A/A": ("tag", "b", 1.0)}
SETTINGS = {"before": ["protocol.compile_cache=cold", "protocol.calibration_max_age_h=0"],
            "after": []}


def one(cell: str, setting: str, seed: int, args: argparse.Namespace, root: Path
        ) -> dict[str, Any]:
    key, value, planted = CELLS[cell]
    run_dir = root / f"{setting}-{cell.replace('/', '').replace('%', '').replace(' ', '_')}-{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    base = "1.0" if key == "factor" else "a"
    if setting == "after":
        forget_variants(root.parent / "compile")
    cfg = compose([
        "+sweep=planted_startup", "protocol=default", "launcher=local",
        "protocol.pairing=process", f"protocol.seed={seed}", f"run_dir='{run_dir}'",
        f"sweep.variable=workload.params.{key}", f"sweep.baseline={base}",
        f"sweep.values=[{value}]", "sweep.labels=[variant]",
        f"workload.params.startup_s={args.startup_s}",
        f"workload.params.compile_s={args.compile_s}", f"workload.params.step_ms={args.step_ms}",
        *SETTINGS[setting], *args.overrides])
    t0 = time.time()
    result = run_campaign(cfg, run_dir)
    spent = read_spent(run_dir)
    node_s = sum(s.node_s for s in spent)
    plan = json.loads((run_dir / "plan.json").read_text())
    first = next((x for x in plan.get("cost", {}).get("log", []) if "lo_node_s" in x), None)
    measured = 0.0
    for p in run_dir.glob("trials/*/trial.json"):
        r = json.loads(p.read_text())
        if r.get("kind", "timed") == "timed" and r.get("status") == "ok":
            measured += float(r.get("measured_s") or (r.get("measured_steps") or 0)
                              * (r.get("step_time_median_s") or 0.0))
    v = result.verdicts[0]
    return {"cell": cell, "setting": setting, "seed": seed, "verdict": str(v.verdict),
            "outcome": correct(planted, str(v.verdict), cfg.protocol.min_effect),
            "node_s": node_s, "processes": len(spent), "measured_s": measured,
            "wall_s": time.time() - t0,
            "predicted": [first["lo_node_s"], first["hi_node_s"]] if first else None,
            "inside": bool(first and first["lo_node_s"] <= node_s <= first["hi_node_s"] + 1e-6),
            # made before any timed process (from a calibration record's costs), or after some
            "predicted_early": bool(first and first.get("from_record"))}


def forget_variants(store: Path) -> None:
    """Remove every arm folder of the compile store but the baseline's: the next campaign's
    variant is new to the machine (orchestrator.platform.compile_stats.note_use's notes)."""
    for note in store.glob("arm-*.json"):
        if not json.loads(note.read_text()).get("baseline"):
            shutil.rmtree(store / note.stem, ignore_errors=True)
            note.unlink()


def table(rows: list[dict[str, Any]]) -> None:
    print("\n| cell | setting | campaigns | verdicts | correct | node-s per campaign | "
          "node-s per correct decision | measured share | prediction held |")
    print("|---|---|---|---|---|---|---|---|---|")
    per: dict[tuple[str, str], float | None] = {}
    for cell in CELLS:
        for setting in SETTINGS:
            rs = [r for r in rows if r["cell"] == cell and r["setting"] == setting]
            if not rs:
                continue
            ok = sum(r["outcome"] == "correct" for r in rs)
            # A/A: a correct decision is any that is not a false one (undecided counts too)
            if cell == "A/A":
                ok = sum(r["outcome"] in ("correct", "undecided") for r in rs)
            node = sum(r["node_s"] for r in rs)
            per[(cell, setting)] = node / ok if ok else None
            verdicts = ", ".join(f"{v} {sum(r['verdict'] == v for r in rs)}"
                                 for v in sorted({r["verdict"] for r in rs}))
            share = sum(r["measured_s"] for r in rs) / node if node else 0.0
            held = sum(r["inside"] for r in rs)
            print(f"| {cell} | {setting} | {len(rs)} | {verdicts} | {ok} | {node / len(rs):.0f} | "
                  f"{per[(cell, setting)] or float('nan'):.0f} | {100 * share:.1f} % | "
                  f"{held}/{len(rs)} |")
    for cell in CELLS:
        b, a = per.get((cell, "before")), per.get((cell, "after"))
        if a and b:
            print(f"{cell}: node-s per correct decision, before / after = {b / a:.2f}x")
    for setting in SETTINGS:
        rs = [r for r in rows if r["setting"] == setting]
        early = [r for r in rs if r.get("predicted_early")]
        print(f"{setting}: {len(early)} of {len(rs)} first predictions made before any timed process"
              f" (a calibration record's costs), {sum(r['inside'] for r in early)} of them held")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--campaigns", type=int, default=10, help="per cell and setting")
    ap.add_argument("--startup-s", type=float, default=20.0)
    ap.add_argument("--compile-s", type=float, default=12.0)
    ap.add_argument("--step-ms", type=float, default=100.0)
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--out", default=None)
    ap.add_argument("overrides", nargs="*", help="more config overrides, for both settings")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    root = Path(args.out or tempfile.mkdtemp(prefix="decision-cost-"))
    root.mkdir(parents=True, exist_ok=True)
    os.environ["ORCH_CALIBRATION_DIR"] = str(root / "calibration")  # this run's own records
    os.environ["ORCH_COMPILE_CACHE_DIR"] = str(root / "compile")  # this run's own store
    path = root / "results.json"
    rows: list[dict[str, Any]] = json.loads(path.read_text()) if path.exists() else []
    done = {(r["cell"], r["setting"], r["seed"]) for r in rows}
    for seed in range(args.campaigns):
        for cell in args.cells.split(","):
            for setting in SETTINGS:
                if (cell, setting, seed) in done:
                    continue
                r = one(cell, setting, seed, args, root / "runs")
                rows.append(r)
                path.write_text(json.dumps(rows, indent=1))
                print(f"[{len(rows)}] {cell:11s} {setting:6s} seed {seed}: {r['verdict']:12s} "
                      f"{r['node_s']:7.0f} node-s, {r['processes']} processes, predicted "
                      f"{r['predicted']}", flush=True)
    print(f"\nstart-up {args.startup_s:g} s ({args.compile_s:g} s of it a compile a warm cache "
          f"skips), {args.step_ms:g} ms steps; results in {path}")
    table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
