"""Typed configuration: one dataclass per config group, registered with Hydra's ConfigStore.

The YAML files under ``conf/`` extend these schemas (``defaults: [/schema/<group>/<name>@_here_]``),
so a misspelt key or a wrong type fails at composition time with the dotted key in the message.
Semantic checks that a type cannot express live in :func:`validate`, which raises
:class:`~orchestrator.errors.ConfigError` naming the key, the valid choices and the fix.

Below the Hydra entry point the code works on these plain dataclasses only (no omegaconf).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Optional

from orchestrator.errors import ConfigError

SCHEMA_VERSION = 1

# omegaconf's marker for a required value; spelled out so trial processes need not import it
MISSING: Any = "???"

PRECISIONS = ("fp32", "bf16", "fp16")
TOLERANCE_PRECISIONS = ("fp32", "tf32", "bf16", "fp16")  # tf32: fp32 with tf32 matmuls
CORRECTNESS_MODES = ("once", "off")
ATTENTION_BACKENDS = ("eager", "sdpa", "tiled", "flash_attn")
SDPA_KERNELS = ("auto", "math", "flash", "efficient", "cudnn")
DEVICES = ("auto", "cpu", "cuda", "musa")
LAUNCHERS = ("inline", "local", "slurm")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")
DATA_KINDS = ("synthetic", "text")
ON_MISMATCH = ("refuse", "flag")
PROFILE_MODES = ("off", "framework", "system", "compute")


# --------------------------------------------------------------------------- workload


@dataclass
class BucketConfig:
    """One shape bucket: a (sequence length, micro-batch) the workload trains on."""

    name: str = MISSING
    seq_len: int = MISSING
    micro_batch: int = MISSING
    # share of the training steps spent in this bucket (mixture = total work / total time)
    weight: float = 1.0


@dataclass
class AttentionConfig:
    backend: str = "sdpa"  # eager | sdpa | tiled | flash_attn
    sdpa_kernel: str = "auto"  # auto | math | flash | efficient | cudnn (sdpa only)
    block_q: int = 64  # tiled only: query rows per tile
    block_k: int = 64  # tiled only: key/value rows per tile


@dataclass
class CompileConfig:
    """torch.compile of the loss function (model forward + loss; backward through AOTAutograd).

    Compile and autotune happen in the warm-up steps, which are excluded from steady state; the
    trial records their cost as ``compile_time_s`` with graph breaks and recompiles."""

    mode: str = "off"  # off (eager) | default | reduce-overhead | max-autotune-no-cudagraphs | ...
    backend: str = "inductor"  # inductor | aot_eager | eager (aot_eager/eager: dynamo only, no codegen)
    fullgraph: bool = False  # a graph break becomes an error (the trial fails) instead of a split
    dynamic: Optional[bool] = None  # None = torch's automatic dynamic shapes; True/False forces it
    mark_dynamic: bool = False  # mark the sequence dimension of every batch dynamic
    # in the first (excluded) step, also run forward + backward once on every other bucket
    # shape of the workload, so the shape policy's recompiles are counted and paid for up front
    visit_buckets: bool = False


@dataclass
class GPTModelConfig:
    vocab_size: int = 512
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 128
    d_ff: int = 512
    dropout: float = 0.0
    # recompute each block's activations in the backward (torch.utils.checkpoint): executed
    # FLOPs then exceed useful FLOPs by the recomputed forward, so HFU > MFU
    activation_checkpointing: bool = False
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)


@dataclass
class OptimizerConfig:
    name: str = "adamw"
    lr: float = 3e-4
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # 0 disables clipping


@dataclass
class DataConfig:
    # synthetic: deterministic seeded token stream, made in the training process;
    # text: a text file tokenized (byte-pair encoding) and packed on the fly by a DataLoader
    kind: str = "synthetic"
    seed: int = 1234
    text_path: Optional[str] = None  # text only: a UTF-8 file, one document per line; None = generated
    text_mib: float = 2.0  # text only: size of the generated file (MiB); also the read cap for a given one
    cache_dir: Optional[str] = None  # generated text and trained tokenizer (default: system temp dir)


@dataclass
class LoaderConfig:
    """torch DataLoader settings for ``data.kind=text`` (how batches are made, not which)."""

    num_workers: int = 0  # 0 = batches are made in the training process
    pin_memory: bool = False  # page-locked host buffers (no effect without an accelerator)
    prefetch_factor: Optional[int] = None  # batches in flight per worker (needs num_workers > 0)
    persistent_workers: bool = False  # keep workers across epochs (needs num_workers > 0)
    # batches per loader epoch; 0 = one endless epoch. With N > 0 the loader is re-iterated every
    # N batches (the stream continues), so worker start-up recurs unless persistent_workers
    epoch_batches: int = 0


@dataclass
class WorkloadConfig:
    """Fields every workload has, whatever its recipe."""

    name: str = MISSING
    kind: str = MISSING  # the schema (gpt, ...): which fields this workload has
    # the recipe that builds it: a registered name, or an import path "pkg.module:build" for
    # one's own recipe taking the same workload fields
    recipe: str = MISSING
    precision: str = "fp32"  # fp32 | bf16 | fp16 (autocast policy)
    seed: int = 0
    world_size: int = 1
    buckets: list[BucketConfig] = MISSING


@dataclass
class GPTWorkloadConfig(WorkloadConfig):
    kind: str = "gpt"
    recipe: str = "gpt"
    model: GPTModelConfig = field(default_factory=GPTModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    loader: LoaderConfig = field(default_factory=LoaderConfig)


@dataclass
class CommandLogConfig:
    """How step records are read from an external command's log."""

    # a regex with named groups step, step_time_s | step_time_ms | time+unit, and optionally
    # loss, tokens, samples; None = the built-in formats of orchestrator.logparse
    pattern: Optional[str] = None
    # read this file (template, relative to cwd) instead of the command's stdout+stderr
    file: Optional[str] = None
    skip_steps: Optional[int] = None  # warm-up step lines skipped by count; None = protocol.warmup_steps


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
    log: CommandLogConfig = field(default_factory=CommandLogConfig)
    tokens_per_step: Optional[int] = None  # None = from the log, else bucket seq_len x micro_batch x world_size
    loss_rtol: float = 0.01  # correctness: largest relative loss difference per logged step
    # useful (model) FLOPs of one training step on one device, declared (e.g. nanoGPT's
    # estimate_mfu numerator: (6 N + 12 L H Q T) x tokens per device-step): MFU is then given
    # against the peak of hardware= at workload.precision, beside any MFU the trainer logs
    # (its own claim). One figure for every bucket, so one bucket per campaign. None = no MFU
    flops_per_step: Optional[float] = None


