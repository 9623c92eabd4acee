"""The verdict rule under the failure modes a real variant brings, before and after the change
of issue 28, over simulated campaigns (orchestrator.analysis.simulate).

Each row is a cell of campaigns with the default protocol (3 rounds, then 2 at a time up to 7,
95 %, the A/A control) under a measured noise model, run by the earlier rule (one pooled error
term, orders reversed every other round and cycle, no carry-over check, `equivalent` by
construction on no significant difference) and by the current one (each variant's own
per-round contrasts, seeded Williams orders, the carry-over check, `equivalent` by
construction only on evidence at the last look, trials and blocks summarised by their lightly
trimmed mean: orchestrator.core.objective), and by the current one with the median summary,
which tells what the summary alone changes. The rows:

- a null variant with its own per-process offset (log SD 5 %, absent from the baseline and the
  A/A control): retained or rejected in how many campaigns (the target: at most 5 %);
- a null variant whose first measured step after each switch is slower, by 2 % of its block
  (pairing=steps): rejected in how many;
- a variant that runs "the baseline's step" by its description yet is 5 % slower, on a
  loaded host with one arm per process: called equivalent in how many (a false equivalent);
- a variant whose every fifth step is 25 % slower, untagged (5 % more time in all): rejected in
  how many (the objective is time: a median summary is blind to it);
- the planted A/A, +-2 % and +-5 % table: what power the change costs.

    python bench/failure_modes.py                      # steps-paired noise model, 400 each
    python bench/failure_modes.py --campaigns 1000 --pairing process
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.analysis.simulate import NoiseModel, Protocol, error_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EARLIER = {"per_arm": False, "order": "reversed", "carry_check": False,
           "construction_on_evidence": False, "trial_summary": "median"}
MEDIAN = {"trial_summary": "median"}  # the current rule but for the trial summary
RULES = (("earlier rule", EARLIER), ("current rule, median", MEDIAN), ("current rule", {}))


def _rate(cells: list, key: str) -> str:
    c = cells[0]
    return f"{c.outcomes[key]}/{c.n} ({c.outcomes[key] / c.n:.1%})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=ROOT / "tests/data/paired_noise_synthetic_steps.json")
    ap.add_argument("--noisy-model", type=Path,
                    default=ROOT / "tests/data/noise_synthetic_loaded.json",
                    help="the false-equivalent row: a loaded host, one arm per process")
    ap.add_argument("--campaigns", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pairing", default="steps")
    ap.add_argument("--paired-min-s", type=float, default=None,
                    help="pairing=steps: measured seconds per arm and process, at least "
                         "(protocol.paired_min_s; default: conf/protocol/default.yaml's)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    base = NoiseModel.load(args.model)
    print(f"noise model {base.name} ({args.model.name}); pairing={args.pairing}; "
          f"{args.campaigns} campaigns per cell, seed {args.seed}")
    # the default protocol (conf/protocol/default.yaml) but for these, and each rule's parts
    proto: dict[str, object] = {"pairing": args.pairing}
    if args.paired_min_s is not None:
        proto["paired_min_s"] = args.paired_min_s
    block = Protocol().config.block_steps
    rows = [
        ("null variant, own per-process offset (log SD 5 %): retain + reject",
         dataclasses.replace(base, variant_process_sd_log=0.05), 1.0, {}, ("retain", "reject")),
        ("null variant, first step after a switch slower (2 % of its block): reject",
         dataclasses.replace(base, variant_carry_log=math.log(1 + 0.02 * block)), 1.0, {},
         ("reject",)),
        ("runs 'the baseline's step' by its description, 5 % slower, loaded host, one arm "
         "per process: equivalent", NoiseModel.load(args.noisy_model), 1 / 1.05,
         {"same_step": True, "pairing": "process"}, ("equivalent",)),
        ("every fifth step of the variant 25 % slower, untagged (5 % more time): reject",
         dataclasses.replace(base, variant_stall_every=5, variant_stall_log=math.log(1.25)),
         1.0, {}, ("reject",)),
    ]
    out: dict = {"model": base.name, "pairing": args.pairing, "campaigns": args.campaigns,
                 "rows": {}, "planted": {}}
    print("\n| failure mode | " + " | ".join(n for n, _ in RULES) + " |\n|---|"
          + "---:|" * len(RULES))
    for name, model, planted, extra, keys in rows:
        got = []
        for _, rule in RULES:
            t0 = time.time()
            cells = error_table(model, Protocol.default(**{**proto, **rule, **extra}), [planted],
                                args.campaigns, args.seed)
            n = sum(cells[0].outcomes[k] for k in keys)
            got.append((n, cells[0].n, time.time() - t0))
        print(f"| {name} | " + " | ".join(f"{n}/{m} ({n / m:.1%})" for n, m, _ in got) + " |")
        out["rows"][name] = [{"hits": n, "n": m} for n, m, _ in got]
    print("\nplanted effects (plain noise model): correct verdicts, false decisions, trials")
    print("| planted | " + " | ".join(f"{n}: correct | {n}: false | {n}: trials"
                                     for n, _ in RULES) + " |\n|---|" + "---:|" * 3 * len(RULES))
    planted = [1.0, 1.02, 1 / 1.02, 1.05, 1 / 1.05]
    tables = [error_table(base, Protocol.default(**proto, **rule), planted, args.campaigns,
                          args.seed)
              for _, rule in RULES]
    for i, s in enumerate(planted):
        label = "A/A" if s == 1.0 else f"{s:.3f}x"
        cells = [t[i] for t in tables]
        print(f"| {label} | " + " | ".join(
            f"{c.kinds['correct'] / c.n:.0%} | {c.kinds['false-decision'] + c.kinds['wrong-direction']} "
            f"| {c.trials / c.n:.1f}" for c in cells) + " |")
        out["planted"][label] = [{"correct": c.kinds["correct"], "n": c.n,
                                  "false": c.kinds["false-decision"] + c.kinds["wrong-direction"],
                                  "trials": c.trials / c.n, **dict(c.outcomes)} for c in cells]
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
