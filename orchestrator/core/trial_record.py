"""The trial record (``trials/<id>/trial.json``) as a type: :class:`TrialRecordDict`, every key a
writer may put in it, and the nested parts the layers above produce (``platform.hardware``,
``platform.flops``, ``platform.interference``, ``platform.env_record``, ``platform.slices``
import them back from here). Types only, standard library only; read and written through
:mod:`orchestrator.core.records`."""

from __future__ import annotations

from typing import Any, TypedDict


class Calibration(TypedDict):
    """A peak calibration run (trial.json ``peaks[].calibration``): see
    :func:`orchestrator.platform.hardware.calibrate_peak`."""

    tflops: float
    median_tflops: float
    runs: int
    matmul: str
    device: str


class PeakRefDict(TypedDict):
    """trial.json ``peaks[]``: a :class:`PeakRef` as plain data."""

    label: str
    kind: str
    hardware: str
    dtype: str
    peak_tflops: float | None
    source: str
    reason: str | None
    calibration: Calibration | None


class UtilizationEntry(TypedDict):
    """trial.json ``utilization[]``: MFU and HFU against one peak."""

    peak: str
    peak_kind: str
    peak_tflops: float | None
    dtype: str
    mfu: float | None
    hfu: float | None
    note: str | None


class FlopsFacts(TypedDict, total=False):
    """trial.json ``flops``: useful and executed FLOPs per step, with their definitions."""

    useful_per_step: float | None
    useful_definition: str
    executed_per_step: int | None
    executed_definition: str
    executed_by_op: dict[str, int]  # op -> FLOPs
    executed_coverage_time: float
    executed_coverage_ops: float
    executed_uncovered_top: list[tuple[str, float]]  # (op, share of op time)
    executed_note: str


class _CpuWindowFigures(TypedDict):
    others_cpu_s: float | None
    others_cores: float | None


class CpuWindowFigures(_CpuWindowFigures, total=False):
    """Other processes' CPU time over a window (:meth:`CpuWindow.stop`; trial.json's
    interference fields, without ``wall_s`` where a multi-rank trial measures none)."""

    wall_s: float
    note: str


class _FingerprintBase(TypedDict):
    python: str
    torch: str
    device_kind: str


class Fingerprint(_FingerprintBase, total=False):
    """trial.json ``environment`` (and environment.json ``fingerprint``): the facts two
    comparable measurements must share."""

    torch_cuda: str | None
    torch_hip: str | None
    torch_musa: str | None  # torch_musa's version on MUSA, else torch's compiled MUSA version
    mudnn: Any  # as musa_facts() reads it
    mccl: Any  # as musa_facts() reads it
    cudnn: int | None
    nccl: Any  # as cuda_facts() reads it
    driver: str | None
    devices: list[str]


class Slice(TypedDict):
    """One duet slice (plan.json ``pairing.slices[]``): its cores and visible devices."""

    cpus: list[int]
    devices: str | None  # "0" or "0,1"; None: the devices are not split


class DeviceSummary(TypedDict):
    """trial.json ``device``: the device the trial ran on (``count`` None: not probed)."""

    kind: str
    name: str
    count: int | None


class BlockMedian(TypedDict):
    """trial.json ``blocks[]``: a paired arm's median step time in one cycle."""

    cycle: int
    median_s: float


class AlternationFacts(TypedDict):
    """trial.json ``alternation``: how an alternated arm's own command took its turns."""

    command_pid: int | None
    core: int | None
    cores_at_stop: dict[str, Any]  # core -> what it ran when stopped, as the platform reads it
    turns: int
    running_s: float
    drained_steps: int
    repeated_step_lines: int


class _DuetFactsBase(TypedDict):
    slice: Slice
    partners: list[str]
    duet_trial: str
    arms: int


class DuetFacts(_DuetFactsBase, total=False):
    """trial.json ``duet``: a duet arm's slice, its partners, and the overlap window."""

    window_s: float
    steps_in_window: int
    steps_outside_window: int


class AttemptSummary(TypedDict):
    """trial.json ``earlier_attempts[]``: an attempt a re-run moved aside, and why."""

    status: str | None
    raw_status: str | None
    infra_reason: str | None
    error: str | None
    others_cores: float | None
    reason: str
    why: str | None
    step_time_median_s: float | None


