"""The core configuration schemas: one dataclass per config group.

The CLI registers them with Hydra's ConfigStore and the YAML files under ``conf/`` extend them
(``defaults: [/schema/<group>/<name>@_here_]``), so a misspelt key or a wrong type fails at
composition time with the dotted key in the message. Each workload kind's own schema lives with
its recipe (``recipes/<recipe>/config.py``) and registers itself here with
:func:`workload_schema`; :mod:`recipes.registry` imports the bundled ones. Semantic checks that
a type cannot express live in :mod:`orchestrator.campaign.validate`.

Below the Hydra entry point the code works on these plain dataclasses only (no omegaconf).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple, Optional, TypeVar

from orchestrator.core.records import Pairing  # the run directory's word, a config choice too

# omegaconf's marker for a required value; spelled out so trial processes need not import it
MISSING: Any = "???"

class Choice(str, Enum):
    """A config field with a fixed set of values: OmegaConf refuses any other at composition
    (``Invalid value 'x', expected one of [...]``, with the dotted key). A ``str`` enum whose
    member names are its values, so code and records compare and print it as the plain string."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def __repr__(self) -> str:  # messages quote it like the string it stands for
        return repr(self.value)

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(m.value for m in cls)


def choices(name: str, *values: str) -> type[Choice]:
    """A Choice type of these values (any strings: the member names are the values), made a
    member of the calling module so that it pickles (trial specs cross process boundaries)."""
    module = sys._getframe(1).f_globals.get("__name__", __name__)
    return Choice(name, [(v, v) for v in values], module=module)  # type: ignore[call-overload,no-any-return]


class Precision(Choice):  # the autocast policy
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class CorrectnessMode(Choice):
    once = "once"
    off = "off"


class Device(Choice):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"
    musa = "musa"


class LauncherName(Choice):
    inline = "inline"
    local = "local"
    slurm = "slurm"


class SlurmAllocation(Choice):  # launcher.slurm.allocation
    per_job = "per_job"
    campaign = "campaign"


class StartMethod(Choice):
    auto = "auto"
    spawn = "spawn"
    forkserver = "forkserver"


class DataKind(Choice):
    synthetic = "synthetic"
    text = "text"


class OnMismatch(Choice):
    refuse = "refuse"
    flag = "flag"


class ProfileMode(Choice):
    off = "off"
    framework = "framework"
    system = "system"
    compute = "compute"


class WarmupPolicy(Choice):
    fixed = "fixed"
    auto = "auto"


class Clock(Choice):
    wall = "wall"
    cpu = "cpu"


class SpeedReference(Choice):
    auto = "auto"
    host = "host"
    off = "off"


class CompileCache(Choice):
    auto = "auto"
    arm = "arm"
    cold = "cold"
    warm = "warm"


class Order(Choice):
    balanced = "balanced"
    reversed = "reversed"


class TrialSummary(Choice):
    trimmed_mean = "trimmed_mean"
    mean = "mean"
    median = "median"

PRECISIONS = Precision.values()
TOLERANCE_PRECISIONS = ("fp32", "tf32", "bf16", "fp16")  # tf32: fp32 with tf32 matmuls
CORRECTNESS_MODES = CorrectnessMode.values()
DEVICES = Device.values()
LAUNCHERS = LauncherName.values()
DATA_KINDS = DataKind.values()
ON_MISMATCH = OnMismatch.values()
PROFILE_MODES = ProfileMode.values()


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
class DataConfig:
    # synthetic: deterministic seeded token stream, made in the training process;
    # text: a text file tokenized (byte-pair encoding) and packed on the fly by a DataLoader
    kind: DataKind = DataKind.synthetic
    seed: int = 1234
    text_path: Optional[str] = None  # text only: a UTF-8 file, one document per line; None = generated
    text_mib: float = 2.0  # text only: size of the generated file (MiB); also the read cap for a given one
    cache_dir: Optional[str] = None  # generated text and trained tokenizer (default: system temp dir)


