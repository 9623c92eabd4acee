"""Provenance of a run directory: the source it ran (source.txt, source.diff) and the command
that started it (command.txt).

``source.txt`` names the git commit, branch and dirty flag of the orchestrator's source tree and
the versions of the installed orchestrator and recipes; when the tree is dirty, ``source.diff``
holds ``git diff HEAD`` plus the untracked files, and source.txt its SHA-256. ``command.txt``
holds the exact command line, the Hydra overrides, the launcher and its parameters, and the
environment switches the sweep sets on each arm. A resumed campaign appends its own command.

Formatting is pure (:func:`source_text`, :func:`command_text`); git is asked through
:func:`orchestrator.platform.git.git_state`. Files are written atomically; the campaign sanitizes
them with everything else in the run directory.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orchestrator
from orchestrator.core.section import Section
from orchestrator.core.convert import to_dict
from orchestrator.platform.env_record import EnvironmentReport
from orchestrator.platform.environment import compare, fingerprint, gather
from orchestrator.core.trial_record import Fingerprint, TrialRecordDict
from orchestrator.core.errors import ConfigError
from orchestrator.core.results import atomic_write_json, atomic_write_text, read_json
from orchestrator.core.sanitize import Sanitizer, reserve_run_dir, sanitize_run_dir
from orchestrator.platform.git import MAX_UNTRACKED_BYTES, GitState, git_state
from recipes.registry import REGISTRY

log = logging.getLogger(__name__)


def package_versions(recipes: Sequence[str] = ()) -> dict[str, str]:
    """Installed versions of the orchestrator and of the modules the recipes come from."""
    from importlib import metadata

    out: dict[str, str] = {}
    try:
        out["throughput-orchestrator"] = metadata.version("throughput-orchestrator")
    except metadata.PackageNotFoundError:
        out["throughput-orchestrator"] = f"{orchestrator.__version__} (from source, not installed)"
    dists = metadata.packages_distributions()
    for name in recipes:
        target = REGISTRY.get(name, name)
        top = target.partition(":")[0].split(".")[0]
        names = dists.get(top) or []
        if names:
            try:
                out[f"recipe {name}"] = f"{top} from {names[0]} {metadata.version(names[0])}"
                continue
            except metadata.PackageNotFoundError:
                pass
        out[f"recipe {name}"] = f"{target} (module not installed as a distribution)"
    return out


def source_text(st: GitState, versions: dict[str, str], diff_sha256: str | None) -> str:
    lines = [
        f"commit: {st.commit or 'unknown'}",
        f"branch: {st.branch or ('detached' if st.commit else 'unknown')}",
        f"dirty: {'unknown' if st.dirty is None else str(st.dirty).lower()}",
    ]
    if st.error:
        lines.append(f"git_error: {st.error}")
    if st.dirty:
        lines.append(f"source_diff: source.diff (git diff HEAD plus {len(st.untracked)} untracked "
                     f"file(s)); sha256 of the diff as git produced it: {diff_sha256}")
        lines.append("source_diff_note: the file is sanitized like every artifact; where "
                     "sanitizing changed it, its own hash differs from the one above")
        if st.skipped:
            lines.append(f"untracked_not_included: {', '.join(st.skipped)} "
                         f"(over {MAX_UNTRACKED_BYTES} bytes or not a file)")
    for k, v in versions.items():
        lines.append(f"version {k}: {v}")
    return "\n".join(lines) + "\n"


def write_source(run_dir: Path, recipes: Sequence[str] = (),
                 code_lines: Sequence[str] = ()) -> GitState:
    """source.txt (+ source.diff when the tree is dirty) for the orchestrator's source tree;
    ``code_lines``: the user's code per arm (orchestrator.campaign.revisions.source_lines)."""
    st = git_state(Path(__file__).resolve().parent, exclude=[run_dir])
    sha = st.diff_sha256
    try:
        versions = package_versions(recipes)
    except Exception as exc:  # metadata of a broken install: recorded, not fatal
        versions = {"error": f"{type(exc).__name__}: {exc}"}
    text = source_text(st, versions, sha)
    if code_lines:
        text += "".join(f"{line}\n" for line in code_lines)
    atomic_write_text(run_dir / "source.txt", text)
    if st.dirty:
        atomic_write_text(run_dir / "source.diff", st.diff)
    elif (run_dir / "source.diff").exists():
        (run_dir / "source.diff").unlink()  # a resume from a clean tree: no stale diff
    return st


@dataclass
class Command:
    """How the campaign was started."""

    argv: list[str]
    overrides: list[str]
    launcher: dict[str, Any]
    arm_env: dict[str, dict[str, str]]  # arm label -> environment switches it sets
    executable: str = field(default_factory=lambda: sys.executable)


