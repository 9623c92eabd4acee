"""The ``muon_tp`` workload's schema (kind ``muon_tp``): a tensor-parallel transformer trained
with Muon, its Newton-Schulz settings and tp_mode, checked by :mod:`recipes.muon.checks`.

The schema registers itself under its kind (no torch here: the pre-flight imports it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from orchestrator.spec.config import Choice, DataConfig, WorkloadConfig, workload_schema
from recipes.muon.checks import (
    COEFFICIENT_SETS,
    COST_PROFILES,
    NS_DTYPES,
    SCALE_MODES,
    SHARDINGS,
    TP_MODES,
    validate_muon_tp,
)



class Sharding(Choice):
    megatron = "megatron"
    dim0 = "dim0"


class Coefficients(Choice):
    simple = "simple"
    quintic = "quintic"
    cubic = "cubic"
    polar_express = "polar_express"
    cans = "cans"


class NsDtype(Choice):
    fp32 = "fp32"
    bf16 = "bf16"


class ScaleMode(Choice):
    shape_scaling = "shape_scaling"
    spectral = "spectral"
    unit_rms_norm = "unit_rms_norm"


class TPMode(Choice):
    duplicated = "duplicated"
    distributed = "distributed"
    auto = "auto"


class CostProfile(Choice):
    measured = "measured"
    registry = "registry"
    none = "none"


# the checks' lists (recipes.muon.checks) and these types name the same values
assert (Sharding.values(), Coefficients.values(), NsDtype.values(), ScaleMode.values(),
        TPMode.values(), CostProfile.values()) == (SHARDINGS, COEFFICIENT_SETS, NS_DTYPES,
                                                   SCALE_MODES, TP_MODES, COST_PROFILES)


@dataclass
class MuonTPModelConfig:
    """A tensor-parallel transformer: its matrices are Muon's tall, wide and square shapes."""

    vocab_size: int = 128
    n_layer: int = 1
    n_head: int = 4  # d_model must divide by it
    d_model: int = 64
    d_ff: int = 256
    n_experts: int = 0  # >0 adds expert FC1/FC2 pairs behind a dense soft router
    d_expert: int = 128
    sharding: Sharding = Sharding["megatron"]  # megatron (QKV/FC1 on dim 0, proj/FC2 on dim 1) | dim0 (all)


@dataclass
class MuonOptimizerConfig:
    name: str = "muon"
    lr: float = 0.02
    momentum: float = 0.95
    nesterov: bool = True
    weight_decay: float = 0.0  # decoupled
    ns_steps: int = 5
    coefficients: Coefficients = Coefficients["quintic"]  # simple | quintic | cubic | polar_express | cans
    # Frobenius normalisation floor: X / max(||X||_F, eps). Emerging-Optimizers' 1e-15; a larger
    # floor shrinks small-norm updates and changes their orthogonalisation
    eps: float = 1e-15
    ns_dtype: NsDtype = NsDtype["fp32"]  # fp32 | bf16 (state stays fp32)
    scale_mode: ScaleMode = ScaleMode["spectral"]  # shape_scaling | spectral | unit_rms_norm
    extra_scale_factor: float = 0.2
    adamw_lr: float = 3e-3  # embeddings, norms, head
    adamw_beta1: float = 0.9
    adamw_beta2: float = 0.95
    adamw_weight_decay: float = 0.0


@dataclass
class TPConfig:
    mode: TPMode = TPMode["duplicated"]  # duplicated | distributed | auto (opt-in)
    cost_profile: CostProfile = CostProfile["measured"]  # auto only: measured (calibrated on the group) | registry | none
    crosses_domain: Optional[bool] = None  # None = from topology; true/false overrides it
    syrk: bool = False  # cost model only: price the Gram and A*A as SYRK (half the FLOPs)


@workload_schema
@dataclass
class MuonTPWorkloadConfig(WorkloadConfig):
    kind: str = "muon_tp"
    recipe: str = "muon_tp"
    model: MuonTPModelConfig = field(default_factory=MuonTPModelConfig)
    optimizer: MuonOptimizerConfig = field(default_factory=MuonOptimizerConfig)
    tp: TPConfig = field(default_factory=TPConfig)
    data: DataConfig = field(default_factory=DataConfig)

    def validate(self) -> None:
        validate_muon_tp(self)
