"""The ``muon_tp`` workload: a tensor-parallel transformer trained with Muon across G ranks.

Runs under the distributed trial contract: when ``workload.world_size > 1`` the trial runner
starts the ranks and initialises ``torch.distributed`` before calling :func:`build`, which uses
the default group. With one rank (or no process group and ``world_size == 1``) the same code
runs unsharded. ``tp.mode`` is the swept variable; ``auto`` resolves per distinct shape.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F

from orchestrator import device as devmod
from orchestrator.config import BucketConfig, MuonTPWorkloadConfig
from orchestrator.errors import BackendUnavailable
from recipes.muon.calibrate import calibrate, describe
from recipes.muon.cost import CostProfile, ModeResolver, profile_from_registry
from recipes.muon.model import TPTransformer
from recipes.muon.newton_schulz import quadratic_steps
from recipes.muon.optimizer import Muon, MuonSettings
from recipes.muon.topology import group_crosses_domain, local_identity

log = logging.getLogger(__name__)


@dataclass
class Batch:
    index: int
    inputs: torch.Tensor
    targets: torch.Tensor


def token_batch(seed: int, index: int, micro_batch: int, seq_len: int, vocab: int) -> Batch:
    """Batch ``index`` of a deterministic stream with learnable structure (pure)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + index)
    start = torch.randint(0, vocab, (micro_batch, 1), generator=g)
    noise = torch.randint(0, 3, (micro_batch, seq_len + 1), generator=g)
    tokens = (start + 5 * torch.arange(seq_len + 1) + noise.cumsum(1)) % vocab
    return Batch(index, tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())


def default_group(world_size: int) -> Optional[dist.ProcessGroup]:
    """The default process group when it matches ``world_size``; None for one rank."""
    have = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    if have != world_size:
        raise BackendUnavailable(
            f"workload.world_size={world_size} but this process sees {have} rank(s); the trial "
            "runner must start the ranks and initialise torch.distributed first")
    return dist.group.WORLD if world_size > 1 else None


def registry_profile(device_name: str, device_kind: str) -> CostProfile:
    """The cost profile of this device's hardware-registry entry (datasheet figures); a device
    without an entry, or an entry lacking a figure the model needs, is refused, never guessed."""
    from orchestrator import hardware

    entry = hardware.lookup(device_name, device_kind)
    if entry is None:
        raise BackendUnavailable("tp.cost_profile=registry: no registry entry matches this "
                                 "device; use tp.cost_profile=measured or none")
    try:
        return profile_from_registry(entry.to_dict())
    except ValueError as exc:
        raise BackendUnavailable(f"tp.cost_profile=registry: {exc}; add it to "
                                 f"conf/hardware/{entry.name}.yaml or use "
                                 "tp.cost_profile=measured") from exc


