"""Summarize per-step times parsed from any trainer's log.

    python -m orchestrator.tools.summarize_steps train.log --skip-first 2 --json

Built-in formats (see :mod:`orchestrator.core.logparse`): ``step 10 ... time 123.4ms``, nanoGPT's
``iter 10: loss 4.2, time 123.45ms``, key=value, JSON lines, Megatron-LM's iteration lines and
torchtitan's metrics lines (its tps needs ``--tokens-per-step``, the tokens of one step on all
devices, and ``--world-size``); ``--pattern`` takes a regex with named groups instead. Prints
count, mean, median, min, max, standard deviation, p10/p90, coefficient of variation, and
throughput when tokens or samples per step are logged (or given).

Steps, not lines: a line that averages k steps (Megatron's ``--log-interval``, torchtitan's
``metrics.log_freq``) counts as k steps of its average time in every figure, ``--skip-first``
included (it drops whole lines, the first ones that cover N steps); ``interval_lines`` says how
many measured lines were such averages. ``--log-interval`` sizes the first such line of a log
resumed from a checkpoint.

MFU: a trainer that logs its own (nanoGPT's ``mfu 30.00%``) is reported as the
"trainer-reported mfu (the trainer's own claim; its peak is unknown to us)": nanoGPT assumes an
A100's bf16 peak of 312 TFLOP/s on any device, and logs -100 % before it has measured (left
out, and counted). Beside it, with ``--flops-per-device-step-tflop`` (useful FLOPs of one step
on one device) and ``--peak-tflops-per-device`` (the device's peak at the training precision),
this tool gives MFU = FLOPs / (median step time x peak), naming the peak.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Sequence
from typing import Any, TypedDict

from orchestrator.platform.flops import utilization
from orchestrator.core.logparse import lines_covering, LogParseError, StepRecord, parse_steps, reported_mfu
from orchestrator.cli.tools._cli import (MAX_PEAK_TFLOPS, MAX_STEP_TFLOP, ToolError, emit,
                                         make_parser, number, positive_number, run)
from orchestrator.spec.bounds import Bound

# a log of more steps than a billion is no training log; a step of more than 1e15 tokens or
# samples is a typo (the largest batches are millions of tokens)
SKIP_FIRST = Bound(0, 10**9, integer=True, why="a billion steps")
PER_STEP = Bound(1, 10**15, integer=True, why="a step of 1e15 tokens")
COUNT = Bound(1, 10**9, integer=True, why="a billion devices or steps")


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), pct in 0-100."""
    xs = sorted(values)
    if not xs:
        raise ValueError("no values")
    pos = (len(xs) - 1) * pct / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(records: Sequence[StepRecord], tokens_per_step: int | None = None,
              samples_per_step: int | None = None) -> dict[str, Any]:
    """Statistics of the step times (seconds) and, where known, throughput (pure). A record
    of k steps (an interval line) is k steps of its time."""
    times = [r.step_time_s for r in records for _ in range(r.steps)]
    if not times:
        raise ValueError("no steps to summarize")
    mean = statistics.fmean(times)
    std = statistics.stdev(times) if len(times) > 1 else 0.0
    out: dict[str, Any] = {
        "count": len(times),
        "first_step": records[0].step - records[0].steps + 1,
        "last_step": records[-1].step,
        "step_time_mean_s": mean,
        "step_time_median_s": statistics.median(times),
        "step_time_min_s": min(times),
        "step_time_max_s": max(times),
        "step_time_std_s": std,
        "step_time_p10_s": percentile(times, 10),
        "step_time_p90_s": percentile(times, 90),
        "step_time_cv": std / mean if mean > 0 else None,
        "interval_lines": sum(1 for r in records if r.steps > 1),
    }
    total_time = sum(times)
    for unit, given, attr in (("tokens", tokens_per_step, "tokens"), ("samples", samples_per_step, "samples")):
        per_step = [given if given is not None else getattr(r, attr) for r in records]
        if all(v is not None for v in per_step) and total_time > 0:
            work = sum(v * r.steps for v, r in zip(per_step, records))  # type: ignore[operator]
            out[f"{unit}_per_s"] = work / total_time
            out[f"{unit}_per_s_source"] = "given" if given is not None else "logged"
        else:
            out[f"{unit}_per_s"] = None
    out.update(reported_mfu(records))
    return out