class ArmCode(TypedDict, total=False):
    """The user's code one arm runs (orchestrator.campaign.revisions): code.json's ``arms``
    entries and a trial record's ``code``; {} when none is known."""

    repo: str | None
    revision: str | None  # the revision asked for (None: the checkout in place)
    commit: str | None
    branch: str | None
    dirty: bool | None
    diff_sha256: str | None
    worktree: str | None  # relative to the run directory
    snapshot_of: str | None  # WORKTREE: the commit the uncommitted changes lie on
    recipe_file: str  # an import-path recipe's module, relative to the repository
    recipe_file_sha256: str


class TrialBase(TypedDict, total=False):
    """The fields every record of a trial starts from (``orchestrator.worker.trial.
    _base_fields``, then the process's cores, rank and failure time): a part of trial.json.
    Each optional, as TypedDict has no partial form: :class:`TrialFields` extends it."""

    trial_id: str
    kind: str
    bucket: str
    seq_len: int
    micro_batch: int
    bucket_weight: float
    arm_id: str
    arm_label: str
    is_baseline: bool
    round: int
    position: int
    pid: int
    started_at: float | None
    warmup_steps: int
    measured_steps: int
    layer: str | None  # a profiled trial's profiler layer
    code: ArmCode  # the user's code the arm ran
    cpu_affinity: list[int] | None
    rank: int
    failed_at: float


class _TrialRecordBase(TypedDict):
    schema_version: int
    status: str


class WarmupFields(TypedDict, total=False):
    """A trial's warm-up fields of its trial.json, in steps (a command's: ``worker.external``;
    every key set, optional only so that :class:`TrialFields` can extend it)."""

    warmup_policy: str
    warmup_steps_floor: int
    warmup_steps_used: int
    warmup_steps_detected: int | None
    warmup_settled: bool
    excluded_steps: int
    excluded_tags: dict[str, int]


class CompileFields(TypedDict, total=False):
    """trial.json's compile fields: totals over the trial, and what leaked into the measured
    steps (``platform.compile_stats.trial_fields``: every key set, optional only so that
    :class:`TrialFields` can extend it)."""

    compile_time_s: float
    compile_time_in_measured_s: float
    graph_breaks: int
    graph_break_reasons: list[str]
    recompiles: int
    recompiles_in_measured: int
    compiled_frames: int
    compile_cache_hits: int
    compile_cache_misses: int