@dataclass
class CustomWorkloadConfig(WorkloadConfig):
    """An in-process user recipe (``recipe: my_pkg.module:build``) with its own parameters."""

    kind: str = "custom"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class MuonTPModelConfig:
    """A tensor-parallel transformer: its matrices are Muon's tall, wide and square shapes."""

    vocab_size: int = 128
    n_layer: int = 1
    n_head: int = 4  # d_model must divide by it
    d_model: int = 64
    d_ff: int = 256
    n_experts: int = 0  # >0 adds expert FC1/FC2 pairs behind a dense soft router
    d_expert: int = 128
    sharding: str = "megatron"  # megatron (QKV/FC1 on dim 0, proj/FC2 on dim 1) | dim0 (all)


@dataclass
class MuonOptimizerConfig:
    name: str = "muon"
    lr: float = 0.02
    momentum: float = 0.95
    nesterov: bool = True
    weight_decay: float = 0.0  # decoupled
    ns_steps: int = 5
    coefficients: str = "quintic"  # simple | quintic | cubic | polar_express | cans
    # Frobenius normalisation floor: X / max(||X||_F, eps). Emerging-Optimizers' 1e-15; a larger
    # floor shrinks small-norm updates and changes their orthogonalisation
    eps: float = 1e-15
    ns_dtype: str = "fp32"  # fp32 | bf16 (state stays fp32)
    scale_mode: str = "spectral"  # shape_scaling | spectral | unit_rms_norm
    extra_scale_factor: float = 0.2
    adamw_lr: float = 3e-3  # embeddings, norms, head
    adamw_beta1: float = 0.9
    adamw_beta2: float = 0.95
    adamw_weight_decay: float = 0.0


@dataclass
class TPConfig:
    mode: str = "duplicated"  # duplicated | distributed | auto (opt-in)
    cost_profile: str = "measured"  # auto only: measured (calibrated on the group) | registry | none
    crosses_domain: Optional[bool] = None  # None = from topology; true/false overrides it
    syrk: bool = False  # cost model only: price the Gram and A*A as SYRK (half the FLOPs)


