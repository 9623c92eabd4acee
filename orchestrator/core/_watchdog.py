"""The watchdog of one trial's command (standard library only; run as a script, ``python -I
-S _watchdog.py SID START``, so it starts in milliseconds).

It blocks reading its stdin, a pipe whose only writer is the process that started the command.
End of file comes when that process closes the pipe (the command ended) or dies, however it
dies: kill -9 included, where no handler runs. Then it SIGKILLs every process still in the
command's session (``setsid`` made the command its leader: its process group and the groups a
shell or a launcher inside it made) that started no earlier than the command, and exits.
"""

import os
import signal
import sys


def members(sid, start_ticks):
    """Pids of the live processes of session ``sid`` started at or after ``start_ticks``."""
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # after the command name: state ppid pgrp session ... starttime (the 22nd field)
        if len(fields) > 19 and fields[0] != b"Z" and int(fields[3]) == sid \
                and int(fields[19]) >= start_ticks:
            out.append(int(name))
    return out


def start_ticks(pid):
    """The process's start time in clock ticks since boot (/proc), None when unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def kill_session(sid, start_ticks_=None):
    """SIGKILL what is left of session ``sid``: its group, then any member that moved to
    another group (started at ``start_ticks_`` or later: a pid reused since is spared).
    Returns the pids found alive."""
    found = members(sid, start_ticks_) if start_ticks_ is not None else []
    if start_ticks_ is not None and not found and start_ticks(sid) != start_ticks_:
        return []  # the session is gone, and the pid may be someone else's now
    try:
        os.killpg(sid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return found


def main():
    sid, start_ticks = int(sys.argv[1]), int(sys.argv[2])
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only end of file ends the watch
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    kill_session(sid, start_ticks)


if __name__ == "__main__":
    main()
