"""What a workload provides to the orchestrator."""

from __future__ import annotations

from typing import Any, Iterator, Protocol


class Trainer(Protocol):
    """One model, optimizer and data stream for one shape bucket on one device."""

    tokens_per_step: int
    samples_per_step: int

    def batches(self) -> Iterator[Any]:
        """An endless, deterministic stream of batches (same seed, same batches)."""
        ...

    def train_step(self, batch: Any) -> Any:
        """Forward, backward and optimizer step; returns the loss as a (detached) tensor.

        Must not synchronise the device or call ``.item()``: the orchestrator syncs at step
        boundaries and reads the loss outside the timed window."""
        ...

    def useful_flops_per_step(self) -> float | None:
        """Analytic model FLOPs of one training step (recompute excluded), or None."""
        ...
