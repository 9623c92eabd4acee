"""A tensor-parallel transformer whose matrices give Muon tall, wide and square shapes.

Every linear layer takes a replicated input and returns a replicated output, with its weight
sharded over the group along ``partition_dim``: 0 splits the output features (each rank
computes its slice, then an all-gather), 1 splits the input features (each rank multiplies its
slice of the input, then an all-reduce). ``megatron`` sharding uses 0 for QKV / FC1 / expert
FC1 and 1 for the attention projection / FC2 / expert FC2; ``dim0`` shards every matrix on
dim 0 (the GTP-style layout where wide weights force the distributed Gram onto the long dim).
Embeddings, norms, the router and the head are replicated. Forward values are identical on
every rank, so replicated parameters get identical gradients.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from recipes.muon.optimizer import mark_sharded

Group = Optional[dist.ProcessGroup]


def _size(group: Group) -> int:
    return dist.get_world_size(group) if group is not None else 1


def _rank(group: Group) -> int:
    return dist.get_rank(group) if group is not None else 0


class _CopyToGroup(torch.autograd.Function):
    """Identity forward; the input gradient is the sum of every rank's partial gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Group) -> torch.Tensor:
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromGroup(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Group) -> torch.Tensor:
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class _GatherLastDim(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Group) -> torch.Tensor:
        ctx.group = group
        parts = [torch.empty_like(x) for _ in range(_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad.chunk(_size(ctx.group), dim=-1)[_rank(ctx.group)].contiguous(), None


class _ScatterLastDim(torch.autograd.Function):
    """This rank's slice of a replicated input; the gradient is re-assembled from every rank."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Group) -> torch.Tensor:
        ctx.group = group
        return x.chunk(_size(group), dim=-1)[_rank(group)].contiguous()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        parts = [torch.empty_like(grad) for _ in range(_size(ctx.group))]
        dist.all_gather(parts, grad.contiguous(), group=ctx.group)
        return torch.cat(parts, dim=-1), None


class ShardedLinear(nn.Module):
    """y = x W^T with W [out, in] sharded on ``partition_dim``; replicated in, replicated out."""

    def __init__(self, d_in: int, d_out: int, partition_dim: int, group: Group,
                 gen: torch.Generator) -> None:
        super().__init__()
        g = _size(group)
        full = torch.randn(d_out, d_in, generator=gen) / math.sqrt(d_in)
        shard = full.chunk(g, dim=partition_dim)[_rank(group)].contiguous() if g > 1 else full
        self.weight = nn.Parameter(shard)
        mark_sharded(self.weight, partition_dim if g > 1 else None)
        self.partition_dim = partition_dim
        self.group = group if g > 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.group is None:
            return F.linear(x, self.weight)
        if self.partition_dim == 0:
            y = F.linear(_CopyToGroup.apply(x, self.group), self.weight)
            return _GatherLastDim.apply(y, self.group)  # type: ignore[no-any-return]
        x_local = _ScatterLastDim.apply(x, self.group)
        return _ReduceFromGroup.apply(F.linear(x_local, self.weight), self.group)  # type: ignore[no-any-return]


class Block(nn.Module):
    def __init__(self, d: int, n_head: int, d_ff: int, n_experts: int, d_expert: int,
                 dims: dict[str, int], group: Group, gen: torch.Generator) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = ShardedLinear(d, 3 * d, dims["qkv"], group, gen)
        self.proj = ShardedLinear(d, d, dims["proj"], group, gen)
        self.fc1 = ShardedLinear(d, d_ff, dims["fc1"], group, gen)
        self.fc2 = ShardedLinear(d_ff, d, dims["fc2"], group, gen)
        self.experts = nn.ModuleList(
            nn.ModuleList([ShardedLinear(d, d_expert, dims["fc1"], group, gen),
                           ShardedLinear(d_expert, d, dims["fc2"], group, gen)])
            for _ in range(n_experts)
        )
        # a dense soft router (every expert runs): real expert shapes, no token dropping
        self.router = nn.Linear(d, n_experts, bias=False) if n_experts else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        h = self.ln2(x)
        out = self.fc2(F.gelu(self.fc1(h)))
        if self.router is not None:
            weights = self.router(h).softmax(dim=-1)
            for i, pair in enumerate(self.experts):
                up, down = pair[0], pair[1]  # type: ignore[index]
                out = out + weights[..., i: i + 1] * down(F.gelu(up(h)))
        return x + out


SHARDINGS = {
    "megatron": {"qkv": 0, "proj": 1, "fc1": 0, "fc2": 1},
    "dim0": {"qkv": 0, "proj": 0, "fc1": 0, "fc2": 0},
}


class TPTransformer(nn.Module):
    def __init__(self, *, vocab_size: int, n_layer: int, n_head: int, d_model: int, d_ff: int,
                 n_experts: int, d_expert: int, max_seq_len: int, sharding: str, group: Group,
                 seed: int) -> None:
        super().__init__()
        # the same generator draws the same full weights on every rank and world size
        gen = torch.Generator().manual_seed(seed)
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_seq_len, d_model)
        with torch.no_grad():
            self.tok.weight.copy_(torch.randn(vocab_size, d_model, generator=gen) * 0.02)
            self.pos.weight.copy_(torch.randn(max_seq_len, d_model, generator=gen) * 0.02)
        dims = SHARDINGS[sharding]
        self.blocks = nn.ModuleList(
            Block(d_model, n_head, d_ff, n_experts, d_expert, dims, group, gen)
            for _ in range(n_layer)
        )
        for blk in self.blocks:
            assert isinstance(blk, Block)
            if blk.router is not None:
                with torch.no_grad():
                    blk.router.weight.copy_(
                        torch.randn(n_experts, d_model, generator=gen) / math.sqrt(d_model))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        with torch.no_grad():
            self.head.weight.copy_(torch.randn(vocab_size, d_model, generator=gen) * 0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1), device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))  # type: ignore[no-any-return]

    def muon_params(self) -> list[nn.Parameter]:
        """Hidden matrices (sharded or router); embeddings and head go to AdamW."""
        return [p for name, p in self.named_parameters()
                if p.dim() == 2 and not name.startswith(("tok.", "pos.", "head."))]

    def other_params(self) -> list[nn.Parameter]:
        ids = {id(p) for p in self.muon_params()}
        return [p for p in self.parameters() if id(p) not in ids]
