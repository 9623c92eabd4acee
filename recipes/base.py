"""What a workload provides to the orchestrator.

In-process recipes (the orchestrator times the steps)
------------------------------------------------------
A recipe is a function ``build(workload, bucket, device) -> Trainer``:

- ``workload`` is the workload's dataclass (:class:`recipes.gpt.config.GPTWorkloadConfig` for
  ``kind: gpt``, :class:`recipes.custom.config.CustomWorkloadConfig` for ``kind: custom``, whose
  ``params`` mapping carries the recipe's own settings and can be swept as
  ``workload.params.NAME``);
- ``bucket`` is the :class:`orchestrator.spec.config.BucketConfig` being measured (name, seq_len,
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

The trainer must provide :class:`Trainer` (``tokens_per_step``, ``samples_per_step``,
``batches()``, ``train_step(batch)``). Everything else is an optional hook, declared with its
default in :class:`TrainerHooks`: a trainer may subclass it (the bundled ones do) and override
what it has, or not subclass it at all; the orchestrator reaches every trainer through
:func:`with_hooks`, so a hook a trainer lacks takes its declared default. The correctness probe
needs a few more members (:data:`PROBE_HOOKS`, :class:`Probeable`); a trainer without them is
"not applicable" to the gate.

External recipes (the trainer is another program)
-------------------------------------------------
A builder decorated with :func:`external_recipe` returns an :class:`ExternalTrainer`; the trial
then runs its command under the orchestrator's time limit and takes step records from its log
(see ``recipes/command``). A builder decorated with :func:`host_only_recipe` runs on the host
CPU without torch (see ``recipes/synthetic``). The orchestrator sees a recipe as a
:class:`Recipe`: the builder with what it declares about itself
(:func:`orchestrator.worker.bootstrap.load_recipe`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar


class Trainer(Protocol):
    """One model, optimizer and data stream for one shape bucket on one device (required)."""

    tokens_per_step: int
    samples_per_step: int

    def batches(self) -> Iterator[Any]:
        """An endless, deterministic stream of batches (same seed, same batches). A batch may
        carry ``index`` (its position in the stream, recorded per step); a stream with a
        ``close()`` (a DataLoader's) is closed when the trial is done with it."""
        ...

    def train_step(self, batch: Any) -> Any:
        """Forward, backward and optimizer step; returns the loss as a (detached) tensor.

        Must not synchronise the device or call ``.item()``: the orchestrator syncs at step
        boundaries and reads the loss outside the timed window."""
        ...


class TrainerHooks:
    """The optional hooks, each with the default a trainer that lacks it gets."""

    # the formula behind useful_flops_per_step (shown next to every MFU); None = not stated
    useful_flops_definition: str | None = None

    def step_tags(self) -> list[str]:
        """Tags of the step just run (``compile``, ``epoch_boundary``, ``checkpoint``,
        ``validation``, ``profiler`` ...): a tagged step is excluded from the timing."""
        return []

    def visit_shapes(self) -> Any:
        """Run once inside the first (excluded) step: e.g. forward + backward on every other
        bucket shape, so recompiles for them are counted and paid up front."""
        return None

    def useful_flops_per_step(self) -> float | None:
        """Analytic model FLOPs of one training step on this device (recompute excluded)."""
        return None

    def extra_record(self) -> dict[str, Any]:
        """Recipe-specific facts for the trial record (never timings)."""
        return {}

    # the settings whose effect executes() describes in full, as a sweep names them
    # ("workload.tp.mode", "env.NAME"): a variant that differs from the baseline in any other
    # setting is never called equivalent by construction, whatever executes() says
    executes_covers: tuple[str, ...] = ()

    def executes(self) -> Any:
        """What this arm's step runs, where a setting is resolved at run time (an ``auto`` that
        picks per shape): JSON-able, equal for two arms exactly when their steps run the same
        code on the same shapes, as far as the settings in ``executes_covers`` decide it; None
        (the default): not described. Called after the measured steps, on every rank. The
        decision rule reads it: a variant that differs from the baseline only in covered
        settings and resolved to the baseline's step in every trial is equivalent by
        construction (orchestrator.analysis.decide)."""
        return None

    def switch(self, workload: Any) -> None:
        """Take on another arm's workload between steps, keeping the model, optimizer and data
        state (``protocol.pairing=steps``). Only the keys the recipe declares switchable
        (:func:`switchable`) may differ from the workload the trainer was built with; the
        orchestrator checks that before any trial runs."""
        raise NotImplementedError(f"{type(self).__name__} cannot switch arms between steps")

    def full_tensor(self, name: str, shard: Any) -> Any:
        """Parameter ``name``'s whole tensor from this rank's shard of it (a weight, gradient or
        update; a collective every rank calls). Unsharded trainers return the shard."""
        return shard


HOOKS = ("useful_flops_definition", "step_tags", "visit_shapes", "useful_flops_per_step",
         "extra_record", "full_tensor", "switch", "executes", "executes_covers")


class Probeable(Trainer, Protocol):
    """What the correctness probe needs besides :class:`Trainer`. A trainer without these
    cannot be probed: when the baseline's lacks them the gate is "not applicable" for the
    campaign (timing decides); when only a variant's (a swept recipe) does, that variant's gate
    is ``error``. Distributed recipes (world_size G > 1): ``state_dict`` returns the full
    (gathered) weights on every rank and ``load_state_dict`` keeps this rank's shard of them;
    ``full_tensor`` (a hook) gathers a sharded gradient or update."""

    model: Any  # the torch.nn.Module being trained (possibly a torch.compile wrapper)
    optimizer: Any  # its torch.optim.Optimizer

    def forward_outputs(self, batch: Any) -> Any:
        """The model's outputs for a batch under the precision policy (no loss, no backward)."""
        ...

    def forward_loss(self, batch: Any) -> Any:
        """The scalar training loss for a batch (no backward, no optimizer step)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Model weights as a checkpoint stores them: the underlying module's, never a
        torch.compile wrapper's (whose keys gain an ``_orig_mod.`` prefix)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Strict load of what state_dict() returns."""
        ...


PROBE_HOOKS = ("model", "optimizer", "batches", "forward_outputs", "forward_loss",
               "train_step", "state_dict", "load_state_dict")


def probe_hooks_missing(trainer: Any) -> list[str]:
    """The members of :class:`Probeable` the trainer lacks (empty: it can be probed)."""
    return [h for h in PROBE_HOOKS if not hasattr(trainer, h)]


class Hooked(TrainerHooks):
    """A trainer that does not subclass :class:`TrainerHooks`, with the hooks' defaults: its
    own members (required ones, hooks it has, anything else such as the probe's) are its own;
    a hook it lacks is the declared default."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.tokens_per_step = trainer.tokens_per_step
        self.samples_per_step = trainer.samples_per_step
        self.batches = trainer.batches
        self.train_step = trainer.train_step  # bound: no extra call inside the timed window
        for name in HOOKS:
            if hasattr(trainer, name):
                setattr(self, name, getattr(trainer, name))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.trainer, name)


def with_hooks(trainer: Any) -> Any:
    """``trainer`` with every optional hook (itself when it subclasses TrainerHooks)."""
    return trainer if isinstance(trainer, TrainerHooks) else Hooked(trainer)


@dataclass
class Invocation:
    """One external command, fully resolved for one trial."""

    argv: list[str] | str  # a list runs without a shell; a string runs through /bin/sh
    cwd: str | None
    env: dict[str, str] = field(default_factory=dict)  # added to the trial's environment
    # the launch's own variables (NNODES, NODE_RANK, MASTER_ADDR ...): given to the command
    # under its env, never recorded (they name machines)
    launch_env: dict[str, str] = field(default_factory=dict)
    log_file: str | None = None  # read steps from this file instead of the captured output
    time_limit_s: float | None = None


class ExternalTrainer(Protocol):
    """A trainer that runs as its own program and reports steps in its log (with
    ``useful_flops_per_step`` / ``useful_flops_definition`` as optional hooks)."""

    tokens_per_step: int | None  # used when the log carries no token counts; None: unknown
    tokens_source: str  # where tokens_per_step came from (config, bucket shape, unknown: why)

    def invocation(self, trial_dir: str, warmup_steps: int, measured_steps: int,
                   timeout_s: float | None) -> Invocation:
        """The command to run for this trial; ``timeout_s`` is the launcher's limit."""
        ...

    def parse(self, lines: list[str]) -> list[Any]:
        """Step records (orchestrator.core.logparse.StepRecord) from the log, in order. Raises
        orchestrator.core.logparse.MalformedStepLine (a step line that cannot be read: status
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


def host_only_recipe(fn: F) -> F:
    """Mark a builder whose trainers run on the host CPU only: the trial process gets the host
    CPU as its device and never imports torch."""
    fn.host_only = True  # type: ignore[attr-defined]
    return fn


def unprobeable(why: str) -> Callable[[F], F]:
    """Declare that a builder's trainers have none of :class:`Probeable`'s hooks, and why: the
    correctness gate says so at once instead of starting a probe process per arm to find out."""
    def mark(fn: F) -> F:
        fn.unprobeable = why  # type: ignore[attr-defined]
        return fn
    return mark


def switchable(*keys: str) -> Callable[[F], F]:
    """Declare the workload keys (``workload.``-prefixed dotted paths) a builder's trainers can
    change between steps through :meth:`TrainerHooks.switch`: a sweep over only these keys may
    run with ``protocol.pairing=steps`` (every arm of a round in one process, block by block)."""
    def mark(fn: F) -> F:
        fn.switchable = tuple(keys)  # type: ignore[attr-defined]
        return fn
    return mark


@dataclass(frozen=True)
class Recipe:
    """A recipe as the orchestrator uses it: its builder and what the builder declares."""

    name: str  # as the workload names it: a registry name or pkg.module:build
    build: Callable[..., Any]  # build(workload, bucket, device) -> trainer
    external: bool = False  # its trainers run another program (ExternalTrainer)
    host_only: bool = False  # host CPU only, no torch device
    switchable: tuple[str, ...] = ()  # keys its trainers switch between steps (switchable())
    # name -> fn(workload, bucket, device) returning a call that runs one operation once
    # (forward and backward) at the bucket's shapes; a sweep's microbench names one
    microbenchmarks: dict[str, Callable[..., Callable[[], Any]]] = field(default_factory=dict)
    unprobeable: str | None = None  # why its trainers cannot be probed (unprobeable()), if so

    @classmethod
    def of(cls, name: str, build: Callable[..., Any]) -> Recipe:
        return cls(name, build, bool(getattr(build, "external", False)),
                   bool(getattr(build, "host_only", False)),
                   tuple(getattr(build, "switchable", ())),
                   dict(getattr(build, "microbenchmarks", None) or {}),
                   getattr(build, "unprobeable", None))

    def trainer(self, workload: Any, bucket: Any, device: str) -> Any:
        """The recipe's trainer for one bucket on ``device``, with every optional hook."""
        return with_hooks(self.build(workload, bucket, device))

