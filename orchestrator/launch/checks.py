"""Launcher settings a type cannot check: one-line errors naming the dotted key and the fix."""

from __future__ import annotations

import os
from typing import Any

from orchestrator.core.errors import ConfigError
from orchestrator.launch.forkserver import START_METHODS, env_switch_reason


def check_affinity(lc: Any) -> None:
    """launcher.cpu_affinity: distinct cores this process may use, not under Slurm."""
    cpus = lc.cpu_affinity
    if cpus is None:
        return
    if lc.name == "slurm":
        raise ConfigError("launcher.cpu_affinity", "Slurm places and binds a job's tasks; "
                          "drop it and bind there (e.g. --cpu-bind in "
                          "launcher.slurm.additional_parameters)")
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    if usable is None:
        raise ConfigError("launcher.cpu_affinity", "this platform cannot pin processes to "
                          "cores; drop launcher.cpu_affinity")
    if not cpus or len(set(cpus)) != len(cpus) or any(
            not isinstance(c, int) or c not in usable for c in cpus):
        raise ConfigError("launcher.cpu_affinity", f"must be distinct cores this process may "
                          f"use ({usable}), got {list(cpus)}; e.g. launcher.cpu_affinity=[0]")


def validate_launcher(cfg: Any) -> None:
    """``cfg`` is a :class:`orchestrator.spec.config.Config`; raises ConfigError on the first problem."""
    lc = cfg.launcher
    world = int(getattr(cfg.workload, "world_size", 1) or 1)
    check_nodes(cfg, world)
    nnodes = max(1, int(getattr(cfg.workload, "nnodes", 1) or 1))
    per_node = world // nnodes
    if getattr(cfg.workload, "kind", "") == "command":  # it starts its own ranks
        world = 1
    if lc.start_method not in START_METHODS:
        raise ConfigError("launcher.start_method",
                          f"{lc.start_method!r} is not a start method; use one of "
                          f"{', '.join(START_METHODS)} (e.g. launcher.start_method=spawn)")
    if lc.start_method == "forkserver" and lc.name == "inline":
        raise ConfigError("launcher.start_method",
                          "forkserver starts trial processes, inline runs them in this one; use "
                          "launcher=local or launcher.start_method=auto")
    if lc.start_method == "forkserver" and lc.name == "slurm":
        raise ConfigError("launcher.start_method",
                          "forkserver is not yet used inside Slurm jobs (a preempted, requeued "
                          "job's forked trial timed out in the local Slurm test); use "
                          "launcher.start_method=auto, which spawns there")
    if lc.start_method == "forkserver" and world > 1:
        raise ConfigError("launcher.start_method",
                          f"forkserver cannot start workload.world_size={world} (each rank is a "
                          "fresh interpreter); use launcher.start_method=auto or spawn")
    check_affinity(lc)
    if lc.devices is not None:
        if len(set(lc.devices)) != len(lc.devices) or any(d < 0 for d in lc.devices):
            raise ConfigError("launcher.devices",
                              f"must be distinct indices >= 0, got {lc.devices}")
        if cfg.device != "cpu" and world > len(lc.devices):
            raise ConfigError(
                "launcher.devices",
                f"workload.world_size={world} needs {world} devices but only {len(lc.devices)} "
                "are listed; list more or lower workload.world_size",
            )
    if lc.name == "inline" and world > 1:
        raise ConfigError(
            "launcher.name",
            f"inline cannot run workload.world_size={world} (one process); use launcher=local",
        )
    s = lc.slurm
    if s.time_limit_min <= 0:
        raise ConfigError("launcher.slurm.time_limit_min", f"must be > 0, got {s.time_limit_min}")
    for key in ("array_parallelism",):
        if getattr(s, key) <= 0:
            raise ConfigError(f"launcher.slurm.{key}", f"must be > 0, got {getattr(s, key)}")
    if s.max_requeue < 0:
        raise ConfigError("launcher.slurm.max_requeue", f"must be >= 0, got {s.max_requeue}")
    if s.gpus_per_node < 0:
        raise ConfigError("launcher.slurm.gpus_per_node", f"must be >= 0, got {s.gpus_per_node}")
    if lc.name == "slurm" and 0 < s.gpus_per_node < per_node:
        raise ConfigError(
            "launcher.slurm.gpus_per_node",
            f"{s.gpus_per_node} < the {per_node} processes per node a trial runs "
            f"(workload.world_size over workload.nnodes={nnodes}): set "
            f"launcher.slurm.gpus_per_node={per_node}",
        )
    reserved = {"ntasks_per_node", "nodes", "array", "job_name", "output", "error"}
    bad = sorted(k for k in s.additional_parameters if str(k).replace("-", "_") in reserved)
    if bad:
        raise ConfigError(
            f"launcher.slurm.additional_parameters.{bad[0]}",
            "is set by the launcher (workload.nnodes nodes, one task per rank); remove it",
        )


def check_nodes(cfg: Any, world: int) -> None:
    """workload.nnodes: the ranks split evenly over the machines, and only where a launcher
    can place them on several (Slurm)."""
    nnodes = max(1, int(getattr(cfg.workload, "nnodes", 1) or 1))
    if nnodes == 1:
        return
    if cfg.launcher.name != "slurm":
        raise ConfigError("workload.nnodes", f"{nnodes} machines per trial need launcher=slurm "
                          f"(launcher={cfg.launcher.name} runs every process on this one); set "
                          "launcher=slurm, or workload.nnodes=1")
    if world % nnodes:
        raise ConfigError("workload.world_size", f"{world} ranks do not split evenly over "
                          f"workload.nnodes={nnodes}; set workload.world_size to a multiple "
                          f"of {nnodes} (the ranks per node times the nodes)")


def validate_start_method(cfg: Any, env_names: list[str]) -> None:
    """``launcher.start_method=forkserver`` with arms whose ``env.*`` switches torch reads when
    imported (those trials must spawn): refused, naming the switch."""
    why = env_switch_reason(env_names)
    if cfg.launcher.start_method == "forkserver" and why:
        raise ConfigError("launcher.start_method",
                          f"forkserver cannot honour it: {why}; use launcher.start_method=auto "
                          "(spawns them, saying why) or spawn")
