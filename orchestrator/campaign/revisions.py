"""The user's code: code revisions as the variable, and what each arm ran.

A command workload's code lies in a git repository (``source.repo``, else the one holding the
command's cwd). With ``source.revision`` set, or swept (``variable: source.revision``), each
arm runs from a worktree of its commit under ``RUN_DIR/worktrees/`` (one per commit), added
once the campaign's checks passed and removed when it ends (``source.keep_worktrees`` keeps
them); the user's checkout is never touched. The command's cwd, and any path of the command,
its environment or its log file inside the repository, move to the same place in the worktree
(:func:`relocate`); ``source.share`` links what git does not track (a prepared dataset) from
the checkout. ``WORKTREE`` is the checkout's uncommitted state, snapshotted once into a commit
object reachable from no branch (:func:`orchestrator.platform.git.snapshot`).

Revisions are resolved to commits when the configuration is checked (:func:`check`: a name git
does not know, two arms at one commit, WORKTREE with nothing uncommitted, a dirty repository
under ``source.require_clean`` are refused in one line before anything is written) and again
when the campaign starts (:func:`materialize`), which records them in ``code.json``: a
resumed campaign runs the commits it started with, even where a branch moved since (and says
so). Without any revision, the arms run the checkout in place and its state is recorded.

Every arm's code (repository, revision asked, commit, branch, dirty flag, SHA-256 of the
uncommitted diff) goes into each of its trials' records (``code``), source.txt and the
decisions.md section :func:`code_section` writes, with the files each revision changes against
the baseline's; an arm changing a file of ``source.frozen_paths`` is invalid, and a checkout
that changed while the trials ran in place is flagged.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

from orchestrator.core.convert import to_dict
from orchestrator.core.errors import ConfigError
from orchestrator.core.results import atomic_write_json, read_json
from orchestrator.core.section import Section
from orchestrator.platform import git
from orchestrator.spec.config import WORKTREE, Config
from orchestrator.spec.sweep import REVISION, ArmCode, ResolvedArm, arm_key, revision_of
from recipes.registry import REGISTRY

log = logging.getLogger(__name__)

FILE = "code.json"
WORKTREES = "worktrees"
SHOWN_FILES = 8  # changed files named per arm in decisions.md


class CodeStarted(TypedDict):
    """code.json's ``started``: the checkout's state when the campaign started."""

    commit: str | None
    branch: str | None
    dirty: bool | None
    diff_sha256: str | None


class CodeArm(ArmCode):
    """One entry of code.json's ``arms`` (by arm id): the arm's label and its code."""

    label: str


class CodeDoc(TypedDict):
    """code.json: the repository, the commit each revision resolved to, the branches that
    moved since, the checkout's state at the start, and each arm's code."""

    repo: str | None
    commits: dict[str, str]  # revision asked -> commit
    moved: list[str]
    started: CodeStarted
    keep_worktrees: bool
    arms: dict[str, CodeArm]


# --------------------------------------------------------------------------- where the code is


def _template_free(text: str) -> bool:
    return "{" not in text


def command_dir(cfg: Config) -> Path:
    """Where a command workload runs: its cwd (when not a template), else the current one."""
    cwd = getattr(cfg.workload, "cwd", None)
    if cwd and _template_free(cwd):
        return Path(os.path.realpath(cwd))
    return Path(os.path.realpath(os.getcwd()))


def recipe_file(recipe: str) -> Path | None:
    """The file of an import-path recipe's module (``pkg.module:build``), found without
    importing it; None for a registered recipe (the orchestrator's own, in source.txt)."""
    if recipe in REGISTRY or ":" not in recipe:
        return None
    from importlib.util import find_spec  # start-up cost: only for an import-path recipe

    try:
        spec = find_spec(recipe.partition(":")[0])
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec is not None and spec.origin else None


def repo_of(cfg: Config) -> Path | None:
    """The repository of the user's code: source.repo, else the one holding the command's cwd
    (a command workload) or the recipe module's file (an import-path recipe); None when it is
    not in a git checkout (or the workload is the orchestrator's own)."""
    if cfg.source.repo:
        return git.toplevel(os.path.realpath(cfg.source.repo))
    if cfg.workload.runs_own_process():
        return git.toplevel(command_dir(cfg))
    f = recipe_file(str(cfg.workload.recipe))
    return git.toplevel(f) if f is not None else None


def relocate(workload: dict[str, Any], repo: Path, tree: Path, here: Path) -> dict[str, str]:
    """The workload.* overrides that run a command workload from ``tree`` (a worktree of
    ``repo``) instead: its cwd at the same place inside the worktree (``here``, the current
    directory, when it has none), and every path into the repository in its command, its
    environment and its log file moved there. {} when nothing of it lies in the repository."""
    src, dst = str(repo), str(tree)
    pattern = re.compile(re.escape(src) + r"(?=/|$|[\s'\"])")

    def move(text: str) -> str:
        return pattern.sub(lambda _: dst, text)

    out: dict[str, str] = {}
    cwd = workload.get("cwd")
    if cwd is None or _template_free(cwd):
        p = Path(os.path.realpath(here / cwd if cwd else here))
        try:
            out["workload.cwd"] = str(tree / p.relative_to(repo))
        except ValueError:
            pass  # runs elsewhere: only paths that name the repository move
    elif move(cwd) != cwd:
        out["workload.cwd"] = move(cwd)
    command = str(workload.get("command", ""))
    if move(command) != command:
        out["workload.command"] = move(command)
    for k, v in (workload.get("env") or {}).items():
        if isinstance(v, str) and move(v) != v:
            out[f"workload.env.{k}"] = move(v)
    logfile = (workload.get("log") or {}).get("file")
    if isinstance(logfile, str) and move(logfile) != logfile:
        out["workload.log.file"] = move(logfile)
    return out


def not_code(cfg: Config, run_dir: Path | None = None) -> list[Path]:
    """What lies in a repository without being its code: the run directory and the
    orchestrator's default output roots (excluded from its dirty state and its snapshot)."""
    here = Path.cwd()
    out = [here / "outputs", here / "multirun"]
    out += [Path(p) for p in (cfg.run_dir, cfg.resume) if p]
    return out + ([run_dir] if run_dir is not None else [])


def _display(path: Path | str | None) -> str | None:
    return None if path is None else str(path)


# --------------------------------------------------------------------------- checks (no writes)


def revisions_by_arm(cfg: Config, arms: Sequence[Any]) -> dict[str, str | None]:
    return {a.arm_id: revision_of(a, cfg.source.revision) for a in arms}


def check(cfg: Config, arms: Sequence[ResolvedArm]) -> None:
    """Before anything is written: the repository, each arm's revision (a commit git knows,
    no two arms at one commit, WORKTREE only with uncommitted changes), source.require_clean,
    source.share and source.frozen_paths. ConfigError naming the key and the fix."""
    src = cfg.source
    revs = revisions_by_arm(cfg, arms)
    swept = any(REVISION in a.overrides for a in arms)
    if not any(r is not None for r in revs.values()) and not src.require_clean:
        if src.share or src.frozen_paths:
            key = "source.share" if src.share else "source.frozen_paths"
            raise ConfigError(key, "applies to code revisions only; set source.revision (or "
                              "sweep it) or drop the key")
        return
    key = REVISION if not swept else "sweep.variable"
    if not git.available():
        raise ConfigError(key, "needs git, which is not on PATH; install git")
    if not cfg.workload.runs_own_process():
        raise ConfigError(key, f"workload {cfg.workload.name} (kind {cfg.workload.kind!r}) runs "
                          "inside the orchestrator's trial processes, so it cannot run another "
                          "revision of its code; revisions are for a command workload "
                          "(workload.command, run from a worktree of each commit)")
    repo = repo_of(cfg)
    if repo is None:
        where = f"source.repo={cfg.source.repo}" if cfg.source.repo else \
            f"the command's directory {command_dir(cfg)}"
        raise ConfigError("source.repo", f"{where} is not in a git repository; set "
                          "source.repo=PATH to the trainer's repository (or workload.cwd)")
    probe = relocate(_plain(cfg.workload), repo, repo / WORKTREES, Path.cwd())
    if not probe:
        raise ConfigError("source.repo", f"workload {cfg.workload.name} runs nothing from "
                          f"{repo}: its cwd lies elsewhere and its command names no path in "
                          "it; set workload.cwd to the repository (or a directory in it)")
    state = git.git_state(repo, exclude=not_code(cfg))
    if state.error:
        raise ConfigError("source.repo", f"{repo}: {state.error}")
    _check_commits(arms, revs, repo, state)
    if src.require_clean and state.dirty and WORKTREE not in revs.values():
        n = len([x for x in state.diff.splitlines() if x.startswith("diff --git")])
        raise ConfigError("source.require_clean", f"{repo} has uncommitted changes ({n} "
                          f"file(s)); commit or stash them, or measure them as the {WORKTREE} "
                          "arm")
    _check_share(src.share, repo)


def _check_commits(arms: Sequence[ResolvedArm], revs: dict[str, str | None], repo: Path,
                   state: git.GitState) -> None:
    """Each arm's revision names a commit (WORKTREE: uncommitted changes), no two the same."""
    commits: dict[str, str] = {}
    for a in arms:
        rev = revs[a.arm_id]
        akey = arm_key(a) if REVISION in a.overrides else REVISION
        if rev is None or not str(rev).strip():
            raise ConfigError(akey, f"arm {a.label!r} has no revision; give a commit, branch or "
                              f"tag (or {WORKTREE} for the uncommitted changes)")
        if rev == WORKTREE:
            if not state.dirty:
                raise ConfigError(akey, f"{WORKTREE}: {repo} has no uncommitted changes to "
                                  "measure; commit them as a revision or drop the arm")
            sha = f"{WORKTREE}@{state.diff_sha256}"
        else:
            try:
                sha = git.resolve(repo, str(rev))
            except git.GitError as exc:
                raise ConfigError(akey, f"{rev!r}: {exc} ({repo}); name a commit, branch or "
                                  "tag that `git log` shows") from None
        other = next((x for x, c in commits.items() if c == sha), None)
        if other is not None:
            raise ConfigError(akey, f"{rev!r} is the same commit ({sha[:12]}) as arm {other!r}; "
                              "a revision sweep compares different commits")
        commits[a.label] = sha


def _check_share(share: Sequence[str], repo: Path) -> None:
    for i, rel in enumerate(share):
        p = Path(rel)
        if p.is_absolute() or ".." in p.parts:
            raise ConfigError(f"source.share[{i}]", f"{rel!r} must be a path inside the "
                              "repository, relative to its root")
        if not (repo / p).exists():
            raise ConfigError(f"source.share[{i}]", f"{rel!r} does not exist in {repo}; prepare "
                              "it there first (the worktrees link it from the checkout)")


def _plain(workload: Any) -> dict[str, Any]:
    return to_dict(workload)  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- the campaign's start


def _link_missing(src: Path, dst: Path) -> list[str]:
    """Link ``src`` (in the checkout) at ``dst`` (in a worktree) where the worktree lacks it;
    into a directory both have, entry by entry. Returns the links made."""
    if not os.path.lexists(dst):
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(src, dst, target_is_directory=src.is_dir())
        return [str(dst)]
    if src.is_dir() and dst.is_dir() and not dst.is_symlink():
        out = []
        for child in sorted(src.iterdir()):
            out += _link_missing(child, dst / child.name)
        return out
    return []  # the revision tracks it: its own stays


def _code_of(state: git.GitState, repo: Path, revision: str | None, commit: str | None,
             branch: str | None, worktree: str | None) -> ArmCode:
    return {"repo": _display(repo), "revision": revision, "commit": commit,
            "branch": branch, "dirty": state.dirty, "diff_sha256": state.diff_sha256,
            "worktree": worktree}


def _ensure_worktree(repo: Path, path: Path, commit: str) -> None:
    have = git.worktree_commit(path)
    if have == commit:
        return  # a resume: the worktree of the earlier invocation
    if path.exists() or have is not None:
        git.remove_worktree(repo, path)
        shutil.rmtree(path, ignore_errors=True)
    git.add_worktree(repo, path, commit)


def materialize(cfg: Config, run_dir: Path, arms: list[ResolvedArm],
                running: list[ResolvedArm]) -> tuple[list[ResolvedArm], list[ResolvedArm]]:
    """At the campaign's start, after its checks: each arm's code resolved and recorded
    (``code.json``), a worktree per revision added under the run directory, and the arms
    (and the running arms, the A/A control included) returned with their ``code`` and the
    ``job_overrides`` that run their jobs from it."""
    repo = repo_of(cfg)
    if repo is None:
        return arms, running
    path = run_dir / FILE
    recorded = read_json(path) if path.is_file() else {}
    commits: dict[str, str] = dict(recorded.get("commits") or {})  # revision asked -> commit
    moved: list[str] = []
    outside = not_code(cfg, run_dir)
    state = git.git_state(repo, exclude=outside)
    by_rev: dict[str | None, tuple[ArmCode, dict[str, str]]] = {}
    for arm in running:
        rev = revision_of(arm, cfg.source.revision)
        if rev in by_rev:
            continue
        if rev is None:  # the checkout in place: its state, recorded
            code = _code_of(state, repo, None, state.commit, state.branch, None)
            code.update(_module_file(cfg, repo))
            by_rev[rev] = (code, {})
            continue
        by_rev[rev] = _worktree_arm(cfg, run_dir, repo, rev, commits, moved, state, outside)
    for line in moved:
        log.warning("source.revision: %s", line)
    atomic_write_json(path, {"repo": _display(repo), "commits": commits, "moved": moved,
                             "started": {"commit": state.commit, "branch": state.branch,
                                         "dirty": state.dirty,
                                         "diff_sha256": state.diff_sha256},
                             "keep_worktrees": cfg.source.keep_worktrees,
                             "arms": {a.arm_id: {"label": a.label, **by_rev[
                                 revision_of(a, cfg.source.revision)][0]} for a in running}})

    def with_code(a: ResolvedArm) -> ResolvedArm:
        code, moves = by_rev[revision_of(a, cfg.source.revision)]
        assert a.workload_config is not None
        return ResolvedArm.of(a, a.workload, a.workload_config, code, moves)

    return [with_code(a) for a in arms], [with_code(a) for a in running]


def _worktree_arm(cfg: Config, run_dir: Path, repo: Path, rev: str, commits: dict[str, str],
                  moved: list[str], state: git.GitState, outside: Sequence[Path],
                  ) -> tuple[ArmCode, dict[str, str]]:
    """(the code record, the job overrides) of the arms at revision ``rev``: its commit
    (``commits``: what an earlier invocation resolved, kept; a branch that moved since is
    added to ``moved``), its worktree added (or kept) and the shared paths linked into it."""
    if rev in commits:
        commit = str(commits[rev])
        now = None if rev == WORKTREE else _try_resolve(repo, rev)
        if now is not None and now != commit:
            moved.append(f"{rev} now names {now[:12]}; this campaign keeps {commit[:12]}, "
                         "the commit its trials ran")
    elif rev == WORKTREE:
        commit, left_out = git.snapshot(repo, exclude=outside)
        if left_out:
            log.warning("the %s snapshot leaves out %d untracked file(s) over %d bytes: %s",
                        WORKTREE, len(left_out), git.MAX_UNTRACKED_BYTES, ", ".join(left_out[:5]))
    else:
        commit = git.resolve(repo, rev)
    commits[rev] = commit
    tree = run_dir / WORKTREES / commit[:12]
    _ensure_worktree(repo, tree, commit)
    linked = [x for rel in cfg.source.share for x in _link_missing(repo / rel, tree / rel)]
    if linked:
        log.info("worktree %s: linked %d shared path(s) from the checkout", commit[:12],
                 len(linked))
    if rev == WORKTREE:
        code = _code_of(state, repo, rev, commit, state.branch, f"{WORKTREES}/{commit[:12]}")
        code["snapshot_of"] = state.commit
    else:
        code = _code_of(git.GitState(dirty=False), repo, rev, commit, git.branch_of(repo, rev),
                        f"{WORKTREES}/{commit[:12]}")
    return code, relocate(_plain(cfg.workload), repo, tree, Path.cwd())


def _module_file(cfg: Config, repo: Path) -> ArmCode:
    """An import-path recipe's module file: its path in the repository and the SHA-256 of its
    contents as the trials import it (what a diff hash of the whole tree would not pin)."""
    f = recipe_file(str(cfg.workload.recipe))
    if f is None:
        return {}
    try:
        rel = os.path.relpath(os.path.realpath(f), repo)
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
    except (OSError, ValueError):
        return {}
    return {"recipe_file": rel, "recipe_file_sha256": digest}


def _try_resolve(repo: Path, rev: str) -> str | None:
    try:
        return git.resolve(repo, rev)
    except git.GitError:
        return None


def source_lines(arms: Sequence[ResolvedArm]) -> list[str]:
    """source.txt's lines for the user's code, one per arm."""
    out = []
    for a in arms:
        c = a.code
        if not c:
            continue
        out.append(
            f"user_code {a.label}: repo {c.get('repo')}; revision {c.get('revision') or '(the checkout in place)'}; "
            f"commit {c.get('commit') or 'unknown'}; branch {c.get('branch') or 'detached'}; "
            f"dirty {str(c.get('dirty')).lower()}"
            + (f"; diff_sha256 {c['diff_sha256']}" if c.get("diff_sha256") else "")
            + (f"; worktree {c['worktree']}" if c.get("worktree") else "")
            + (f"; recipe file {c['recipe_file']} sha256 {c['recipe_file_sha256']}"
               if c.get("recipe_file") else ""))
    return out


def cleanup(cfg: Config, run_dir: Path) -> None:
    """The campaign's worktrees removed (their files and git's record of them), unless
    source.keep_worktrees; the repository's objects stay."""
    tdir = run_dir / WORKTREES
    if cfg.source.keep_worktrees or not tdir.is_dir():
        return
    repo = repo_of(cfg)
    for tree in sorted(tdir.iterdir()):
        if repo is not None:
            git.remove_worktree(repo, tree)
        shutil.rmtree(tree, ignore_errors=True)
    try:
        tdir.rmdir()
    except OSError:
        pass


# --------------------------------------------------------------------------- the decision log


def _frozen_hits(files: Sequence[str], patterns: Sequence[str]) -> list[str]:
    return [f for f in files if any(fnmatch.fnmatch(f, p) or f.startswith(p.rstrip("/") + "/")
                                    for p in patterns)]


def _arm_line(c: CodeArm) -> str:
    state = ("dirty, diff sha256 " + str(c.get("diff_sha256"))[:16]) if c.get("dirty") \
        else "clean" if c.get("dirty") is False else "unknown"
    where = f"worktree `{c['worktree']}`" if c.get("worktree") else "the checkout in place"
    rev = c.get("revision")
    line = (f"- `{c.get('label')}`: " + (f"revision `{rev}` = " if rev else "")
            + f"commit `{str(c.get('commit') or 'unknown')[:12]}`"
            + (f" (branch `{c['branch']}`)" if c.get("branch") else "")
            + f", {state}, ran from {where}")
    if c.get("snapshot_of"):
        line += f" (the uncommitted changes on top of `{str(c['snapshot_of'])[:12]}`)"
    if c.get("recipe_file"):
        line += (f"; recipe module `{c['recipe_file']}` sha256 "
                 f"{str(c.get('recipe_file_sha256'))[:16]}")
    return line


def _changes(cfg: Config, repo: Path, base: CodeArm, c: CodeArm,
             verdict: Any) -> list[str]:
    """The files arm ``c``'s commit changes against the baseline's; a frozen one makes its
    verdict invalid (in place)."""
    a, b = base.get("commit"), c.get("commit")
    if not a or not b or a == b:
        return []
    try:
        files = git.changed_files(repo, str(a), str(b))
    except git.GitError as exc:
        return [f"  - its changes against the baseline's commit could not be read ({exc})"]
    add = sum(x[1] for x in files if x[1] > 0)
    rem = sum(x[2] for x in files if x[2] > 0)
    names = ", ".join(f"`{f[0]}`" for f in files[:SHOWN_FILES])
    more = f" and {len(files) - SHOWN_FILES} more" if len(files) > SHOWN_FILES else ""
    out = [f"  - changes {len(files)} file(s) against the baseline's commit (+{add} -{rem}): "
           f"{names}{more}"]
    hits = _frozen_hits([f[0] for f in files], cfg.source.frozen_paths)
    if hits and verdict is not None:
        out.append(f"  - **changes a frozen path** ({', '.join(f'`{h}`' for h in hits)}): its "
                   "verdict is invalid")
        verdict.verdict = "invalid"
        verdict.reasons.insert(0, f"revision changes {', '.join(hits[:3])}, frozen by "
                               "source.frozen_paths: not a throughput change of the same "
                               "computation")
    return out


def _changed_checkout(cfg: Config, run_dir: Path, repo: Path, started: CodeStarted,
                      verdicts: Sequence[Any]) -> list[str]:
    """A warning (in every verdict too) when the checkout the trials ran in place changed."""
    now = git.git_state(repo, exclude=not_code(cfg, run_dir))
    if (now.commit, now.diff_sha256) == (started.get("commit"), started.get("diff_sha256")):
        return []
    msg = (f"the checkout changed while the trials ran in place (commit "
           f"{str(started.get('commit'))[:12]} -> {str(now.commit)[:12]}, "
           f"{'dirty' if now.dirty else 'clean'}): trials may have run different code")
    log.warning("%s", msg)
    for v in verdicts:
        v.reasons.insert(0, f"WARNING: {msg}")
    return [f"- **WARNING: {msg}**; run a revision sweep (source.revision) to measure fixed "
            "commits"]


def code_section(cfg: Config, run_dir: Path, verdicts: Sequence[Any]) -> list[Section]:
    """decisions.md's "Code" section from code.json: each arm's revision, commit, branch
    and state, the files each revision changes against the baseline's; an arm whose revision
    changes a file of source.frozen_paths becomes invalid (in place), and a checkout that
    changed under trials running in place is flagged."""
    path = run_dir / FILE
    if not path.is_file():
        return []
    try:
        doc: CodeDoc = read_json(path)
    except (OSError, ValueError):
        return []
    arms = doc.get("arms") or {}
    repo = repo_of(cfg)  # the recorded path is sanitized once the campaign ends
    body = [f"- repository: `{doc.get('repo')}`"]
    base_id = next(iter(arms), None)
    by_label = {v.label: v for v in verdicts}
    for arm_id, c in arms.items():
        body.append(_arm_line(c))
        if repo is not None and base_id is not None and arm_id != base_id:
            body += _changes(cfg, repo, arms[base_id], c, by_label.get(c.get("label")))
    body += [f"- a branch moved after the campaign started: {line}"
             for line in doc.get("moved") or []]
    if repo is not None and any(not c.get("worktree") for c in arms.values()):
        body += _changed_checkout(cfg, run_dir, repo, doc.get("started") or {}, verdicts)
    return [Section("Code", body)]
