"""Pre-flight validation: the semantic checks a type cannot express.

Composition (Hydra, the schemas of :mod:`orchestrator.config`) catches misspelt keys and wrong
types; :func:`validate` checks what is left, before any work, and raises
:class:`~orchestrator.errors.ConfigError` naming the dotted key, the valid choices and the fix.
It stands above everything it asks: the recipes (is the recipe importable, is each arm a valid
workload), the hardware registry, the launcher's settings, the sweep's structure, the protocol's
vocabularies (warm-up policies, speed-reference and compile-cache modes).
"""

from __future__ import annotations

import os
import re
import typing
from typing import Any

from orchestrator.compile_stats import CACHE_MODES
from orchestrator.config import (
    ATTENTION_BACKENDS,
    COMPILE_BACKENDS,
    COMPILE_MODES,
    CORRECTNESS_MODES,
    DATA_KINDS,
    DEVICES,
    LAUNCHERS,
    ON_MISMATCH,
    PRECISIONS,
    PROFILE_MODES,
    SDPA_KERNELS,
    TOLERANCE_PRECISIONS,
    CommandWorkloadConfig,
    Config,
    GPTWorkloadConfig,
    LoaderConfig,
    MuonTPWorkloadConfig,
    ProfileConfig,
    ProtocolConfig,
    SyntheticWorkloadConfig,
    WorkloadConfig,
    to_dict,
    workload_from_dict,
)
from orchestrator.errors import ConfigError
from orchestrator.hardware import validate_hardware
from orchestrator.launch.checks import validate_launcher
from orchestrator.logparse import LogParseError, compile_pattern
from orchestrator.reference import MODES as SPEED_REFERENCE_MODES
from orchestrator.steady import WARMUP_POLICIES
from orchestrator.sweep import apply_overrides, check_sweep, expand_arms
from recipes import REGISTRY, check_import_path
from recipes.command.recipe import BUILTINS, template_fields
from recipes.muon.checks import validate_muon_tp


def _choice(key: str, value: Any, choices: typing.Sequence[Any]) -> None:
    if value not in choices:
        raise ConfigError(
            key, f"{value!r} is not a valid choice; choose one of: {', '.join(map(str, choices))}"
        )


def _positive(key: str, value: float, *, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(key, f"must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")


def validate_workload(w: WorkloadConfig) -> None:
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
    if isinstance(w, GPTWorkloadConfig):
        m = w.model
        _choice("workload.model.attention.backend", m.attention.backend, ATTENTION_BACKENDS)
        _choice("workload.model.attention.sdpa_kernel", m.attention.sdpa_kernel, SDPA_KERNELS)
        _positive("workload.model.attention.block_q", m.attention.block_q)
        _positive("workload.model.attention.block_k", m.attention.block_k)
        _positive("workload.model.vocab_size", m.vocab_size)
        _positive("workload.model.n_layer", m.n_layer)
        if not 0 <= m.dropout < 1:
            raise ConfigError("workload.model.dropout", f"must be in [0, 1), got {m.dropout}")
        if m.d_model % m.n_head:
            raise ConfigError(
                "workload.model.n_head",
                f"d_model={m.d_model} must be divisible by n_head={m.n_head}",
            )
        for i, b in enumerate(w.buckets):
            if b.seq_len < 2:
                raise ConfigError(f"workload.buckets[{i}].seq_len", "must be >= 2")
    if isinstance(w, CommandWorkloadConfig) and w.flops_per_step is not None:
        _positive("workload.flops_per_step", w.flops_per_step)
    if isinstance(w, SyntheticWorkloadConfig):
        _positive("workload.matrix_size", w.matrix_size)
        _positive("workload.units_per_token", w.units_per_token)
        if not -0.9 <= w.extra_work_fraction <= 10:
            raise ConfigError("workload.extra_work_fraction",
                              f"must be in [-0.9, 10], got {w.extra_work_fraction}")
        _positive("workload.slow_first_steps", w.slow_first_steps, allow_zero=True)
        _positive("workload.slow_factor", w.slow_factor)
        _positive("workload.epoch_steps", w.epoch_steps, allow_zero=True)
    validate_levers(w)
    if isinstance(w, MuonTPWorkloadConfig):
        validate_muon_tp(w)


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


def validate(cfg: Config) -> None:
    """Semantic checks a type cannot express. Raises ConfigError on the first problem."""
    w = cfg.workload
    if not isinstance(w, WorkloadConfig):
        raise ConfigError("workload", "no workload selected; choose one with workload=NAME")
    _choice("device", cfg.device, DEVICES)
    _choice("launcher.name", cfg.launcher.name, LAUNCHERS)
    validate_workload(w)
    p = cfg.protocol
    _positive("protocol.warmup_steps", p.warmup_steps, allow_zero=True)
    _positive("protocol.measured_steps", p.measured_steps)
    if p.measured_steps < 3:
        raise ConfigError("protocol.measured_steps", "must be >= 3 to give a median with a spread")
    _positive("protocol.measured_min_s", p.measured_min_s, allow_zero=True)
    _positive("protocol.repeats", p.repeats)
    validate_protocol(p)
    if not 0.5 <= p.confidence < 1:
        raise ConfigError("protocol.confidence", f"must be in [0.5, 1), got {p.confidence}")
    _positive("protocol.min_effect", p.min_effect, allow_zero=True)
    _positive("protocol.trial_timeout_s", p.trial_timeout_s)
    _positive("launcher.max_parallel", cfg.launcher.max_parallel)
    validate_hardware(cfg.hardware)
    for i, n in enumerate(p.projection_steps):
        _positive(f"protocol.projection_steps[{i}]", n)
    _choice("environment.on_mismatch", cfg.environment.on_mismatch, ON_MISMATCH)
    for i, pattern in enumerate(cfg.sanitize.extra_patterns):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"sanitize.extra_patterns[{i}]",
                              f"{pattern!r} is not a valid regular expression ({exc}); "
                              "quote it or escape special characters") from None
    if isinstance(w, CommandWorkloadConfig) and w.flops_per_step is not None:
        chosen = [b.name for b in w.buckets
                  if cfg.sweep is None or cfg.sweep.buckets is None or b.name in cfg.sweep.buckets]
        if len(chosen) > 1:
            raise ConfigError(
                "workload.flops_per_step",
                f"is one figure for every bucket, but {len(chosen)} buckets are selected "
                f"({', '.join(chosen)}) and their steps differ in FLOPs; select one with "
                f"sweep.buckets=[{chosen[0]}] (a campaign per bucket), or drop it")
    validate_launcher(cfg)
    validate_correctness(cfg)
    validate_profile(cfg.profile)
    if cfg.sweep is not None:
        check_sweep(cfg)
        validate_arms(cfg)
        check_lever_sweep(cfg)