@dataclass
class MuonTPWorkloadConfig(WorkloadConfig):
    kind: str = "muon_tp"
    recipe: str = "muon_tp"
    model: MuonTPModelConfig = field(default_factory=MuonTPModelConfig)
    optimizer: MuonOptimizerConfig = field(default_factory=MuonOptimizerConfig)
    tp: TPConfig = field(default_factory=TPConfig)
    data: DataConfig = field(default_factory=DataConfig)


# --------------------------------------------------------------------------- protocol


@dataclass
class CorrectnessProtocolConfig:
    """The correctness gate: one probe process per arm (plus a baseline repeat for the noise
    floor), run once per campaign before the timed rounds."""

    mode: str = "once"  # once | off
    steps: int = 4  # training steps of the loss trajectory (>= 2: the round trip splits them)
    timeout_s: float = 600.0  # per probe process


@dataclass
class ProtocolConfig:
    # warm-up: `fixed` excludes warmup_steps; `auto` excludes at least warmup_steps, then until
    # the median of the last warmup_window steps is within warmup_tolerance of the window before
    # (at most warmup_max_steps). Tagged steps (compile, epoch_boundary, checkpoint, validation,
    # profiler) are always excluded.
    warmup_policy: str = "fixed"  # fixed | auto
    warmup_steps: int = 3
    warmup_max_steps: int = 30
    warmup_window: int = 3
    warmup_tolerance: float = 0.05  # relative
    measured_steps: int = 10  # timed steps per trial (at least)
    # ... and at least this much measured step time (seconds; 0 = off): short steps are timed
    # in larger numbers, so a trial's median does not rest on a fraction of a second of a
    # machine whose speed changes (capped at 2000 steps; not for distributed trials)
    measured_min_s: float = 0.0
    # wall = time.perf_counter with a device sync (what training time is); cpu = the process's
    # CPU time (time.process_time), host-CPU work only: leaves out time lost to other processes
    # on a shared machine, so it is for calibrating the statistics, not for claiming speedups
    clock: str = "wall"  # wall | cpu
    # host-speed reference (orchestrator.reference): a fixed host workload timed before every
    # step, outside the timed window; speedups, intervals and the noise floor of host-bound
    # trials then use step times in units of the host's speed of the moment. auto = on for
    # single-threaded steps on the CPU device; off on GPUs (their step time does not follow the
    # host's speed) and for CPU thread pools (their spinning threads bias the reference by arm);
    # host = on for any CPU trial
    speed_reference: str = "auto"  # auto | host | off
    # torch.compile caches (orchestrator.compile_stats): cold = a fresh, empty inductor/Triton
    # cache per trial, so compile_time_s is a first run's cost; warm = the machine's own caches
    compile_cache: str = "cold"  # cold | warm
    repeats: int = 3  # initial rounds; each round runs every arm once, in a fresh process
    # adaptive rounds: while a variant is undecided (or decided on a gain under
    # adaptive_gain_below) add adaptive_step_rounds rounds, up to max_rounds in all
    max_rounds: int = 3  # >= repeats; == repeats: a fixed protocol of `repeats` rounds
    adaptive_step_rounds: int = 2
    adaptive_gain_below: float = 0.03  # 0.03 = 3 %
    aa_arm: bool = False  # run the baseline twice per round (A/A) to measure the noise floor
    reverse_every_other_round: bool = True  # A B C, C B A, ...
    confidence: float = 0.95  # of the bootstrap interval on the speedup
    bootstrap_resamples: int = 2000
    min_effect: float = 0.02  # smallest speedup worth keeping (0.02 = 2 %)
    warn_cv: float = 0.10  # robust coefficient of variation above which a warning is shown
    trial_timeout_s: float = 900.0
    # a distributed trial whose ranks fell out of step (collective mismatch, lost peer) failed
    # in the harness, not on the variant's account: re-run it this many times, then the
    # variant's verdict is invalid (never reject) if it still fails so
    infra_retries: int = 1
    seed: int = 0  # of the bootstrap
    # time-to-train projections (one-off warm-up/compile cost + N x steady step time) in reports
    projection_steps: list[int] = field(default_factory=lambda: [100, 1000, 10000])
    # numerics and checkpoint gate (orchestrator/correctness): once per campaign, or off
    correctness: CorrectnessProtocolConfig = field(default_factory=CorrectnessProtocolConfig)


# --------------------------------------------------------------------------- invariants


