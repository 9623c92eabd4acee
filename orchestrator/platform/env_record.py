"""The environment report's records: ``environment.json`` and its sections, and the
fingerprint every trial record carries (``trial.json``'s ``environment``). Written by
:mod:`orchestrator.platform.device` (what torch and the vendor's extension say about the
device) and :mod:`orchestrator.platform.environment` (the host, the container, the tools, the
whole report); types only, standard library only."""

from __future__ import annotations

from typing import Any, TypedDict
from orchestrator.core.trial_record import Fingerprint  # noqa: F401  (moved to core)


class BackendAutoload(TypedDict):
    """environment.json ``torch_backend_autoload``: torch's out-of-tree backend autoloading."""

    variable: str
    value: str | None
    enabled: bool
    entry_points: list[str]
    error: str | None


class TorchBuild(TypedDict):
    """environment.json ``torch``: torch's version and the stacks it was compiled against."""

    version: str
    git_version: str | None
    debug: bool | None
    cuda: str | None
    hip: str | None
    musa: str | None


class _DevicePropertiesBase(TypedDict):
    index: int


class DeviceProperties(_DevicePropertiesBase, total=False):
    """One entry of environment.json ``musa.devices`` / ``cuda.devices`` (``error`` alone
    where the properties could not be read)."""

    name: str
    arch: str | None
    total_memory_bytes: int | None
    multi_processor_count: int | None
    is_integrated: bool | None
    is_multi_gpu_board: bool | None
    error: str


class _DeviceFactsBase(TypedDict):
    available: bool
    device_count: int
    devices: list[DeviceProperties]
    errors: dict[str, str | None]  # query -> why it failed


class DeviceFacts(_DeviceFactsBase, total=False):
    """What :func:`_devices` fills in of environment.json ``musa`` / ``cuda``."""

    arch_list: list[str] | None


class MusaTopology(TypedDict):
    """environment.json ``musa.topology``: MtLink domains and MTML topology levels."""

    source: str
    mtlink_domain: list[str | None]
    topology_level: dict[str, int | None]  # "a-b" device pair -> MTML's level


class MusaFacts(DeviceFacts, total=False):
    """environment.json ``musa``: what this process sees of MUSA (the last three keys are
    added by the environment report from the MUSA version tools)."""

    status: str  # absent | broken | present
    torch_musa_version: str | None
    torch_musa_git: str | None
    topology: MusaTopology
    mudnn_version: Any  # whatever torch.backends.mudnn.version() returns (an int, or None)
    mudnn_allow_tf32: bool | None
    mccl_built: bool
    mccl_version: Any  # "x.y.z" from a version tuple, else what mccl.version() returned
    toolkit_version: str | None
    runtime_version: str | None
    mudnn_tool_version: str | None


class _CudaFactsBase(DeviceFacts):
    built: bool


class CudaFacts(_CudaFactsBase, total=False):
    """environment.json ``cuda``: what this process sees of CUDA (or ROCm)."""

    cudnn_version: int | None
    nccl_version: Any  # "x.y.z" from a version tuple, else what nccl.version() returned


class DistributedBackends(TypedDict, total=False):
    """environment.json ``distributed``: the process-group backends of this torch (each
    ``is_<name>_available`` answer, or ``error: ...`` where asking raised)."""

    error: str
    gloo: bool | str
    nccl: bool | str
    mpi: bool | str
    ucc: bool | str
    xccl: bool | str
    is_mccl_available: bool | str
    mccl: bool
    registered: list[str]
    gloo_probe: str | None  # added by the environment report


class CpuFacts(TypedDict):
    """environment.json ``cpu``: the host's CPU and memory."""

    model: str
    logical_cores: int | None
    physical_cores: int | None
    usable_cores: int | None
    memory_total_bytes: int | None


class _ContainerFactsBase(TypedDict):
    detected: bool
    evidence: list[str]
    image: str | None
    image_digest: str | None


class ContainerFacts(_ContainerFactsBase, total=False):
    """environment.json ``container``: whether this process runs in a container, and its image."""

    image_digest_source: str
    image_digest_note: str


class FlashAttnFacts(TypedDict, total=False):
    """environment.json ``attention.flash_attn`` / ``attention.flash_attn_interface``: the
    flash-attention package, who made it, and (``flash_attn`` only) whether it runs here."""

    installed: bool
    usable: bool
    error: str
    version: str | None
    distributions: list[str]
    provider: str
    exports: dict[str, bool]  # entry point -> exported and callable