@dataclass
class WorkloadConfig:
    """Fields every workload has, whatever its recipe."""

    name: str = MISSING
    kind: str = MISSING  # the schema (gpt, ...): which fields this workload has
    # the recipe that builds it: a registered name, or an import path "pkg.module:build" for
    # one's own recipe taking the same workload fields
    recipe: str = MISSING
    precision: Precision = Precision.fp32  # fp32 | bf16 | fp16 (autocast policy)
    seed: int = 0
    # the ranks of one trial in all, and the machines they span: nnodes x (world_size / nnodes)
    # processes per node. nnodes > 1: one Slurm job step over that many nodes (launcher=slurm);
    # a command is started once per node, its ranks its own (docs/launching.md)
    world_size: int = 1
    nnodes: int = 1
    buckets: list[BucketConfig] = MISSING

    def validate(self) -> None:
        """This kind's own checks (a recipe's schema overrides it); raise ConfigError naming
        the dotted key and the fix. The fields above are checked by orchestrator.campaign.validate."""

    # What the layers below the recipes ask of a workload, instead of importing its recipe
    # (a recipe's schema overrides what applies to it):

    def check_selection(self, selected: list[str]) -> None:
        """Checks on the names of the buckets a campaign selected (ConfigError)."""

    def check_arms(self, protocol: ProtocolConfig, arms: list[SweptArm], key: str,
                   variable: str) -> None:
        """Checks across a sweep's arms (``arms[0]`` the baseline, all of this kind); ``key``:
        the sweep key to name in an error, ``variable`` the sweep's variable. Raise
        ConfigError."""

    def forces_attention_kernel(self) -> bool:
        """Forces an attention kernel the device may lack (checked by attention_refusal)."""
        return False

    def attention_refusal(self, target: dict[str, Any]) -> str | None:
        """Why the device ``target`` describes cannot run this arm's attention as configured
        (only where the arm forces a kernel), or None."""
        return None

    def reads_text(self) -> bool:
        """Trains on a text corpus through a data loader (decisions.md's input section)."""
        return False

    def runs_own_process(self) -> bool:
        """Runs as a program of its own (a user's command): an env.* switch reaches it even
        when the trial runs inline, and its numerics are judged on the loss it logs."""
        return False

    def sized_before_run(self) -> bool:
        """A trial's step count is fixed before it runs (a command's ``{steps}``), so the
        campaign sizes trials by time from a pilot (orchestrator.campaign.sizing); False: the
        worker itself measures until protocol.measured_min_s."""
        return False

    def steps_asked(self, warmup_steps: int, measured_steps: int) -> tuple[int, bool] | None:
        """(the step lines a trial asked for ``warmup_steps + measured_steps`` should log,
        whether exactly that many (else at least)), where its length can be told (a command
        taking ``{steps}``); None: it cannot be told."""
        return warmup_steps + measured_steps, True


class SweptArm(NamedTuple):
    """One arm of a sweep as a recipe's schema sees it (:meth:`WorkloadConfig.check_arms`)."""

    label: str
    workload: WorkloadConfig
    differing: set[str]  # the dotted settings it changes against the baseline


# workload kind -> its schema; each recipe's config module registers its own
WORKLOAD_SCHEMAS: dict[str, type[WorkloadConfig]] = {}

W = TypeVar("W", bound=type[WorkloadConfig])


def workload_schema(schema: W) -> W:
    """Class decorator: register a workload schema under its ``kind`` (the field's default)."""
    kind = schema.__dataclass_fields__["kind"].default
    assert isinstance(kind, str) and kind != MISSING, f"{schema.__name__} needs a kind default"
    WORKLOAD_SCHEMAS[kind] = schema
    return schema


# --------------------------------------------------------------------------- protocol


@dataclass
class CorrectnessProtocolConfig:
    """The correctness gate: one probe process per arm (plus a baseline repeat for the noise
    floor), run once per campaign before the timed rounds."""

    mode: CorrectnessMode = CorrectnessMode.once
    steps: int = 4  # training steps of the loss trajectory (>= 2: the round trip splits them)
    timeout_s: float = 600.0  # per probe process


