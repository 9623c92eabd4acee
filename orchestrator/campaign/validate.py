"""Pre-flight validation: the semantic checks a type cannot express.

Composition (Hydra, the schemas of :mod:`orchestrator.spec.config`) catches misspelt keys and wrong
types; :func:`validate` checks what is left, before any work, and raises
:class:`~orchestrator.core.errors.ConfigError` naming the dotted key, the valid choices and the fix.
It stands above everything it asks: the recipes (is the recipe importable, is each arm a valid
workload), the hardware registry, the launcher's settings, the sweep's structure, the protocol's
vocabularies (warm-up policies, speed-reference and compile-cache modes).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from orchestrator.core.records import Pairing
from orchestrator.platform import device as devmod
from orchestrator.spec.bounds import check_numbers, check_spending
from orchestrator.spec.duet import duet_devices_obstacle, duet_length_obstacle
from orchestrator.spec.ledger import check_baseline_arm
from orchestrator.platform.compile_stats import CACHE_MODES
from orchestrator.spec.config import (
    CORRECTNESS_MODES,
    DEVICES,
    LAUNCHERS,
    ON_MISMATCH,
    PRECISIONS,
    PROFILE_MODES,
    TOLERANCE_PRECISIONS,
    Config,
    ProfileConfig,
    ProtocolConfig,
    SweptArm,
    WorkloadConfig,
)
from orchestrator.core.errors import ConfigError, check_finite
from orchestrator.core.errors import check_choice as _choice
from orchestrator.core.errors import check_positive as _positive
from orchestrator.platform.hardware import validate_hardware
from orchestrator.launch.checks import validate_launcher, validate_start_method
from orchestrator.launch.device_probe import DeviceResolved
from orchestrator.campaign import revisions
from orchestrator.platform.slices import duet_slices
from orchestrator.core.reference import MODES as SPEED_REFERENCE_MODES
from orchestrator.core.steady import WARMUP_POLICIES
from orchestrator.spec.sweep import (
    ResolvedArm,
    arm_key,
    check_sweep,
    differing_settings,
    pairing_obstacle,
    resolve_arms,
    selected_buckets,
    shared_log_obstacle,
)
from recipes.registry import REGISTRY, check_import_path


def validate_workload(w: WorkloadConfig) -> None:
    reject_nan(w, "workload")
    if w.recipe not in REGISTRY and ":" not in w.recipe:
        raise ConfigError(
            "workload.recipe",
            f"unknown recipe {w.recipe!r}; choose one of: {', '.join(sorted(REGISTRY))}, "
            "or an import path pkg.module:build",
        )
    if w.recipe not in REGISTRY:
        problem = check_import_path(w.recipe)
        if problem:
            raise ConfigError("workload.recipe", problem)
    _choice("workload.precision", w.precision, PRECISIONS)
    _positive("workload.world_size", w.world_size)
    if not w.buckets:
        raise ConfigError("workload.buckets", "needs at least one bucket (name, seq_len, micro_batch)")
    names = [b.name for b in w.buckets]
    if len(set(names)) != len(names):
        raise ConfigError("workload.buckets", f"bucket names must be unique, got {names}")
    for i, b in enumerate(w.buckets):
        _positive(f"workload.buckets[{i}].seq_len", b.seq_len)
        _positive(f"workload.buckets[{i}].micro_batch", b.micro_batch)
        _positive(f"workload.buckets[{i}].weight", b.weight)
    # every numeric key in its range (orchestrator.spec.bounds) before the kind's own checks,
    # which compute with them (d_model % n_head)
    check_numbers(w, "workload")
    w.validate()  # the kind's own checks (its schema, recipes/<recipe>/config.py)


def validate_correctness(cfg: Config) -> None:
    c = cfg.protocol.correctness
    _choice("protocol.correctness.mode", c.mode, CORRECTNESS_MODES)
    if c.steps < 2:
        raise ConfigError("protocol.correctness.steps", f"must be >= 2 (the checkpoint round "
                          f"trip resumes half-way), got {c.steps}")
    _positive("protocol.correctness.timeout_s", c.timeout_s)
    tols = cfg.invariants.tolerances
    for name, tol in tols.items():
        _choice(f"invariants.tolerances.{name}", name, TOLERANCE_PRECISIONS)
        for f in ("rel_l2", "atol", "rtol", "trajectory_rtol", "update_rel_l2"):
            _positive(f"invariants.tolerances.{name}.{f}", getattr(tol, f), allow_zero=True)
    if c.mode != "off" and cfg.workload.precision not in tols:
        raise ConfigError(
            "invariants.tolerances",
            f"has no entry for workload.precision={cfg.workload.precision}; add "
            f"invariants.tolerances.{cfg.workload.precision} or set protocol.correctness.mode=off",
        )


def reject_nan(obj: Any, key: str) -> None:
    """ConfigError naming the first NaN anywhere under ``obj`` (dataclasses, dicts, lists):
    every range check lets NaN through, since each comparison with it is false."""
    if isinstance(obj, float):
        check_finite(key, obj)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            reject_nan(getattr(obj, f.name), f"{key}.{f.name}" if key else f.name)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            reject_nan(v, f"{key}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            reject_nan(v, f"{key}[{i}]")


def validate(cfg: Config) -> None:
    """Semantic checks a type cannot express. Raises ConfigError on the first problem."""
    reject_nan(cfg, "")
    # every numeric key a finite number of its kind (inf, 2.5 steps), before any check computes
    # with one; their ranges after the checks below, whose messages are more specific
    check_numbers(cfg, ranges=False)
    w = cfg.workload
    if not isinstance(w, WorkloadConfig):
        raise ConfigError("workload", "no workload selected; choose one with workload=NAME")
    _choice("device", cfg.device, DEVICES)
    _choice("launcher.name", cfg.launcher.name, LAUNCHERS)
    validate_workload(w)
    validate_timing(cfg.protocol)
    validate_protocol(cfg.protocol)
    _positive("launcher.max_parallel", cfg.launcher.max_parallel)
    validate_hardware(cfg.hardware)
    _choice("environment.on_mismatch", cfg.environment.on_mismatch, ON_MISMATCH)
    validate_sanitize(cfg)
    cfg.workload.check_selection([b["name"] for b in selected_buckets(cfg)])
    validate_launcher(cfg)
    validate_correctness(cfg)
    validate_profile(cfg.profile)
    # every numeric key in its range (orchestrator.spec.bounds), after the checks above, whose
    # messages are more specific, and before the sweep's arms are resolved and planned
    check_numbers(cfg)
    check_spending(cfg.protocol)
    if cfg.sweep is not None:
        check_sweep(cfg)
        arms = resolve_arms(cfg)
        validate_arms(arms)
        check_lever_sweep(cfg, arms)
        check_baseline_arm(cfg, arms)  # baseline=vN: the baseline arm is the version
        check_pairing(cfg, arms)
        if not _decided_on_a_node(cfg):  # else after the probe: attention_on_resolved_device
            check_attention_arms(cfg, arms)
        revisions.check(cfg, arms)  # source.revision: each arm's commit, read-only


def validate_timing(p: ProtocolConfig) -> None:
    """The protocol's counts, times and levels."""
    _positive("protocol.warmup_steps", p.warmup_steps, allow_zero=True)
    _positive("protocol.measured_steps", p.measured_steps)
    if p.measured_steps < 3:
        raise ConfigError("protocol.measured_steps", "must be >= 3 to give a median with a spread")
    _positive("protocol.measured_min_s", p.measured_min_s, allow_zero=True)
    _positive("protocol.repeats", p.repeats)
    if not 0.5 <= p.confidence < 1:
        raise ConfigError("protocol.confidence", f"must be in [0.5, 1), got {p.confidence}")
    if p.pairing not in Pairing.values():
        raise ConfigError("protocol.pairing", f"must be auto, process, steps or duet, got "
                          f"{p.pairing!r}")
    _positive("protocol.block_steps", p.block_steps)
    _positive("protocol.switch_warmup_steps", p.switch_warmup_steps, allow_zero=True)
    _positive("protocol.paired_min_s", p.paired_min_s, allow_zero=True)
    if not 0 < p.aa_alpha <= 0.5:
        raise ConfigError("protocol.aa_alpha", f"must be in (0, 0.5] (the A/A check's error rate, "
                          f"e.g. 0.01), got {p.aa_alpha}")
    _positive("protocol.min_effect", p.min_effect, allow_zero=True)
    _positive("protocol.trial_timeout_s", p.trial_timeout_s)
    for i, n in enumerate(p.projection_steps):
        _positive(f"protocol.projection_steps[{i}]", n)


