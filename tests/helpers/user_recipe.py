"""A user's own in-process recipe, registered by import path (tests.helpers.user_recipe:build).

A tiny MLP regression trainer that knows nothing about timing. ``params.compile`` compiles its
loss with torch.compile (aot_eager: dynamo + AOTAutograd, no C++ codegen, so tests stay quick);
``params.graph_break`` plants a graph break in the compiled function; ``params.fullgraph``
compiles with fullgraph=True (a graph break is then an error)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Batch:
    index: int
    x: torch.Tensor
    y: torch.Tensor


class RegressionTrainer:
    def __init__(self, workload: Any, bucket: Any, device: str) -> None:
        p = workload.params
        torch.manual_seed(workload.seed)
        self.device = torch.device(device)
        self.width = int(p.get("width", 16))
        self.bucket = bucket
        self.model = torch.nn.Sequential(torch.nn.Linear(self.width, self.width), torch.nn.Tanh(),
                                         torch.nn.Linear(self.width, 1)).to(self.device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=float(p.get("lr", 0.05)))
        self.graph_break = bool(p.get("graph_break", False))
        self.loss_fn = self._loss
        if p.get("compile", False):
            self.loss_fn = torch.compile(self._loss, backend="aot_eager",
                                         fullgraph=bool(p.get("fullgraph", False)))
        self.tokens_per_step = bucket.micro_batch * bucket.seq_len
        self.samples_per_step = bucket.micro_batch

    def _loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.model(x)
        if self.graph_break:
            torch._dynamo.graph_break()
        return torch.nn.functional.mse_loss(h, y)

    def batches(self) -> Iterator[Batch]:
        i = 0
        while True:
            g = torch.Generator().manual_seed(i)
            x = torch.randn(self.bucket.micro_batch, self.width, generator=g)
            yield Batch(i, x.to(self.device), x.sum(1, keepdim=True).tanh().to(self.device))
            i += 1

    def train_step(self, batch: Batch) -> torch.Tensor:
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(batch.x, batch.y)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def useful_flops_per_step(self) -> float | None:
        return None


def build(workload: Any, bucket: Any, device: str) -> RegressionTrainer:
    return RegressionTrainer(workload, bucket, device)