@dataclass
class ProtocolConfig:
    # warm-up: `fixed` excludes warmup_steps; `auto` excludes at least warmup_steps, then until
    # the median of the last warmup_window steps is within warmup_tolerance of the window before
    # (at most warmup_max_steps). Tagged steps (compile, epoch_boundary, checkpoint, validation,
    # profiler) are always excluded.
    warmup_policy: WarmupPolicy = WarmupPolicy.fixed
    warmup_steps: int = 3
    warmup_max_steps: int = 30
    warmup_window: int = 3
    warmup_tolerance: float = 0.05  # relative
    measured_steps: int = 10  # timed steps per trial (at least)
    # ... and at least this much measured step time (seconds; 0 = off): short steps are timed
    # in larger numbers, so a trial's median does not rest on a fraction of a second of a
    # machine whose speed changes (capped at 2000 steps; not for distributed trials)
    measured_min_s: float = 0.0
    # what a trial's (and, paired by steps, a block's) measured step times are summarised by,
    # the time the verdicts compare (orchestrator.core.objective): trimmed_mean = the mean
    # with one step in fifty left out at each end (the objective is training time; one stray
    # step of a long trial does not decide); mean; median (the rule before issue 28: blind to
    # a variant slower one step in five)
    trial_summary: TrialSummary = TrialSummary.trimmed_mean
    # a tagged step that recurs in a trial's steady state (a recompile, an epoch boundary, a
    # checkpoint on at least two steps after warm-up) is a cost of the arm: counted in its
    # time; one-off tagged steps and the harness's own (switch, profiler) are not
    charge_recurring_tags: bool = True
    # wall = time.perf_counter with a device sync (what training time is); cpu = the process's
    # CPU time (time.process_time), host-CPU work only: leaves out time lost to other processes
    # on a shared machine, so it is for calibrating the statistics, not for claiming speedups
    clock: Clock = Clock.wall
    # host-speed reference (core.reference): a fixed host workload timed before every step,
    # outside the timed window; host-bound trials' times then in units of the host's speed.
    # auto = on for single-threaded steps on the CPU device; off on GPUs and for CPU thread
    # pools (their spinning threads bias the reference by arm); host = on for any CPU trial
    speed_reference: SpeedReference = SpeedReference.auto
    # compile/autotune caches (platform.compile_stats; docs/levers.md): arm = each arm its own,
    # warm across its trials; cold = fresh per trial; warm = the machine's; auto = arm, or
    # cold for a sweep over compile settings
    compile_cache: CompileCache = CompileCache.auto
    cache_env: list[str] = field(default_factory=list)  # a command's own cache variables too
    # compile_cache=arm: each arm's folder in the user's compile store ($ORCH_COMPILE_CACHE_DIR,
    # else ~/.cache/orchestrator/compile), named by the arm's identity, so a later campaign
    # running the same arm starts warm; false: run-directory scratch, removed at the end
    arm_cache_store: bool = True
    arm_cache_max_gb: float = 50.0  # the store's size past which the least recently used go
    # node-hours the campaign may spend (0 = no cap; campaign.cost, docs/protocol.md)
    budget_node_hours: float = 0.0
    repeats: int = 3  # initial rounds; each round runs every arm once, in a fresh process
    # adaptive rounds: while a variant is inconclusive and a decision on the objective (the
    # mixture) is within reach, add adaptive_step_rounds rounds, up to max_rounds in all; a
    # decided variant drops out. Each look (the first rounds, then each extension) spends
    # (1 - confidence) / looks of the error rate (orchestrator.core.paired)
    max_rounds: int = 3  # >= repeats; == repeats: a fixed protocol of `repeats` rounds
    adaptive_step_rounds: int = 2
    # adaptive rounds run the trial length the variance components of the rounds so far make
    # cheapest for the precision (Kalibera and Jones; orchestrator.core.paired.optimal_steps,
    # recorded in plan.json); false: every round runs measured_steps / measured_min_s
    plan_trial_length: bool = True
    # the A/A control (the baseline twice per round) checks that the intervals are calibrated
    # (must cover 1, else more rounds; at the cap the verdicts are invalid), unless a record
    # of this machine, workload and pairing younger than calibration_max_age_h says so
    # (campaign.calibration; 0 = every campaign)
    aa_arm: bool = False
    calibration_max_age_h: float = 168.0
    # the A/A check is a test of its own: the chance that calibrated intervals are called
    # uncalibrated (A/A interval at 1 - aa_alpha / scopes missing 1 in some scope), so that a
    # calibrated campaign ends invalid at most this often
    aa_alpha: float = 0.01
    # the arms' order in each round (pairing=process) and each cycle (pairing=steps):
    # balanced = a Williams design seeded by protocol.seed, round and bucket (every arm follows
    # every other equally often, the A/A control placed like any variant: carry-over and drift
    # favour none); reversed = A B C, C B A, ... (the earlier design)
    order: Order = Order.balanced
    reverse_every_other_round: bool = True  # order=reversed only
    # process: every trial is one arm in its own fresh process; steps: one fresh process per
    # round and bucket runs every arm, switching arm every block_steps measured steps (each
    # block after switch_warmup_steps excluded ones), blocks paired in the analysis
    # (orchestrator.core.blocks). steps needs a sweep over keys the recipe declares switchable;
    # a command's arms always can: its trainer switches them through orchestrator.client, or
    # its arms run as processes of their own taking turns on the same cores
    # (orchestrator.worker.pairing.alternation). auto: steps when it can (a plain command only where no
    # accelerator is visible), else process (orchestrator.spec.sweep.choose_pairing, plan.json)
    # duet: a round's arms run at the same time, each on its own disjoint slice of the machine
    # (duet_cpus / duet_devices), the placement rotated every round, each arm's steps kept
    # where they overlap in time (orchestrator.worker.pairing.duet; docs/protocol.md). auto picks duet
    # where steps cannot pair and slices are declared
    pairing: Pairing = Pairing.auto
    # pairing=duet: each slice's CPU cores (disjoint, equal in number); None = this process's
    # cores split into one contiguous slice per arm
    duet_cpus: Optional[list[list[int]]] = None
    # pairing=duet: each slice's devices as a visible-devices list ("0", "1" or "0,1", "2,3":
    # CUDA_VISIBLE_DEVICES / MUSA_VISIBLE_DEVICES of the arm on it); None = no device slicing
    duet_devices: Optional[list[str]] = None
    # pairing=steps: adaptive rounds run the cycles per round the first rounds' cycle-level and
    # between-process spread make cheapest (orchestrator.campaign.lengths.cycles_per_round); off by
    # default until its error rates are measured (docs/protocol.md)
    plan_cycles: bool = False
    block_steps: int = 3
    switch_warmup_steps: int = 1
    # pairing=steps: at least this much measured step time per arm in each paired process
    # (seconds; 0 = measured_min_s alone). One process pays its start and warm-ups once for
    # every arm, and a round's effect is then almost all within-process noise (the median of
    # its cycles' log ratios), so longer paired processes are the cheap way to precision
    # (Kalibera and Jones; docs/protocol.md, "How long a paired process runs")
    paired_min_s: float = 0.0
    confidence: float = 0.95  # 1 - the error rate of a campaign's decisions, over all looks
    # how the error rate is spread over the looks: alpha * (rounds / max_rounds)^alpha_spending
    # (Lan-DeMets power family; 0 = the same share at every look, Bonferroni; 3 = strict early
    # looks, most of it left to the last, chosen with the campaign simulator, docs/protocol.md)
    alpha_spending: float = 3.0
    # equivalence band: a speedup within [1 / (1 + min_effect), 1 + min_effect] is no difference
    # that matters (0.02 = 2 %); retain needs the mixture significantly faster and outside it
    min_effect: float = 0.02
    # run the sweep's microbenchmark (sweep.microbench) per arm and check its direction against
    # the verdict (orchestrator/microbench); the quick protocol leaves it out
    direction_check: bool = True
    # non-inferiority: every bucket's lower bound must stay above 1 - ni_margin for a retain,
    # and a bucket significantly slower than that rejects (0.05 = 5 %)
    ni_margin: float = 0.05
    warn_cv: float = 0.10  # robust coefficient of variation above which a warning is shown
    trial_timeout_s: float = 900.0
    # a distributed trial whose ranks fell out of step (collective mismatch, lost peer) failed
    # in the harness, not on the variant's account: re-run it this many times, then the
    # variant's verdict is invalid (never reject) if it still fails so
    infra_retries: int = 1
    # interference (orchestrator.platform.interference): a single-process trial during whose measured
    # steps other processes took more than interference_cores cores on average is re-run (up
    # to interference_retries times; the first attempt kept aside, never pooled); 0 also
    # turns off the re-run of a contaminated trial (orchestrator.analysis.contamination)
    interference_cores: float = 0.25
    interference_retries: int = 2
    # before the campaign the machine's load is sampled: busy (other processes above
    # interference_cores, or on the GPUs) is a warning, or with require_quiet a refusal (exit 2)
    require_quiet: bool = False
    seed: int = 0  # seeds the balanced orders (protocol.order); the verdicts use no other random draw
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


