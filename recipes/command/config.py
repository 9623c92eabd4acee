"""The ``command`` workload's schema (kind ``command``): an external training command, its
template placeholders and how its log is read, and their checks.

The schema registers itself under its kind; ``conf/workload/command_example.yaml`` extends it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import string
import sys
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Optional

from orchestrator.spec.config import (
    MISSING,
    ProtocolConfig,
    SweptArm,
    WorkloadConfig,
    workload_schema,
)
from orchestrator.core.errors import ConfigError, check_positive
from orchestrator.core.logparse import LogParseError, compile_pattern

# the template placeholders every command gets (besides workload.params)
BUILTINS = ("python", "steps", "warmup_steps", "measured_steps", "bucket", "seq_len",
            "micro_batch", "seed", "world_size", "trial_dir", "device",
            # a launch across machines (one command per node): recipes.command.recipe.node_values
            "nnodes", "node_rank", "nproc_per_node", "master_addr", "master_port",
            "rdzv_endpoint")


def template_fields(template: str) -> list[str]:
    """The ``{name}`` fields of a template (raises ValueError on unbalanced braces)."""
    return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]


# names of params that usually set the work of a step (a batch or sequence size, gradient
# accumulation): sweeping one is refused unless workload.tokens_per_step says otherwise
WORK_PARAM_WORDS = ("batch", "block_size", "seq_len", "seq_length", "sequence_length",
                    "context_length", "n_ctx", "accum", "tokens")


def looks_like_work(param: str) -> bool:
    """Whether a param's name says it sets the work per step (batch_size, grad_accum ...)."""
    name = param.lower()
    return any(w in name for w in WORK_PARAM_WORDS) or name in ("bs", "mbs", "gbs")


def _positive_int(key: str, value: Any, what: str) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok and isinstance(value, str) and value.strip().isdigit():
        value, ok = int(value), True
    if not ok or value <= 0:
        raise ConfigError(key, f"{what} is {value!r}, not a whole number > 0; state tokens per "
                          "step as a number or a product such as '{batch_size} * {seq_len}'")
    return int(value)


def work_per_step(w: Any, bucket: Any) -> tuple[int | None, str]:
    """(tokens of one step, where the figure comes from) for a command workload and one of
    its buckets, before any log is read (logged tokens take precedence in the trial record).
    ``workload.tokens_per_step``: a number, or a product of numbers and placeholders (params
    and built-ins) evaluated with this bucket; unset, the bucket shape when the command takes
    {seq_len} and {micro_batch}, else unknown (None): the bucket shape is then not the
    command's work. Raises ConfigError naming workload.tokens_per_step."""
    key, t = "workload.tokens_per_step", w.tokens_per_step
    if t is None:
        used = set()
        for text in (w.command, w.cwd or "", *map(str, w.env.values())):
            try:
                used |= set(template_fields(text))
            except ValueError:
                pass  # validate() names a bad template
        if {"seq_len", "micro_batch"} <= used:
            return bucket.seq_len * bucket.micro_batch * w.world_size, "bucket shape"
        missing = " and ".join(f"{{{n}}}" for n in ("seq_len", "micro_batch") if n not in used)
        return None, (f"unknown: the command does not take {missing}, so the bucket shape is "
                      "not its work per step; state it as workload.tokens_per_step (e.g. "
                      "'{batch_size} * {seq_len}' from the params), or log tokens per step")
    if not isinstance(t, str):
        return _positive_int(key, t, "the figure"), "config"
    vals = {**w.params, "seq_len": bucket.seq_len, "micro_batch": bucket.micro_batch,
            "world_size": w.world_size}
    total, shown = 1, []
    for term in t.split("*"):
        term = term.strip()
        names = template_fields(term) if "{" in term else []
        if names and term == f"{{{names[0]}}}":
            name = names[0]
            if name not in vals:
                raise ConfigError(key, f"{t!r}: unknown placeholder {{{name}}}; use workload."
                                  f"params names or seq_len, micro_batch, world_size")
            n = _positive_int(key, vals[name], f"{{{name}}}")
        else:
            n = _positive_int(key, term, f"{term!r} in {t!r}")
        total *= n
        shown.append(str(n))
    return total, f"config: {t.strip()} = {' x '.join(shown)}"