def command_text(cmd: Command, when: str) -> str:
    lines = [
        f"# started {when}",
        f"command: {shlex.join([Path(cmd.executable).name, *cmd.argv])}",
        f"argv: {shlex.join(cmd.argv)}",
        f"python: {cmd.executable}",
        "hydra_overrides:" + ("" if cmd.overrides else " (none)"),
        *[f"  {o}" for o in cmd.overrides],
        f"launcher: {cmd.launcher.get('name')}",
        *[f"  {k}: {v}" for k, v in cmd.launcher.items() if k != "name"],
        "sweep_environment_switches:" + ("" if any(cmd.arm_env.values()) else " (none)"),
    ]
    for label, env in cmd.arm_env.items():
        if env:
            lines.append(f"  {label}: " + " ".join(f"{k}={shlex.quote(v)}"
                                                  for k, v in sorted(env.items())))
    return "\n".join(lines) + "\n"


def write_command(run_dir: Path, cmd: Command) -> None:
    """command.txt; a resumed campaign appends its command after the first one."""
    when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    path = run_dir / "command.txt"
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    new = command_text(cmd, when)
    atomic_write_text(path, (old + "\n# resumed\n" + new) if old else new)


# --------------------------------------------------------------------------- campaign glue


def _fp(rec: TrialRecordDict) -> Fingerprint | None:
    """A record's fingerprint; records collected through pandas carry NaN where it is absent."""
    fp = rec.get("environment")
    return fp if isinstance(fp, dict) else None


def recipes_of(cfg: Any, arms: Sequence[Any]) -> list[str]:
    names = {cfg.workload.recipe}
    names |= {a.overrides["workload.recipe"] for a in arms if "workload.recipe" in a.overrides}
    return sorted(names)


def check_resume_environment(cfg: Any, run_dir: Path, records: Sequence[TrialRecordDict]) -> None:
    """Before a resume runs anything: refuse when this machine differs from the trials already
    in the run directory (device, driver, torch, library versions), unless on_mismatch=flag."""
    prior = [(str(r["trial_id"]), _fp(r)) for r in records if _fp(r)]
    if not prior:
        return
    here = fingerprint(cfg.device)
    diff = compare([*prior, ("this process", here)])
    if not diff:
        return
    what = "; ".join(diff)
    if cfg.environment.on_mismatch == "flag":
        log.warning("ENVIRONMENT MISMATCH: resuming %s on a different environment (%s); the "
                    "verdicts will be flagged", run_dir.name, what)
        return
    raise ConfigError(
        "environment.on_mismatch",
        f"refusing to resume: this environment differs from the trials already measured "
        f"({what}); resume where they ran, start a new run directory, or set "
        "environment.on_mismatch=flag to mix them with a warning",
    )


def env_switches_by_arm(arms: Sequence[Any], records: Sequence[TrialRecordDict]) -> dict[str, dict[str, str]]:
    """arm label -> the env.* switches it sets, from the sweep's arms (and, for arms only the
    trials know, such as the A/A control, from their records)."""
    out = {a.label: dict(a.env) for a in arms}
    for rec in sorted(records, key=lambda r: r.get("position", 0)):
        label = rec.get("arm_label")
        if label is not None and label not in out and isinstance(rec.get("env"), dict):
            out[str(label)] = {str(k): str(v) for k, v in rec["env"].items()}
    return out


def write_environment(run_dir: Path, records: Sequence[TrialRecordDict], device: str,
                      arm_env: dict[str, dict[str, str]] | None = None) -> str:
    """run_dir/environment.json: the report of the earliest trial that wrote one (gathered in a
    trial process); when none did, one gathered here and labelled so. Returns where it came
    from. The report is gathered once, in one arm's trial; ``arm_env`` (every arm's env.*
    switches) is added as ``env_switches_by_arm`` so an environment-switch sweep shows each
    arm's value, not only the reporting arm's."""
    def extra(report: EnvironmentReport, arm: Any) -> EnvironmentReport:
        if arm_env is not None:
            report["env_switches_by_arm"] = arm_env
            if arm is not None:
                report["source_arm"] = arm
            if any(arm_env.values()):
                report["env_switches_note"] = (
                    "the environment above was read in one arm's trial process (source_arm); "
                    "each arm's trials ran with their own switches, listed in env_switches_by_arm")
        return report

    for rec in sorted(records, key=lambda r: r.get("position", 0)):
        src = run_dir / "trials" / str(rec.get("trial_id")) / "environment.json"
        if rec.get("environment_report") == "environment.json" and src.is_file():
            try:
                report = read_json(src)
            except (OSError, ValueError):
                continue
            report["source_trial"] = rec["trial_id"]
            atomic_write_json(run_dir / "environment.json", extra(report, rec.get("arm_label")))
            return f"trial {rec['trial_id']}"
    if (run_dir / "environment.json").is_file():
        if arm_env is not None:
            try:
                report = read_json(run_dir / "environment.json")
                atomic_write_json(run_dir / "environment.json", extra(report, report.get("source_arm")))
            except (OSError, ValueError):
                pass
        return "an earlier invocation"
    report = gather(device, gathered_in="orchestrator process (no trial process reported one)")
    atomic_write_json(run_dir / "environment.json", extra(report, None))
    return "the orchestrator process"


