"""The ``muon_tp`` workload: a tensor-parallel transformer trained with Muon across G ranks.

Runs under the distributed trial contract: when ``workload.world_size > 1`` the trial runner
starts the ranks and initialises ``torch.distributed`` before calling :func:`build`, which uses
the default group. With one rank (or no process group and ``world_size == 1``) the same code
runs unsharded. ``tp.mode`` is the swept variable; ``auto`` resolves per distinct shape.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F

from orchestrator.platform import device as devmod
from orchestrator.platform import hardware
from orchestrator.spec.config import BucketConfig
from orchestrator.core.errors import BackendUnavailable
from recipes.base import TrainerHooks, switchable
from recipes.muon.calibrate import calibrate, describe, measure_latency
from recipes.muon.config import MuonTPWorkloadConfig
from recipes.muon.cost import CostProfile, ModeResolver, profile_from_registry
from recipes.muon.model import ShardedLinear, TPTransformer
from recipes.muon.newton_schulz import quadratic_steps
from recipes.muon.optimizer import Muon, MuonSettings, partition_dim_of
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


def registry_profile(device_name: str, device_kind: str,
                     measure_latency: Optional[Callable[[], float]] = None) -> CostProfile:
    """The cost profile of this device's hardware-registry entry: datasheet peaks and link
    bandwidths. No datasheet states a per-collective latency, so an entry whose
    ``collective_latency_us`` is null takes it from ``measure_latency()`` (a short measurement
    on the group; the profile is then labelled ``hybrid``). A device without an entry, or an
    entry lacking another figure the model needs, is refused, never guessed."""
    entry = hardware.lookup(device_name, device_kind)
    if entry is None:
        raise BackendUnavailable("tp.cost_profile=registry: no registry entry matches this "
                                 "device; use tp.cost_profile=measured or none")
    latency = None
    if entry.collective_latency_us is None and measure_latency is not None:
        latency = measure_latency()
    try:
        return profile_from_registry(entry.to_dict(), latency_s=latency,
                                     latency_source="one-element all-reduce on the group")
    except ValueError as exc:
        raise BackendUnavailable(f"tp.cost_profile=registry: {exc}; add it to "
                                 f"conf/hardware/{entry.name}.yaml or use "
                                 "tp.cost_profile=measured") from exc


class _Optimizers:
    """Muon and AdamW as the one ``optimizer`` the correctness probe expects (zero_grad,
    state_dict, load_state_dict). The state is this rank's: Muon's momentum of a sharded weight
    is the shard's."""

    def __init__(self, muon: Muon, adamw: torch.optim.Optimizer) -> None:
        self.muon, self.adamw = muon, adamw

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.muon.zero_grad(set_to_none=set_to_none)
        self.adamw.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        self.muon.step()
        self.adamw.step()

    def state_dict(self) -> dict[str, Any]:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.muon.load_state_dict(state["muon"])
        self.adamw.load_state_dict(state["adamw"])