def validate_sanitize(cfg: Config) -> None:
    for i, pattern in enumerate(cfg.sanitize.extra_patterns):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"sanitize.extra_patterns[{i}]",
                              f"{pattern!r} is not a valid regular expression ({exc}); "
                              "quote it or escape special characters") from None


def check_pairing(cfg: Config, arms: Sequence[Any]) -> None:
    """protocol.pairing=steps for arms that cannot run so, and protocol.pairing=duet without
    a slice per arm (or with unequal slices), are refused in one line."""
    if cfg.protocol.pairing == Pairing.duet or cfg.protocol.duet_cpus or cfg.protocol.duet_devices:
        if cfg.protocol.pairing == Pairing.duet and not cfg.workload.runs_own_process():
            raise ConfigError("protocol.pairing", f"duet runs each arm as a program of its own "
                              f"on its slice; workload {cfg.workload.name} (kind "
                              f"{cfg.workload.kind!r}) runs inside the trial process: use "
                              "process or steps (or a command workload)")
        # declared slices are checked in form whatever the pairing; their number against the
        # arms where duet is asked for (auto falls back to process when they are too few)
        n = len(arms) + (1 if cfg.protocol.aa_arm else 0) if cfg.protocol.pairing == Pairing.duet else 1
        duet_slices(cfg.protocol, n, cfg.launcher.cpu_affinity)
        if cfg.protocol.pairing == Pairing.duet and cfg.launcher.max_parallel > 1:
            raise ConfigError("launcher.max_parallel", "must be 1 with protocol.pairing=duet: "
                              "a duet takes every slice of the machine")
        clash = (shared_log_obstacle(arms, "a duet's arms run at the same time")
                 or duet_length_obstacle(cfg.protocol)
                 if cfg.protocol.pairing == Pairing.duet else "")
        if clash:
            raise ConfigError("protocol.pairing", f"duet: {clash}")
        # declared device slices this host lacks (where the trials run on this host)
        missing = duet_devices_obstacle(cfg.protocol, cfg.launcher.name, cfg.device)
        if missing:
            raise ConfigError(*missing)
    if cfg.protocol.pairing != Pairing.steps:
        return
    why = pairing_obstacle(arms)
    if why:
        raise ConfigError("protocol.pairing", f"steps: {why}; use protocol.pairing=process "
                          "(or auto, which picks)")


