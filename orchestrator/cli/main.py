"""Command line: Hydra composition in front, plain dataclasses behind.

Before Hydra takes over, every requested configuration is composed once (a pre-flight) so that
a misspelt key, a wrong type or a bad value fails before any work with one line naming the
dotted key and the fix, and exit code 2, instead of a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
import difflib
import itertools
import logging
import os
import re
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from orchestrator.spec import config as cfgmod
from orchestrator.platform import device as devmod
from orchestrator.platform import rundir
from orchestrator.spec.config import Config
from orchestrator.core.errors import ConfigError, Interrupted
from orchestrator.core.paths import conf_dir
from orchestrator.cli.tools._cli import quiet_broken_pipe

log = logging.getLogger("orchestrator")


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))


# --------------------------------------------------------------------------- error translation


def _schema_fields(obj_type: Any) -> list[str]:
    if isinstance(obj_type, type) and dataclasses.is_dataclass(obj_type):
        return [f.name for f in dataclasses.fields(obj_type)]
    return []


def explain(exc: BaseException) -> ConfigError:
    """Turn a Hydra/OmegaConf composition error into a one-line ConfigError."""
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf.errors import (
        ConfigAttributeError,
        ConfigKeyError,
        MissingMandatoryValue,
        OmegaConfBaseException,
        ValidationError,
    )

    if isinstance(exc, ConfigError):
        return exc
    if isinstance(exc, MissingConfigException):
        text = str(exc)
        m = re.search(r"Could not find '([^']+)'", text)
        missing = m.group(1) if m else "?"
        group, _, option = missing.rpartition("/")
        if group:
            opts = group_options(group)
            near = difflib.get_close_matches(option, opts, n=1)
            hint = f" (did you mean {group}={near[0]}?)" if near else ""
            return ConfigError(
                group, f"no option {option!r}{hint}; choose one of: {', '.join(opts) or 'none'}"
            )
        return ConfigError(missing, "config not found")
    if isinstance(exc, OverrideParseException):
        hint = quote_hint(getattr(exc, "override", "") or "")
        return ConfigError("override", f"cannot parse: {str(exc).splitlines()[0]}"
                           + (f"; {hint}" if hint else ""))
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, OmegaConfBaseException):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        first = str(exc).strip().splitlines()
        return ConfigError("config", first[0] if first else type(exc).__name__)
    key = getattr(cause, "full_key", None) or "config"
    obj_type = getattr(cause, "object_type", None)
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)):
        fields = _schema_fields(obj_type)
        leaf = key.rsplit(".", 1)[-1]
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        near = difflib.get_close_matches(leaf, fields, n=1)
        hint = f"did you mean {parent + '.' if parent else ''}{near[0]}? " if near else ""
        if not fields:  # a free-form mapping (workload.params, env): the key is new
            return ConfigError(key, f"is not set in this config; a new key needs a leading +: "
                               f"+{key}=VALUE")
        valid = f"valid keys{' under ' + parent if parent else ''}: {', '.join(fields)}"
        return ConfigError(key, f"unknown key; {hint}{valid}")
    if isinstance(cause, MissingMandatoryValue):
        return ConfigError(key, f"is required; set it with {key}=VALUE")
    if isinstance(cause, ValidationError):
        msg = str(cause).strip().splitlines()[0]
        choice = re.match(r"Invalid value '(.*)', expected one of \[(.*)\]", msg)
        if choice:  # a Choice field (orchestrator.spec.config)
            return ConfigError(key, f"{choice.group(1)!r} is not a valid choice; choose one of: "
                               f"{choice.group(2)}")
        return ConfigError(key, f"{msg}; fix the value's type")
    return ConfigError(key, str(cause).strip().splitlines()[0])


# characters Hydra's override grammar refuses in an unquoted value (its lexer stops at them:
# "LexerNoViableAltException"), though a git revision (HEAD~1, main^2), a path (~/data) or a
# shell-like string may well hold them; quoted, a value may hold anything
_UNQUOTABLE = "~^#!&;<>`'\"(){}="


def quote_hint(override: str) -> str:
    """How to write ``override`` so that Hydra parses it, when an unquoted value holds a
    character the grammar refuses (``sweep.baseline=HEAD~1`` -> ``'sweep.baseline="HEAD~1"'``,
    the outer quotes for the shell); "" when that is not why it failed."""
    key, eq, value = override.partition("=")
    if not eq or not value or value[0] in "'\"":
        return ""
    plain = re.sub(r"\$\{[^}]*\}", "", value)  # ${...}: an interpolation, braces allowed
    bad = sorted({c for c in plain if c in _UNQUOTABLE})
    if not bad:
        return ""

    def quoted(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    if value.startswith("[") and value.endswith("]"):  # a list: quote the elements that need it
        items = [x.strip() for x in value[1:-1].split(",")]
        fixed = "[" + ",".join(quoted(x) if any(c in x for c in bad) else x for x in items) + "]"
    else:
        fixed = quoted(value)
    chars = " ".join(repr(c) for c in bad)
    return (f"Hydra's grammar takes {chars} only in a quoted value: write "
            f"{shlex.quote(key + '=' + fixed)} (the outer quotes keep the shell from removing "
            "the inner ones)")


# --------------------------------------------------------------------------- composition


# Hydra's flags: those that only print (no composition) and those that take a value
_PRINT_ONLY = ("--help", "-h", "--hydra-help", "--version", "--shell-completion", "-sc")
_WITH_VALUE = ("--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn",
               "--cfg", "-c", "--package", "-p", "--experimental-rerun")


@dataclass
class Args:
    """The command line, read the way Hydra reads it: overrides, -m, and Hydra's own flags."""

    overrides: list[str] = dataclasses.field(default_factory=list)
    multirun: bool = False
    print_only: bool = False  # --help, --version ...: nothing is composed or run
    prints: bool = False  # --cfg, --info, --resolve: composed and printed, nothing run
    config_dirs: list[str] = dataclasses.field(default_factory=list)
    flags: dict[str, str | None] = dataclasses.field(default_factory=dict)