class OurMfu(TypedDict):
    """The MFU figures of the tool's summary (its --json output): ours, against a stated peak."""

    mfu: float
    mfu_step_time_s: float
    flops_per_device_step_tflop: float
    mfu_peak_tflops_per_device: float
    mfu_peak_kind: str | None


def our_mfu(summary: dict[str, Any], flops_tflop: float, peak_tflops: float,
            peak_kind: str | None) -> OurMfu:
    """MFU from given useful FLOPs per device-step and a stated peak, at the median step time:
    the orchestrator's definition (pure)."""
    t = summary["step_time_median_s"]
    return {"mfu": utilization(flops_tflop * 1e12, t, peak_tflops), "mfu_step_time_s": t,
            "flops_per_device_step_tflop": flops_tflop, "mfu_peak_tflops_per_device": peak_tflops,
            "mfu_peak_kind": peak_kind}


def _text(s: dict[str, Any], path: str, skipped: int) -> list[str]:
    ms = lambda k: f"{s[k] * 1e3:.3f} ms"
    lines = [
        f"{path}: {s['count']} steps ({s['first_step']}..{s['last_step']}), first {skipped} skipped",
        f"  mean   {ms('step_time_mean_s')}   median {ms('step_time_median_s')}",
        f"  min    {ms('step_time_min_s')}   max    {ms('step_time_max_s')}",
        f"  std    {ms('step_time_std_s')}   cv     "
        + ("—" if s["step_time_cv"] is None else f"{s['step_time_cv'] * 100:.2f}%"),
        f"  p10    {ms('step_time_p10_s')}   p90    {ms('step_time_p90_s')}",
    ]
    if s.get("interval_lines"):
        lines.append(f"  {s['interval_lines']} line(s) average several steps (the trainer's log "
                     "interval): each of their steps counted at the line's average")
    for unit in ("tokens", "samples"):
        if s.get(f"{unit}_per_s") is not None:
            lines.append(f"  {unit}/s {s[f'{unit}_per_s']:,.1f} ({s[f'{unit}_per_s_source']}, "
                         "total over total time)")
    if "trainer_reported_mfu_label" in s:
        med = s["trainer_reported_mfu_median"]
        left = s["trainer_reported_mfu_left_out"]
        lines.append(f"  {s['trainer_reported_mfu_label']}: "
                     + ("none usable" if med is None else
                        f"median {med * 100:.2f}% over {s['trainer_reported_mfu_steps']} steps")
                     + (f"; {left} negative value(s) left out" if left else ""))
    if s.get("mfu") is not None:
        kind = f" ({s['mfu_peak_kind']})" if s.get("mfu_peak_kind") else ""
        lines.append(f"  MFU {s['mfu'] * 100:.2f}% (ours: {s['flops_per_device_step_tflop']:g} TFLOP "
                     f"of useful FLOPs per device-step as given, median step "
                     f"{s['mfu_step_time_s']:.3f} s, relative to a peak of "
                     f"{s['mfu_peak_tflops_per_device']:g} TFLOP/s per device{kind})")
    elif "trainer_reported_mfu_label" in s:
        lines.append("  MFU: not computed; give --flops-per-device-step-tflop and "
                     "--peak-tflops-per-device for a figure against a stated peak")
    return lines