def validate_protocol(p: ProtocolConfig) -> None:
    _choice("protocol.warmup_policy", p.warmup_policy, WARMUP_POLICIES)
    _choice("protocol.clock", p.clock, ("wall", "cpu"))
    _choice("protocol.speed_reference", p.speed_reference, SPEED_REFERENCE_MODES)
    _choice("protocol.compile_cache", p.compile_cache, CACHE_MODES)
    for name in p.cache_env:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ConfigError("protocol.cache_env", f"{name!r} is not an environment variable's "
                              "name; list names such as [MY_KERNEL_CACHE_DIR]")
    _positive("protocol.warmup_window", p.warmup_window)
    _positive("protocol.warmup_tolerance", p.warmup_tolerance)
    if p.warmup_max_steps < p.warmup_steps:
        raise ConfigError("protocol.warmup_max_steps",
                          f"must be >= protocol.warmup_steps ({p.warmup_steps}), got "
                          f"{p.warmup_max_steps}")
    _positive("protocol.max_rounds", p.max_rounds)
    if p.max_rounds < p.repeats:
        # the campaign would run `repeats` rounds anyway: a silent max() hid the contradiction
        raise ConfigError(
            "protocol.max_rounds",
            f"{p.max_rounds} is below protocol.repeats={p.repeats} (the initial rounds); set "
            f"protocol.max_rounds={p.repeats} for a fixed protocol without adaptive rounds, or "
            f"lower protocol.repeats",
        )
    _positive("protocol.adaptive_step_rounds", p.adaptive_step_rounds)
    _positive("protocol.warn_cv", p.warn_cv)
    _positive("protocol.ni_margin", p.ni_margin, allow_zero=True)
    _positive("protocol.alpha_spending", p.alpha_spending, allow_zero=True)
    _positive("protocol.interference_cores", p.interference_cores)


