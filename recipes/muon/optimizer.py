"""Muon for matrix parameters (tensor-parallel aware), AdamW for the rest.

Per matrix parameter and step: decoupled weight decay, momentum as an EMA
(``buf.lerp_(grad, 1 - momentum)``), optional Nesterov (``grad.lerp(buf, momentum)``),
Newton-Schulz on the fp32 update (through ``tp_mode`` when the parameter is sharded), the
update scale of the *global* shape, then ``p -= lr * scale * orth``.

A sharded parameter carries ``tp_partition_dim`` (0: rows split, 1: columns split), set with
:func:`mark_sharded`; the group is the optimizer's ``group``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional

import torch
import torch.distributed as dist

from recipes.muon.cost import Choice, ModeResolver
from recipes.muon.newton_schulz import DEFAULT_EPS, NS_DTYPES, newton_schulz_tp, scale_factor

PARTITION_ATTR = "tp_partition_dim"
TP_MODES = ("duplicated", "distributed", "auto")


def mark_sharded(param: torch.Tensor, partition_dim: Optional[int]) -> torch.Tensor:
    setattr(param, PARTITION_ATTR, partition_dim)
    return param


def partition_dim_of(param: torch.Tensor) -> Optional[int]:
    return getattr(param, PARTITION_ATTR, None)


@dataclass(frozen=True)
class MuonSettings:
    lr: float = 0.02
    momentum: float = 0.95
    nesterov: bool = True
    weight_decay: float = 0.0
    ns_steps: int = 5
    coefficients: str = "quintic"
    eps: float = DEFAULT_EPS
    ns_dtype: str = "fp32"
    scale_mode: str = "spectral"
    extra_scale_factor: float = 0.2


class Muon(torch.optim.Optimizer):
    def __init__(
        self,
        params: Iterable[torch.Tensor],
        settings: MuonSettings,
        *,
        group: Optional[dist.ProcessGroup] = None,
        tp_mode: str = "duplicated",
        resolver: Optional[ModeResolver] = None,
    ) -> None:
        if tp_mode not in TP_MODES:
            raise ValueError(f"invalid tp_mode {tp_mode!r}; choose one of {TP_MODES}")
        if tp_mode == "auto" and resolver is None:
            raise ValueError("tp_mode='auto' needs a ModeResolver")
        params = list(params)
        for p in params:
            if p.dim() != 2:
                raise ValueError(f"Muon takes 2-D parameters only, got shape {tuple(p.shape)}")
        super().__init__(params, {"lr": settings.lr})
        self.settings = settings
        self.group = group
        self.tp_mode = tp_mode
        self.resolver = resolver
        self.group_size = dist.get_world_size(group) if group is not None else 1

    def global_shape(self, p: torch.Tensor) -> tuple[int, int]:
        m, n = p.shape
        pd = partition_dim_of(p)
        if pd == 0:
            m *= self.group_size
        elif pd == 1:
            n *= self.group_size
        return int(m), int(n)

    def mode_for(self, p: torch.Tensor) -> str:
        if self.tp_mode != "auto":
            return self.tp_mode
        assert self.resolver is not None
        m, n = self.global_shape(p)
        return self.resolver.resolve(m, n, self.group_size, partition_dim_of(p)).mode

    def choices(self) -> list[Choice]:
        return list(self.resolver.cache.values()) if self.resolver is not None else []

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        if closure is not None:
            raise ValueError("Muon does not support closures")
        s = self.settings
        for grp in self.param_groups:
            lr = grp["lr"]
            for p in grp["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.float()
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(grad)
                buf = state["momentum_buffer"]
                if s.weight_decay:
                    p.mul_(1 - lr * s.weight_decay)
                buf.lerp_(grad, 1 - s.momentum)
                update = grad.lerp(buf, s.momentum) if s.nesterov else buf
                orth = newton_schulz_tp(
                    update, s.ns_steps, s.coefficients, group=self.group,
                    partition_dim=partition_dim_of(p), mode=self.mode_for(p), eps=s.eps,
                    compute_dtype=NS_DTYPES[s.ns_dtype],
                )
                m, n = self.global_shape(p)
                orth = orth * scale_factor(m, n, s.scale_mode) * s.extra_scale_factor
                p.add_(orth.to(p.dtype), alpha=-lr)
