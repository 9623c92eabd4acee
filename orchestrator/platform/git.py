"""The git seam: a repository's state, revisions resolved to commits, worktrees, and the
commits between two revisions. Every call is a ``git`` subprocess with a time limit; nothing
here changes a user's checkout (its files, index, HEAD or branches): a worktree is added under
a directory the caller owns, and the snapshot of uncommitted changes is a commit object built
through a temporary index, reachable from no branch.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

GIT_TIMEOUT_S = 10.0
WORKTREE_TIMEOUT_S = 300.0  # checking out a large repository
MAX_UNTRACKED_BYTES = 1 << 20  # untracked files larger than this are listed, not included
# the author of a snapshot commit (a repository without user.name/user.email still snapshots)
SNAPSHOT_IDENTITY = {"GIT_AUTHOR_NAME": "orchestrator", "GIT_AUTHOR_EMAIL": "orchestrator@localhost",
                     "GIT_COMMITTER_NAME": "orchestrator",
                     "GIT_COMMITTER_EMAIL": "orchestrator@localhost"}


class GitError(RuntimeError):
    """A git command failed: its first line of stderr."""


def available() -> bool:
    return shutil.which("git") is not None


def git(root: str | os.PathLike[str], *args: str, timeout: float = GIT_TIMEOUT_S,
        env: dict[str, str] | None = None) -> str:
    """``git -C root args...``'s stdout; GitError with git's first line of stderr."""
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=timeout, check=False, errors="replace",
                              env={**os.environ, **env} if env else None)
    except FileNotFoundError:
        raise GitError("git is not installed (no git on PATH)") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} took longer than {timeout:g} s") from None
    if proc.returncode != 0:
        raise GitError((proc.stderr.strip().splitlines() or [f"git {args[0]} failed"])[0])
    return proc.stdout


def toplevel(path: str | os.PathLike[str]) -> Path | None:
    """The root of the git checkout holding ``path``, or None (not in a checkout, no git)."""
    p = Path(path)
    if not p.is_dir():
        p = p.parent
    try:
        return Path(git(p, "rev-parse", "--show-toplevel").strip())
    except GitError:
        return None


@dataclass
class GitState:
    root: str | None = None
    commit: str | None = None
    branch: str | None = None
    dirty: bool | None = None
    diff: str = ""
    error: str | None = None
    untracked: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # untracked files too large to include

    @property
    def diff_sha256(self) -> str | None:
        """The SHA-256 of the uncommitted changes as git produced them (None: clean)."""
        if not self.dirty:
            return None
        return hashlib.sha256(self.diff.encode("utf-8", errors="surrogateescape")).hexdigest()


def _untracked_diff(top: Path, rel: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(top), "diff", "--no-index", "--binary", "--", "/dev/null", rel],
        capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False, errors="replace")
    return proc.stdout  # exit code 1 means "differs", which it does


def pathspecs(top: Path, exclude: Sequence[str | os.PathLike[str]]) -> list[str]:
    """``.`` and an exclusion for each of ``exclude`` that lies inside ``top`` (the run
    directory, the orchestrator's outputs: never the user's code)."""
    out = ["."]
    for p in exclude:
        try:
            rel = Path(os.path.realpath(p)).relative_to(top)
        except ValueError:
            continue
        if str(rel) != ".":
            out.append(f":(exclude){rel.as_posix()}")
    return out


def git_state(path: str | os.PathLike[str],
              exclude: Sequence[str | os.PathLike[str]] = ()) -> GitState:
    """The git state of the tree holding ``path``: commit, branch (None when detached), dirty,
    and when dirty ``git diff HEAD`` plus the untracked files (those over
    MAX_UNTRACKED_BYTES listed in ``skipped``); a path outside git says so in ``error``.
    ``exclude``: paths inside the tree that are not its code (a run directory)."""
    top = toplevel(path)
    if top is None:
        return GitState(error="not a git checkout")
    st = GitState(root=str(top))
    spec = ["--", *pathspecs(top, exclude)]
    try:
        st.commit = git(top, "rev-parse", "HEAD").strip()
        branch = git(top, "rev-parse", "--abbrev-ref", "HEAD").strip()
        st.branch = None if branch == "HEAD" else branch  # detached
        status = git(top, "status", "--porcelain", "--untracked-files=all", *spec)
        st.dirty = bool(status.strip())
        if st.dirty:
            parts = [git(top, "diff", "HEAD", "--binary", *spec)]
            st.untracked = git(top, "ls-files", "--others", "--exclude-standard",
                               *spec).splitlines()
            for rel in st.untracked:
                f = top / rel
                if not f.is_file() or f.stat().st_size > MAX_UNTRACKED_BYTES:
                    st.skipped.append(rel)
                    continue
                parts.append(_untracked_diff(top, rel))
            st.diff = "".join(parts)
    except (OSError, GitError, subprocess.TimeoutExpired) as exc:
        st.error = str(exc)
    return st


def resolve(root: str | os.PathLike[str], rev: str) -> str:
    """The full commit id ``rev`` (a commit, branch, tag, ``HEAD~2`` ...) names in ``root``;
    GitError when it names none."""
    if not rev or rev.startswith("-"):
        raise GitError(f"{rev!r} is not a revision")
    try:
        return git(root, "rev-parse", "--verify", "--quiet", "--end-of-options",
                   f"{rev}^{{commit}}").strip()
    except GitError:
        raise GitError(f"no commit {rev!r} in this repository") from None


def branch_of(root: str | os.PathLike[str], rev: str) -> str | None:
    """The branch ``rev`` names (``main`` for ``main`` or ``refs/heads/main``), else None."""
    if not rev or rev.startswith("-"):
        return None
    try:
        full = git(root, "rev-parse", "--symbolic-full-name", rev).strip()
    except GitError:
        return None
    return full[len("refs/heads/"):] if full.startswith("refs/heads/") else None


def subject(root: str | os.PathLike[str], commit: str) -> str:
    """The first line of a commit's message."""
    return git(root, "log", "-1", "--format=%s", commit).strip()