@dataclass
class ToleranceConfig:
    """How far a variant's tensors may lie from the baseline's at one precision.

    A tensor passes when ``rms(variant - baseline) <= atol + rel_l2 * rms(baseline)``, i.e. its
    normwise relative error is within ``rel_l2`` (with ``atol`` as an absolute floor for tensors
    that are mathematically zero). ``rtol`` is elementwise and only characterises: the share of
    elements with ``|a - b| > atol + rtol * |b|`` is reported, not gated.
    """

    rel_l2: float = MISSING
    atol: float = MISSING
    rtol: float = MISSING
    trajectory_rtol: float = MISSING  # largest relative loss difference over the probe steps
    # rel_l2 for the optimizer's update of one step (Adam passes the relative error of small
    # gradients straight through, elementwise, so its update is judged on a looser scale)
    update_rel_l2: float = MISSING
    rationale: str = ""


def default_tolerances() -> dict[str, ToleranceConfig]:
    """The defaults conf/invariants/default.yaml restates, with their rationale there."""
    return {
        "fp32": ToleranceConfig(1e-5, 1e-9, 1e-4, 1e-5, 1e-3),
        "tf32": ToleranceConfig(5e-3, 1e-7, 2e-2, 1e-3, 5e-2),
        "bf16": ToleranceConfig(3e-2, 1e-6, 1e-1, 2e-3, 2e-1),
        "fp16": ToleranceConfig(5e-3, 1e-7, 2e-2, 1e-3, 5e-2),
    }


@dataclass
class InvariantsConfig:
    """What a sweep may not change: dotted config prefixes frozen for every arm."""

    name: str = "default"
    frozen: list[str] = field(default_factory=list)
    # why each prefix is frozen (shown in the error when a sweep touches one)
    reasons: dict[str, str] = field(default_factory=dict)
    # correctness gate: numerical tolerance per precision (fp32, tf32, bf16, fp16)
    tolerances: dict[str, ToleranceConfig] = field(default_factory=default_tolerances)
    # a sweep whose variable lies under one of these prefixes declares the data order as its
    # variable: the gate then reports the batch sequence instead of requiring it to match
    data_order_keys: list[str] = field(default_factory=lambda: ["workload.data"])


# --------------------------------------------------------------------------- sweep


@dataclass
class SweepConfig:
    """One hypothesis, one variable.

    ``variable`` is a dotted config path (``workload.model.attention.block_q``) or the name of a
    compound knob declared in ``knob`` (a mapping from field name to dotted path, e.g. a tile
    shape). ``baseline`` and each entry of ``values`` are scalars for a path, or mappings over the
    knob's fields. ``fixed`` is applied to every arm, the baseline included.
    """

    name: str = MISSING
    hypothesis: str = MISSING
    variable: str = MISSING
    baseline: Any = MISSING
    values: list[Any] = MISSING
    knob: Optional[dict[str, str]] = None
    labels: Optional[list[str]] = None  # one per value; default derived from the value
    baseline_label: Optional[str] = None
    fixed: dict[str, Any] = field(default_factory=dict)
    buckets: Optional[list[str]] = None  # None = every bucket of the workload
    # the workload kind (gpt, command, synthetic, muon_tp ...) this sweep only makes sense for;
    # a workload of another kind is refused. None = any kind
    workload_kind: Optional[str] = None
    # a workload of that kind, named in the refusal: the sweep file's default workload (its
    # defaults list overrides /workload unless workload= is given)
    workload_example: Optional[str] = None


# --------------------------------------------------------------------------- launcher


@dataclass
class SlurmLauncherConfig:
    """Slurm through submitit. One job = the arms of one (round, bucket), so the arms compared
    with each other always share a node and its devices; rounds are submitted in plan order."""

    partition: Optional[str] = None
    time_limit_min: int = 60  # per job (one round of one bucket)
    gpus_per_node: int = 0  # 0 for CPU; a distributed workload needs >= workload.world_size
    cpus_per_task: Optional[int] = None
    mem_gb: Optional[float] = None
    account: Optional[str] = None
    nodelist: Optional[str] = None  # pin every job to these node(s)
    additional_parameters: dict[str, Any] = field(default_factory=dict)  # extra #SBATCH keys
    setup: list[str] = field(default_factory=list)  # shell lines run before the job starts
    array_parallelism: int = 1  # jobs of one round (one per bucket) that may run at once
    max_requeue: int = 2  # requeues after preemption or job time-out (submitit checkpointing)
    folder: Optional[str] = None  # submitit's job files; default <run_dir>/slurm
    poll_interval_s: float = 2.0
    lost_after_s: float = 60.0  # a job gone from squeue this long without a result is lost