# The evidence a profile can show and a sweep can declare that it addresses (sweep.evidence):
# name -> what share of the step it is (orchestrator.analysis.rank reads it from a profile)
EVIDENCE_KINDS: dict[str, str] = {
    "input_bound": "time producing the batch (phase/data) / step",
    "host_gaps": "device idle waiting for the host (launch-bound) / step",
    "attention_share": "the attention op, forward and backward (region/attention) / step",
    "optimizer_share": "optimizer step and zeroing gradients (phase/optimizer) / step",
    "allocator_churn": "device allocator calls reaching the driver (cudaMalloc/Free) / step",
}


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
    # what a profile must show for this sweep to be worth running (EVIDENCE_KINDS): advise
    # ranks the sweep by the Amdahl bound of that share of the step. [] = declares none
    evidence: list[str] = field(default_factory=list)
    # a microbenchmark of the op the knob changes (a recipe's MICROBENCHMARKS name, e.g. attention,
    # fwd+bwd at each bucket's shapes), run per arm: its direction vs the verdict. None = none
    microbench: Optional[str] = None
    microbench_graph: bool = False  # time CUDA graph replays of it where it can be captured


# --------------------------------------------------------------------------- launcher


@dataclass
class SlurmLauncherConfig:
    """Slurm through submitit. One job = the arms of one (round, bucket), so the arms compared
    with each other always share a node and its devices; rounds are submitted in plan order."""

    partition: Optional[str] = None
    time_limit_min: int = 60  # per job (one round of one bucket)
    # 0: on cuda/musa one per process of a node (world_size / nnodes), none on the CPU; set,
    # it must be >= the processes per node
    gpus_per_node: int = 0
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
    # per_job: one sbatch job per (round, bucket), queued once per round; campaign: one
    # allocation (salloc) held for the whole campaign, each trial group a job step (srun) in
    # it, time_limit_min then the allocation's (orchestrator/launch/slurm_alloc.py)
    allocation: SlurmAllocation = SlurmAllocation.per_job