def validate_profile(p: ProfileConfig) -> None:
    _choice("profile.mode", p.mode, PROFILE_MODES)
    _positive("profile.wait_steps", p.wait_steps, allow_zero=True)
    _positive("profile.warmup_steps", p.warmup_steps, allow_zero=True)
    _positive("profile.active_steps", p.active_steps)
    _positive("profile.system_steps", p.system_steps)
    _positive("profile.launch_skip", p.launch_skip, allow_zero=True)
    _positive("profile.launch_count", p.launch_count)
    _positive("profile.tool_timeout_s", p.tool_timeout_s)
    if p.mode == "compute" and not (p.kernel_filter or "").strip():
        raise ConfigError(
            "profile.kernel_filter",
            "required for profile=compute: mcu/ncu replay and serialise every kernel, so an "
            "unfiltered end-to-end capture measures the tool, not throughput; set e.g. "
            "profile.kernel_filter=gemm profile.launch_count=5",
        )


def validate_arms(arms: Sequence[ResolvedArm]) -> None:
    """Every arm of the sweep must still be a valid workload (catches e.g. a misspelt backend
    name); the error names the sweep value that sets the bad key."""
    for arm in arms:
        assert arm.workload_config is not None
        try:
            validate_workload(arm.workload_config)
        except ConfigError as exc:
            raise ConfigError(arm_key(arm), f"arm {arm.label!r} sets {exc.key}: {exc.message}"
                              ) from None


# --------------------------------------------------------------------------- attention arms

def _decided_on_a_node(cfg: Config) -> bool:
    """device=auto with launcher=slurm: resolved on a compute node (a probe job before the
    plan, orchestrator.launch.device_probe), never from this host's devices."""
    return cfg.device == "auto" and cfg.launcher.name == "slurm"


def attention_on_resolved_device(cfg: Config, arms: Sequence[ResolvedArm],
                                 device: DeviceResolved) -> None:
    """The attention pre-flight where device=auto was resolved on a compute node, with the
    node's facts (plan.json's ``device_resolved``); elsewhere :func:`validate` did it."""
    if _decided_on_a_node(cfg):
        check_attention_arms(cfg, arms, target=device.get("attention") or {})

def check_attention_arms(cfg: Config, arms: Sequence[ResolvedArm],
                         target: dict[str, Any] | None = None) -> None:
    """Arms that force an attention kernel (sdpa_kernel other than auto, the flash_attn
    backend) which the device cannot run are refused in one line before any work, on MUSA,
    where torch_musa's selector is known from its source (elsewhere the correctness gate
    finds out). ``target``: the device's facts (default: asked through the device seam, only
    when some arm forces a kernel)."""
    forced = [a for a in arms if a.workload_config is not None
              and a.workload_config.forces_attention_kernel()]
    if not forced:
        return
    target = target if target is not None else devmod.attention_target(cfg.device)
    if not target:
        return
    bad = []
    for arm in forced:
        assert arm.workload_config is not None
        why = arm.workload_config.attention_refusal(target)
        if why:
            bad.append((arm, why))
    if not bad:
        return
    keep = [a.label for a in arms if not a.is_baseline and all(a is not b for b, _ in bad)]
    fix = ("choose another sweep.baseline" if any(a.is_baseline for a, _ in bad) else
           f"drop {', '.join(repr(a.label) for a, _ in bad)} from sweep.values (keeping "
           f"{', '.join(map(repr, keep)) or 'none'})")
    raise ConfigError(arm_key(bad[0][0]), "; ".join(
        f"arm {a.label!r} cannot run on {target['kind']}: {why}" for a, why in bad)
        + f"; {fix}, or run on another device")


# --------------------------------------------------------------------------- levers across the arms


def check_lever_sweep(cfg: Config, arms: Sequence[ResolvedArm]) -> None:
    """Checks that need the protocol or launcher next to the arms; the recipe's own first."""
    if cfg.sweep is not None and all(a.workload_config is not None for a in arms):
        sweep = cfg.sweep
        key = "sweep.variable" if not sweep.knob else f"sweep.knob.{next(iter(sweep.knob))}"
        swept = [SweptArm(a.label, a.workload_config, set(differing_settings(arms[0], a)))
                 for a in arms if a.workload_config is not None]
        cfg.workload.check_arms(cfg.protocol, swept, key, sweep.variable)
    validate_start_method(cfg, [k for a in arms for k in a.env])
    env_swept = any(a.env != arms[0].env for a in arms)
    if env_swept and cfg.launcher.name == "inline" and not cfg.workload.runs_own_process():
        raise ConfigError("launcher.name",
                          "inline runs trials inside this process, where an env.* switch read at "
                          "start-up (threads, allocator) cannot take effect; use launcher=local")