class TrialFields(TrialBase, WarmupFields, CompileFields, total=False):
    """A trial record's fields, each optional: what a worker gathers before a record's status
    (its base fields, a command's fields) and every key a ``trial.json`` may hold. The
    recipe's :meth:`extra_record` may add keys of its own beyond these."""

    # beyond TrialBase's: every record of a trial (launch.base's failure records too)
    finished_at: float | None
    node: int
    # a failure
    error: str | None
    traceback: str
    stderr_tail: str | None
    failure_kind: str
    infra_reason: str
    raw_status: str | None
    rank0_error: str | None
    earlier_attempts: list[AttemptSummary]
    log_file: str | None  # decisions.md's failures only (campaign.render): the whole log's path
    # the measured window (worker.timing.StepFields, worker.external.WarmupFields)
    device: DeviceSummary
    torch_version: str | None
    python_version: str
    startup_to_first_step_s: float | None
    startup_measured_from: str
    trainer_build_s: float
    step_time_median_s: float
    step_time_mad_s: float
    clock: str
    measured_steps_run: int
    measured_s: float
    speed_reference: bool
    speed_reference_why: str
    reference_median_s: float | None
    compile_steps: int
    tokens_per_step: int | None
    tokens_per_s: float | None
    tokens_source: str
    peak_mem_bytes: int
    peak_mem_source: str
    reserved_mem_bytes: int  # the allocator's other figures (platform.device.memory_figures)
    peak_reserved_mem_bytes: int
    device_time_median_s: float
    host_launch_median_s: float
    timed_by: str
    timed_by_why: str
    device_host_agreement: float | None
    device_block_steps: int | None
    device_blocks: int
    useful_flops_per_step: float | None
    final_loss: float | None
    nonfinite_loss_steps: list[int]
    env: dict[str, str]
    torch_threads: int | None
    warmup_excess_s: float
    data_wait_share: float
    log_notes: list[str]
    # FLOPs and utilization (platform.flops)
    flops: FlopsFacts
    matmul_dtype: str | None
    matmul_dtype_why: str
    peaks: list[PeakRefDict]
    utilization: list[UtilizationEntry]
    peaks_note: str
    # compile (beyond CompileFields)
    compile_cache: str
    compile_cache_fill: str
    interference: CpuWindowFigures
    # distributed (platform.distributed.DistSummary, worker.pairing.client.rank_fields)
    step_agreement_median_s: float | None
    world_size: int
    dist_backend: str | None
    step_time_definition: str
    rank_skew_median_s: float | None
    rank_skew_max_s: float | None
    slowest_rank_counts: dict[int, int]  # rank -> measured steps it was the slowest in
    threads_per_rank: int | None
    step_time_rank_medians_s: dict[int, float]
    # nodes (platform.distributed.DistNodes, worker.nodes.NodeStepFields, a command's nodes)
    nodes: int
    rank_nodes: list[int]
    node_skew_median_s: float | None
    slowest_node_counts: dict[int, int] | dict[str, int] | None  # node -> steps slowest in
    nodes_logging_steps: list[int]
    step_time_from: str
    node_wall_s: dict[str, float | None]  # node -> its command's wall time
    # what the step ran (the recipe's executes(), JSON of its own) and its recipe's facts
    executes: Any  # the recipe's own JSON description, of any shape
    executes_covers: list[str]
    compile_buckets_visited: list[str]
    pin_memory_effective: bool
    pin_memory_note: str
    muon_tp: Any  # the muon recipe's auto choices, of its own shape
    # pairing (worker.pairing)
    pairing: str
    paired_by: str
    paired_process: str
    paired_arms: list[str]
    block_steps: int
    switch_warmup_steps: int
    cycles: int
    blocks: list[BlockMedian]
    alternation: AlternationFacts
    duet: DuetFacts
    duet_slice: int
    # the environment (platform.environment.record_facts)
    environment: Fingerprint | None
    environment_gather_s: float
    environment_report: str
    environment_report_error: str
    environment_error: str
    # the launcher's (launch.process, launch.local, launch.slurm, launch.inline)
    returncode: int | None
    start_method: str
    start_method_why: str | None
    launcher: str
    devices: list[int] | str | None
    slurm_job_id: str
    slurm_attempt: int
    slurm_node_rank: int
    slurm_state: str
    slurm_allocation: str  # launch.slurm_alloc's, with its id and the step's own job id
    slurm_allocation_id: str
    slurm_step_id: str
    node_id: str
    process_seconds: float
    # a command's (worker.external, worker.pairing.client)
    command: str
    command_env: dict[str, str]
    command_wall_s: float | None
    command_returncode: int | None  # the command's own exit code (returncode: the trial process's)
    client_params: dict[str, Any]  # the user's workload params, free-form JSON
    client_channel: str
    client_strays: list[Any]  # the refused connections, as the channel records them
    steps_asked: int | None
    steps_logged: int
    steps_ignored: str
    step_source: str
    teardown: str  # stopped after logging every step it was asked for (worker.external)
    trainer_reported_mfu_median: float | None
    trainer_reported_mfu_steps: int
    trainer_reported_mfu_left_out: int
    trainer_reported_mfu_label: str
    # a profiled trial's (worker.profile)
    profiled_step_median_s: float | None
    profiler_attributed_flops_per_step: float | None
    phases_ok: bool
    finite_loss: bool
    artifacts: list[str]
    tool: str
    tool_wall_s: float
    expected_report_suffix: str
    steps_run: int
    # a microbenchmark trial's (worker.microbench; platform.kernel_bench.KernelTiming.fields)
    microbench: str
    call_times_s: list[float]
    call_time_median_s: float
    call_time_p20_s: float
    call_time_p50_s: float
    call_time_p80_s: float
    call_rel_se: float
    call_stopped_by: str
    call_clock: str
    call_mode: str
    call_flush_bytes: int
    call_cache_bytes: int | None
    call_cache_source: str


class TrialRecordDict(_TrialRecordBase, TrialFields, total=False):
    """A trial's record as written (``trials/<id>/trial.json``, and ``trial.rank<N>.json``):
    the schema version and status every record has (:func:`orchestrator.core.results.
    trial_record`), and any of :class:`TrialFields`."""
