"""Processes that leave their session (issue 51's escape tests): a launcher script that starts
``setsid`` children and a double-forked daemon, and the ``sleep MARK`` processes it leaves."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

# a trainer's launcher that leaves children outside its session, then runs the trainer
ESCAPER = """\
#!/bin/sh
mark=$1; shift
setsid sleep "$mark" &                       # a child in a session of its own
( setsid sh -c 'sleep "$0" &' "$mark" & )    # a daemon: double fork, setsid, parent gone
exec "$@"
"""


def escaper(d: Path) -> Path:
    path = d / "escaper.sh"
    path.write_text(ESCAPER)
    return path


def left(mark: str) -> list[int]:
    """The live processes ``sleep MARK``."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            state = (d / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if cmd[:2] in ([b"sleep", mark.encode()], [b"/bin/sleep", mark.encode()]) \
                and state != b"Z":
            out.append(int(d.name))
    return out


def wait_for(pred: Callable[[], object], limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return bool(pred())
