"""The environment report this process sees, in the tools' shared command-line style.

    python -m orchestrator.tools.env_report --output environment.json
    python -m orchestrator.tools.env_report --json          # the report on stdout
    python -m orchestrator.tools.env_report                 # a short text summary

The environment report a trial gathers (orchestrator/platform/environment.py), standalone: what this
process sees of MUSA, CUDA and the CPU, library and driver versions, usable attention kernels,
profilers, distributed backends and the relevant environment switches. Sanitized like every
run-directory artifact unless ``--keep-hostnames`` (host names only; secrets, users, home paths
and private IPs are always removed). ``--output FILE`` writes the JSON report to FILE (a
one-line note goes to stderr); ``--json`` prints it on stdout (with ``--output`` as well:
both). Bad input: one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.platform.environment import gather
from orchestrator.core.results import atomic_write_text
from orchestrator.core.sanitize import Sanitizer
from orchestrator.cli.tools._cli import ToolError, emit, make_parser, run

DEVICES = ("auto", "cpu", "cuda", "musa")


def build_parser() -> argparse.ArgumentParser:
    p = make_parser("env_report", __doc__ or "")
    p.add_argument("--output", "-o", metavar="FILE", help="write the report here (JSON)")
    p.add_argument("--device", default="auto", choices=DEVICES,
                   help="device whose attention kernels are probed (default: auto)")
    p.add_argument("--keep-hostnames", action="store_true",
                   help="keep host names (private use only)")
    p.add_argument("--extra-pattern", action="append", default=[], metavar="REGEX",
                   help="also redact matches of REGEX (repeatable)")
    return p


def summary_lines(report: dict[str, Any], elapsed_s: float) -> list[str]:
    """A few human lines over a (sanitized) report: the devices, versions and probe errors."""
    sel = report.get("selected_device") or {}
    torch = report.get("torch") or {}
    cpu = report.get("cpu") or {}
    errors = report.get("errors") or {}
    dist = report.get("distributed") or {}
    lines = [
        f"device: {sel.get('kind', 'none')}: {sel.get('name', sel.get('error'))}"
        + (f" (x{sel['count']})" if sel.get("count") else ""),
        (f"torch {torch.get('version')} (cuda {torch.get('cuda')}, musa {torch.get('musa')}); "
         f"python {(report.get('python') or {}).get('version')}"),
        f"cpu: {cpu.get('model')} ({cpu.get('logical_cores')} logical cores)",
        "distributed backends: " + (", ".join(k for k, v in dist.items() if v is True) or "none"),
        f"{len(errors)} probe error(s)" + (": " + ", ".join(sorted(errors)) if errors else ""),
        f"gathered in {elapsed_s:.2f} s after start-up; --json or --output FILE for the report",
    ]
    return lines


def main_args(args: argparse.Namespace) -> int:
    for i, pattern in enumerate(args.extra_pattern):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ToolError(f"--extra-pattern[{i}]",
                            f"{pattern!r} is not a valid regular expression ({exc})") from None
    out = Path(args.output) if args.output else None
    if out is not None and out.is_dir():
        raise ToolError("--output", f"{out} is a directory; give a file name such as "
                        f"{out}/environment.json")
    t0 = time.perf_counter()
    report = gather(args.device, gathered_in="env_report")
    detected = Sanitizer.from_config(None)
    sanitizer = Sanitizer(identity=detected.identity, keep_hostnames=args.keep_hostnames,
                          extra_patterns=tuple(args.extra_pattern))
    clean = sanitizer.data(report)
    elapsed = time.perf_counter() - t0
    if out is not None:
        try:
            atomic_write_text(out, json.dumps(clean, indent=2, default=str) + "\n")
        except OSError as exc:
            raise ToolError("--output", f"cannot write {out}: {exc.strerror or exc}; give a "
                            "writable file path") from None
        sel = clean.get("selected_device", {})
        print(f"wrote {out} ({sel.get('kind', 'no device')}: {sel.get('name', sel.get('error'))}; "
              f"{len(clean.get('errors') or {})} probe error(s); {elapsed:.2f} s after start-up)",
              file=sys.stderr)
        if not args.json:
            return 0
    emit(json.loads(json.dumps(clean, default=str)), summary_lines(clean, elapsed), args.json)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(main_args, build_parser(), argv)


def console() -> None:
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())
