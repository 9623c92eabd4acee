"""The verdict rule's error rates under a measured noise model, over simulated campaigns
(orchestrator.analysis.simulate): the default protocol (adaptive, 3 rounds then 2 at a time up to 7)
beside a fixed protocol of 7 rounds, one table each.

    python bench/simulate_rule.py tests/data/noise_synthetic_documented_quiet.json --campaigns 300
    python bench/simulate_rule.py bench/noise_models/synthetic_local_2026-12-01.json \
        --pairing process,steps --steps 100     # one arm per process beside pairing by steps
    python bench/simulate_rule.py bench/noise_models/command_busy_alternated_2026-12-04.json \
        --pairing steps --contamination on,off   # a plain command alternated, screen on/off
    python bench/simulate_rule.py bench/noise_models/synthetic_local_2026-12-01.json \
        --adaptive-only --aa on,off   # the A/A arm every campaign, or a calibration relied on
    python bench/simulate_rule.py tests/data/noise_synthetic_loaded.json --detected-load off,on \
        --quick --adaptive-only    # the rule under detected load: default and quick protocols
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.analysis.simulate import (  # noqa: E402
    NoiseModel,
    Protocol,
    error_table,
    format_table,
    shipped_protocol,
)

PLANTED = [1.0, 1.02, 1 / 1.02, 1.05, 1 / 1.05, 1.10, 1 / 1.10]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--campaigns", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pairing", default="process",
                    help="process, steps or process,steps (protocol.pairing of the campaigns)")
    ap.add_argument("--steps", type=int, default=None,
                    help="measured steps per arm and round (default: the noise model's)")
    ap.add_argument("--paired-min-s", type=float, default=None,
                    help="pairing=steps: measured seconds per arm and process, at least "
                         "(protocol.paired_min_s; default: conf/protocol/default.yaml's)")
    ap.add_argument("--contamination", default="on",
                    help="pairing=steps: on, off or on,off: the round contrasts' contamination "
                         "screen re-running a flagged round once (orchestrator.analysis."
                         "contamination.screen_paired)")
    ap.add_argument("--planted", default=None,
                    help="planted speedups, comma-separated (default: 1, ±2 %%, ±5 %%, ±10 %%)")
    ap.add_argument("--adaptive-only", action="store_true",
                    help="the default protocol's cells only (no fixed 7-round protocol)")
    ap.add_argument("--detected-load", default="off",
                    help="off, on or off,on: the campaign detected load, so the rule holds back "
                         "a timing verdict on thin evidence (decide.thin_under_load)")
    ap.add_argument("--aa", default="on",
                    help="on, off or on,off: the A/A arm in every campaign (on), or none, as a "
                         "campaign relying on a fresh calibration record runs "
                         "(orchestrator.campaign.calibration)")
    ap.add_argument("--quick", action="store_true",
                    help="also the quick protocol's cell: 2 rounds of 3 steps, no A/A arm")
    args = ap.parse_args()
    planted = ([float(x) for x in args.planted.split(",")] if args.planted else PLANTED)
    model = NoiseModel.load(args.model)
    print(f"noise model {model.name}: {model.source}")
    default, quick = shipped_protocol("default"), shipped_protocol("quick")
    # --paired-min-s replaces the default protocol's time floor (the quick one has none)
    floor = {} if args.paired_min_s is None else {"paired_min_s": args.paired_min_s}
    protocols: list[tuple[str, Protocol]] = [
        ((f"adaptive (default: {default.repeats} rounds, +{default.adaptive_step_rounds} up to "
          f"{default.max_rounds})"), Protocol.from_config(default, steps=args.steps, **floor)),
        (f"fixed ({default.max_rounds} rounds)",
         Protocol.from_config(default, repeats=default.max_rounds, steps=args.steps, **floor))]
    if args.quick:  # conf/protocol/quick.yaml, its measured steps
        protocols.append((f"quick ({quick.max_rounds} rounds of {quick.measured_steps} steps"
                          + ("" if quick.aa_arm else ", no A/A arm") + ")",
                          Protocol.from_config(quick, steps=quick.measured_steps)))
    cells_to_run = [(f"{name}, pairing={pairing}"
                     + (f", contamination screen {screen}" if pairing == "steps" else "")
                     + (", load detected" if load == "on" else "")
                     + ("" if aa == "on" or not proto.config.aa_arm else
                        ", no A/A arm (a calibration record relied on)"),
                     Protocol.from_config(proto.config, pairing=pairing, steps=proto.steps,
                                          contamination=screen == "on",
                                          detected_load=load == "on",
                                          aa_arm=proto.config.aa_arm and aa == "on"))
                    for pairing in args.pairing.split(",")
                    for screen in (args.contamination.split(",") if pairing == "steps"
                                   else ["on"])
                    for name, proto in protocols
                    for load in args.detected_load.split(",")
                    for aa in args.aa.split(",")
                    if not (args.adaptive_only and name.startswith("fixed"))]
    for name, proto in cells_to_run:
        t0 = time.time()
        cells = error_table(model, proto, planted, args.campaigns, args.seed)
        print(f"\n{name}, {args.campaigns} campaigns per cell ({time.time() - t0:.1f} s):")
        print("\n".join(format_table(cells)))


if __name__ == "__main__":
    main()