@dataclass
class LauncherConfig:
    name: str = "local"  # inline | local | slurm
    # local: trials run one at a time unless max_parallel > 1 (never two on one device)
    max_parallel: int = 1
    devices: Optional[list[int]] = None  # device indices the local launcher may use
    python: Optional[str] = None  # interpreter for trial processes (default: this one)
    slurm: SlurmLauncherConfig = field(default_factory=SlurmLauncherConfig)


# --------------------------------------------------------------------------- hardware


@dataclass
class HardwareConfig:
    """The peak that utilization (MFU/HFU) is relative to; see :mod:`orchestrator.hardware`.

    ``name``: ``auto`` matches the detected device against the registry (``conf/hardware/``;
    an unknown device gives MFU null with the reason, never a fallback), ``measured``
    calibrates the peak on the spot with a short matmul at the workload's precision, or a
    registry SKU (``hardware=h100``) whose datasheet figures are then composed in here. The
    remaining fields mirror a registry entry and stay None for ``auto`` / ``measured``.
    """

    name: str = "auto"  # auto | measured | a registry SKU (file stem under conf/hardware/)
    # also calibrate a measured peak: None = only on CPU or with name=measured
    measure_peak: Optional[bool] = None
    calibration_size: int = 0  # square matmul side for calibration; 0 = by device kind
    calibration_min_s: float = 0.1  # least wall time spent in calibration matmuls
    count_executed_flops: bool = True  # one extra, untimed step under FlopCounterMode
    # registry fields (see conf/hardware/h100.yaml); units in the names
    description: Optional[str] = None
    vendor: Optional[str] = None
    device_kind: Optional[str] = None  # cpu | cuda | musa
    match: Optional[list[str]] = None  # substrings of the device name as torch reports it
    exclude: Optional[list[str]] = None  # substrings that veto a match (GB200 is not B200)
    calibrate: bool = False  # the entry has no fixed peak: measure it on the spot (CPU)
    peak_tflops: Optional[dict[str, Optional[float]]] = None  # dense, per dtype
    memory_bandwidth_gbps: Optional[float] = None
    intra_domain_bandwidth_gbps: Optional[float] = None  # per direction per device
    inter_domain_bandwidth_gbps: Optional[float] = None  # per device over the network
    collective_latency_us: Optional[float] = None
    domain_size: Optional[int] = None  # devices per fast-link domain
    figure_kind: Any = None  # datasheet | measured, or a mapping figure -> kind
    sources: Optional[dict[str, str]] = None  # figure -> where it comes from
    notes: Optional[str] = None


# --------------------------------------------------------------------------- provenance


@dataclass
class SanitizeConfig:
    """What is scrubbed from every artifact of the run directory (orchestrator/sanitize.py):
    secrets, user names, home paths, private IPs and host names are always replaced."""

    # true keeps host names (for private use only: such a run directory must not be shared)
    keep_hostnames: bool = False
    # regular expressions for further private names (projects, registries); replaced by
    # <redacted-N>
    extra_patterns: list[str] = field(default_factory=list)
    # binary vendor profiler reports (.nsys-rep, .msys-rep, .ncu-rep, .mcu-rep) cannot be
    # rewritten and may hold host names and command lines: false (default) moves them out of
    # the run directory into the private store (~/.cache/orchestrator/private/<run id>/) when
    # the campaign ends; true keeps them (private use only: such a run dir must not be shared)
    keep_vendor_reports: bool = False


@dataclass
class EnvironmentConfig:
    # what to do when trials ran in environments that differ in device, driver, torch or
    # library versions: refuse (resume is refused; verdicts become invalid) | flag (warn loudly)
    on_mismatch: str = "refuse"


# --------------------------------------------------------------------------- profile


@dataclass
class ProfileConfig:
    """Profiled trials: planned apart from timed trials and never in timing statistics.

    ``mode``: off | framework (torch.profiler) | system (msys/nsys around a short run) | compute
    (mcu/ncu on a filtered kernel segment). One profiled trial per arm and bucket."""

    mode: str = "off"  # off | framework | system | compute
    # framework: torch.profiler schedule over steady steps (after protocol.warmup_steps)
    wait_steps: int = 1  # steps run with the profiler idle
    warmup_steps: int = 1  # profiler on, events discarded (its own start-up cost)
    active_steps: int = 3  # steps recorded into the trace
    record_shapes: bool = True
    profile_memory: bool = True
    with_flops: bool = True  # profiler-attributed FLOPs (orchestrator.flops) in an extra window
    with_stack: bool = False  # off by default: stacks make traces large (and carry paths)
    # system: steps run under msys/nsys (after protocol.warmup_steps); bounded on purpose
    system_steps: int = 5
    # compute: mcu/ncu replay and serialise kernels, so only a filtered segment is allowed
    kernel_filter: Optional[str] = None  # kernel-name regex; required for mode=compute
    launch_skip: int = 0  # matching launches skipped before capture
    launch_count: int = 5  # matching launches captured
    tool_timeout_s: float = 900.0  # the whole wrapped run, tool start-up included


