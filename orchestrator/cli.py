"""Command line: Hydra composition in front, plain dataclasses behind.

Before Hydra takes over, every requested configuration is composed once (a pre-flight) so that
a misspelt key, a wrong type or a bad value fails before any work with one line naming the
dotted key and the fix, and exit code 2, instead of a traceback.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import logging
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

from orchestrator import config as cfgmod
from orchestrator import device as devmod
from orchestrator.config import Config
from orchestrator.errors import ConfigError
from orchestrator.paths import conf_dir
from orchestrator.tools._cli import quiet_broken_pipe

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
        return ConfigError("override", f"cannot parse: {str(exc).splitlines()[0]}")
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
        valid = f"valid keys{' under ' + parent if parent else ''}: {', '.join(fields)}"
        return ConfigError(key, f"unknown key; {hint}{valid}")
    if isinstance(cause, MissingMandatoryValue):
        return ConfigError(key, f"is required; set it with {key}=VALUE")
    if isinstance(cause, ValidationError):
        msg = str(cause).strip().splitlines()[0]
        return ConfigError(key, f"{msg}; fix the value's type")
    return ConfigError(key, str(cause).strip().splitlines()[0])


# --------------------------------------------------------------------------- composition


def _split_args(argv: list[str]) -> tuple[list[str], bool, bool]:
    """(overrides, multirun, hydra_flag): hydra's own flags (--help, --cfg ...) skip pre-flight."""
    overrides, multirun, other = [], False, False
    for a in argv:
        if a in ("-m", "--multirun"):
            multirun = True
        elif a.startswith("-"):
            other = True
        else:
            overrides.append(a)
    return overrides, multirun, other


def _expand(overrides: list[str]) -> list[list[str]]:
    """Every combination a multirun would run (Hydra's basic sweeper, Cartesian product)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    axes = []
    for o in parsed:
        if o.is_sweep_override():
            vals = list(o.sweep_string_iterator())
            axes.append([f"{o.get_key_element()}={v}" for v in vals])
        else:
            axes.append([o.input_line])
    return [list(c) for c in itertools.product(*axes)]


def to_config(cfg: Any, need_sweep: bool = True) -> Any:
    """The composed DictConfig as validated plain dataclasses (crosses the boundary once);
    ``need_sweep=False`` for a workload alone (``python -m orchestrator.baseline init``)."""
    from omegaconf import OmegaConf

    # start-up cost: every recipe schema, hardware registry, launcher check; --help needs none
    from orchestrator.baseline.ledger import apply_baseline
    from orchestrator.validate import validate

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


def register_configs() -> None:
    """Register every schema with Hydra's ConfigStore (idempotent): the core groups, and one
    ``schema/workload/<kind>`` per registered workload kind (each recipe's own schema)."""
    from hydra.core.config_store import ConfigStore

    from recipes.registry import workload_kinds  # start-up cost: every recipe schema

    cs = ConfigStore.instance()
    cs.store(name="base_config", node=cfgmod.Config)
    for kind in workload_kinds():
        cs.store(group="schema/workload", name=kind, node=cfgmod.WORKLOAD_SCHEMAS[kind])
    cs.store(group="schema/protocol", name="protocol", node=cfgmod.ProtocolConfig)
    cs.store(group="schema/invariants", name="invariants", node=cfgmod.InvariantsConfig)
    cs.store(group="schema/sweep", name="sweep", node=cfgmod.SweepConfig)
    cs.store(group="schema/launcher", name="launcher", node=cfgmod.LauncherConfig)
    cs.store(group="schema/hardware", name="hardware", node=cfgmod.HardwareConfig)
    cs.store(group="schema/profile", name="profile", node=cfgmod.ProfileConfig)


def compose(overrides: list[str], need_sweep: bool = True) -> Any:
    """Compose and validate one configuration (tests, notebooks, pre-flight)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        try:
            cfg = hydra_compose("config", overrides=overrides)
        except Exception as exc:
            raise explain(exc) from None
    return to_config(cfg, need_sweep)


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


def preflight(argv: list[str]) -> None:
    overrides, multirun, other = _split_args(argv)
    if other:
        return
    job_overrides = [o for o in overrides if not o.lstrip("+~").startswith("hydra")]
    combos = _expand(job_overrides) if multirun else [job_overrides]
    for combo in combos:
        check_device(compose(combo))


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
        from orchestrator.sanitize import Sanitizer, reserve_run_dir

        pairs = [(k, v) for a in arms for k, v in a.env.items()]
        sanitizer = Sanitizer.from_config(config.sanitize, environ={**os.environ, **dict(pairs)})
        sanitizer.add_secret_env(pairs)
        reserve_run_dir(run_dir, sanitizer)
        sanitizer.file(path)
    except Exception as exc:  # noqa: BLE001 - the campaign's own outcome stands
        log.warning("campaign.log not re-sanitized: %s: %s", type(exc).__name__, exc)


def run_job(cfg: Any) -> Any:
    """Hydra's task function: one campaign."""
    from hydra.core.hydra_config import HydraConfig

    # start-up cost: the campaign imports torch and pandas; --help and the pre-flight do not
    from orchestrator.campaign import run_campaign
    from orchestrator.sweep import resolve_arms

    config = to_config(cfg)
    check_device(config)  # again: Hydra's own flags (--config-dir ...) skip the pre-flight
    if config.resume:
        run_dir = Path(config.resume)
        if not (run_dir / "plan.json").exists():
            raise ConfigError("resume", f"{run_dir} is not a campaign run directory (no plan.json)")
    elif config.run_dir:
        run_dir = Path(config.run_dir)
    else:
        run_dir = Path(HydraConfig.get().runtime.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    arms = resolve_arms(config)  # once: the campaign and the log's sanitizer share them
    handler = setup_logging(run_dir)
    try:
        log.info("campaign %s on %s -> %s", config.sweep.name, config.workload.name, run_dir)
        result = run_campaign(config, run_dir, overrides=list(HydraConfig.get().overrides.task),
                              arms=arms)
    finally:
        end_logging(handler, run_dir, config, arms)
    return {"run_dir": str(run_dir), "verdicts": [v.to_dict() for v in result.verdicts]}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    rc = quiet_broken_pipe(lambda: _main(argv))
    if rc:
        sys.exit(rc)


def _main(argv: list[str]) -> None:
    if _split_args(argv)[2] and hasattr(signal, "SIGPIPE"):
        # Hydra's own flags (--help, --cfg, --info) only print, and Hydra reports a
        # BrokenPipeError as a traceback: die of SIGPIPE quietly, as a Unix tool would. Never
        # for a campaign, whose sockets and subprocess pipes must not kill it silently.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        preflight(argv)
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

    sys.argv = [sys.argv[0], *argv]
    _task()
