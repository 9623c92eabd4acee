"""Variants that break the model on purpose, for the correctness gate's tests. Each wraps the
real GPT trainer and breaks one thing; the gate must catch each for its own reason."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from recipes.gpt.recipe import Batch, GPTTrainer, synthetic_batch


def _wrap_attention(trainer: GPTTrainer, fn: Any) -> None:
    for block in trainer.model.blocks:  # type: ignore[union-attr]
        attn: Any = block.attn
        inner = attn.attend
        attn.attend = lambda q, k, v, inner=inner: fn(inner(q, k, v))


def build_scaled(workload: Any, bucket: Any, device: str) -> GPTTrainer:
    """An attention backend with a planted scaling error: its output is 5 % too large."""
    t = GPTTrainer(workload, bucket, device)
    _wrap_attention(t, lambda o: o * 1.05)
    return t


def build_nan(workload: Any, bucket: Any, device: str) -> GPTTrainer:
    """A backend that returns NaN for the first query row (e.g. a fully masked tile)."""

    def poison(o: torch.Tensor) -> torch.Tensor:
        o = o.clone()
        o[..., 0, :] = float("nan")
        return o

    t = GPTTrainer(workload, bucket, device)
    _wrap_attention(t, poison)
    return t


def build_dropout(workload: Any, bucket: Any, device: str) -> GPTTrainer:
    """A variant that quietly turns dropout on (p = 0.1) where the baseline has none."""
    t = GPTTrainer(workload, bucket, device)
    for m in t.model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.1
    return t


def build_lr(workload: Any, bucket: Any, device: str) -> GPTTrainer:
    """An optimizer change: a fused AdamW that steps with a 10 % larger learning rate."""
    t = GPTTrainer(workload, bucket, device)
    for group in t.optimizer.param_groups:
        group["lr"] *= 1.1
    return t


class _Shuffled(GPTTrainer):
    def batches(self) -> Iterator[Batch]:
        """A loader change that swaps neighbouring batches: 1, 0, 3, 2, ..."""
        b, w = self.bucket, self.workload
        i = 0
        while True:
            index = i + 1 if i % 2 == 0 else i - 1
            x = synthetic_batch(w.data.seed, index, b.micro_batch, b.seq_len, w.model.vocab_size)
            yield Batch(x.index, x.inputs.to(self.device), x.targets.to(self.device))
            i += 1


def build_shuffled(workload: Any, bucket: Any, device: str) -> GPTTrainer:
    return _Shuffled(workload, bucket, device)


class _CompiledKeys(GPTTrainer):
    """torch.compile'd, and checkpoints saved from the compiled wrapper: every key gains
    ``_orig_mod.``, so eager and compiled checkpoints no longer load into each other."""

    def state_dict(self) -> dict[str, Any]:
        return self.model.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state, strict=True)


def build_compiled_keys(workload: Any, bucket: Any, device: str) -> GPTTrainer:
    t = _CompiledKeys(workload, bucket, device)
    t.model = torch.compile(t.model, backend="eager")  # type: ignore[assignment]
    return t


def build_compiled(workload: Any, bucket: Any, device: str) -> GPTTrainer:
    """The fix: the same compiled model, checkpoints saved from the underlying module
    (GPTTrainer.state_dict unwraps ``_orig_mod``)."""
    t = GPTTrainer(workload, bucket, device)
    t.model = torch.compile(t.model, backend="eager")  # type: ignore[assignment]
    return t