def environment_section(
    cfg: Any, run_dir: Path, records: Sequence[TrialRecordDict], verdicts: Sequence[Any],
    git: GitState | None = None, arms: Sequence[Any] = (),
) -> Section:
    """Write environment.json, apply the mismatch policy to ``verdicts`` (in place) and return
    the decisions.md section that says where everything came from. ``arms``: the campaign's
    arms (their env.* switches are listed per arm)."""
    arm_env = env_switches_by_arm(arms, records) if arms else None
    source = write_environment(run_dir, records, cfg.device, arm_env)
    diff = compare([(str(r["trial_id"]), _fp(r)) for r in records if _fp(r)])
    body = [f"- environment report: `environment.json` (gathered in {source})"]
    if arm_env and any(arm_env.values()):
        body.append("- environment switches per arm (`env_switches_by_arm` in environment.json): "
                    + "; ".join(f"`{label}`: " + (", ".join(f"{k}={v}" for k, v in env.items())
                                                   or "none") for label, env in arm_env.items()))
    if git is not None:
        state = "dirty, see `source.diff`" if git.dirty else "clean" if git.dirty is False \
            else "unknown"
        body.append(f"- source: commit `{(git.commit or 'unknown')[:12]}` ({state}); "
                    "`source.txt`; command and overrides: `command.txt`")
    missing = sum(1 for r in records if not _fp(r))
    if missing:
        body.append(f"- {missing} trial(s) died before reporting their environment")
    if not diff:
        body.append("- every trial that reported its environment ran on the same device, "
                    "driver, torch and library versions")
        return Section("Provenance", body)
    refuse = cfg.environment.on_mismatch == "refuse"
    log.error("ENVIRONMENT MISMATCH across trials: %s", "; ".join(diff))
    body.append("- **ENVIRONMENT MISMATCH: trials ran on different environments; their times "
                "are not comparable.** Differing facts:")
    body += [f"  - {d}" for d in diff]
    if refuse:
        body.append("- every verdict is **invalid** (environment.on_mismatch=refuse)")
        for v in verdicts:
            v.verdict = "invalid"
            v.reasons.insert(0, "trials ran in differing environments (see Provenance)")
    else:
        body.append("- verdicts kept as computed (environment.on_mismatch=flag): read them "
                    "with care")
        for v in verdicts:
            v.reasons.insert(0, "WARNING: trials ran in differing environments")
    return Section("Provenance", body)


@dataclass
class Session:
    """What a campaign invocation keeps for its provenance: one sanitizer for the whole run
    directory (stable placeholders) and the git state it recorded."""

    sanitizer: Any
    git: GitState | None = None

    def sanitize_trial(self, trial_dir: Path) -> None:
        """A finished trial's files (stderr tail, logs, record) as soon as it is recorded."""
        for p in sorted(trial_dir.glob("*")):
            if p.is_file() and not p.name.endswith(".tmp"):
                try:
                    self.sanitizer.file(p)
                except OSError as exc:
                    log.warning("could not sanitize %s: %s", p.name, exc)

    def sanitize_files(self, run_dir: Path, names: Sequence[str]) -> None:
        for name in names:
            if (run_dir / name).is_file():
                self.sanitizer.file(run_dir / name)

    def seal(self, run_dir: Path) -> None:
        """The last step of a campaign: every file of the run directory sanitized."""
        changed = sanitize_run_dir(run_dir, self.sanitizer)
        log.debug("sanitized %d file(s) in %s", len(changed), run_dir.name)


def _argv(argv: Sequence[str]) -> list[str]:
    """sys.argv with ``.../orchestrator/__main__.py`` shown as ``-m orchestrator``."""
    out = list(argv)
    if out and Path(out[0]).name == "__main__.py":
        out[0:1] = ["-m", Path(out[0]).parent.name]
    return out


def start(cfg: Any, run_dir: Path, arms: Sequence[Any], records: Sequence[TrialRecordDict],
          overrides: Sequence[str] | None = None, code_lines: Sequence[str] = ()) -> Session:
    """Before any trial, once the campaign's checks passed (a resume on a different
    environment is refused by :func:`check_resume_environment` before this): write source.txt
    (+ source.diff) and command.txt."""
    # the arms' env.* switches reach the trial processes only: their secret values count too
    arm_env = {k: v for a in arms for k, v in a.env.items()}
    sanitizer = Sanitizer.from_config(cfg.sanitize, environ={**os.environ, **arm_env})
    sanitizer.add_secret_env((k, v) for a in arms for k, v in a.env.items())  # every arm's value
    reserve_run_dir(run_dir, sanitizer)
    git = write_source(run_dir, recipes_of(cfg, arms), code_lines)
    cmd = Command(
        argv=_argv(sys.argv),
        overrides=list(overrides) if overrides is not None
        else ["(started from Python, not the command line: see config.json)"],
        launcher=to_dict(cfg.launcher),
        arm_env={a.label: dict(a.env) for a in arms},
    )
    write_command(run_dir, cmd)
    session = Session(sanitizer, git)
    session.sanitize_files(run_dir, ("source.txt", "source.diff", "command.txt"))
    return session