@dataclass
class LauncherConfig:
    name: LauncherName = LauncherName.local
    # local: trials run one at a time unless max_parallel > 1 (never two on one device)
    max_parallel: int = 1
    devices: Optional[list[int]] = None  # device indices the local launcher may use
    python: Optional[str] = None  # interpreter for trial processes (default: this one)
    # how local (and Slurm) worker processes start: auto = forked from one fork server per
    # campaign where sound, else spawned; forkserver = the same, the pre-flight refusing what
    # could never fork; spawn = always `python -m <worker>` (docs/launching.md)
    start_method: StartMethod = StartMethod.auto
    # CPU cores every trial process (and what it starts: a command, its ranks, dataloader
    # workers) is pinned to, e.g. [0]; None = wherever the OS schedules it. Cores of one
    # machine can differ in speed (a busy sibling hyperthread on the host of a VM): the
    # campaign measures them before its first trial and says so (machine_load.json)
    cpu_affinity: Optional[list[int]] = None
    slurm: SlurmLauncherConfig = field(default_factory=SlurmLauncherConfig)


# --------------------------------------------------------------------------- hardware


@dataclass
class HardwareConfig:
    """The peak that utilization (MFU/HFU) is relative to; see :mod:`orchestrator.platform.hardware`.

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
    """What is scrubbed from every artifact of the run directory (orchestrator/core/sanitize.py):
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
    on_mismatch: OnMismatch = OnMismatch.refuse