class MusaAttention(TypedDict):
    """environment.json ``attention.musa``: torch_musa's SDPA implementation and a flash check."""

    implementation: dict[str, str]  # kernel -> what runs it
    arch: str | None
    flash_refusal_bf16_head64: str | None


class _AttentionReportBase(TypedDict):
    device: str
    selector: str | None
    sdpa: dict[str, dict[str, str]]  # kernel -> dtype -> "ok" or why not


class AttentionReport(_AttentionReportBase, total=False):
    """environment.json ``attention``: which attention kernels run forward and backward here."""

    sdpa_usable: dict[str, list[str]]  # kernel -> the dtypes it ran
    musa: MusaAttention
    flash_attn: FlashAttnFacts
    flash_attn_interface: FlashAttnFacts


class TritonFacts(TypedDict, total=False):
    """environment.json ``compile.triton``: Triton's distribution, version and backends."""

    installed: bool
    distributions: list[str]
    version: str | None
    backends: list[str]


class _CompileFactsBase(TypedDict):
    inductor_compile_threads: int | None


class CompileFacts(_CompileFactsBase, total=False):
    """environment.json ``compile``: what sets compile-time figures."""

    inductor_note: str
    triton: TritonFacts


class _TorchRuntimeBase(TypedDict):
    threads: int
    interop_threads: int


class TorchRuntime(_TorchRuntimeBase, total=False):
    """environment.json ``torch.runtime``: torch's threads and CPU kernels in this process."""

    cpu_capability: str | None
    mkldnn: bool


class _SelectedDeviceBase(TypedDict):
    requested: str


class SelectedDevice(_SelectedDeviceBase, total=False):
    """environment.json ``selected_device``: the device the trials use, or why none."""

    error: str
    kind: str
    index: int | None
    name: str
    count: int


class _VersionsBase(TypedDict):
    orchestrator: str


class Versions(_VersionsBase, total=False):
    """environment.json ``versions``: this orchestrator's version."""

    note: str


class DeviceEvents(TypedDict):
    """environment.json ``profilers.device_events``: whether torch.profiler records the device."""

    kind: str | None
    activity: str | None
    why: str | None


class Skipped(TypedDict):
    """An environment.json section not probed because ``import torch`` fails here."""

    skipped: str


class TorchReport(TypedDict, total=False):
    """environment.json ``torch``: :class:`TorchBuild`'s keys
    (none where asking torch failed) and the runtime."""

    version: str
    git_version: str | None
    debug: bool | None
    cuda: str | None
    hip: str | None
    musa: str | None
    runtime: TorchRuntime | Skipped | None


class Drivers(TypedDict):
    """environment.json ``drivers``: kernel driver versions and where they were read."""

    musa: str | None
    cuda: str | None
    sources: str


class Profilers(TypedDict):
    """environment.json ``profilers``: torch.profiler's activities and the profiler tools."""

    torch_activities: list[str] | Skipped | None
    device_events: DeviceEvents | Skipped | None
    tools: dict[str, dict[str, Any] | None]  # tool -> tool_version()'s free-form answer


class _EnvironmentReportBase(TypedDict):
    schema_version: int
    gathered_in: str
    gathered_at: str
    python: dict[str, str]  # version, implementation
    platform: dict[str, str]  # system, release, machine, libc
    cpu: CpuFacts | None
    versions: Versions | None


class EnvironmentReport(_EnvironmentReportBase, total=False):
    """environment.json: the full environment report (a section is None where its probe
    failed; ``errors`` says why). The last four keys are added by the campaign."""

    torch: TorchReport
    torch_backend_autoload: BackendAutoload | None
    selected_device: SelectedDevice
    musa: MusaFacts | None
    cuda: CudaFacts | Skipped | None
    visibility: dict[str, str | None]  # visibility variable -> its value
    drivers: Drivers
    distributed: DistributedBackends | Skipped
    attention: AttentionReport | Skipped | None
    profilers: Profilers
    driver_tools: dict[str, dict[str, Any] | None]  # tool -> tool_version()'s free-form answer
    compile: CompileFacts | None
    container: ContainerFacts | None
    env_switches: dict[str, str]
    fingerprint: Fingerprint | Skipped | None
    errors: dict[str, str]  # probe -> why it failed
    gather_time_s: float
    env_switches_by_arm: dict[str, dict[str, str]]
    source_arm: Any  # the reporting trial's arm label, as its record has it
    env_switches_note: str
    source_trial: Any  # the reporting trial's id, as its record has it
