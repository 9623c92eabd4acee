"""Utilization from FLOPs, step time and peak, named by the kind of FLOPs.

    python -m orchestrator.tools.compute_mfu --flops-per-device-step-tflop 1.2 \\
        --step-seconds 0.5 --peak-tflops-per-device 989.5 --flops-kind useful

MFU only for ``useful`` (analytic model) FLOPs, HFU for ``executed`` (counted, recompute
included) FLOPs, and an explicitly labelled "profiler-attributed utilization" for FLOPs a
profiler attributed.

``--buckets FILE.json`` aggregates a mixture of shape buckets as total FLOPs over total time.
The file is a list of bucket objects, or an object with the list under ``buckets`` and
optionally the figures the flags would give:

    {"flops_kind": "useful", "peak_tflops_per_device": 989.5, "peak_kind": "datasheet",
     "buckets": [{"name": "s512", "flops_per_device_step_tflop": 1.2, "step_seconds": 0.5,
                  "step_weight": 0.75}, ...]}

- ``flops_kind``, ``peak_tflops_per_device`` (TFLOP/s, dense, one device), ``peak_kind``
  (datasheet | measured): used when the flag is not given; a flag that says the same is fine,
  a flag and the file that disagree are refused (exit 2).
- per bucket: ``flops_per_device_step_tflop`` (TFLOP of one step on one device),
  ``step_seconds``, an optional ``name``, and either ``step_weight`` (share of steps) or
  ``samples`` (then ``global_batch``, per bucket or via ``--global-batch``), the same one for
  every bucket of a file: step shares and sample counts are not comparable.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from typing import Any

from orchestrator.platform.flops import (
    DEFINITIONS,
    FLOP_KINDS,
    BucketWork,
    bucket_steps,
    mixture_utilization,
    utilization,
    utilization_name,
)
from orchestrator.cli.tools._cli import (MAX_PEAK_TFLOPS, MAX_STEP_TFLOP, ToolError, emit,
                                         make_parser, number, positive_number, run)
from orchestrator.spec.bounds import WEEK_S, Bound

# figures a bucket file may state at its top level instead of (or as well as) a flag
FILE_FIELDS = {"flops_kind": "--flops-kind", "peak_tflops_per_device": "--peak-tflops-per-device",
               "peak_kind": "--peak-kind"}
PEAK_KINDS = ("datasheet", "measured")
# counts a bucket file states: finite, not negative, and far above any real one (a typo else)
STEP_WEIGHT = Bound(0.0, 1e12, why="relative weights")
SAMPLES = Bound(0.0, 1e18, why="a quintillion samples")
GLOBAL_BATCH = Bound(0.0, 1e12, lo_open=True, why="a trillion samples a step")


def _peak(flag: str, value: Any) -> float:
    return positive_number(flag, value, hi=MAX_PEAK_TFLOPS, why="far above any device")


def _step_tflop(flag: str, value: Any) -> float:
    return positive_number(flag, value, hi=MAX_STEP_TFLOP, why="a zettaFLOP a device-step")


def _step_s(flag: str, value: Any) -> float:
    return positive_number(flag, value, hi=WEEK_S, why="a week")


def read_bucket_file(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except OSError as exc:
        raise ToolError("--buckets", f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ToolError("--buckets", f"not valid JSON (line {exc.lineno}): {exc.msg}") from None
    except UnicodeDecodeError:
        raise ToolError("--buckets", f"{os.path.basename(path)} is not UTF-8 text; give a JSON "
                        "file of buckets") from None


def file_figures(data: Any) -> dict[str, Any]:
    """The top-level figures of a bucket file (flops_kind, peak_tflops_per_device, peak_kind),
    checked; absent ones are left out."""
    if not isinstance(data, dict):
        return {}
    out: dict[str, Any] = {}
    if data.get("flops_kind") is not None:
        if data["flops_kind"] not in FLOP_KINDS:
            raise ToolError("--buckets.flops_kind", f"{data['flops_kind']!r} is not a valid choice; "
                            f"choose one of: {', '.join(FLOP_KINDS)}")
        out["flops_kind"] = data["flops_kind"]
    if data.get("peak_tflops_per_device") is not None:
        out["peak_tflops_per_device"] = _peak("--buckets.peak_tflops_per_device",
                                              data["peak_tflops_per_device"])
    if data.get("peak_kind") is not None:
        if data["peak_kind"] not in PEAK_KINDS:
            raise ToolError("--buckets.peak_kind", f"{data['peak_kind']!r} is not a valid choice; "
                            f"choose one of: {', '.join(PEAK_KINDS)}")
        out["peak_kind"] = data["peak_kind"]
    return out


def merge_figures(flags: dict[str, Any], in_file: dict[str, Any]) -> dict[str, Any]:
    """Flag or file for each figure (pure): a flag alone or the file alone gives it; both must
    agree. Raises ToolError naming the flag when they do not."""
    out = dict(flags)
    for field, flag in FILE_FIELDS.items():
        given, stated = flags.get(field), in_file.get(field)
        if stated is None:
            continue
        if given is None:
            out[field] = stated
            continue
        same = (math.isclose(float(given), float(stated), rel_tol=1e-9)
                if field == "peak_tflops_per_device" else given == stated)
        if not same:
            shown = f"{given:g}" if isinstance(given, float) else repr(given)
            shown_file = f"{stated:g}" if isinstance(stated, float) else repr(stated)
            raise ToolError(flag, f"{shown} disagrees with {field} {shown_file} in the --buckets "
                            "file; give one of them, or the same value")
    return out


def load_buckets(path: str, global_batch: float | None, data: Any = None) -> list[BucketWork]:
    if data is None:
        data = read_bucket_file(path)
    if isinstance(data, dict):
        data = data.get("buckets")
    if not isinstance(data, list) or not data:
        raise ToolError("--buckets", "expected a non-empty list of buckets (or {\"buckets\": [...]})")
    out = []
    first_mode: tuple[str, int] | None = None
    for i, b in enumerate(data):
        key = f"--buckets[{i}]"
        if not isinstance(b, dict):
            raise ToolError(key, "each bucket must be an object")
        name = str(b.get("name", f"bucket{i}"))
        flops = _step_tflop(f"{key}.flops_per_device_step_tflop",
                            b.get("flops_per_device_step_tflop"))
        step_s = _step_s(f"{key}.step_seconds", b.get("step_seconds"))
        weight, samples = b.get("step_weight"), b.get("samples")
        gb = b.get("global_batch", global_batch)
        for field, value, bound in (("step_weight", weight, STEP_WEIGHT),
                                    ("samples", samples, SAMPLES),
                                    ("global_batch", b.get("global_batch"), GLOBAL_BATCH)):
            if value is not None:
                number(f"{key}.{field}", value, bound)
        if (weight is None) == (samples is None):
            raise ToolError(key, "give exactly one of step_weight, or samples (with global_batch)")
        mode = "step_weight" if weight is not None else "samples"
        if first_mode is None:
            first_mode = (mode, i)
        elif mode != first_mode[0]:
            # a step weight is a share of steps, samples / global batch a count of steps:
            # their ratio means nothing, so the mixture's weights would be arbitrary
            named = f"bucket {b['name']!r} " if "name" in b else ""
            raise ToolError(key, f"{named}gives {mode} but --buckets[{first_mode[1]}] gives "
                            f"{first_mode[0]}; step shares and sample counts cannot be mixed: "
                            "give every bucket step_weight, or every bucket samples "
                            "(with global_batch)")
        try:
            steps = bucket_steps(weight=None if weight is None else float(weight),
                                 samples=None if samples is None else float(samples),
                                 global_batch=None if gb is None else float(gb))
        except (TypeError, ValueError) as exc:
            raise ToolError(key, f"{exc}; use --global-batch or a per-bucket global_batch") from None
        out.append(BucketWork(name, flops * 1e12, step_s, steps))
    if sum(b.steps for b in out) <= 0:
        raise ToolError("--buckets", "the buckets' step weights sum to 0")
    return out


def build_parser() -> argparse.ArgumentParser:
    p = make_parser("compute_mfu", __doc__ or "")
    p.add_argument("--flops-per-device-step-tflop", type=str, metavar="F",
                   help="FLOPs of one step on one device, in TFLOP (1e12 FLOPs)")
    p.add_argument("--step-seconds", type=str, metavar="S", help="time of one step, in seconds")
    p.add_argument("--peak-tflops-per-device", type=str, metavar="P",
                   help="peak of one device at the training precision, in TFLOP/s (dense)")
    p.add_argument("--flops-kind", choices=FLOP_KINDS,
                   help="useful = analytic model FLOPs (MFU); executed = counted incl. recompute "
                   "(HFU); profiler-attributed = from a profiler (required, unless the --buckets "
                   "file states flops_kind)")
    p.add_argument("--peak-kind", choices=PEAK_KINDS, default=None,
                   help="where the peak comes from (stated in the output)")
    p.add_argument("--buckets", metavar="FILE.json",
                   help="per-bucket FLOPs and step times, and optionally flops_kind, "
                   "peak_tflops_per_device and peak_kind (see above)")
    p.add_argument("--global-batch", type=float, help="samples per step, for buckets given by samples")
    return p


def main_args(args: argparse.Namespace) -> int:
    flags: dict[str, Any] = {"flops_kind": args.flops_kind, "peak_kind": args.peak_kind,
                             "peak_tflops_per_device": None}
    if args.peak_tflops_per_device is not None:
        flags["peak_tflops_per_device"] = _peak("--peak-tflops-per-device",
                                                args.peak_tflops_per_device)
    if args.global_batch is not None:
        number("--global-batch", args.global_batch, GLOBAL_BATCH)
    data = None
    if args.buckets:
        if args.flops_per_device_step_tflop or args.step_seconds:
            raise ToolError("--buckets", "give per-bucket figures in the file, not "
                            "--flops-per-device-step-tflop / --step-seconds as well")
        data = read_bucket_file(args.buckets)
        flags = merge_figures(flags, file_figures(data))
    where = " or {} in the --buckets file" if args.buckets else ""
    for field in ("flops_kind", "peak_tflops_per_device"):
        if flags[field] is None:
            flag = FILE_FIELDS[field]
            raise ToolError(flag, f"is required: give {flag}{where.format(field)}")
    kind, peak, peak_kind = flags["flops_kind"], flags["peak_tflops_per_device"], flags["peak_kind"]
    name = utilization_name(kind)
    out: dict[str, Any] = {
        "flops_kind": kind,
        "flops_definition": DEFINITIONS[kind],
        "utilization_name": name,
        "peak_tflops_per_device": peak,
        "peak_kind": peak_kind,
    }
    if args.buckets:
        buckets = load_buckets(args.buckets, args.global_batch, data)
        total_flops, total_time, util = mixture_utilization(buckets, peak)
        w = sum(b.steps for b in buckets)
        out["buckets"] = [{
            "name": b.name, "step_share": b.steps / w,
            "flops_per_device_step_tflop": b.flops_per_device_step / 1e12,
            "step_seconds": b.step_time_s,
            "utilization": utilization(b.flops_per_device_step, b.step_time_s, peak),
        } for b in buckets]
        out.update(aggregation="total FLOPs over total time at the buckets' step shares",
                   total_tflop_per_mean_step=total_flops / w / 1e12,
                   mean_step_seconds=total_time / w, utilization=util)
    else:
        flops = _step_tflop("--flops-per-device-step-tflop", args.flops_per_device_step_tflop)
        step_s = _step_s("--step-seconds", args.step_seconds)
        out.update(flops_per_device_step_tflop=flops, step_seconds=step_s,
                   utilization=utilization(flops * 1e12, step_s, peak))
    over = [(b["name"], b["utilization"]) for b in out.get("buckets", []) if b["utilization"] > 1]
    if out["utilization"] > 1 or over:
        what = f"bucket {over[0][0]}: {over[0][1] * 100:.0f}%" if over else \
            f"{out['utilization'] * 100:.0f}%"
        raise ToolError("--peak-tflops-per-device", f"{name} above 100% ({what}) is impossible: "
                        "the FLOPs, the step time or the peak is wrong (units: TFLOP per device "
                        "step, seconds, TFLOP/s per device)")
    peak_txt = f"{peak:g} TFLOP/s per device" + (f" ({peak_kind})" if peak_kind else "")
    lines = [(f"{name}: {out['utilization'] * 100:.2f}% "
              f"({kind} FLOPs, relative to a peak of {peak_txt})")]
    for b in out.get("buckets", []):
        lines.append(f"  {b['name']}: {b['utilization'] * 100:.2f}% "
                     f"(step share {b['step_share']:.3f}, {b['flops_per_device_step_tflop']:g} TFLOP "
                     f"in {b['step_seconds']:g} s)")
    if "buckets" in out:
        lines.append("  mixture = total FLOPs / total time, not a mean of bucket figures")
    lines.append(f"  {kind} FLOPs: {DEFINITIONS[kind]}")
    emit(out, lines, args.json)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(main_args, build_parser(), argv)


def console() -> None:
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())