@dataclass
class CommandLogConfig:
    """How step records are read from an external command's log."""

    # a regex with named groups step, step_time_s | step_time_ms | time+unit, and optionally
    # loss, tokens, samples; None = the built-in formats of orchestrator.core.logparse
    pattern: Optional[str] = None
    # read this file (template, relative to cwd) instead of the command's stdout+stderr
    file: Optional[str] = None
    skip_steps: Optional[int] = None  # warm-up step lines skipped by count; None = protocol.warmup_steps
    # the trainer logs one line per this many steps, averaged over them (Megatron-LM's
    # --log-interval, torchtitan's metrics.log_freq): the first line's steps; later lines' come
    # from their step numbers. None = the first line covers the steps since 0 (a run resumed
    # from a checkpoint needs it; orchestrator.core.logparse)
    log_interval: Optional[int] = None


@workload_schema
@dataclass
class CommandWorkloadConfig(WorkloadConfig):
    """Any external training command as a trial; steps come from its log.

    ``command`` is a template: ``{name}`` is replaced by a value of ``params`` or a built-in
    (python, steps, warmup_steps, measured_steps, bucket, seq_len, micro_batch, seed,
    world_size, trial_dir). ``env`` values are templates too. A sweep varies
    ``workload.params.NAME`` (interpolated as an argument) or ``env.NAME`` (set for the trial)."""

    kind: str = "command"
    recipe: str = "command"
    command: str = MISSING
    shell: bool = False  # run through /bin/sh (pipes, &&); default: split like a shell, no shell
    cwd: Optional[str] = None  # working directory (template); None = the orchestrator's
    env: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    time_limit_s: Optional[float] = None  # None = 95 % of protocol.trial_timeout_s
    # a command that has logged every step line it was asked for ({steps}) and has not exited
    # this long after is stopped, and its steps kept (trial.json's ``teardown``): a trainer
    # hanging at exit (NCCL teardown, a dataloader worker, a final upload) costs this, not the
    # rest of time_limit_s. On one node; None = wait for it until time_limit_s
    exit_grace_s: Optional[float] = 60.0
    log: CommandLogConfig = field(default_factory=CommandLogConfig)
    # the work of one step, in tokens: a number, or a product of placeholders and numbers
    # stated from the params ("{batch_size} * {seq_len} * {grad_accum}"), so a sweep whose arms
    # differ in it is refused; tokens the log carries come first. None = the bucket shape
    # (seq_len x micro_batch x world_size) when the command takes {seq_len} and {micro_batch},
    # else unknown (no tokens/s)
    tokens_per_step: Any = None
    loss_rtol: float = 0.01  # correctness: largest relative loss difference per logged step
    # useful (model) FLOPs of one training step on one device, declared (e.g. nanoGPT's
    # estimate_mfu numerator: (6 N + 12 L H Q T) x tokens per device-step): MFU is then given
    # against the peak of hardware= at workload.precision, beside any MFU the trainer logs
    # (its own claim). One figure for every bucket, so one bucket per campaign. None = no MFU
    flops_per_step: Optional[float] = None
    # params the trainer reads through orchestrator.client.params() every step, so that one run
    # of the command switches between arms (protocol.pairing=steps: adjacent blocks paired, as
    # for the embedded recipes; docs/levers.md, "Your trainer, paired by steps"). Each is a key
    # of params, and not a placeholder of the command (the switched value reaches the trainer
    # only through the client)
    switchable: list[str] = field(default_factory=list)

    def validate(self) -> None:
        li = self.log.log_interval
        if li is not None and (isinstance(li, bool) or not isinstance(li, int) or li < 1):
            raise ConfigError("workload.log.log_interval",
                              f"must be a whole number of steps >= 1 (got {li!r}); give your "
                              "trainer's logging interval, or leave it unset")
        if self.flops_per_step is not None:
            check_positive("workload.flops_per_step", self.flops_per_step)
        if not self.command.strip():
            raise ConfigError("workload.command", "is empty; give the training command to run")
        clash = sorted(set(self.params) & set(BUILTINS))
        if clash:
            raise ConfigError(f"workload.params.{clash[0]}",
                              f"is a built-in placeholder; rename it (built-ins: {', '.join(BUILTINS)})")
        known = set(BUILTINS) | set(self.params)
        templates = {"workload.command": self.command, "workload.cwd": self.cwd or "",
                     "workload.log.file": self.log.file or "",
                     **{f"workload.env.{k}": str(v) for k, v in self.env.items()}}
        for key, text in templates.items():
            try:
                fields = template_fields(text)
            except ValueError as exc:
                raise ConfigError(key, f"bad template ({exc}); write a literal brace as {{{{ or }}}}") from None
            for name in fields:
                if name not in known:
                    raise ConfigError(key, f"unknown placeholder {{{name}}}; declare it under "
                                      f"workload.params or use one of: {', '.join(BUILTINS)}")
        self._check_switchable()
        if self.log.pattern is not None:
            try:
                compile_pattern(self.log.pattern)
            except LogParseError as exc:
                raise ConfigError("workload.log.pattern", str(exc)) from None
        if self.log.skip_steps is not None and self.log.skip_steps < 0:
            raise ConfigError("workload.log.skip_steps", f"must be >= 0, got {self.log.skip_steps}")
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise ConfigError("workload.time_limit_s", f"must be > 0, got {self.time_limit_s}")
        for b in self.buckets:  # each bucket's figure (a template's placeholders too)
            work_per_step(self, b)
        if self.loss_rtol < 0 or self.loss_rtol != self.loss_rtol:
            raise ConfigError("workload.loss_rtol", f"must be >= 0, got {self.loss_rtol}")
        self.check_paths()

    def _check_switchable(self) -> None:
        used: set[str] = set()
        for text in (self.command, self.cwd or "", self.log.file or "",
                     *map(str, self.env.values())):
            used |= set(template_fields(text))
        for i, name in enumerate(self.switchable):
            key = f"workload.switchable[{i}]"
            if name not in self.params:
                raise ConfigError(key, f"{name!r} is not a key of workload.params; declare its "
                                  f"default there (workload.params.{name}=...)")
            if name in used:
                raise ConfigError(key, f"{name!r} is also a placeholder of the command; a "
                                  "switched param reaches the trainer only through "
                                  "orchestrator.client.params(), so take it off the command line")

    def runs_own_process(self) -> bool:
        return True

    def sized_before_run(self) -> bool:
        return True

    def steps_asked(self, warmup_steps: int, measured_steps: int) -> tuple[int, bool] | None:
        """{steps} in the command, cwd or env: that many step lines (one more is allowed: a
        loop that also logs its step 0, as nanoGPT's does); {measured_steps} alone: the trial
        can be told its length, but not how many lines it logs (a warm-up of its own may come
        first), so at least that many; neither: None (its length is its own)."""
        used: set[str] = set()
        for text in (self.command, self.cwd or "", *map(str, self.env.values())):
            try:
                used |= set(template_fields(text))
            except ValueError:
                pass  # validate() names a bad template
        if "steps" in used:
            return warmup_steps + measured_steps, True
        if "measured_steps" in used:
            return measured_steps, False
        return None

    def check_selection(self, selected: list[str]) -> None:
        """The declared FLOPs are one figure: one bucket per campaign."""
        if self.flops_per_step is not None and len(selected) > 1:
            chosen = selected
            raise ConfigError(
                "workload.flops_per_step",
                f"is one figure for every bucket, but {len(chosen)} buckets are selected "
                f"({', '.join(chosen)}) and their steps differ in FLOPs; select one with "
                f"sweep.buckets=[{chosen[0]}] (a campaign per bucket), or drop it")

    def check_arms(self, protocol: ProtocolConfig, arms: list[SweptArm], key: str,
                   variable: str) -> None:
        """The command's log must outlive its time limit, and the arms must do the same work
        per step (a throughput sweep compares the same work in less time): where
        ``tokens_per_step`` states it from the params, arms whose figure differs are refused;
        where it is not stated, sweeping a param whose name says it sets the work (a batch or
        sequence size, gradient accumulation) is refused with the way to state it. Tokens a
        trainer logs are compared after the trials
        (:func:`orchestrator.analysis.loss_gate.work_gates`)."""
        if self.time_limit_s is not None and self.time_limit_s >= protocol.trial_timeout_s:
            raise ConfigError("workload.time_limit_s",
                              f"{self.time_limit_s:g} s must be below protocol.trial_timeout_s="
                              f"{protocol.trial_timeout_s:g} s so the command's log is kept")
        for arm in arms[1:]:
            _check_same_work(self, arms[0], arm, key, variable)

    def check_paths(self) -> None:
        """The working directory and the program exist here, before any trial (otherwise
        every trial fails to start and the campaign ends invalid). Templates whose value is
        only known per trial ({trial_dir}, a param a sweep varies) are not checked."""
        fixed = {"python": sys.executable}
        cwd = None
        if self.cwd:
            if set(template_fields(self.cwd)) - set(fixed):
                return
            cwd = Path(os.path.expanduser(self.cwd.format_map(fixed)))
            if not cwd.is_dir():
                raise ConfigError("workload.cwd", f"{cwd} is not a directory; set workload.cwd "
                                  "to the directory the command runs in")
        if self.shell:
            return  # a shell line: its first word may be a builtin, a variable or a function
        try:
            first = shlex.split(self.command)[0]
        except (ValueError, IndexError):
            return
        if set(template_fields(first)) - set(fixed):
            return
        exe = first.format_map(fixed)
        if "/" in exe:
            path = Path(os.path.expanduser(exe))
            if not path.is_absolute():
                path = (cwd or Path.cwd()) / path
            if not path.is_file() or not os.access(path, os.X_OK):
                what = "is not executable" if path.is_file() else "does not exist"
                raise ConfigError("workload.command", f"{exe} {what} (looked for {path}); give "
                                  "the path of the program to run (relative paths are from "
                                  "workload.cwd)")
        elif shutil.which(exe, path=self.env.get("PATH") or os.environ.get("PATH")) is None:
            raise ConfigError("workload.command", f"{exe!r} is not on PATH; give the program's "
                              "full path, or {python} for this Python")


def _check_same_work(w: CommandWorkloadConfig, base: SweptArm, arm: SweptArm, key: str,
                     variable: str) -> None:
    for b in w.buckets:
        mine, theirs = (work_per_step(x.workload, b)[0] for x in (base, arm))
        if mine != theirs:
            raise ConfigError(key, f"{variable!r} is frozen: it changes the work per "
                              f"step (workload.tokens_per_step: {mine} tokens in "
                              f"{base.label!r}, {theirs} in {arm.label!r}, bucket {b.name}); "
                              "a throughput sweep compares the same work per step, so "
                              "pick another variable")
    if w.tokens_per_step is not None:
        return
    for path in sorted(arm.differing):
        name = path.removeprefix("workload.params.")
        if path.startswith("workload.params.") and looks_like_work(name):
            raise ConfigError(key, f"{path!r} is frozen: by its name it sets the work per "
                              "step (a batch or sequence size), which a throughput sweep "
                              "must keep. If it does not, state the work per step: "
                              f"workload.tokens_per_step='{{seq_len}} * {{micro_batch}}' "
                              "(a product of params and built-ins); arms that differ in "
                              "it are refused")