def validate_protocol(p: ProtocolConfig) -> None:
    _choice("protocol.warmup_policy", p.warmup_policy, WARMUP_POLICIES)
    _choice("protocol.clock", p.clock, ("wall", "cpu"))
    _choice("protocol.speed_reference", p.speed_reference, SPEED_REFERENCE_MODES)
    _choice("protocol.compile_cache", p.compile_cache, CACHE_MODES)
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
    _positive("protocol.adaptive_gain_below", p.adaptive_gain_below, allow_zero=True)
    _positive("protocol.warn_cv", p.warn_cv)
    if p.bootstrap_resamples < 100:
        raise ConfigError("protocol.bootstrap_resamples",
                          f"must be >= 100 for a usable interval, got {p.bootstrap_resamples}")


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


def validate_arms(cfg: Config) -> None:
    """Every arm of the sweep must still be a valid workload (catches e.g. a misspelt backend
    name); the error names the sweep value that sets the bad key."""
    workload = to_dict(cfg.workload)
    for arm in expand_arms(cfg):
        key = "sweep.baseline" if arm.is_baseline else f"sweep.values[{int(arm.arm_id[1:]) - 1}]"
        try:
            validate_workload(workload_from_dict(apply_overrides(workload, arm.overrides)))
        except ConfigError as exc:
            raise ConfigError(key, f"arm {arm.label!r} sets {exc.key}: {exc.message}") from None


# --------------------------------------------------------------------------- levers


def validate_levers(w: WorkloadConfig) -> None:
    if isinstance(w, GPTWorkloadConfig):
        _validate_gpt(w)
    elif isinstance(w, CommandWorkloadConfig):
        _validate_command(w)


def _validate_gpt(w: GPTWorkloadConfig) -> None:
    c = w.model.compile
    _choice("workload.model.compile.mode", c.mode, COMPILE_MODES)
    _choice("workload.model.compile.backend", c.backend, COMPILE_BACKENDS)
    if c.backend != "inductor" and c.mode not in ("off", "default"):
        raise ConfigError("workload.model.compile.mode",
                          f"{c.mode!r} is an inductor mode; with backend={c.backend} use "
                          "mode=default, or set workload.model.compile.backend=inductor")
    if c.mark_dynamic and c.mode == "off":
        raise ConfigError("workload.model.compile.mark_dynamic",
                          "needs torch.compile; set workload.model.compile.mode (e.g. default)")
    d = w.data
    _choice("workload.data.kind", d.kind, DATA_KINDS)
    if not d.text_mib > 0:
        raise ConfigError("workload.data.text_mib", f"must be > 0, got {d.text_mib}")
    if d.text_path is not None and not os.path.isfile(d.text_path):
        raise ConfigError("workload.data.text_path",
                          f"no such file {os.path.basename(d.text_path)!r}; point it at a UTF-8 "
                          "text file (one document per line) or null to generate one")
    lo = w.loader
    if lo.num_workers < 0:
        raise ConfigError("workload.loader.num_workers", f"must be >= 0, got {lo.num_workers}")
    if lo.epoch_batches < 0:
        raise ConfigError("workload.loader.epoch_batches", f"must be >= 0, got {lo.epoch_batches}")
    if lo.num_workers == 0:
        for key in ("prefetch_factor", "persistent_workers"):
            if getattr(lo, key) not in (None, False):
                raise ConfigError(f"workload.loader.{key}",
                                  "needs worker processes; set workload.loader.num_workers > 0")
    if lo.prefetch_factor is not None and lo.prefetch_factor < 1:
        raise ConfigError("workload.loader.prefetch_factor", f"must be >= 1, got {lo.prefetch_factor}")
    if d.kind != "text" and lo != LoaderConfig():
        raise ConfigError("workload.loader",
                          "DataLoader settings apply to the text pipeline; set "
                          "workload.data.kind=text (the synthetic stream has no loader)")


