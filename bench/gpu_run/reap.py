"""Ends what a part of bench/gpu_check.sh left running: every process whose environment holds
``ORCH_GPU_CHECK_TAG=<tag>`` (the check exports it, so everything it starts inherits it, a
trial process in a session of its own too), except this process, its ancestors (the check
itself) and the pids given with ``--keep``. Each is sent SIGKILL by its pid; one line per
process ended goes to stdout (``pid name``), nothing when none was left.

    python bench/gpu_run/reap.py TAG --keep 1234
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

VAR = "ORCH_GPU_CHECK_TAG"


def ancestors(pid: int) -> set[int]:
    """``pid`` and every parent above it."""
    out = set()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def tagged(tag: str, proc: Path = Path("/proc")) -> list[int]:
    want = f"{VAR}={tag}".encode()
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if want in env.split(b"\0"):
            found.append(int(entry.name))
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tag")
    ap.add_argument("--keep", type=int, action="append", default=[])
    args = ap.parse_args(argv)
    spare = ancestors(os.getpid()) | set(args.keep)
    for pid in sorted(set(tagged(args.tag)) - spare):
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            name = "?"
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
        print(f"{pid} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