class MuonTPTrainer:
    def __init__(self, workload: MuonTPWorkloadConfig, bucket: BucketConfig, device: str) -> None:
        self.workload, self.bucket = workload, bucket
        self.device = torch.device(device)
        self.group = default_group(workload.world_size)
        self.rank = dist.get_rank(self.group) if self.group is not None else 0
        m, o, tp = workload.model, workload.optimizer, workload.tp
        self.model = TPTransformer(
            vocab_size=m.vocab_size, n_layer=m.n_layer, n_head=m.n_head, d_model=m.d_model,
            d_ff=m.d_ff, n_experts=m.n_experts, d_expert=m.d_expert,
            max_seq_len=max(b.seq_len for b in workload.buckets), sharding=m.sharding,
            group=self.group, seed=workload.seed,
        ).to(self.device)
        settings = MuonSettings(
            lr=o.lr, momentum=o.momentum, nesterov=o.nesterov, weight_decay=o.weight_decay,
            ns_steps=o.ns_steps, coefficients=o.coefficients, eps=o.eps, ns_dtype=o.ns_dtype,
            scale_mode=o.scale_mode, extra_scale_factor=o.extra_scale_factor,
        )
        self.tp_info: dict[str, Any] = {"mode": tp.mode, "group_size": self.group_size}
        resolver = None
        if tp.mode == "auto":
            resolver = self._resolver(tp, o) if self.group_size > 1 else ModeResolver(
                steps=o.ns_steps, quad_steps=0, ns_dtype=o.ns_dtype, crosses_domain=False,
                profile=None)  # one rank: nothing is sharded, nothing to calibrate
            self.tp_info.setdefault("profile", "not needed (single rank)")
        self.muon = Muon(self.model.muon_params(), settings, group=self.group, tp_mode=tp.mode,
                         resolver=resolver)
        self.adamw = torch.optim.AdamW(self.model.other_params(), lr=o.adamw_lr,
                                       betas=(o.adamw_beta1, o.adamw_beta2),
                                       weight_decay=o.adamw_weight_decay)
        self.tokens_per_step = bucket.micro_batch * bucket.seq_len
        self.samples_per_step = bucket.micro_batch

    @property
    def group_size(self) -> int:
        return dist.get_world_size(self.group) if self.group is not None else 1

    def _resolver(self, tp: Any, o: Any) -> ModeResolver:
        dev = devmod.resolve(self.device.type, self.device.index)
        crosses, basis = group_crosses_domain(
            self.group, local_identity(dev.kind, dev.index), tp.crosses_domain)
        profile: Optional[CostProfile] = None
        if tp.cost_profile == "measured":
            profile = calibrate(self.group, ns_dtype=o.ns_dtype, steps=o.ns_steps,
                                coefficient_set=o.coefficients, device=str(self.device), dev=dev)
        elif tp.cost_profile == "registry":
            profile = registry_profile(dev.name, dev.kind)
        self.tp_info.update(crosses_domain=crosses, domain_basis=basis,
                            profile=describe(profile) if profile else "none (conservative rule)")
        if self.rank == 0:
            log.info("tp_mode auto: G=%d, crosses_domain=%s (%s), profile %s", self.group_size,
                     crosses, basis, self.tp_info["profile"])
        return ModeResolver(steps=o.ns_steps, quad_steps=quadratic_steps(o.coefficients, o.ns_steps),
                            ns_dtype=o.ns_dtype, crosses_domain=crosses, profile=profile,
                            syrk=tp.syrk, rank=self.rank)

    def batches(self) -> Iterator[Batch]:
        b, w = self.bucket, self.workload
        index = 0
        while True:
            batch = token_batch(w.data.seed, index, b.micro_batch, b.seq_len, w.model.vocab_size)
            yield Batch(index, batch.inputs.to(self.device), batch.targets.to(self.device))
            index += 1

    def loss(self, batch: Batch) -> torch.Tensor:
        logits = self.model(batch.inputs)
        return F.cross_entropy(logits.flatten(0, 1).float(), batch.targets.flatten())

    def train_step(self, batch: Batch) -> torch.Tensor:
        self.muon.zero_grad(set_to_none=True)
        self.adamw.zero_grad(set_to_none=True)
        loss = self.loss(batch)
        loss.backward()
        self.muon.step()
        self.adamw.step()
        return loss.detach()

    def useful_flops_per_step(self) -> float:
        """6 x global non-embedding parameters x tokens + causal attention (PaLM convention);
        Newton-Schulz FLOPs are optimizer work and not counted."""
        m = self.workload.model
        n = 0
        for name, p in self.model.named_parameters():
            if name.startswith(("tok.", "pos.")):
                continue
            n += p.numel() * (self.group_size if getattr(p, "tp_partition_dim", None) is not None
                              else 1)
        per_token = 6 * n + 6 * m.n_layer * self.bucket.seq_len * m.d_model
        return float(per_token * self.tokens_per_step)

    def extra_record(self) -> dict[str, Any]:
        """What auto chose per distinct shape, with the predicted per-mode costs (data for
        decisions.md; the orchestrator, not the recipe, times the steps)."""
        info = dict(self.tp_info)
        info["choices"] = [
            {"m": c.m, "n": c.n, "g": c.g, "partition_dim": c.partition_dim, "mode": c.mode,
             "basis": c.basis,
             "predicted_s": {k: v.total_s for k, v in c.costs.items()}}
            for c in self.muon.choices()
        ]
        return {"muon_tp": info}


def build(workload: MuonTPWorkloadConfig, bucket: BucketConfig, device: str) -> MuonTPTrainer:
    return MuonTPTrainer(workload, bucket, device)
