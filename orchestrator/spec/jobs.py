"""What a launcher runs, as plain data: worker jobs (trial and probe specs) and the trial specs
a plan turns into.

A worker job is one worker process (one per rank for a distributed workload) started as
``python -m <worker> <job dir>/spec.json``: a timed or profiled trial
(:class:`TrialSpec`, ``orchestrator.worker.trial``) or a correctness probe (:class:`ProbeSpec`,
``orchestrator.worker.probe``). The spec carries everything the worker needs (the arm's
resolved workload, the bucket(s), the protocol's numbers), so the worker imports no config
machinery beyond the schemas; the worker writes its record (``trial.json`` / ``probe.json``)
into the job directory. Every launcher runs both kinds the same way, so on Slurm the gate's
probes run on the compute nodes like the trials.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional, cast

from orchestrator.spec.config import Config
from orchestrator.core.convert import to_dict
from orchestrator.spec.plan import PlannedTrial
from orchestrator.core.steady import WarmupPolicy
from orchestrator.platform import compile_stats
from orchestrator.spec.sweep import ArmCode, Bucket, ResolvedArm, selected_buckets, varies_compilation

# set by the launcher just before it starts the process: start-to-first-step is measured from it
LAUNCH_T0_VAR = "ORCHESTRATOR_LAUNCH_T0"


class WorkerJob(abc.ABC):
    """One worker process (or one per rank) a launcher starts: ``python -m <worker> SPEC``."""

    worker: ClassVar[str]  # the module run with python -m
    record_file: ClassVar[str]  # the record the worker writes into its job directory
    id_field: ClassVar[str]  # the record's field that names the job
    env: dict[str, str]  # set in the worker's environment (an arm's env.* switches)
    workload: dict[str, Any]  # the arm's resolved workload (names its recipe)

    @property
    @abc.abstractmethod
    def job_id(self) -> str:
        """Names the job (and its record: the record's id field holds it)."""

    @property
    @abc.abstractmethod
    def job_dir(self) -> Path:
        """spec.json, stdout/stderr logs and the record go here."""

    @property
    def record_path(self) -> Path:
        return self.job_dir / self.record_file

    @abc.abstractmethod
    def nproc(self) -> int:
        """Processes the launcher starts: one per rank."""

    def nodes(self) -> int:
        """Machines the job spans (workload.nnodes): its processes split evenly over them."""
        return max(1, int(self.workload.get("nnodes", 1) or 1))

    def plain(self) -> dict[str, Any]:
        """The fields as plain data (nested records as dicts)."""
        return {k: _plain(v) for k, v in self.__dict__.items()}

    def to_json(self) -> str:
        return json.dumps(self.plain(), indent=2)

    def payload(self) -> dict[str, Any]:
        """The job as plain data that :func:`job_from_payload` turns back into it."""
        return {"job": JOB_KINDS[type(self)], "spec": self.plain()}


def _plain(v: Any) -> Any:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return dataclasses.asdict(v)
    if isinstance(v, list) and v and dataclasses.is_dataclass(v[0]):
        return [dataclasses.asdict(x) for x in v]
    return v


@dataclass
class PairedArm:
    """One arm a paired process (protocol.pairing=steps) runs, and where its record goes."""

    arm_id: str
    arm_label: str
    is_baseline: bool
    trial_id: str
    trial_dir: str
    workload: dict[str, Any]  # the arm's resolved workload
    env: dict[str, str] = field(default_factory=dict)  # its env.* switches (a duet's own process)
    # ({} fits the total=False ArmCode; mypy types a dict() default as dict[Never, Never])
    code: ArmCode = field(default_factory=dict)  # type: ignore[assignment]  # the user's code it runs


@dataclass
class PairingPart:
    """A paired trial's own part: every arm its one trial process measures, and the part of the
    mode that planned it (``orchestrator.worker.pairing``, one module per mode).

    ``mode`` is that module's tag and ``settings`` its own fields, as plain data: each mode
    declares its part's type in its own module, and reads it back (and checks it) there
    (``StepsPart.of``, ``DuetPart.of``). The spec, below the worker, needs no change for a new
    mode."""

    mode: str  # the tag of the mode's part: steps | alternation | duet
    arms: list[PairedArm]  # in block order; the spec's own fields are the first's
    settings: dict[str, Any] = field(default_factory=dict)  # the mode's typed part, as a dict
    own_processes: bool = False  # each arm its own process with its own env switches

    def __post_init__(self) -> None:  # read back from a payload: the entries as records
        self.arms = [a if isinstance(a, PairedArm) else PairedArm(**a) for a in self.arms]


@dataclass
class TrialSpec(WorkerJob):
    worker: ClassVar[str] = "orchestrator.worker.trial"
    record_file: ClassVar[str] = "trial.json"
    id_field: ClassVar[str] = "trial_id"

    trial_id: str
    trial_dir: str
    bucket: Bucket
    arm_id: str
    arm_label: str
    is_baseline: bool
    round: int
    position: int  # place in the plan (execution order)
    workload: dict[str, Any]
    device: str = "auto"
    warmup_steps: int = 3
    measured_steps: int = 10
    measured_min_s: float = 0.0  # keep measuring past measured_steps until this much step time
    env: dict[str, str] = field(default_factory=dict)
    # timed | profile | microbench (profiled and microbenchmark trials: never in timing
    # statistics)
    kind: str = "timed"
    profile: dict[str, Any] = field(default_factory=dict)  # layer and settings, kind=profile
    microbench: dict[str, Any] = field(default_factory=dict)  # name, calls, kind=microbench
    hardware: dict[str, Any] = field(default_factory=dict)  # HardwareConfig as a dict
    timeout_s: float | None = None  # the launcher's limit for this trial (external commands stop sooner)
    warmup_policy: str = "fixed"  # fixed | auto (see orchestrator.core.steady)
    warmup_max_steps: int = 30
    warmup_window: int = 3
    warmup_tolerance: float = 0.05
    clock: str = "wall"  # wall | cpu (process CPU time; host-CPU recipes only)
    speed_reference: str = "off"  # auto | host | off (orchestrator.core.reference)
    # arm | cold | warm (orchestrator.platform.compile_stats; auto is resolved by make_specs)
    compile_cache: str = "warm"
    cache_env: list[str] = field(default_factory=list)  # protocol.cache_env: more cache variables
    # compile_cache=arm: the run directory's caches folder (each arm's env names its own below)
    cache_root: str = ""
    env_report: bool = False  # also write the full environment.json (the campaign's first trial)
    cpu_affinity: Optional[list[int]] = None  # launcher.cpu_affinity: cores the trial is pinned to
    # the user's code the trial runs (its arm's: orchestrator.campaign.revisions); in its record
    code: ArmCode = field(default_factory=dict)  # type: ignore[assignment]  # as PairedArm.code
    # a paired trial (protocol.pairing=steps or duet): its arms and its mode's part
    paired: Optional[PairingPart] = None

    def shown_env(self, env: dict[str, str] | None = None) -> dict[str, str]:
        """``env`` (the spec's own by default) as a record shows it: the arm's switches, not
        the cache folders compile_cache=arm pointed it at."""
        env = self.env if env is None else env
        if not self.cache_root:
            return dict(env)
        return {k: v for k, v in env.items() if not v.startswith(self.cache_root)}

    def __post_init__(self) -> None:  # read back from a payload: the part as a record
        if isinstance(self.paired, dict):
            self.paired = PairingPart(**self.paired)

    @property
    def paired_arms(self) -> list[PairedArm]:
        """Every arm this trial process measures ([] for one arm per process)."""
        return self.paired.arms if self.paired else []

    def warmup(self) -> WarmupPolicy:
        return WarmupPolicy(self.warmup_policy, self.warmup_steps, self.warmup_max_steps,
                            self.warmup_window, self.warmup_tolerance)

    @property
    def job_id(self) -> str:
        return self.trial_id

    @property
    def job_dir(self) -> Path:
        return Path(self.trial_dir)

    def nproc(self) -> int:
        """A ``command`` workload starts its own ranks (its world_size is only a placeholder of
        its command line): one process per node it spans."""
        if self.workload.get("kind") == "command":
            return self.nodes()
        return max(1, int(self.workload.get("world_size", 1) or 1))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> TrialSpec:
        with open(path, encoding="utf-8") as fh:
            return cls(**json.load(fh))


@dataclass
class ProbeSpec(WorkerJob):
    """One arm's correctness probe (every bucket), see :mod:`orchestrator.worker.probe`."""

    worker: ClassVar[str] = "orchestrator.worker.probe"
    record_file: ClassVar[str] = "probe.json"
    id_field: ClassVar[str] = "name"

    name: str  # a0, a1, ..., a0-repeat
    arm_id: str
    arm_label: str
    role: str  # baseline | variant | baseline_repeat
    probe_dir: str
    workload: dict[str, Any]
    buckets: list[Bucket]
    init_checkpoint: str  # written by the baseline, loaded by every arm
    batch_dir: str  # the baseline's probe batch per bucket
    device: str = "auto"
    steps: int = 4
    cross_load: dict[str, str] = field(default_factory=dict)  # arm_id -> its final checkpoint
    env: dict[str, str] = field(default_factory=dict)

    @property
    def job_id(self) -> str:
        return self.name

    @property
    def job_dir(self) -> Path:
        return Path(self.probe_dir)

    def nproc(self) -> int:
        """A distributed workload is probed by its G ranks (rank 0 writes the record)."""
        return max(1, int(self.workload.get("world_size", 1) or 1))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ProbeSpec:
        with open(path, encoding="utf-8") as fh:
            return cls(**json.load(fh))


JOB_KINDS: dict[type[WorkerJob], str] = {TrialSpec: "trial", ProbeSpec: "probe"}


def job_from_payload(data: dict[str, Any]) -> WorkerJob:
    """A job from :meth:`WorkerJob.payload` (a bare trial spec dict reads as a trial)."""
    if "job" not in data:
        return TrialSpec(**data)
    kinds = {v: k for k, v in JOB_KINDS.items()}
    return kinds[data["job"]](**data["spec"])


def make_specs(cfg: Config, run_dir: Path, arms: Sequence[ResolvedArm],
               planned: Sequence[PlannedTrial]) -> list[TrialSpec]:
    """One spec per planned trial, each carrying its arm's resolved workload (a paired mode's
    planner then joins a round's: ``orchestrator.worker.pairing.plan_specs``)."""
    by_arm = {a.arm_id: a for a in arms}
    buckets = {b["name"]: b for b in selected_buckets(cfg)}
    cache_mode = compile_stats.resolve_mode(str(cfg.protocol.compile_cache),
                                            varies_compilation(arms))
    specs = []
    for p in planned:
        arm = by_arm[p.arm_id]
        specs.append(
            TrialSpec(
                trial_id=p.trial_id,
                trial_dir=str(run_dir / "trials" / p.trial_id),
                bucket=buckets[p.bucket],
                arm_id=arm.arm_id,
                arm_label=arm.label,
                is_baseline=arm.is_baseline,
                round=p.round,
                position=p.position,
                workload=arm.job_workload(),
                code=cast(ArmCode, dict(arm.code)),  # cast: mypy reads dict() of a TypedDict as a plain dict
                device=cfg.device,
                warmup_steps=cfg.protocol.warmup_steps,
                # the planner's trial length for adaptive rounds, else the protocol's; the
                # time floor holds either way (the planner only lengthens the window)
                measured_steps=p.measured_steps or cfg.protocol.measured_steps,
                measured_min_s=cfg.protocol.measured_min_s,
                env=_arm_env(cfg, run_dir, arm, cache_mode),
                hardware=to_dict(cfg.hardware),
                timeout_s=cfg.protocol.trial_timeout_s,
                warmup_policy=cfg.protocol.warmup_policy,
                warmup_max_steps=cfg.protocol.warmup_max_steps,
                warmup_window=cfg.protocol.warmup_window,
                warmup_tolerance=cfg.protocol.warmup_tolerance,
                clock=cfg.protocol.clock,
                speed_reference=cfg.protocol.speed_reference,
                compile_cache=cache_mode,
                cache_env=list(cfg.protocol.cache_env),
                cache_root=arm_cache_home(cfg, run_dir) if cache_mode == "arm" else "",
                cpu_affinity=(list(cfg.launcher.cpu_affinity)
                              if cfg.launcher.cpu_affinity is not None else None),
            )
        )
    return specs


def _arm_env(cfg: Config, run_dir: Path, arm: ResolvedArm, cache_mode: str) -> dict[str, str]:
    """The arm's ``env.*`` switches; under compile_cache=arm first its own cache folders (a
    variable the arm sets itself stays the arm's)."""
    if cache_mode != "arm":
        return dict(arm.env)
    if cfg.protocol.arm_cache_store:
        root = compile_stats.stored_arm_root(compile_stats.store_dir(),
                                             compile_stats.arm_key(arm_identity(cfg, arm)))
    else:
        root = compile_stats.arm_cache_root(run_dir, arm.arm_id)
    return {**compile_stats.cache_env(root, list(cfg.protocol.cache_env)), **arm.env}


def arm_cache_home(cfg: Config, run_dir: Path) -> str:
    """compile_cache=arm: the folder every arm's cache folder lies in (the user's compile store,
    or the run directory's scratch with protocol.arm_cache_store off)."""
    if cfg.protocol.arm_cache_store:
        return os.fspath(compile_stats.store_dir())
    return str(run_dir / compile_stats.CACHES_DIR)


def arm_identity(cfg: Config, arm: ResolvedArm) -> dict[str, object]:
    """What an arm's compiled artifacts follow from, for its folder in the compile store: its
    id (the A/A control, the baseline's own configuration, keeps a folder of its own), the
    workload it compares (not a job's worktree path), its environment switches, its code
    revision (commit and diff hash), the device and torch's version (read from the installed
    package's metadata: the campaign process imports no torch). Inductor's and Triton's caches
    are keyed by content as well, so a key that misses a change costs only a recompile."""
    return {"v": 1, "arm": arm.arm_id, "workload": arm.workload, "env": dict(arm.env),
            "code": {k: v for k, v in dict(arm.code).items() if k != "worktree"},
            "device": str(cfg.device), "torch": _torch_version(),
            "cache_env": list(cfg.protocol.cache_env)}


@functools.lru_cache(maxsize=1)  # once per campaign process: every spec of every arm asks
def _torch_version() -> str:
    """torch's installed version, and a vendor extension's beside it (torch_musa)."""
    from importlib import metadata

    got = []
    for dist in ("torch", "torch_musa"):
        try:
            got.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            continue
    return ", ".join(got)


def round_groups(specs: Sequence[TrialSpec]) -> list[list[TrialSpec]]:
    """The specs of each round and bucket, in plan order: what a paired trial joins."""
    groups: dict[tuple[int, str], list[TrialSpec]] = {}
    for s in specs:
        groups.setdefault((s.round, s.bucket["name"]), []).append(s)
    return list(groups.values())


def paired_arms(members: Sequence[TrialSpec]) -> list[PairedArm]:
    """Each one-arm spec as an arm of a paired trial."""
    return [PairedArm(m.arm_id, m.arm_label, m.is_baseline, m.trial_id, m.trial_dir, m.workload,
                      dict(m.env), cast(ArmCode, dict(m.code))) for m in members]


def paired_members(spec: TrialSpec) -> list[TrialSpec]:
    """The one-arm view of each arm a paired spec runs (the spec itself when not paired)."""
    if not spec.paired_arms:
        return [spec]
    return [dataclasses.replace(spec, trial_id=a.trial_id, trial_dir=a.trial_dir,
                                arm_id=a.arm_id, arm_label=a.arm_label,
                                is_baseline=a.is_baseline, workload=a.workload,
                                env=(dict(a.env) if spec.paired and spec.paired.own_processes
                                     else spec.env),
                                code=cast(ArmCode, dict(a.code)) or spec.code, paired=None)
            for a in spec.paired_arms]