class MuonTPTrainer(TrainerHooks):
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
        resolver = self._auto_resolver(tp, o) if tp.mode == "auto" else None
        self.muon = Muon(self.model.muon_params(), settings, group=self.group, tp_mode=tp.mode,
                         resolver=resolver)
        self.adamw = torch.optim.AdamW(self.model.other_params(), lr=o.adamw_lr,
                                       betas=(o.adamw_beta1, o.adamw_beta2),
                                       weight_decay=o.adamw_weight_decay)
        self.optimizer = _Optimizers(self.muon, self.adamw)
        self.tokens_per_step = bucket.micro_batch * bucket.seq_len
        self.samples_per_step = bucket.micro_batch

    def _auto_resolver(self, tp: Any, o: Any) -> ModeResolver:
        resolver = self._resolver(tp, o) if self.group_size > 1 else ModeResolver(
            steps=o.ns_steps, quad_steps=0, ns_dtype=o.ns_dtype, crosses_domain=False,
            profile=None)  # one rank: nothing is sharded, nothing to calibrate
        self.tp_info.setdefault("profile", "not needed (single rank)")
        return resolver

    def switch(self, workload: MuonTPWorkloadConfig) -> None:
        """Another arm's tp_mode, between steps (protocol.pairing=steps): weights, momentum
        and the data stream stay. Every rank switches at the same step (the orchestrator's
        block schedule), so auto's calibration, a collective, runs on all ranks the first
        time auto is switched to."""
        tp = workload.tp
        if tp.mode == "auto" and self.muon.resolver is None:
            self.muon.resolver = self._auto_resolver(tp, workload.optimizer)
        self.muon.tp_mode = tp.mode
        self.tp_info["mode"] = tp.mode
        self.workload = workload

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
            group = self.group
            profile = registry_profile(dev.name, dev.kind, lambda: measure_latency(
                group, device=str(self.device), dev=dev))
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
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(batch)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    # ---- correctness-probe hooks (recipes/base.py). With G > 1 ranks, state_dict and
    # full_tensor are collectives: every rank calls them, in the same order.

    def forward_outputs(self, batch: Batch) -> torch.Tensor:
        return self.model(batch.inputs)  # type: ignore[no-any-return]

    def forward_loss(self, batch: Batch) -> torch.Tensor:
        return self.loss(batch)

    def _partition_dims(self) -> dict[str, int]:
        return {n: pd for n, p in self.model.named_parameters()
                if (pd := partition_dim_of(p)) is not None}

    def full_tensor(self, name: str, t: torch.Tensor) -> torch.Tensor:
        """The whole tensor of parameter ``name`` (its shard on this rank: a weight, gradient
        or update) gathered over the group along its partition dim; replicated ones as they are."""
        pd = self._partition_dims().get(name)
        if pd is None or self.group is None:
            return t
        parts = [torch.empty_like(t) for _ in range(self.group_size)]
        dist.all_gather(parts, t.contiguous(), group=self.group)
        return torch.cat(parts, dim=pd)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The full (gathered) weights, identical on every rank and for every group size."""
        return {n: self.full_tensor(n, t.detach()).clone()
                for n, t in self.model.state_dict().items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Strict load of full weights; each rank keeps its shard of the sharded ones."""
        dims = self._partition_dims()
        own = self.model.state_dict()
        missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
        if missing or unexpected:
            raise KeyError(f"state_dict keys differ: missing {missing}, unexpected {unexpected}")
        local = {}
        for n, t in state.items():
            pd = dims.get(n)
            if pd is not None and self.group is not None:
                if t.shape[pd] != own[n].shape[pd] * self.group_size:
                    raise ValueError(f"{n}: full shape {tuple(t.shape)} does not split into "
                                     f"{self.group_size} shards of {tuple(own[n].shape)}")
                t = t.chunk(self.group_size, dim=pd)[self.rank]
            local[n] = t
        self.model.load_state_dict(local, strict=True)

    useful_flops_definition = (
        "per device: (6 x N x tokens + 12 x n_layer x seq_len x d_model x tokens) / G per step, "
        "G the tensor-parallel group size, so that MFU = this / (step time x one device's peak) "
        "is the whole model's work over the group's peak. N counts the global weights of the "
        "matrix multiplies (every sharded linear at its full [out, in] size, expert weights "
        "included since the soft router runs every expert, the router and the LM head; "
        "embeddings, biases and norm gains do no matmul work and are left out), 2 FLOPs per "
        "multiply-add, forward + backward = 3 x forward; the attention term counts the full "
        "seq x seq score square for QK^T and PV (as the GPT recipe: causal masking not "
        "discounted). Work every rank repeats (attention, norms, the head: replicated here) is "
        "counted once for the model, and Newton-Schulz is optimizer work, not counted"
    )

    def _matmul_params(self) -> int:
        """Global weights of the matrix multiplies (a sharded weight at G x its shard)."""
        n = 0
        for mod in self.model.modules():
            if isinstance(mod, ShardedLinear):
                n += mod.weight.numel() * (self.group_size if mod.group is not None else 1)
            elif isinstance(mod, torch.nn.Linear):
                n += mod.weight.numel()
        return n

    def useful_flops_per_step(self) -> float:
        """This device's share of the model's training FLOPs (see useful_flops_definition)."""
        m, b = self.workload.model, self.bucket
        attention_fwd = 2 * 2 * m.n_layer * b.micro_batch * b.seq_len**2 * m.d_model
        total = 6 * self._matmul_params() * self.tokens_per_step + 3 * attention_fwd
        return float(total) / self.group_size

    def extra_record(self) -> dict[str, Any]:
        """What auto chose per distinct shape, with the predicted per-mode costs (data for
        decisions.md; the orchestrator, not the recipe, times the steps)."""
        info = dict(self.tp_info)
        info["choices"] = [
            {"m": c.m, "n": c.n, "g": c.g, "partition_dim": c.partition_dim, "mode": c.mode,
             "basis": c.basis,
             "predicted_s": {k: v.total_s for k, v in c.costs.items()}}
            for c in (self.muon.choices() if self.muon.tp_mode == "auto" else [])
        ]
        return {"muon_tp": info}

    # the description below is all that tp.mode changes (forward, gradients and AdamW run the
    # same code in every mode)
    executes_covers = ("workload.tp.mode",)

    def executes(self) -> Any:
        """The Newton-Schulz path each Muon weight takes, in step order: its global shape,
        partition dim and mode (``local`` where it is not sharded; auto's choice from the
        resolver's cache, None if a shape was never resolved)."""
        muon = self.muon
        out = []
        for grp in muon.param_groups:
            for p in grp["params"]:
                pd = partition_dim_of(p)
                m, n = muon.global_shape(p)
                if pd is None or muon.group is None or muon.group_size == 1:
                    mode = "local"
                elif muon.tp_mode != "auto":
                    mode = muon.tp_mode
                else:
                    hit = (muon.resolver.cache.get((m, n, muon.group_size, pd))
                           if muon.resolver is not None else None)
                    if hit is None:
                        return None
                    mode = hit.mode
                out.append(f"{m}x{n}/p{pd}:{mode}")
        return {"newton_schulz": out}


@switchable("workload.tp.mode")
def build(workload: MuonTPWorkloadConfig, bucket: BucketConfig, device: str) -> MuonTPTrainer:
    return MuonTPTrainer(workload, bucket, device)
