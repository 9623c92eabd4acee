"""The range of every numeric config key: one table, applied to every numeric field.

A type says int or float; it does not say that ``protocol.paired_min_s=inf`` makes every trial
fail, that ``protocol.block_steps=1000000000`` asks the arms for six billion steps, or that
``protocol.measured_min_s=1e308`` overflows the sizing. :data:`BOUNDS` gives each numeric field
of every config dataclass (keyed ``Class.field``, the class that declares it, so an inherited
field has one entry) its least and largest value and whether it is a whole number;
:func:`check_numbers` walks a config and refuses the first value outside its bound in one line
naming the dotted key and the range (ConfigError: exit 2 before any work). A numeric field
without an entry is a test failure (tests/spec/test_bounds.py enumerates them), so a new key
cannot slip through; at run time it still gets :data:`FALLBACK` (finite, not absurd).

The maxima are generous, not tight: each is far above any real setting and exists so that a
typo, ``inf`` or ``1e308`` is refused instead of hanging or crashing a campaign hours later.
Tighter rules that depend on other keys or on the recipe stay where they were
(orchestrator.campaign.validate, each recipe's ``validate``). The pre-flight walks a config
twice: first only whether each value is a finite number of its kind (``ranges=False``: before
any check computes with one), then the ranges, after the specific checks whose messages say
more; a workload's ranges come before its recipe's own checks, which compute with them.

Layers: imports only the standard library and orchestrator.core.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from dataclasses import dataclass
from typing import Any, Union

from orchestrator.core.errors import ConfigError


@dataclass(frozen=True)
class Bound:
    """``lo`` <= value <= ``hi`` (``lo_open`` / ``hi_open``: strictly), a whole number when
    ``integer``; ``why`` says why the maximum is where it is (shown when it is exceeded).
    ``interval``: both ends matter alike (a fraction, a probability), so a value outside is
    told the interval ("must be in [0, 1)"), as the recipes' own checks word it."""

    lo: float
    hi: float
    integer: bool = False
    lo_open: bool = False
    hi_open: bool = False
    why: str = ""
    interval: bool = False

    def interval_text(self) -> str:
        return (f"{'(' if self.lo_open else '['}{_num(self.lo)}, {_num(self.hi)}"
                f"{')' if self.hi_open else ']'}")

    def range_text(self) -> str:
        return f"{'an integer' if self.integer else 'a number'} in {self.interval_text()}"

    def problem(self, value: Any, ranges: bool = True) -> str | None:
        """Why ``value`` is out of this bound (a phrase), None when it is in; ``ranges=False``:
        only whether it is a finite number of the right kind."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number, got {value!r}"
        if isinstance(value, float) and math.isnan(value):
            return "must be a number, got nan"  # the wording of check_finite, which runs first
        if isinstance(value, float) and math.isinf(value):
            return f"must be finite, got {value}"
        if self.integer and isinstance(value, float) and not value.is_integer():
            return f"must be a whole number, got {value!r}"
        if not ranges:
            return None
        below = value < self.lo or (self.lo_open and value == self.lo)
        above = value > self.hi or (self.hi_open and value == self.hi)
        if self.interval and (below or above):
            return f"must be in {self.interval_text()} ({self.why}), got {_got(value)}"
        if below:
            return f"must be {'>' if self.lo_open else '>='} {_num(self.lo)}, got {_got(value)}"
        if above:
            why = f" ({self.why})" if self.why else ""
            return (f"must be {'<' if self.hi_open else '<='} {_num(self.hi)}{why}, got "
                    f"{_got(value)}")
        return None

    def check(self, key: str, value: Any, ranges: bool = True) -> Any:
        """``value`` when it is in bound, else ConfigError naming ``key`` and the range."""
        why = self.problem(value, ranges)
        if why and self.interval and why.startswith("must be in"):
            raise ConfigError(key, why)  # the interval is the fix
        if why:
            raise ConfigError(key, f"{why}; set {key} to {self.range_text()}")
        return value


def _num(x: float) -> str:
    """A bound as people write it (1000000, 604800, 0.999999999)."""
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e16):
        return str(int(x))
    return f"{x:.12g}"


def _got(x: float) -> str:
    """A given value exactly as it came (1e+308, 0.9999999999999, a 30-digit int)."""
    return str(x) if isinstance(x, int) else repr(x)


# --------------------------------------------------------------------------- the maxima

# Steps: a million steps of the smallest step timed here (~0.1 ms) is minutes, of a real
# model's step days; a larger count is a typo, and the arms would run until the timeout.
MAX_STEPS = 1_000_000
_STEPS = "a million steps is days of a real model's training"
# Seconds: a week. No trial, timeout or measuring floor of a benchmark runs longer.
WEEK_S = 7 * 24 * 3600.0
_WEEK = "a week"
# Rounds: a thousand fresh processes per arm and bucket; the default stops at 7, the thorough
# protocol at 15, and beyond a thousand the per-look error rates underflow.
MAX_ROUNDS = 1000
_ROUNDS = "a thousand rounds; the default protocol stops at 7"
# Re-runs of a trial (or requeues of a job): a hundred is already a broken machine.
MAX_RETRIES = 100
_RETRIES = "a trial that fails a hundred times is broken, not unlucky"
# Cores and devices: above any machine's (Linux's NR_CPUS is at most 8192).
MAX_CORE = 65_535
MAX_DEVICE = 1023
# Seeds: 32 bits, what numpy's legacy seeding and every data loader take.
MAX_SEED = 2**32 - 1
# Relative figures (tolerances, margins, rates): beyond this every value passes alike.
MAX_REL = 1000.0


def _steps(lo: int = 0) -> Bound:
    return Bound(lo, MAX_STEPS, integer=True, why=_STEPS)


def _seconds(zero: bool = False) -> Bound:
    return Bound(0.0, WEEK_S, lo_open=not zero, why=_WEEK)


def _rounds() -> Bound:
    return Bound(1, MAX_ROUNDS, integer=True, why=_ROUNDS)


def _retries() -> Bound:
    return Bound(0, MAX_RETRIES, integer=True, why=_RETRIES)


def _count(lo: int, hi: int, why: str) -> Bound:
    return Bound(lo, hi, integer=True, why=why)


def _rel(zero: bool = True, hi: float = MAX_REL, why: str = "beyond it every value passes") -> Bound:
    return Bound(0.0, hi, lo_open=not zero, why=why)


_SEED = Bound(0, MAX_SEED, integer=True, why="a 32-bit seed")
_CORE = Bound(0, MAX_CORE, integer=True, why="above any machine's core numbers")
_DEVICE = Bound(0, MAX_DEVICE, integer=True, why="above any node's device indices")
_UNIT = Bound(0.0, 1.0, hi_open=True, why="a fraction", interval=True)  # dropout, betas ...
_LR = _rel(hi=1000.0, why="a learning rate that large diverges at the first step")
_DIM = _count(1, 10_000_000, "ten million")  # model widths, vocabularies
_LAYERS = _count(1, 100_000, "a hundred thousand")
_BANDWIDTH = Bound(0.0, 1e6, lo_open=True, why="a million GB/s, far above any link or memory")


# --------------------------------------------------------------------------- the table

# Class.field -> its bound. The class is the one that declares the field (recipes' schemas
# included: they live beside their recipes, this table names them by class).
BOUNDS: dict[str, Bound] = {
    # ---- protocol
    "ProtocolConfig.warmup_steps": _steps(),
    "ProtocolConfig.warmup_max_steps": _steps(),
    "ProtocolConfig.warmup_window": _steps(1),
    "ProtocolConfig.warmup_tolerance": _rel(zero=False, hi=100.0,
                                            why="relative: 100 = 10000 %"),
    "ProtocolConfig.measured_steps": _steps(3),
    "ProtocolConfig.measured_min_s": _seconds(zero=True),
    "ProtocolConfig.repeats": _rounds(),
    "ProtocolConfig.max_rounds": _rounds(),
    "ProtocolConfig.adaptive_step_rounds": _rounds(),
    "ProtocolConfig.aa_alpha": Bound(0.0, 0.5, lo_open=True, why="an error rate",
                                     interval=True),
    "ProtocolConfig.duet_cpus": _CORE,
    "ProtocolConfig.calibration_max_age_h": Bound(0.0, 1e5, why="hours: 1e5 is eleven years"),
    "ProtocolConfig.arm_cache_max_gb": Bound(0.0, 1e6, lo_open=True, why="gigabytes"),
    "ProtocolConfig.budget_node_hours": Bound(0.0, 1e6, why="node-hours: 1e6 is a century of "
                                              "a 1000-node cluster"),
    "ProtocolConfig.block_steps": _steps(1),
    "ProtocolConfig.switch_warmup_steps": _steps(),
    "ProtocolConfig.paired_min_s": _seconds(zero=True),
    # an error rate under 1e-9 asks for t quantiles no campaign's rounds can reach; bisect's
    # per-comparison confidence (Bonferroni over its comparisons) stays well under it
    "ProtocolConfig.confidence": Bound(0.5, 1 - 1e-9, why="an error rate of at least 1e-9"),
    # the power of the spending function: 0 Bonferroni, 3 the default; at 10 the first look
    # spends (repeats / max_rounds)^10 of the error rate, next to nothing already
    "ProtocolConfig.alpha_spending": Bound(0.0, 10.0, why="beyond it the early looks spend "
                                                          "nothing"),
    "ProtocolConfig.min_effect": _rel(hi=10.0, why="an equivalence band of 11x either way"),
    "ProtocolConfig.ni_margin": _rel(hi=1.0, why="a bucket 100 % slower"),
    "ProtocolConfig.warn_cv": _rel(zero=False, hi=100.0, why="a spread of 10000 %"),
    "ProtocolConfig.trial_timeout_s": _seconds(),
    "ProtocolConfig.infra_retries": _retries(),
    "ProtocolConfig.interference_cores": Bound(0.0, float(MAX_CORE + 1), lo_open=True,
                                               why="above any machine's cores"),
    "ProtocolConfig.interference_retries": _retries(),
    "ProtocolConfig.seed": _SEED,
    # a projection is arithmetic (N x the step time), so it may go far beyond MAX_STEPS
    "ProtocolConfig.projection_steps": _count(1, 10**12, "a trillion steps"),
    "CorrectnessProtocolConfig.steps": _steps(2),
    "CorrectnessProtocolConfig.timeout_s": _seconds(),
    # ---- invariants
    "ToleranceConfig.rel_l2": _rel(),
    "ToleranceConfig.atol": _rel(),
    "ToleranceConfig.rtol": _rel(),
    "ToleranceConfig.trajectory_rtol": _rel(),
    "ToleranceConfig.update_rel_l2": _rel(),
    # ---- launcher
    "LauncherConfig.max_parallel": _count(1, 1024, "a thousand trials at once"),
    "LauncherConfig.devices": _DEVICE,
    "LauncherConfig.cpu_affinity": _CORE,
    "SlurmLauncherConfig.time_limit_min": _count(1, 7 * 24 * 60, "a week"),
    "SlurmLauncherConfig.gpus_per_node": _count(0, 1024, "above any node's"),
    "SlurmLauncherConfig.cpus_per_task": _count(1, MAX_CORE + 1, "above any node's"),
    "SlurmLauncherConfig.mem_gb": Bound(0.0, 1e6, lo_open=True, why="a petabyte"),
    "SlurmLauncherConfig.array_parallelism": _count(1, 10_000, "ten thousand jobs at once"),
    "SlurmLauncherConfig.max_requeue": _retries(),
    "SlurmLauncherConfig.poll_interval_s": Bound(0.0, 3600.0, lo_open=True, why="an hour"),
    "SlurmLauncherConfig.lost_after_s": _seconds(),
    # ---- hardware
    "HardwareConfig.calibration_size": _count(0, 65_536, "a 65536-square fp32 matmul is 16 "
                                                         "GiB a matrix"),
    "HardwareConfig.calibration_min_s": Bound(0.0, 3600.0, lo_open=True,
                                              why="an hour of calibration before any trial"),
    "HardwareConfig.peak_tflops": Bound(0.0, 1e6, lo_open=True,
                                        why="a million TFLOP/s, far above any device"),
    "HardwareConfig.memory_bandwidth_gbps": _BANDWIDTH,
    "HardwareConfig.intra_domain_bandwidth_gbps": _BANDWIDTH,
    "HardwareConfig.inter_domain_bandwidth_gbps": _BANDWIDTH,
    "HardwareConfig.collective_latency_us": Bound(0.0, 1e7, lo_open=True, why="ten seconds"),
    "HardwareConfig.domain_size": _count(1, 1_000_000, "a million devices"),
    # ---- profile
    "ProfileConfig.wait_steps": _steps(),
    "ProfileConfig.warmup_steps": _steps(),
    "ProfileConfig.active_steps": _steps(1),
    "ProfileConfig.system_steps": _steps(1),
    "ProfileConfig.launch_skip": _steps(),
    "ProfileConfig.launch_count": _steps(1),
    "ProfileConfig.tool_timeout_s": _seconds(),
    # ---- workload: every kind's common fields
    "WorkloadConfig.seed": _SEED,
    "WorkloadConfig.world_size": _count(1, 1_000_000, "a million ranks"),
    "WorkloadConfig.nnodes": _count(1, 100_000, "a hundred thousand machines"),
    "BucketConfig.seq_len": _DIM,
    "BucketConfig.micro_batch": _count(1, 1_000_000, "a million sequences a step"),
    "BucketConfig.weight": Bound(0.0, 1e9, lo_open=True, why="relative weights"),
    "DataConfig.seed": _SEED,
    "DataConfig.text_mib": Bound(0.0, 100_000.0, lo_open=True, why="100 GiB of text"),
    # ---- workload: gpt (recipes/gpt/config.py)
    "GPTModelConfig.vocab_size": _DIM,
    "GPTModelConfig.n_layer": _LAYERS,
    "GPTModelConfig.n_head": _LAYERS,
    "GPTModelConfig.d_model": _DIM,
    "GPTModelConfig.d_ff": _DIM,
    "GPTModelConfig.dropout": _UNIT,
    "AttentionConfig.block_q": _count(1, 65_536, "a tile of 65536 rows"),
    "AttentionConfig.block_k": _count(1, 65_536, "a tile of 65536 rows"),
    "AttentionConfig.num_warps": _count(1, 64, "Triton's most"),
    "AttentionConfig.num_stages": _count(1, 64, "far past any pipeline"),
    "OptimizerConfig.lr": _LR,
    "OptimizerConfig.weight_decay": _rel(),
    "OptimizerConfig.beta1": _UNIT,
    "OptimizerConfig.beta2": _UNIT,
    "OptimizerConfig.grad_clip": Bound(0.0, 1e9, why="0 disables clipping"),
    "LoaderConfig.num_workers": _count(0, 1024, "a thousand loader processes"),
    "LoaderConfig.prefetch_factor": _count(1, 1024, "a thousand batches in flight a worker"),
    "LoaderConfig.epoch_batches": _steps(),
    # ---- workload: muon_tp (recipes/muon/config.py)
    "MuonTPModelConfig.vocab_size": _DIM,
    "MuonTPModelConfig.n_layer": _LAYERS,
    "MuonTPModelConfig.n_head": _LAYERS,
    "MuonTPModelConfig.d_model": _DIM,
    "MuonTPModelConfig.d_ff": _DIM,
    "MuonTPModelConfig.n_experts": _count(0, 100_000, "a hundred thousand experts"),
    "MuonTPModelConfig.d_expert": _DIM,
    "MuonOptimizerConfig.lr": _LR,
    "MuonOptimizerConfig.momentum": _UNIT,
    "MuonOptimizerConfig.weight_decay": _rel(),
    "MuonOptimizerConfig.ns_steps": _count(1, 100, "Newton-Schulz converges in about 5"),
    "MuonOptimizerConfig.eps": Bound(0.0, 1.0, lo_open=True, why="a guard against zero"),
    "MuonOptimizerConfig.extra_scale_factor": _rel(),
    "MuonOptimizerConfig.adamw_lr": _LR,
    "MuonOptimizerConfig.adamw_beta1": _UNIT,
    "MuonOptimizerConfig.adamw_beta2": _UNIT,
    "MuonOptimizerConfig.adamw_weight_decay": _rel(),
    # ---- workload: synthetic (recipes/synthetic/config.py)
    "SyntheticWorkloadConfig.matrix_size": _count(1, 65_536, "16 GiB a matrix"),
    "SyntheticWorkloadConfig.units_per_token": Bound(0.0, 1e6, lo_open=True,
                                                     why="a million work units a token"),
    "SyntheticWorkloadConfig.extra_work_fraction": Bound(-0.9, 10.0, interval=True,
                                                         why="a tenth to 11x the work"),
    "SyntheticWorkloadConfig.slow_first_steps": _steps(),
    "SyntheticWorkloadConfig.slow_factor": Bound(0.0, 1000.0, lo_open=True,
                                                 why="a thousand times the work"),
    "SyntheticWorkloadConfig.epoch_steps": _steps(),
    # ---- workload: command (recipes/command/config.py)
    "CommandWorkloadConfig.time_limit_s": _seconds(),
    "CommandWorkloadConfig.exit_grace_s": _seconds(),
    "CommandWorkloadConfig.loss_rtol": _rel(),
    "CommandWorkloadConfig.flops_per_step": Bound(0.0, 1e21, lo_open=True,
                                                  why="a zettaFLOP a step"),
    "CommandLogConfig.skip_steps": _steps(),
    "CommandLogConfig.log_interval": _steps(1),
}

# what a numeric field missing from BOUNDS gets at run time (a test makes sure none is)
FALLBACK = Bound(-1e15, 1e15, why="no bound declared for this key")


# --------------------------------------------------------------------------- the walk

_NUMBERS = (int, float)


def _scalar(t: Any) -> type | None:
    """int or float when ``t`` is that type, an Optional of it, or a list / dict (nested) of
    it; else None. bool is not a number here."""
    if t is bool:
        return None
    if t in _NUMBERS:
        return t  # type: ignore[no-any-return]
    origin = typing.get_origin(t)
    args = typing.get_args(t)
    if origin is Union:
        inner = [a for a in args if a is not type(None)]
        return _scalar(inner[0]) if len(inner) == 1 else None
    if origin in (list, tuple) and args:
        return _scalar(args[0])
    if origin is dict and len(args) == 2:
        return _scalar(args[1])
    return None


@functools.cache
def numeric_fields(cls: type) -> tuple[tuple[str, str], ...]:
    """(field name, table key) of each numeric field of dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if _scalar(hints.get(f.name)) is None:
            continue
        owner = next((c for c in cls.__mro__ if f.name in vars(c).get("__annotations__", {})),
                     cls)
        out.append((f.name, f"{owner.__name__}.{f.name}"))
    return tuple(out)