def parse_args(argv: list[str]) -> Args:
    a = Args()
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, val = arg.partition("=")
        if arg in ("-m", "--multirun"):
            a.multirun = True
        elif arg in _PRINT_ONLY or name in _PRINT_ONLY:
            a.print_only = True
        elif arg.startswith("-") and (name in _WITH_VALUE):
            if not eq:
                if i + 1 >= len(argv):
                    raise ConfigError(arg, "needs a value")
                i += 1
                val = argv[i]
            a.flags[name] = val
            if name in ("--config-dir", "-cd"):
                a.config_dirs.append(val)
            if name in ("--cfg", "-c"):
                a.prints = True
        elif arg.startswith("-"):
            a.flags[name] = val if eq else None
            if name in ("--info", "-i", "--resolve"):
                a.prints = True
        else:
            a.overrides.append(arg)
        i += 1
    return a


def _split_args(argv: list[str]) -> tuple[list[str], bool, bool]:
    """(overrides, multirun, hydra_flag): whether any of Hydra's own flags is given."""
    a = parse_args(argv)
    return a.overrides, a.multirun, bool(a.flags) or a.print_only


def _expand(overrides: list[str]) -> list[list[str]]:
    """Every combination a multirun would run (Hydra's basic sweeper, Cartesian product)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as exc:  # noqa: BLE001 - Hydra's parse errors, one line with the fix
        raise explain(exc) from None
    axes = []
    for o in parsed:
        if o.is_sweep_override():
            vals = list(o.sweep_string_iterator())
            axes.append([f"{o.get_key_element()}={v}" for v in vals])
        else:
            axes.append([str(o.input_line)])
    return [list(c) for c in itertools.product(*axes)]


def to_config(cfg: Any, need_sweep: bool = True) -> Any:
    """The composed DictConfig as validated plain dataclasses (crosses the boundary once);
    ``need_sweep=False`` for a workload alone (``python -m orchestrator.baseline init``)."""
    from omegaconf import OmegaConf

    # start-up cost: every recipe schema, hardware registry, launcher check; --help needs none
    from orchestrator.spec.ledger import apply_baseline
    from orchestrator.campaign.validate import validate

    try:
        obj = OmegaConf.to_object(cfg)
    except Exception as exc:
        raise explain(exc) from None
    if isinstance(obj, dict):  # a conf dir without the schema default
        raise ConfigError("config", "config.yaml must list base_config in its defaults")
    assert isinstance(obj, Config)
    if obj.sweep is None and need_sweep:
        raise ConfigError(
            "sweep", f"no sweep selected; add +sweep=NAME, one of: {', '.join(group_options('sweep'))}"
        )
    apply_baseline(obj)  # baseline=latest|vN: the version's overrides, before the sweep's arms
    validate(obj)
    return obj


_REGISTERED: list[tuple[int, tuple[tuple[str, int], ...]]] = []  # what register_configs stored


def register_configs() -> None:
    """Register every schema with Hydra's ConfigStore (idempotent): the core groups, and one
    ``schema/workload/<kind>`` per registered workload kind (each recipe's own schema). Done
    once per store and set of schemas: turning the dataclasses into configs is a quarter of a
    composition's time (Hydra deep-copies what it loads, so the stored nodes stay as stored)."""
    from hydra.core.config_store import ConfigStore

    from recipes.registry import workload_kinds  # start-up cost: every recipe schema

    cs = ConfigStore.instance()
    key = (id(cs), tuple((k, id(cfgmod.WORKLOAD_SCHEMAS[k])) for k in workload_kinds()))
    if key in _REGISTERED:
        return
    cs.store(name="base_config", node=cfgmod.Config)
    for kind in workload_kinds():
        cs.store(group="schema/workload", name=kind, node=cfgmod.WORKLOAD_SCHEMAS[kind])
    cs.store(group="schema/protocol", name="protocol", node=cfgmod.ProtocolConfig)
    cs.store(group="schema/invariants", name="invariants", node=cfgmod.InvariantsConfig)
    cs.store(group="schema/sweep", name="sweep", node=cfgmod.SweepConfig)
    cs.store(group="schema/launcher", name="launcher", node=cfgmod.LauncherConfig)
    cs.store(group="schema/hardware", name="hardware", node=cfgmod.HardwareConfig)
    cs.store(group="schema/profile", name="profile", node=cfgmod.ProfileConfig)
    _REGISTERED[:] = [key]


def compose(overrides: list[str], need_sweep: bool = True,
            config_dirs: list[str] | None = None) -> Any:
    """Compose and validate one configuration (tests, notebooks, pre-flight). ``config_dirs``:
    the user's config directories (``--config-dir``), searched after the shipped ``conf/``."""
    return to_config(compose_raw(overrides, config_dirs), need_sweep)


def compose_raw(overrides: list[str], config_dirs: list[str] | None = None,
                with_hydra: bool = False) -> Any:
    """The composed DictConfig, errors translated (``with_hydra``: the ``hydra`` node too)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_configs()
    GlobalHydra.instance().clear()
    overrides = _with_config_dirs(overrides, config_dirs or [])
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        try:
            return hydra_compose("config", overrides=overrides, return_hydra_config=with_hydra)
        except Exception as exc:
            # a YAML syntax error reaches us without its file: find it (conf/ or the user's)
            for d in [conf_dir(), *user_config_dirs(overrides, config_dirs or [])]:
                for f in sorted(Path(d).rglob("*.yaml")) if Path(d).is_dir() else []:
                    yaml_error(f)
            raise explain(exc) from None


def _with_config_dirs(overrides: list[str], dirs: list[str]) -> list[str]:
    """``--config-dir DIR`` as Hydra applies it: DIR on the config search path."""
    if not dirs:
        return list(overrides)
    out, paths = [], [f"file://{os.path.abspath(d)}" for d in dirs]
    for o in overrides:
        if o.startswith("hydra.searchpath="):
            paths = _searchpath_entries(o) + paths
        else:
            out.append(o)
    quoted = ",".join("'" + p.replace("\\", "\\\\").replace("'", "\\'") + "'" for p in paths)
    return [*out, f"hydra.searchpath=[{quoted}]"]


def _searchpath_entries(override: str) -> list[str]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides([override])[0]
    except Exception as exc:
        raise explain(exc) from None
    value = parsed.value()
    if not isinstance(value, list):
        raise ConfigError("hydra.searchpath", "must be a list, e.g. hydra.searchpath=[file://DIR]")
    return [str(v) for v in value]


def user_config_dirs(overrides: list[str], config_dirs: list[str]) -> list[Path]:
    """The user's own config directories: ``--config-dir`` and ``hydra.searchpath`` file://
    entries (pkg:// entries are packages, not checked here)."""
    dirs = [Path(os.path.abspath(d)) for d in config_dirs]
    for o in overrides:
        if o.startswith("hydra.searchpath="):
            for e in _searchpath_entries(o):
                if e.startswith("file://"):
                    dirs.append(Path(os.path.abspath(e[len("file://"):])))
    return dirs


def check_config_dirs(dirs: list[Path]) -> None:
    """A user's config directory must exist, and no file in it may have a shipped config's
    name: Hydra searches the shipped ``conf/`` first, so such a file would be ignored
    silently. Every YAML file in it must parse (the error names its file and line)."""
    shipped = conf_dir()
    for d in dirs:
        if not d.is_dir():
            raise ConfigError("--config-dir", f"{d} is not a directory; give the directory that "
                              "holds your workload/, sweep/ ... folders")
        for f in sorted(d.rglob("*.yaml")):
            rel = f.relative_to(d)
            if (shipped / rel).is_file():
                stem = rel.with_name(f"{rel.stem}_mine{rel.suffix}")
                raise ConfigError(str(f), f"has the name of a shipped config ({rel}), which "
                                  f"Hydra would read instead of yours; rename it (e.g. {stem}) "
                                  "and select it by its new name")
            yaml_error(f)


def yaml_error(path: Path) -> None:
    """ConfigError naming the file and line of a YAML syntax error in ``path``."""
    import yaml

    try:
        yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(str(path), "is not UTF-8 text; a config file is YAML") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(where, f"YAML error: {what}; fix the file's syntax") from None


def check_device(config: Any) -> None:
    """Refuse an explicitly requested device (``device=musa`` / ``cuda``) this process cannot
    see, before any trial: otherwise every trial fails and the campaign ends in ``invalid``
    verdicts minutes later. ``auto`` and ``cpu`` are not checked (no torch import). Skipped for
    ``launcher=slurm`` (the trials run on compute nodes; the submitting host need not have the
    device) and for the command workload (the external trainer uses the device, in its own
    environment)."""
    if config.device in ("auto", "cpu"):
        return
    if config.launcher.name == "slurm":
        log.warning("device=%s not checked on this host: launcher=slurm runs the trials on the "
                    "compute nodes", config.device)
        return
    if getattr(config.workload, "kind", "") == "command":
        return
    reason = devmod.unavailable_reason(config.device)
    if reason:
        raise ConfigError(
            "device", f"{config.device!r} requested but this process cannot use it: {reason}; "
            "use device=auto (or device=cpu), or run where the device is visible (with "
            "launcher=slurm this check is skipped: the trials run on the compute nodes)")


# the directories Hydra creates for this invocation's run (preflight pins hydra.run.dir)
_MADE_FOR_RUN: dict[str, list[Path]] = {}


def _missing_dirs(path: Path) -> list[Path]:
    out, p = [], path
    while not p.exists() and p != p.parent:
        out.append(p)
        p = p.parent
    return list(reversed(out))


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def run_target(config: Any, hydra_run_dir: str | None) -> tuple[Path | None, bool]:
    """(the run directory a campaign of ``config`` writes, whether it resumes one)."""
    if config.resume:
        return Path(config.resume), True
    if config.run_dir:
        return Path(config.run_dir), False
    return (Path(hydra_run_dir) if hydra_run_dir else None), False


SLURM_PING_TIMEOUT_S = 15.0


def check_launcher(config: Any) -> None:
    """launcher=slurm: sbatch and squeue are on PATH and a controller answers, before any
    work (else every trial would fail to submit, each with a traceback)."""
    import shutil
    import subprocess

    if config.launcher.name != "slurm":
        return
    tools = ["sbatch", "squeue", "scancel"]
    if str(getattr(config.launcher.slurm, "allocation", "per_job")) == "campaign":
        tools += ["salloc", "srun"]  # one allocation, each trial a job step in it
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise ConfigError("launcher", f"slurm: {', '.join(missing)} not on PATH (no Slurm "
                          "client here); run where Slurm is installed, or use launcher=local")
    try:
        proc = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True,
                              timeout=SLURM_PING_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError("launcher", f"slurm: squeue did not answer ({type(exc).__name__}); "
                          "check that slurmctld runs, or use launcher=local") from None
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise ConfigError("launcher", f"slurm: no controller answers (squeue: {why}); start "
                          "slurmctld (or check SLURM_CONF), or use launcher=local")


def preflight(argv: list[str]) -> list[str]:
    """Compose every requested configuration before Hydra runs (the same checks on every
    route: plain overrides, -m, --config-dir, hydra.searchpath), check the run directory each
    campaign would write (writes nothing), and return the overrides that pin Hydra's own run
    directory to it, so that a refusal leaves no directory behind."""
    a = parse_args(argv)
    if a.print_only:
        return []
    for flag in ("--config-path", "-cp", "--config-name", "-cn", "--experimental-rerun"):
        if flag in a.flags:
            raise ConfigError(flag, "is not supported: the primary config is the orchestrator's "
                              "conf/; add your own config files with --config-dir DIR "
                              "(docs/configuration.md)")
    dirs = user_config_dirs(a.overrides, a.config_dirs)
    check_config_dirs(dirs)
    keep = ("hydra.searchpath=", "hydra.run.dir=")
    job_overrides = [o for o in a.overrides
                     if not o.lstrip("+~").startswith("hydra") or o.startswith(keep)]
    combos = _expand(job_overrides) if a.multirun else [job_overrides]
    pins: list[str] = []
    for combo in combos:
        raw = compose_raw(combo, a.config_dirs, with_hydra=not a.multirun)
        hydra_run_dir = None
        if not a.multirun:
            from omegaconf import OmegaConf, open_dict

            hydra_run_dir = str(OmegaConf.select(raw, "hydra.run.dir"))
            with open_dict(raw):
                del raw["hydra"]
        config = to_config(raw)
        check_device(config)
        if a.prints:
            continue
        check_launcher(config)
        if a.prints:
            continue
        target, resume = run_target(config, hydra_run_dir)
        if target is None:
            continue
        rundir.check_target(target, resume=resume)
        if not a.multirun:
            # Hydra makes its run directory before the task runs: the campaign's own, where it
            # is a new one (the directories it makes are removed on a refusal), else the
            # current directory, which exists (a resume or run_dir= makes no other directory)
            if config.resume or config.run_dir:
                if any(o.startswith("hydra.run.dir=") for o in a.overrides):
                    continue  # the user's own choice of Hydra's directory stands
                pin = Path(".")
            else:
                pin = target
                _MADE_FOR_RUN[str(target.absolute())] = _missing_dirs(target.absolute())
            pins = [f"hydra.run.dir={_quote(str(pin))}"]
    return pins


# --------------------------------------------------------------------------- entry


def setup_logging(run_dir: Path | None = None) -> logging.Handler | None:
    """Console logging, plus ``<run_dir>/campaign.log`` when a run dir is given; the file
    handler is returned so that :func:`end_logging` removes it when the campaign ends (in a
    multirun, one process runs several campaigns: each log gets only its own lines)."""
    import logging.handlers

    root = logging.getLogger()
    root.setLevel(logging.INFO)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S")
    if not any(isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
               for h in root.handlers):
        sh = logging.StreamHandler(sys.stderr)
        sh.setFormatter(fmt)
        root.addHandler(sh)
    if run_dir is None:
        return None
    # watched: the seal rewrites campaign.log atomically (a new inode); a line logged after it
    # goes to the new file, not to the orphaned old one
    fh = logging.handlers.WatchedFileHandler(run_dir / "campaign.log", encoding="utf-8")
    fh.setFormatter(fmt)
    root.addHandler(fh)
    return fh


def end_logging(handler: logging.Handler | None, run_dir: Path, config: Any = None,
                arms: Any = ()) -> None:
    """Remove and close the campaign's file handler, then sanitize campaign.log once more (lines
    logged after the campaign's seal, e.g. an error, carry paths too; ``arms``: the campaign's,
    whose env.* values are secrets too)."""
    if handler is None:
        return
    logging.getLogger().removeHandler(handler)
    handler.close()
    path = run_dir / "campaign.log"
    if config is None or not path.is_file():
        return
    try:
        # start-up cost: the sanitizer is needed only once a campaign has run
        from orchestrator.core.sanitize import Sanitizer, reserve_run_dir

        pairs = [(k, v) for a in arms for k, v in a.env.items()]
        sanitizer = Sanitizer.from_config(config.sanitize, environ={**os.environ, **dict(pairs)})
        sanitizer.add_secret_env(pairs)
        reserve_run_dir(run_dir, sanitizer)
        sanitizer.file(path)
    except Exception as exc:  # noqa: BLE001 - the campaign's own outcome stands
        log.warning("campaign.log not re-sanitized: %s: %s", type(exc).__name__, exc)


@contextlib.contextmanager
def signals_interrupt() -> Any:
    """SIGINT and SIGTERM raise :class:`Interrupted` in the main thread, so a campaign stops
    the same way for both (its launchers take their trial processes down) and says how to
    resume. Not inside a Slurm job, whose SIGTERM announces preemption (submitit requeues)."""
    import threading

    if threading.current_thread() is not threading.main_thread() or "SLURM_JOB_ID" in os.environ:
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def resume_command(run_dir: Path) -> str:
    """The command that resumes ``run_dir``: this invocation's arguments, with resume= for
    run_dir= (Hydra's own run directory is pinned by resume= too)."""
    args = [a for a in _ARGV if not a.split("=", 1)[0].lstrip("+~") in ("run_dir", "resume")
            and not a.startswith("hydra.run.dir=")]
    return shlex.join(["python", "-m", "orchestrator", *args, f"resume={run_dir}"])


def _interrupted(exc: KeyboardInterrupt, run_dir: Path) -> int:
    """One line on the console and in campaign.log; the exit code (130 SIGINT, 143 SIGTERM)."""
    # start-up cost: the campaign's record readers, needed only once a campaign ran
    from orchestrator.campaign.resume import completed_on_disk
    from orchestrator.core.results import read_json

    signum = exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)
    try:
        ids = {t.get("trial_id") for t in read_json(run_dir / "plan.json").get("trials", [])}
    except (OSError, ValueError, AttributeError):
        ids = set()
    planned = len(ids)
    # the planned trials only (a pilot, a profiled or a microbenchmark trial is not one)
    done = len(set(completed_on_disk(run_dir)) & ids) if run_dir.is_dir() else 0
    name = signal.Signals(signum).name
    what = (f"interrupted ({name}) after {done} of {planned} trials" if planned
            else f"interrupted ({name}) before the first trial")
    log.error("%s; resume with: %s", what, resume_command(run_dir))
    return 128 + signum


def run_job(cfg: Any) -> Any:
    """Hydra's task function: one campaign. The run directory is claimed (locked) and every
    check of it done before anything is written to it (campaign.log included)."""
    from hydra.core.hydra_config import HydraConfig

    # start-up cost: the campaign imports torch and pandas; --help and the pre-flight do not
    from orchestrator.campaign.run import prepare, run_campaign
    from orchestrator.spec.sweep import resolve_arms

    config = to_config(cfg)
    check_device(config)  # again: a route that skipped the pre-flight (a Python caller)
    target, resume = run_target(config, HydraConfig.get().runtime.output_dir)
    assert target is not None
    run_dir = target
    made = _MADE_FOR_RUN.pop(str(run_dir.absolute()), [])
    claim = rundir.claim(run_dir, resume=resume, made=made)
    handler = None
    arms: Any = ()
    try:
        arms = resolve_arms(config)  # once: the campaign and the log's sanitizer share them
        start = prepare(config, run_dir, arms)
        handler = setup_logging(run_dir)
        log.info("campaign %s on %s -> %s", config.sweep.name, config.workload.name, run_dir)
        try:
            result = run_campaign(config, run_dir, overrides=list(HydraConfig.get().overrides.task),
                                  arms=arms, claim=claim, start=start)
        except KeyboardInterrupt as exc:
            rc = _interrupted(exc, run_dir)
            raise SystemExit(rc) from None
    except ConfigError:
        claim.release(undo=handler is None)  # refused before the first write: nothing stays
        raise
    finally:
        claim.release()
        if handler is not None:
            end_logging(handler, run_dir, config, arms)
    return {"run_dir": str(run_dir), "verdicts": [v.to_dict() for v in result.verdicts]}


_ARGV: list[str] = []


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    try:
        rc = quiet_broken_pipe(lambda: _main(argv))
    except KeyboardInterrupt as exc:  # before a campaign started: nothing to resume
        signum = exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)
        print(f"interrupted ({signal.Signals(signum).name}) before any campaign started",
              file=sys.stderr)
        sys.exit(128 + signum)
    if rc:
        sys.exit(rc)


def _main(argv: list[str]) -> None:
    _ARGV[:] = argv
    pa = parse_args(argv)
    if (pa.print_only or pa.prints) and hasattr(signal, "SIGPIPE"):
        # Hydra's own flags (--help, --cfg, --info) only print, and Hydra reports a
        # BrokenPipeError as a traceback: die of SIGPIPE quietly, as a Unix tool would. Never
        # for a campaign, whose sockets and subprocess pipes must not kill it silently.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    with signals_interrupt():
        try:
            if not pa.multirun:  # a held run directory is refused before Hydra is imported
                for o in pa.overrides:
                    key, eq, value = o.lstrip("+").partition("=")
                    if eq and key in ("run_dir", "resume") and value.strip("'\""):
                        rundir.check_free(Path(value.strip("'\"")), key=key)
            pins = preflight(argv)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(exc.exit_code)

        import hydra

        register_configs()

        @hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
        def _task(cfg: Any) -> Any:
            try:
                return run_job(cfg)
            except ConfigError as exc:
                print(f"error: {exc}", file=sys.stderr)
                sys.exit(exc.exit_code)

        sys.argv = [sys.argv[0], *argv, *pins]
        _task()