# --------------------------------------------------------------------------- root


@dataclass
class Config:
    workload: Any = MISSING
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    invariants: InvariantsConfig = field(default_factory=InvariantsConfig)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    sweep: Optional[SweepConfig] = None
    device: str = "auto"  # auto | cpu | cuda | musa
    run_dir: Optional[str] = None  # default: Hydra's run dir
    resume: Optional[str] = None  # a run dir whose completed trials are kept
    sanitize: SanitizeConfig = field(default_factory=SanitizeConfig)
    environment: EnvironmentConfig = field(default_factory=EnvironmentConfig)


@dataclass
class SyntheticWorkloadConfig(WorkloadConfig):
    """Calibrated load (recipes/synthetic): each step does a known number of real work units
    (matmuls of matrix_size x matrix_size on the host CPU) for the sensitivity calibration."""

    kind: str = "synthetic"
    recipe: str = "synthetic"
    matrix_size: int = 32  # one work unit = a (matrix_size x matrix_size) matmul + tanh
    units_per_token: float = 1.0  # work units per token of the bucket (seq_len * micro_batch)
    # planted effect: the step does (1 + extra_work_fraction) times the work (rounded to units)
    extra_work_fraction: float = 0.0
    slow_first_steps: int = 0  # simulated warm-up: the first N steps do slow_factor times the work
    slow_factor: float = 3.0
    epoch_steps: int = 0  # > 0: every N-th step is an epoch boundary (tagged, extra work)


WORKLOAD_SCHEMAS: dict[str, type[WorkloadConfig]] = {
    "gpt": GPTWorkloadConfig,
    "command": CommandWorkloadConfig,
    "custom": CustomWorkloadConfig,
    "synthetic": SyntheticWorkloadConfig,
    "muon_tp": MuonTPWorkloadConfig,
}


def register_configs() -> None:
    """Register every schema with Hydra's ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for recipe, schema in WORKLOAD_SCHEMAS.items():
        cs.store(group="schema/workload", name=recipe, node=schema)
    cs.store(group="schema/protocol", name="protocol", node=ProtocolConfig)
    cs.store(group="schema/invariants", name="invariants", node=InvariantsConfig)
    cs.store(group="schema/sweep", name="sweep", node=SweepConfig)
    cs.store(group="schema/launcher", name="launcher", node=LauncherConfig)
    cs.store(group="schema/hardware", name="hardware", node=HardwareConfig)
    cs.store(group="schema/profile", name="profile", node=ProfileConfig)


# --------------------------------------------------------------------------- dict <-> dataclass


def to_dict(obj: Any) -> Any:
    """A dataclass tree as plain JSON-able data."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


def from_dict(cls: type, data: Any, key: str = "") -> Any:
    """Rebuild a dataclass tree from :func:`to_dict` output (used in trial processes, which
    must not pay for importing omegaconf). Unknown keys raise ConfigError."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    extra = set(data) - names
    if extra:
        raise ConfigError(f"{key}{sorted(extra)[0]}", f"unknown key; valid keys: {sorted(names)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], f"{key}{f.name}")
    return cls(**kwargs)


def _convert(tp: Any, value: Any, key: str) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(args[0], value, key) if len(args) == 1 else value
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key + ".")
    if origin is list:
        (arg,) = typing.get_args(tp) or (Any,)
        return [_convert(arg, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        args = typing.get_args(tp)
        return {k: _convert(args[1] if args else Any, v, f"{key}.{k}") for k, v in value.items()}
    return value


def workload_from_dict(data: dict[str, Any]) -> WorkloadConfig:
    schema = WORKLOAD_SCHEMAS.get(data.get("kind", ""))
    if schema is None:
        raise ConfigError(
            "workload.kind",
            f"unknown workload kind {data.get('kind')!r}; choose one of: {', '.join(WORKLOAD_SCHEMAS)}",
        )
    return from_dict(schema, data, "workload.")  # type: ignore[no-any-return]