def is_ancestor(root: str | os.PathLike[str], older: str, newer: str) -> bool:
    try:
        git(root, "merge-base", "--is-ancestor", older, newer)
    except GitError:
        return False
    return True


def first_parent_path(root: str | os.PathLike[str], good: str, bad: str) -> list[str]:
    """The commits after ``good`` up to and including ``bad`` along bad's first parents,
    oldest first (the history a bisection walks); GitError when good is not on that path."""
    if not is_ancestor(root, good, bad):
        raise GitError(f"{good[:12]} is not an ancestor of {bad[:12]}")
    out = git(root, "rev-list", "--first-parent", "--ancestry-path", "--reverse",
              f"{good}..{bad}", timeout=60.0).split()
    if not out or out[-1] != bad:
        raise GitError(f"{good[:12]} is not on the first-parent history of {bad[:12]}")
    return out


def changed_files(root: str | os.PathLike[str], a: str, b: str) -> list[tuple[str, int, int]]:
    """(path, lines added, lines removed) for each file that differs between commits ``a`` and
    ``b`` (a binary file counts -1, -1)."""
    out = []
    for line in git(root, "diff", "--numstat", "--no-renames", a, b, timeout=60.0).splitlines():
        parts = line.split("\t", 2)
        if len(parts) == 3:
            add, rem, path = parts
            out.append((path, int(add) if add.isdigit() else -1, int(rem) if rem.isdigit() else -1))
    return out


def snapshot(root: str | os.PathLike[str],
             exclude: Sequence[str | os.PathLike[str]] = ()) -> tuple[str, list[str]]:
    """(a commit of the checkout's current files, the untracked files left out): HEAD's tree
    with every tracked change and the untracked files that .gitignore does not exclude (those
    over MAX_UNTRACKED_BYTES left out, and whatever lies under ``exclude``), built through a
    temporary index, HEAD as its parent. The user's index, HEAD and branches are not touched;
    the commit is reachable from no ref."""
    top = toplevel(root)
    if top is None:
        raise GitError(f"{root} is not in a git checkout")
    head = resolve(top, "HEAD")
    spec = ["--", *pathspecs(top, exclude)]
    left_out = []
    with tempfile.TemporaryDirectory(prefix="orch-index-") as d:
        env = {"GIT_INDEX_FILE": str(Path(d) / "index"), **SNAPSHOT_IDENTITY}
        git(top, "read-tree", head, env=env)
        git(top, "add", "--update", *spec, env=env, timeout=120.0)
        small = []
        for rel in git(top, "ls-files", "--others", "--exclude-standard", *spec,
                       env=env).splitlines():
            f = top / rel
            if f.is_file() and f.stat().st_size <= MAX_UNTRACKED_BYTES:
                small.append(rel)
            else:
                left_out.append(rel)
        for i in range(0, len(small), 200):
            git(top, "add", "--", *small[i:i + 200], env=env, timeout=120.0)
        tree = git(top, "write-tree", env=env).strip()
        commit = git(top, "commit-tree", tree, "-p", head, "-m",
                     "orchestrator: snapshot of the uncommitted changes", env=env).strip()
    return commit, left_out


def add_worktree(root: str | os.PathLike[str], path: Path, commit: str) -> None:
    """A detached worktree of ``commit`` at ``path`` (which must not exist)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    git(root, "worktree", "add", "--detach", "--force", str(path), commit,
        timeout=WORKTREE_TIMEOUT_S)


def worktree_commit(path: Path) -> str | None:
    """The commit a worktree at ``path`` has checked out, None when it is not a worktree."""
    if not (path / ".git").exists():
        return None
    try:
        return git(path, "rev-parse", "HEAD").strip()
    except GitError:
        return None


def remove_worktree(root: str | os.PathLike[str], path: Path) -> None:
    """Remove a worktree this process added (its files and git's record of it)."""
    try:
        git(root, "worktree", "remove", "--force", "--force", str(path), timeout=120.0)
    except GitError:
        shutil.rmtree(path, ignore_errors=True)
        try:
            git(root, "worktree", "prune")
        except GitError:
            pass