def bound_for(table_key: str) -> Bound:
    return BOUNDS.get(table_key, FALLBACK)


def _leaves(value: Any, key: str) -> list[tuple[str, Any]]:
    if value is None:
        return []
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in _leaves(v, f"{key}.{k}")]
    if isinstance(value, (list, tuple)):
        return [x for i, v in enumerate(value) for x in _leaves(v, f"{key}[{i}]")]
    return [(key, value)]


def check_numbers(obj: Any, key: str = "", ranges: bool = True) -> None:
    """ConfigError for the first numeric value under ``obj`` (a config dataclass, and every
    dataclass inside it, in lists and dicts too) outside its bound; ``key``: ``obj``'s dotted
    name (``""`` for the root Config). ``ranges=False``: only that each is a finite number of
    its kind (the pre-flight's first pass, before checks that compute with the values)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        numeric = dict(numeric_fields(type(obj)))
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            name = f"{key}.{f.name}" if key else f.name
            if f.name in numeric:
                bound = bound_for(numeric[f.name])
                for leaf_key, leaf in _leaves(value, name):
                    bound.check(leaf_key, leaf, ranges)
            else:
                check_numbers(value, name, ranges)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            check_numbers(v, f"{key}.{k}", ranges)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            check_numbers(v, f"{key}[{i}]", ranges)


# --------------------------------------------------------------------------- across keys

# the least error rate one look may spend: below it 1 - alpha / 2 rounds to 1.0 in floating
# point once split over scopes, and the t quantile of the interval is undefined
MIN_LOOK_ALPHA = 1e-12


def check_spending(p: Any) -> None:
    """The first look (after protocol.repeats of protocol.max_rounds rounds) spends
    alpha x (repeats / max_rounds)^alpha_spending of the error rate: refuse a protocol whose
    first look would spend less than :data:`MIN_LOOK_ALPHA`."""
    alpha = 1 - p.confidence
    if p.max_rounds <= p.repeats or p.alpha_spending == 0:
        first = alpha
    else:
        first = alpha * (p.repeats / p.max_rounds) ** p.alpha_spending
    if first < MIN_LOOK_ALPHA:
        raise ConfigError("protocol.alpha_spending", (
            f"{_num(p.alpha_spending)} leaves the first look (after protocol.repeats="
            f"{p.repeats} of protocol.max_rounds={p.max_rounds} rounds) an error rate of "
            f"{first:.1e}, below {MIN_LOOK_ALPHA:g}, where no interval can be computed; lower "
            "protocol.alpha_spending (3 is the default) or raise protocol.repeats"))
