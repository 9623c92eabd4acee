"""``python -m orchestrator.tools.env_report [--output FILE] [--device auto]``

The environment report a trial gathers (orchestrator/environment.py), standalone: what this
process sees of MUSA, CUDA and the CPU, library and driver versions, usable attention kernels,
profilers, distributed backends and the relevant environment switches. Sanitized like every
run-directory artifact unless ``--keep-hostnames`` (host names only; secrets, users, home paths
and private IPs are always removed). Without ``--output`` the JSON goes to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

DEVICES = ("auto", "cpu", "cuda", "musa")


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="env_report", description=__doc__.split("\n\n")[1])
    ap.add_argument("--output", "-o", help="write the report here (JSON) instead of stdout")
    ap.add_argument("--device", default="auto", choices=DEVICES,
                    help="device whose attention kernels are probed (default: auto)")
    ap.add_argument("--keep-hostnames", action="store_true",
                    help="keep host names (private use only)")
    ap.add_argument("--extra-pattern", action="append", default=[], metavar="REGEX",
                    help="also redact matches of REGEX (repeatable)")
    args = ap.parse_args(argv)
    import re

    for i, p in enumerate(args.extra_pattern):
        try:
            re.compile(p)
        except re.error as exc:
            return _fail(f"--extra-pattern[{i}]: {p!r} is not a valid regular expression ({exc})")
    out = Path(args.output) if args.output else None
    if out is not None and out.is_dir():
        return _fail(f"--output: {out} is a directory; give a file name such as {out}/environment.json")

    t0 = time.perf_counter()
    from orchestrator.environment import gather
    from orchestrator.sanitize import Sanitizer

    report = gather(args.device, gathered_in="env_report")
    sanitizer = Sanitizer.from_config(None)
    sanitizer = Sanitizer(identity=sanitizer.identity, keep_hostnames=args.keep_hostnames,
                          extra_patterns=tuple(args.extra_pattern))
    clean = sanitizer.data(report)
    text = json.dumps(clean, indent=2, default=str) + "\n"
    if out is None:
        sys.stdout.write(text)
        return 0
    from orchestrator.results import atomic_write_text

    try:
        atomic_write_text(out, text)
    except OSError as exc:
        return _fail(f"--output: cannot write {out}: {exc.strerror or exc}")
    sel = clean.get("selected_device", {})
    print(f"wrote {out} ({sel.get('kind', 'no device')}: {sel.get('name', sel.get('error'))}; "
          f"{len(clean.get('errors') or {})} probe error(s); {time.perf_counter() - t0:.2f} s "
          "after start-up)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
