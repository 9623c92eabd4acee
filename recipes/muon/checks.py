"""Semantic checks of a ``muon_tp`` workload (no torch import: runs in the CLI pre-flight)."""

from __future__ import annotations

from typing import Any, Sequence

from orchestrator.core.errors import ConfigError

# keys of newton_schulz.COEFFICIENT_SETS (kept here: the pre-flight imports no torch)
COEFFICIENT_SETS = ("simple", "quintic", "cubic", "polar_express", "cans")
NS_DTYPES = ("fp32", "bf16")
SCALE_MODES = ("shape_scaling", "spectral", "unit_rms_norm")
TP_MODES = ("duplicated", "distributed", "auto")
COST_PROFILES = ("measured", "registry", "none")
SHARDINGS = ("megatron", "dim0")


def _choice(key: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ConfigError(key, f"{value!r} is not a valid choice; choose one of: {', '.join(choices)}")


def _positive(key: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(key, f"must be > 0, got {value!r}")


def validate_muon_tp(w: Any) -> None:
    m, o, tp = w.model, w.optimizer, w.tp
    if w.precision != "fp32":
        raise ConfigError("workload.precision", "the muon_tp recipe trains in fp32 (Muon state is "
                          "fp32; choose the NS dtype with workload.optimizer.ns_dtype); set fp32")
    _choice("workload.model.sharding", m.sharding, SHARDINGS)
    for key in ("vocab_size", "n_layer", "n_head", "d_model", "d_ff", "d_expert"):
        _positive(f"workload.model.{key}", getattr(m, key))
    if m.n_experts < 0:
        raise ConfigError("workload.model.n_experts", f"must be >= 0, got {m.n_experts}")
    if m.d_model % m.n_head:
        raise ConfigError("workload.model.n_head",
                          f"d_model={m.d_model} must be divisible by n_head={m.n_head}")
    g = w.world_size
    sharded = ["d_model", "d_ff"] + (["d_expert"] if m.n_experts else [])
    for key in sharded:
        if getattr(m, key) % g:
            raise ConfigError(f"workload.model.{key}",
                              f"{getattr(m, key)} must be divisible by workload.world_size={g} "
                              "(the weights are sharded G ways)")
    if o.name != "muon":
        raise ConfigError("workload.optimizer.name", f"{o.name!r}: the muon_tp recipe uses muon")
    _positive("workload.optimizer.lr", o.lr)
    _positive("workload.optimizer.adamw_lr", o.adamw_lr)
    if not 0 <= o.momentum < 1:
        raise ConfigError("workload.optimizer.momentum", f"must be in [0, 1), got {o.momentum}")
    if o.ns_steps < 1:
        raise ConfigError("workload.optimizer.ns_steps", f"must be >= 1, got {o.ns_steps}")
    _positive("workload.optimizer.eps", o.eps)
    _choice("workload.optimizer.coefficients", o.coefficients, COEFFICIENT_SETS)
    _choice("workload.optimizer.ns_dtype", o.ns_dtype, NS_DTYPES)
    _choice("workload.optimizer.scale_mode", o.scale_mode, SCALE_MODES)
    _choice("workload.tp.mode", tp.mode, TP_MODES)
    _choice("workload.tp.cost_profile", tp.cost_profile, COST_PROFILES)