# --------------------------------------------------------------------------- profile


@dataclass
class ProfileConfig:
    """Profiled trials: planned apart from timed trials and never in timing statistics.

    ``mode``: off | framework (torch.profiler) | system (msys/nsys around a short run) | compute
    (mcu/ncu on a filtered kernel segment). One profiled trial per arm and bucket."""

    mode: ProfileMode = ProfileMode.off
    # framework: torch.profiler schedule over steady steps (after protocol.warmup_steps)
    wait_steps: int = 1  # steps run with the profiler idle
    warmup_steps: int = 1  # profiler on, events discarded (its own start-up cost)
    active_steps: int = 3  # steps recorded into the trace
    record_shapes: bool = True
    profile_memory: bool = True
    with_flops: bool = True  # profiler-attributed FLOPs (orchestrator.platform.flops) in an extra window
    with_stack: bool = False  # off by default: stacks make traces large (and carry paths)
    # system: steps run under msys/nsys (after protocol.warmup_steps); bounded on purpose
    system_steps: int = 5
    # compute: mcu/ncu replay and serialise kernels, so only a filtered segment is allowed
    kernel_filter: Optional[str] = None  # kernel-name regex; required for mode=compute
    launch_skip: int = 0  # matching launches skipped before capture
    launch_count: int = 5  # matching launches captured
    tool_timeout_s: float = 900.0  # the whole wrapped run, tool start-up included


# --------------------------------------------------------------------------- source


WORKTREE = "WORKTREE"  # source.revision: the checkout's uncommitted changes, snapshotted


@dataclass
class SourceConfig:
    """The user's code: the git repository a command workload runs from, and the revision its
    trials run (docs/revisions.md). ``revision`` unset: the checkout as it is, in place (its
    commit, branch and uncommitted changes are recorded per trial); a commit, branch or tag:
    every trial runs from a worktree of that commit under the run directory (the user's
    checkout is never touched); ``WORKTREE``: a worktree of the checkout's uncommitted changes,
    snapshotted once when the campaign starts. A sweep over ``source.revision`` compares code
    revisions (``baseline: main``, ``values: [HEAD]``)."""

    # the repository; None = the one holding the command's cwd (else the current directory)
    repo: Optional[str] = None
    revision: Optional[str] = None
    # repository-relative paths git does not track (a prepared dataset, a tokenizer) that each
    # worktree links from the checkout; what the revision tracks itself is never replaced
    share: list[str] = field(default_factory=list)
    # repository-relative paths (glob patterns) that no revision may change against the
    # baseline's (the model, the data pipeline): an arm whose diff touches one is invalid
    frozen_paths: list[str] = field(default_factory=list)
    # refuse to start when the repository has uncommitted changes (python -m orchestrator.check
    # sets it: a CI check measures commits, never a half-edited checkout)
    require_clean: bool = False
    keep_worktrees: bool = False  # leave the worktrees in the run directory after the campaign


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
    device: Device = Device.auto
    run_dir: Optional[str] = None  # default: Hydra's run dir
    resume: Optional[str] = None  # a run dir whose completed trials are kept
    # a version of the workload's baseline ledger to run against (docs/baselines.md): latest |
    # vN. Its overrides are applied to the workload before the sweep's arms; config.json then
    # records the version's id
    baseline: Optional[str] = None
    # the ledgers' root: <baselines_dir>/<workload name>/vN.json (relative: to the current dir)
    baselines_dir: str = "baselines"
    sanitize: SanitizeConfig = field(default_factory=SanitizeConfig)
    environment: EnvironmentConfig = field(default_factory=EnvironmentConfig)
    source: SourceConfig = field(default_factory=SourceConfig)
