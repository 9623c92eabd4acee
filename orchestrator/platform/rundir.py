"""A run directory's claim: checked before anything is written, held exclusively while a
campaign writes to it.

Every check a run directory needs happens before the first byte goes into it: that its path is
not under a file, that it can be created or written, that an existing directory is a campaign's
(or empty), and that no other campaign holds it. The claim is an exclusive ``flock`` on the
directory itself (Linux and macOS lock a directory's descriptor as any file's), so taking it
writes nothing, a refused second campaign leaves the directory byte-identical, and the kernel
drops the lock when its holder dies, however it dies (kill -9 included): a resume never waits
for a dead campaign. The holder is named by its pid, read from ``/proc/locks`` where the
kernel lists it.
"""

from __future__ import annotations

import errno
import fcntl
import os
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.core.errors import ConfigError

# files a campaign writes first: a directory holding one of them is a campaign's run directory
CAMPAIGN_MARKERS = ("plan.json", "config.json", "campaign.log", "command.txt", "source.txt")


def _nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and not p.is_symlink() and p != p.parent:
        p = p.parent
    return p


def _probe_writable(directory: Path) -> str | None:
    """Why nothing can be created in ``directory`` (None: it can). Permission bits say nothing
    to root, and a read-only mount or an immutable directory refuses root too, so this tries:
    a file is created and removed at once (the directory's files are left as they were)."""
    probe = directory / f".orchestrator-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    try:
        probe.unlink()
    except OSError:
        pass
    return None


def check_target(path: Path, *, key: str = "run_dir", resume: bool = False) -> bool:
    """Refuse (ConfigError, one line naming ``key``) a run directory that cannot be one:
    under a file, not a directory, not writable, or an existing non-empty directory that no
    campaign wrote. ``resume``: it must be a campaign run directory already. Writes nothing
    that stays. Returns whether the directory exists."""
    if path.exists() and not path.is_dir():
        raise ConfigError(key, f"{path} is a file, not a directory; choose another {key}")
    if not path.exists():
        if resume:
            raise ConfigError(key, f"{path} does not exist; give the run directory of the "
                              "campaign to resume")
        anc = _nearest_existing(path.absolute())
        if not anc.is_dir():
            raise ConfigError(key, f"{path} is under {anc}, which is a file, not a directory; "
                              f"choose another {key}")
        why = _probe_writable(anc)
        if why:
            raise ConfigError(key, f"cannot create {path}: {anc} is not writable ({why}); "
                              f"choose a writable {key}")
        return False
    markers = [m for m in CAMPAIGN_MARKERS if (path / m).exists()]
    if resume and not (path / "plan.json").exists():
        raise ConfigError(key, f"{path} is not a campaign run directory (no plan.json); give "
                          "the run directory of the campaign to resume")
    if not markers and any(path.iterdir()):
        raise ConfigError(key, f"{path} is not empty and no campaign wrote it; choose a new or "
                          f"empty {key} (a campaign sanitizes every file of its run directory)")
    why = _probe_writable(path)
    if why:
        raise ConfigError(key, f"{path} is not writable ({why}); choose a writable {key}, or "
                          "copy the run directory somewhere writable to resume it")
    return True


def lock_holder(path: Path) -> int | None:
    """The pid holding a flock on ``path`` (Linux: /proc/locks), None when unknown."""
    try:
        st = path.stat()
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    want = f":{st.st_ino}"
    for line in text.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (a blocked waiter has "->");
        # matched by inode (the device field's format differs between kernels and mounts)
        if "FLOCK" not in parts or "->" in parts:
            continue
        i = parts.index("FLOCK")
        try:
            pid, where = int(parts[i + 3]), parts[i + 4]
        except (IndexError, ValueError):
            continue
        if where.endswith(want):
            return pid
    return None


@dataclass
class Claim:
    """An exclusive hold on a run directory; :meth:`release` when the campaign ends (the
    kernel releases it anyway when the process dies)."""

    path: Path
    fd: int | None
    created: list[Path] = field(default_factory=list)  # directories this claim made

    def release(self, *, undo: bool = False) -> None:
        """Drop the lock; ``undo``: also remove the directories this claim created, where they
        are still empty (a campaign refused before it wrote anything leaves nothing)."""
        if self.fd is not None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = None
        if undo:
            for d in reversed(self.created):
                try:
                    d.rmdir()
                except OSError:
                    break
            self.created = []

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release(undo=exc[0] is not None and not _wrote(self.path))


def _wrote(path: Path) -> bool:
    try:
        return any(path.iterdir())
    except OSError:
        return False


def held_error(key: str, path: Path, holder: int | None) -> ConfigError:
    """The one-line refusal of a run directory another campaign holds."""
    who = f"pid {holder}" if holder else "another process"
    return ConfigError(key, f"another campaign ({who}) is running in {path}; wait for it to "
                       f"finish (then resume=... it if needed), or choose another {key}")


def claim(path: Path, *, key: str = "run_dir", resume: bool = False,
          made: list[Path] | None = None) -> Claim:
    """Check ``path`` (:func:`check_target`), create it if needed, and lock it exclusively.
    A directory another live campaign holds is refused in one line naming its pid; the
    directories made here are removed again on any refusal. ``made``: directories made for
    this campaign already (Hydra makes its run directory before the task runs), removed on a
    refusal like those made here."""
    existed = check_target(path, key=key, resume=resume)
    created: list[Path] = [d for d in (made or []) if d.is_dir()]
    if not existed:
        missing = []
        p = path
        while not p.exists():
            missing.append(p)
            p = p.parent
        try:
            for d in reversed(missing):
                d.mkdir()
                created.append(d)
        except OSError as exc:
            Claim(path, None, created).release(undo=True)
            raise ConfigError(key, f"cannot create {path}: {exc.strerror or exc}; choose a "
                              f"writable {key}") from None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        Claim(path, None, created).release(undo=True)
        raise ConfigError(key, f"cannot open {path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = lock_holder(path)
        os.close(fd)
        Claim(path, None, created).release(undo=True)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise ConfigError(key, f"cannot lock {path}: {exc.strerror or exc}") from None
        raise held_error(key, path, holder) from None
    return Claim(path, fd, created)


def check_free(path: Path, *, key: str = "run_dir") -> None:
    """Refuse at once (before any composition) a run directory another live campaign holds;
    writes nothing and takes no lock (the campaign claims it later)."""
    if not path.is_dir():
        return
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise held_error(key, path, lock_holder(path)) from None
    finally:
        os.close(fd)
