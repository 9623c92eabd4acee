"""What a workload provides to the orchestrator.

In-process recipes (the orchestrator times the steps)
------------------------------------------------------
A recipe is a function ``build(workload, bucket, device) -> Trainer``:

- ``workload`` is the workload's dataclass (:class:`recipes.gpt.config.GPTWorkloadConfig` for
  ``kind: gpt``, :class:`recipes.custom.config.CustomWorkloadConfig` for ``kind: custom``, whose
  ``params`` mapping carries the recipe's own settings and can be swept as
  ``workload.params.NAME``);
- ``bucket`` is the :class:`orchestrator.config.BucketConfig` being measured (name, seq_len,
  micro_batch);
- ``device`` is a torch device string resolved by the orchestrator (``cpu``, ``cuda:0``,
  ``musa:0``); build the model there.

Register it by import path, no code change in this package::

    workload:
      kind: custom
      name: my_model
      recipe: my_pkg.train:build      # anything importable from the trial process
      params: {hidden: 256}
      buckets: [{name: b32, seq_len: 32, micro_batch: 8}]

The orchestrator then owns warm-up exclusion, device synchronisation at step boundaries, per-step
records, loss read-back outside the timed window, fresh processes and statuses; the recipe must
not time itself, synchronise, or call ``.item()`` in ``train_step``. A missing module or function
is refused at start (``workload.recipe: cannot import ...``, exit code 2).

External recipes (the trainer is another program)
-------------------------------------------------
A builder decorated with :func:`external_recipe` returns an :class:`ExternalTrainer`; the trial
then runs its command under the orchestrator's time limit and takes step records from its log
(see ``recipes/command``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar


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

    # Hooks the correctness gate (orchestrator/correctness) needs besides the above. A trainer
    # without them cannot be probed: when the baseline's lacks them the gate is "not applicable"
    # for the campaign (correctness.json mode not_applicable, no gate in the verdicts, timing
    # decides); only when the baseline has them and a variant's trainer (a swept recipe) does
    # not is that variant's gate `error` (verdict `invalid`).
    #
    # model: the torch.nn.Module being trained (possibly a torch.compile wrapper)
    # optimizer: its torch.optim.Optimizer
    #
    # def forward_outputs(self, batch) -> Tensor:
    #     The model's outputs for a batch under the precision policy (no loss, no backward).
    # def forward_loss(self, batch) -> Tensor:
    #     The scalar training loss for a batch (no backward, no optimizer step).
    # def state_dict(self) -> dict[str, Tensor]:
    #     Model weights as a checkpoint stores them. Save the underlying module, never a
    #     torch.compile wrapper (whose keys gain an ``_orig_mod.`` prefix).
    # def load_state_dict(self, state) -> None:
    #     Strict load of what state_dict() returns.
    #
    # Distributed recipes (workload.world_size = G > 1; the probe runs on G ranks): state_dict
    # returns the full (gathered) weights on every rank and load_state_dict keeps this rank's
    # shard of them; optionally
    # def full_tensor(self, name, shard) -> Tensor:
    #     Parameter ``name``'s whole tensor from this rank's shard of it (a weight, gradient or
    #     update), a collective every rank calls; the probe compares whole gradients and updates.

@dataclass
class Invocation:
    """One external command, fully resolved for one trial."""

    argv: list[str] | str  # a list runs without a shell; a string runs through /bin/sh
    cwd: str | None
    env: dict[str, str] = field(default_factory=dict)  # added to the trial's environment
    log_file: str | None = None  # read steps from this file instead of the captured output
    time_limit_s: float | None = None


class ExternalTrainer(Protocol):
    """A trainer that runs as its own program and reports steps in its log."""

    tokens_per_step: int  # used when the log carries no token counts
    tokens_source: str  # where tokens_per_step came from (config, bucket shape)

    def invocation(self, trial_dir: str, warmup_steps: int, measured_steps: int,
                   timeout_s: float | None) -> Invocation:
        """The command to run for this trial; ``timeout_s`` is the launcher's limit."""
        ...

    def parse(self, lines: list[str]) -> list[Any]:
        """Step records (orchestrator.logparse.StepRecord) from the log, in order. Raises
        orchestrator.logparse.MalformedStepLine (a step line that cannot be read: status
        ``malformed_log``), LogParseError (no step lines: ``no_step_lines``) or another
        ValueError (``malformed_log``)."""
        ...

    def skip_steps(self, warmup_steps: int) -> int:
        """How many leading step records are warm-up."""
        ...


F = TypeVar("F", bound=Callable[..., Any])


def external_recipe(fn: F) -> F:
    """Mark a builder whose trainers run external commands (the trial takes the log path)."""
    fn.external = True  # type: ignore[attr-defined]
    return fn


def is_external(builder: Callable[..., Any]) -> bool:
    return bool(getattr(builder, "external", False))