def _validate_command(w: CommandWorkloadConfig) -> None:
    if not w.command.strip():
        raise ConfigError("workload.command", "is empty; give the training command to run")
    clash = sorted(set(w.params) & set(BUILTINS))
    if clash:
        raise ConfigError(f"workload.params.{clash[0]}",
                          f"is a built-in placeholder; rename it (built-ins: {', '.join(BUILTINS)})")
    known = set(BUILTINS) | set(w.params)
    templates = {"workload.command": w.command, "workload.cwd": w.cwd or "",
                 "workload.log.file": w.log.file or "",
                 **{f"workload.env.{k}": str(v) for k, v in w.env.items()}}
    for key, text in templates.items():
        try:
            fields = template_fields(text)
        except ValueError as exc:
            raise ConfigError(key, f"bad template ({exc}); write a literal brace as {{{{ or }}}}") from None
        for name in fields:
            if name not in known:
                raise ConfigError(key, f"unknown placeholder {{{name}}}; declare it under "
                                  f"workload.params or use one of: {', '.join(BUILTINS)}")
    if w.log.pattern is not None:
        try:
            compile_pattern(w.log.pattern)
        except LogParseError as exc:
            raise ConfigError("workload.log.pattern", str(exc)) from None
    if w.log.skip_steps is not None and w.log.skip_steps < 0:
        raise ConfigError("workload.log.skip_steps", f"must be >= 0, got {w.log.skip_steps}")
    if w.time_limit_s is not None and not w.time_limit_s > 0:
        raise ConfigError("workload.time_limit_s", f"must be > 0, got {w.time_limit_s}")
    if w.tokens_per_step is not None and w.tokens_per_step <= 0:
        raise ConfigError("workload.tokens_per_step", f"must be > 0, got {w.tokens_per_step}")
    if w.loss_rtol < 0:
        raise ConfigError("workload.loss_rtol", f"must be >= 0, got {w.loss_rtol}")


def check_lever_sweep(cfg: Config) -> None:
    """Checks that need the protocol or launcher next to the arms."""
    assert cfg.sweep is not None
    arms = expand_arms(cfg)
    base = to_dict(cfg.workload)
    workloads = [workload_from_dict(apply_overrides(base, a.overrides)) for a in arms]
    compiles = any(isinstance(w, GPTWorkloadConfig) and w.model.compile.mode != "off"
                   for w in workloads)
    if compiles and cfg.protocol.warmup_steps < 1:
        raise ConfigError("protocol.warmup_steps",
                          "must be >= 1 when an arm uses torch.compile: the first step compiles, "
                          "and compile time must stay out of the measured steps")
    visiting = [w for w in workloads
                if isinstance(w, GPTWorkloadConfig) and w.model.compile.visit_buckets]
    if visiting and all(w.model.compile.mode == "off" for w in visiting):
        raise ConfigError("workload.model.compile.visit_buckets",
                          "counts the recompiles of other bucket shapes, which needs torch.compile "
                          "in some arm; set workload.model.compile.mode (e.g. default) or drop it")
    env_swept = any(a.env != arms[0].env for a in arms)
    if env_swept and cfg.launcher.name == "inline" and not isinstance(cfg.workload, CommandWorkloadConfig):
        raise ConfigError("launcher.name",
                          "inline runs trials inside this process, where an env.* switch read at "
                          "start-up (threads, allocator) cannot take effect; use launcher=local")
    w = cfg.workload
    if isinstance(w, CommandWorkloadConfig) and w.time_limit_s is not None and (
            w.time_limit_s >= cfg.protocol.trial_timeout_s):
        raise ConfigError("workload.time_limit_s",
                          f"{w.time_limit_s:g} s must be below protocol.trial_timeout_s="
                          f"{cfg.protocol.trial_timeout_s:g} s so the command's log is kept")
