"""The verdict rule's error rates under a measured noise model, over simulated campaigns
(orchestrator.analysis.simulate): the default protocol (adaptive, 3 rounds then 2 at a time up to 7)
beside a fixed protocol of 7 rounds, one table each.

    python bench/simulate_rule.py tests/data/noise_synthetic_documented_quiet.json --campaigns 300
    python bench/simulate_rule.py bench/noise_models/synthetic_local_2026-12-01.json \
        --pairing process,steps --steps 100     # one arm per process beside pairing by steps
    python bench/simulate_rule.py bench/noise_models/command_busy_alternated_2026-12-04.json \
        --pairing steps --contamination on,off   # a plain command alternated, screen on/off
    python bench/simulate_rule.py tests/data/noise_synthetic_loaded.json --detected-load off,on \
        --quick --adaptive-only    # the rule under detected load: default and quick protocols
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.analysis.simulate import NoiseModel, Protocol, error_table, format_table  # noqa: E402

PLANTED = [1.0, 1.02, 1 / 1.02, 1.05, 1 / 1.05, 1.10, 1 / 1.10]


def _default_paired_min_s() -> float:
    import yaml

    conf = Path(__file__).resolve().parents[1] / "conf" / "protocol" / "default.yaml"
    return float(yaml.safe_load(conf.read_text()).get("paired_min_s", 0.0))


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
    ap.add_argument("--quick", action="store_true",
                    help="also the quick protocol's cell: 2 rounds of 3 steps, no A/A arm")
    args = ap.parse_args()
    planted = ([float(x) for x in args.planted.split(",")] if args.planted else PLANTED)
    if args.paired_min_s is None:
        args.paired_min_s = _default_paired_min_s()
    model = NoiseModel.load(args.model)
    print(f"noise model {model.name}: {model.source}")
    protocols: list[tuple[str, dict[str, object]]] = [
        ("adaptive (default: 3 rounds, +2 up to 7)", {"steps": args.steps}),
        ("fixed (7 rounds)", {"repeats": 7, "max_rounds": 7, "steps": args.steps})]
    if args.quick:  # conf/protocol/quick.yaml: no time floor either
        protocols.append(("quick (2 rounds of 3 steps, no A/A arm)",
                          {"repeats": 2, "max_rounds": 2, "steps": 3, "aa_arm": False}))
    cells_to_run = [(f"{name}, pairing={pairing}"
                     + (f", contamination screen {screen}" if pairing == "steps" else "")
                     + (", load detected" if load == "on" else ""),
                     Protocol(**kw, pairing=pairing,  # type: ignore[arg-type]
                              paired_min_s=0.0 if "quick" in name else args.paired_min_s,
                              contamination=screen == "on", detected_load=load == "on"))
                    for pairing in args.pairing.split(",")
                    for screen in (args.contamination.split(",") if pairing == "steps"
                                   else ["on"])
                    for name, kw in protocols
                    for load in args.detected_load.split(",")
                    if not (args.adaptive_only and name.startswith("fixed"))]
    for name, proto in cells_to_run:
        t0 = time.time()
        cells = error_table(model, proto, planted, args.campaigns, args.seed)
        print(f"\n{name}, {args.campaigns} campaigns per cell ({time.time() - t0:.1f} s):")
        print("\n".join(format_table(cells)))


if __name__ == "__main__":
    main()
