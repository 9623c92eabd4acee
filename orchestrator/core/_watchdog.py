"""The watchdog of one trial's command, and the kill that ends everything the command started
(standard library only; run as a script, ``python -I -S _watchdog.py SID START [TAG [CGROUP]]``,
so it starts in milliseconds).

It blocks reading its stdin, a pipe whose only writer is the process that started the command.
End of file comes when that process closes the pipe (the command ended) or dies, however it
dies: kill -9 included, where no handler runs. Then it kills everything the command started,
wherever it moved (:func:`kill_command`), and exits:

- the command's cgroup (CGROUP, where one could be made): every process in it, by
  ``cgroup.kill``, or frozen and SIGKILLed one by one; then the cgroup is removed. Nothing
  started inside can leave it without privileges, ``setsid`` and double forks included;
- the command's session (``setsid`` made the command its leader: its process group and the
  groups a shell or a launcher inside it made);
- every process whose environment carries the command's tag (``ORCH_TRIAL_TAG=TAG``, a random
  token set for that command only, inherited by everything it starts unless a program clears
  its environment): what left the session where no cgroup could be made (scanned always).

Only processes started no earlier than the command are touched (a pid reused since is
spared), and never the process doing the killing.
"""

import os
import signal
import sys
import time

TAG_VAR = "ORCH_TRIAL_TAG"
ROUNDS = 50  # scans that find processes still alive (a double fork seen half-way, a slow death)
PAUSE_S = 0.01


def _stat(pid):
    """(state, session, start ticks) of a process from /proc, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        # after the command name: state ppid pgrp session ... starttime (the 22nd field)
        return fields[0], int(fields[3]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _tagged(pid, needle):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:  # gone, or not ours to read (then not ours to kill either)
        return False


def members(sid, start_ticks, tag=None):
    """Pids of the live processes started at or after ``start_ticks`` that are in session
    ``sid`` (None: any session) or, with ``tag``, carry ``ORCH_TRIAL_TAG=tag`` (not this one)."""
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    needle = f"{TAG_VAR}={tag}".encode() if tag else None
    me = os.getpid()
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        st = _stat(name)
        if st is None or st[0] == b"Z" or st[2] < start_ticks:
            continue
        if (sid is not None and st[1] == sid) or (needle and _tagged(name, needle)):
            out.append(int(name))
    return out


def start_ticks(pid):
    """The process's start time in clock ticks since boot (/proc), None when unknown."""
    st = _stat(pid)
    return st[2] if st else None


def _write(path, text):
    try:
        with open(path, "w") as f:
            f.write(text)
        return True
    except OSError:
        return False


def _procs(cgroup):
    """The pids in a cgroup, None when it is gone."""
    try:
        with open(os.path.join(cgroup, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return []


def _freeze(cgroup, on):
    """Freeze (``on``) or thaw a cgroup, v2 (cgroup.freeze) or v1 (freezer.state); True once
    it is frozen, or thawed."""
    if os.path.exists(os.path.join(cgroup, "cgroup.freeze")):
        ask, state = "cgroup.events", "frozen 1" if on else "frozen 0"
        asked = _write(os.path.join(cgroup, "cgroup.freeze"), "1" if on else "0")
    else:
        ask = "freezer.state"
        state = "FROZEN" if on else "THAWED"
        asked = _write(os.path.join(cgroup, ask), state)
    for _ in range(100 if asked else 0):  # freezing waits for every task to stop
        try:
            with open(os.path.join(cgroup, ask)) as f:
                if state in f.read():
                    return True
        except OSError:
            return False
        time.sleep(PAUSE_S)
    return False


def kill_cgroup(cgroup):
    """SIGKILL every process in ``cgroup`` (cgroup.kill; else frozen, so that nothing forks
    meanwhile, each pid killed, thawed) and remove it. Returns the pids found in it."""
    found = []
    for _ in range(ROUNDS * 5):
        pids = _procs(cgroup)
        if pids is None:
            break
        pids = [p for p in pids if p != os.getpid()]
        if not pids:
            try:
                os.rmdir(cgroup)
                break
            except FileNotFoundError:
                break
            except OSError:
                pass  # a killed process not yet out of it
        elif not _write(os.path.join(cgroup, "cgroup.kill"), "1"):
            if _freeze(cgroup, True):  # nothing forks now: the list is complete
                pids = _procs(cgroup) or pids
            for pid in pids:
                _kill(pid)  # a frozen process dies once thawed
            _freeze(cgroup, False)
        found += [p for p in pids if p not in found]
        time.sleep(PAUSE_S / 5)
    return found


def _kill(pid, sig=signal.SIGKILL):
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_command(sid, since=None, tag=None, cgroup=None):
    """SIGKILL what is left of a command: its cgroup, its session's group, any member of its
    session that moved to another group, any process carrying its tag; each started at
    ``since`` (the command's start) or later. Returns the pids found alive."""
    found = kill_cgroup(cgroup) if cgroup else []
    if since is None:  # no /proc: the group is all there is to find
        if sid is not None:
            try:
                os.killpg(sid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return found
    # the session is the command's while its leader is the command or gone (a session's id
    # is not reused while any member holds it); a live other process with that pid is not
    ours = sid is not None and start_ticks(sid) in (None, since)
    quiet = 0  # two empty scans in a row: one could miss a process mid-exec (no environ yet)
    for i in range(ROUNDS if ours or tag else 0):
        alive = members(sid if ours else None, since, tag)
        if i == 0 and ours:
            try:
                os.killpg(sid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        quiet = 0 if alive else quiet + 1
        if quiet == 2:
            break
        for pid in alive:
            _kill(pid)
        found += [p for p in alive if p not in found]
        time.sleep(PAUSE_S)
    return found


def main():
    sid, since = int(sys.argv[1]), int(sys.argv[2])
    tag, cgroup = [a if a != "-" else None for a in (sys.argv[3:] + ["-", "-"])[:2]]
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only end of file ends the watch
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    kill_command(sid, since, tag, cgroup)


if __name__ == "__main__":
    main()
