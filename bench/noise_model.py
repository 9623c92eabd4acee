"""Fit a campaign simulator noise model (orchestrator.analysis.simulate.NoiseModel) from real run dirs.

Reads every ok timed trial's steps.csv of the given run directories (one bucket, ``--bucket``;
the first by default) and estimates:

- the host's two speed states: per trial, steps more than ``--slow-at`` (log) above the trial's
  20th percentile are slow; the ratio of slow to fast medians, and the mean length in seconds
  of the runs of fast and of slow steps (cut by trial ends, so under-estimates);
- the per-step noise: the robust SD of log step time among fast steps;
- the per-process offset: the block fit's residual SD of the trials' log fast-step medians
  (orchestrator.core.paired), less what the step noise explains;
- interference: the share of trials whose residual lies beyond 4 robust SDs, and their factor;
- with a host-speed reference in steps.csv (``reference_s``): all of the above on step /
  reference, which is what the campaign analyses (``normalised`` only when no slow state is
  left in it: a reference that removes part of the host's speed leaves the rest as states);
- the fixed cost per trial: start to first step plus the time outside the measured steps.

    python bench/noise_model.py RUN_DIR [RUN_DIR ...] --name gpt_tiny_s512 --bucket s512 \
        --out tests/data/noise_gpt_tiny_s512.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.core import paired  # noqa: E402
from orchestrator.analysis.simulate import NoiseModel  # noqa: E402


def _robust_sd(x: np.ndarray) -> float:
    return float(1.4826 * np.median(np.abs(x - np.median(x)))) if x.size else 0.0


def _runs(flags: np.ndarray, times: np.ndarray) -> tuple[list[float], list[float]]:
    fast, slow = [], []
    start = 0
    for i in range(1, flags.size + 1):
        if i == flags.size or flags[i] != flags[start]:
            (slow if flags[start] else fast).append(float(times[start:i].sum()))
            start = i
    return fast, slow


def fit(run_dirs: list[Path], bucket: str | None, name: str, slow_at: float,
        max_others_cores: float = 0.25) -> NoiseModel:
    import pandas as pd

    trials = []
    procs: dict[tuple[str, str], tuple[float, float]] = {}  # pairing=steps: (ran s, wall s)
    for rd in run_dirs:
        for tj in sorted(rd.glob("trials/*/trial.json")):
            rec = json.loads(tj.read_text())
            if rec.get("status") != "ok" or rec.get("kind", "timed") != "timed":
                continue
            others = (rec.get("interference") or {}).get("others_cores")
            if others is not None and others > max_others_cores:
                continue  # measured under interference: the campaign re-runs such trials
            if bucket is None:
                bucket = rec["bucket"]
            if rec["bucket"] != bucket:
                continue
            steps = pd.read_csv(tj.parent / "steps.csv")
            m = steps[steps["phase"] == "measured"]
            trials.append((rd.name, rec, m))
            if rec.get("paired_process"):  # what the process ran past its warm-ups
                key = (rd.name, rec["paired_process"])
                ran = float(steps.loc[steps["phase"] != "warmup", "step_time_s"].sum())
                procs[key] = (procs.get(key, (0.0, 0.0))[0] + ran,
                              float((rec.get("finished_at") or 0) - (rec.get("started_at") or 0))
                              + float(rec.get("startup_to_first_step_s") or 0.0))
    if len(trials) < 4:
        raise SystemExit(f"need at least 4 ok trials of bucket {bucket}, found {len(trials)}")
    fast_sd, spans_f, spans_s, ratios, fixed, fast_meds, n_steps = [], [], [], [], [], [], []
    referenced = False  # some trial had a host-speed reference: the analysed series is step / it
    cells: dict[tuple[int, str], float] = {}
    for i, (rd, rec, m) in enumerate(trials):
        t = m["step_time_s"].to_numpy(float)
        x = np.log(t)
        if "reference_s" in m and m["reference_s"].notna().all():
            # the campaign analyses step / reference: the states and noise are fitted on that
            # (a reference taken before each step removes only part of the host's speed here)
            ref = m["reference_s"].to_numpy(float)
            x = np.log(t / ref) + float(np.median(np.log(ref)))
            referenced = True
        lo = np.percentile(x, 20)
        slow = x > lo + slow_at  # the host's speed states, in the analysed series
        if slow.any() and (~slow).any():
            ratios.append(math.exp(float(np.median(x[slow]) - np.median(x[~slow]))))
        a, b = _runs(slow, t)
        spans_f += a
        spans_s += b
        f = x[~slow]
        fast_sd.append(_robust_sd(f))
        fast_meds.append(float(np.median(x[~slow])))
        n_steps.append(t.size)
        cells[(i, f"{rd}:{rec['arm_id']}:{rec['round']}")] = float(np.median(f))
        if rec.get("paired_process"):
            continue  # one fixed cost per paired process, below
        wall = (rec.get("finished_at") or 0) - (rec.get("started_at") or 0)
        outside = wall - float(t.sum())
        fixed.append(max(0.0, outside) + float(rec.get("startup_to_first_step_s") or 0.0))
    fixed += [max(0.0, wall - ran) for ran, wall in procs.values()]
    # blocks: (run dir, round); arms: (run dir, arm) -- one fit over all trials
    by_block: dict[tuple[int, str], float] = {}
    blocks: dict[tuple[str, str], int] = {}
    for (_, key), v in cells.items():
        rd, arm, rnd = key.split(":")
        block = blocks.setdefault((rd, rnd), len(blocks))
        by_block[(block, f"{rd}:{arm}")] = v
    base = next(iter(sorted({a for _, a in by_block})))
    fitb = paired.fit_blocks(by_block, base, drop_outliers=False)
    resid = np.array(list(fitb.residuals.values()))
    rsd = _robust_sd(resid) if resid.size >= 4 else (fitb.resid_sd or 0.0)
    step_sd = float(np.median(fast_sd))
    n = float(np.median(n_steps))
    proc2 = max(rsd ** 2 - (math.pi / 2) * step_sd ** 2 / n, 0.0)
    out = np.abs(resid) > 4 * max(rsd, 1e-9)
    # the host's states are modelled on the analysed series itself: the simulator applies
    # them as they are, not a perfect reference that would divide them out
    normalised = referenced and not ratios
    ref_sd = 0.0  # normalised: the reference's own noise is inside step_sd_log already
    return NoiseModel(
        name=name, step_s=float(np.exp(np.median(fast_meds))), step_sd_log=step_sd,
        process_sd_log=math.sqrt(proc2),
        slow_ratio=float(np.median(ratios)) if ratios else 1.0,
        mean_fast_s=float(np.mean(spans_f)) if spans_f else 1e9,
        mean_slow_s=float(np.mean(spans_s)) if spans_s else 0.0,
        normalised=normalised, reference_sd_log=ref_sd,
        outlier_trial_p=float(out.mean()) if resid.size else 0.0,
        outlier_factor=float(np.exp(np.median(np.abs(resid[out])))) if out.any() else 2.0,
        fixed_s=float(np.median(fixed)), steps=int(n),
        source=(f"bench/noise_model.py over {len(trials)} ok trials of bucket {bucket} in "
                f"{len(run_dirs)} run dir(s): {', '.join(sorted({r for r, _, _ in trials}))}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--bucket")
    ap.add_argument("--name", required=True)
    ap.add_argument("--slow-at", type=float, default=math.log(1.25),
                    help="log distance above a trial's 20th percentile that counts a step slow")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--note", default="", help="the conditions (appended to `source`)")
    ap.add_argument("--max-others-cores", type=float, default=0.25,
                    help="leave out trials during which other processes took more CPU (cores)")
    args = ap.parse_args()
    model = fit(args.run_dirs, args.bucket, args.name, args.slow_at, args.max_others_cores)
    if args.note:
        from dataclasses import replace

        model = replace(model, source=f"{model.source}; {args.note}")
    text = model.to_json()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