def build_parser() -> argparse.ArgumentParser:
    p = make_parser("summarize_steps", __doc__ or "")
    p.add_argument("log", help="training log file, or - for stdin")
    p.add_argument("--skip-first", type=int, default=0, metavar="N",
                   help="leave out the first N parsed steps (warm-up, compilation); a line "
                   "averaging several steps is left out whole")
    p.add_argument("--pattern", help="regex with named groups: step, and step_time_ms | "
                   "step_time_s | time + unit (ms|s); optional loss, tokens, samples")
    p.add_argument("--tokens-per-step", type=int, help="tokens per step when the log has none")
    p.add_argument("--samples-per-step", type=int, help="samples per step when the log has none")
    p.add_argument("--world-size", type=int, metavar="N",
                   help="devices in the run: torchtitan logs tokens/s per device")
    p.add_argument("--log-interval", type=int, metavar="K",
                   help="steps between the trainer's averaged lines (Megatron-LM's "
                   "--log-interval, torchtitan's metrics.log_freq): sizes the first line of a "
                   "resumed log")
    p.add_argument("--flops-per-device-step-tflop", type=str, metavar="F",
                   help="useful (model) FLOPs of one step on one device, in TFLOP: with "
                   "--peak-tflops-per-device, MFU at the median step time")
    p.add_argument("--peak-tflops-per-device", type=str, metavar="P",
                   help="peak of one device at the training precision, in TFLOP/s (dense)")
    p.add_argument("--peak-kind", choices=("datasheet", "measured"), default=None,
                   help="where the peak comes from (stated in the output)")
    return p


def main_args(args: argparse.Namespace) -> int:
    if args.skip_first < 0:
        raise ToolError("--skip-first", f"must be >= 0, got {args.skip_first}")
    number("--skip-first", args.skip_first, SKIP_FIRST)
    for name, bound in (("tokens_per_step", PER_STEP), ("samples_per_step", PER_STEP),
                        ("world_size", COUNT), ("log_interval", COUNT)):
        v = getattr(args, name)
        if v is not None and v <= 0:
            raise ToolError(f"--{name.replace('_', '-')}", f"must be > 0, got {v}")
        if v is not None:
            number(f"--{name.replace('_', '-')}", v, bound)
    flops_flag, peak_flag = "--flops-per-device-step-tflop", "--peak-tflops-per-device"
    flops = peak = None
    if args.flops_per_device_step_tflop is not None or args.peak_tflops_per_device is not None:
        for flag, value, other in ((flops_flag, args.flops_per_device_step_tflop, peak_flag),
                                   (peak_flag, args.peak_tflops_per_device, flops_flag)):
            if value is None:
                raise ToolError(flag, f"is required with {other} (MFU needs both)")
        flops = positive_number(flops_flag, args.flops_per_device_step_tflop,
                                hi=MAX_STEP_TFLOP, why="a zettaFLOP a device-step")
        peak = positive_number(peak_flag, args.peak_tflops_per_device, hi=MAX_PEAK_TFLOPS,
                               why="far above any device")
    try:
        if args.log == "-":
            lines = sys.stdin.read().splitlines()
        else:
            with open(args.log, encoding="utf-8", errors="replace") as fh:
                lines = fh.read().splitlines()
    except OSError as exc:
        raise ToolError(args.log, f"cannot read: {exc.strerror}; pass an existing log file") from None
    try:
        records = parse_steps(lines, args.pattern, tokens_per_step=args.tokens_per_step,
                              world_size=args.world_size, log_interval=args.log_interval)
    except LogParseError as exc:
        raise ToolError(args.log, str(exc)) from None
    bad = next((r for r in records if not r.step_time_s > 0), None)
    if bad is not None:
        raise ToolError(args.log, f"step {bad.step} has a step time of {bad.step_time_s:g} s; a "
                        "step time must be > 0 (check the log's units or --pattern)")
    cut = lines_covering(records, args.skip_first)
    kept, skipped = records[cut:], sum(r.steps for r in records[:cut])  # whole lines: >= N
    if not kept:
        total = sum(r.steps for r in records)
        raise ToolError("--skip-first", f"skips all {total} parsed steps; use a smaller N")
    s = summarize(kept, args.tokens_per_step, args.samples_per_step)
    if flops is not None and peak is not None:
        s.update(our_mfu(s, flops, peak, args.peak_kind))
    s["skipped_first"] = skipped
    name = "stdin" if args.log == "-" else os.path.basename(args.log)  # no directories echoed
    s["log"] = name
    emit(s, _text(s, name, skipped), args.json)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(main_args, build_parser(), argv)


def console() -> None:
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())
