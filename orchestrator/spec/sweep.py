"""One-variable-at-a-time sweeps: checking a sweep file and expanding it into arms.

An arm is the baseline or one variant: a label plus the overrides it applies to the workload
(dotted paths) and to the trial's environment (``env.NAME``). Everything else is identical
across arms, which is what makes the comparison mean something.

Arms are resolved once (:func:`resolve_arms`): each :class:`ResolvedArm` carries its workload
with the overrides applied, as plain data (what a trial or probe spec carries) and as its
kind's dataclass. The stages after planning (trial specs, the correctness gate's probes,
profiled trials, the pre-flight's checks) read these instead of applying the overrides again.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Any, TypedDict, cast

from orchestrator.core.records import Pairing
from orchestrator.core.trial_record import ArmCode  # noqa: F401  (moved to core; importers follow)
from orchestrator.spec.config import EVIDENCE_KINDS, Config, SweepConfig, WorkloadConfig
from orchestrator.core.convert import to_dict
from orchestrator.core.errors import ConfigError
from orchestrator.platform.slices import duet_slices
from orchestrator.spec.duet import duet_length_obstacle
from recipes.registry import switchable_keys, workload_from_dict, workload_kinds

ENV_PREFIX = "env."
# the code revision an arm runs (orchestrator.campaign.revisions): a sweep path beside the
# workload's keys and env.NAME, applied to a worktree instead of the workload config
REVISION = "source.revision"


class Bucket(TypedDict):
    """A workload bucket as plain data (spec.config.BucketConfig; plan.json's ``buckets``, a
    trial spec's ``bucket``)."""

    name: str
    seq_len: int
    micro_batch: int
    weight: float


class ArmPlan(TypedDict):
    """An arm as plan.json records it (``arms``, ``control_arm``)."""

    arm_id: str
    label: str
    value: Any  # the sweep's value for the arm: any JSON value a sweep file gives
    is_baseline: bool
    overrides: dict[str, Any]  # workload.* paths -> value (free-form, as the sweep sets them)
    env: dict[str, str]


@dataclass(frozen=True)
class Arm:
    arm_id: str  # a0 = baseline, a1.. = variants, in sweep order
    label: str
    value: Any
    is_baseline: bool
    overrides: dict[str, Any] = field(default_factory=dict)  # workload.* paths -> value
    env: dict[str, str] = field(default_factory=dict)

    def plan_dict(self) -> ArmPlan:
        """The arm as plan.json records it (what a resume must find unchanged)."""
        return {"arm_id": self.arm_id, "label": self.label, "value": self.value,
                "is_baseline": self.is_baseline, "overrides": self.overrides, "env": self.env}


@dataclass(frozen=True)
class ResolvedArm(Arm):
    """An arm with its workload resolved (overrides applied) once, when the campaign plans."""

    workload: dict[str, Any] = field(default_factory=dict)  # plain data, as a spec carries it
    workload_config: WorkloadConfig | None = None  # the same, as its kind's dataclass
    # the user's code this arm runs (orchestrator.campaign.revisions): its repository's commit,
    # branch, dirty flag and diff hash, the revision asked for, the worktree; {} = none known
    # ({} fits the total=False ArmCode; mypy types a dict() default as dict[Never, Never])
    code: ArmCode = field(default_factory=dict)  # type: ignore[assignment]
    # workload.* paths a job of this arm runs with instead (its cwd and command moved into the
    # arm's worktree); the workload above stays the configuration the sweep compares
    job_overrides: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, arm: Arm, workload: dict[str, Any], config: WorkloadConfig,
           code: ArmCode | None = None,
           job_overrides: dict[str, str] | None = None) -> ResolvedArm:
        return cls(arm.arm_id, arm.label, arm.value, arm.is_baseline, dict(arm.overrides),
                   dict(arm.env), workload, config, cast(ArmCode, dict(code or {})),
                   dict(job_overrides or {}))

    def job_workload(self) -> dict[str, Any]:
        """The workload a trial or probe of this arm runs (a copy): the configuration with the
        job's own paths (its worktree) applied; the sweep's overrides are not applied again."""
        out = copy.deepcopy(self.workload)
        root = {"workload": out}
        for path, value in self.job_overrides.items():
            _set(root, path, value)
        return out


def _paths(sweep: SweepConfig) -> dict[str, str]:
    """Knob field -> dotted path (a plain variable is a knob with one unnamed field)."""
    if sweep.knob:
        return dict(sweep.knob)
    return {"": sweep.variable}


def _leaf_paths(tree: Any, prefix: str) -> list[str]:
    if isinstance(tree, dict):
        out = []
        for k, v in tree.items():
            out.extend(_leaf_paths(v, f"{prefix}.{k}" if prefix else k))
        return out
    return [prefix]


def _get(tree: dict[str, Any], path: str) -> Any:
    node: Any = tree
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(path)
        node = node[part]
    return node


def _set(tree: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    node = tree
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value


def _check_path(key: str, path: str, workload: dict[str, Any]) -> None:
    if path == REVISION:
        return
    if path.startswith("source."):
        raise ConfigError(key, f"{path!r} cannot be swept; of the source keys a sweep varies "
                          f"{REVISION} (the code revision each arm runs)")
    if path.startswith(ENV_PREFIX):
        if len(path) == len(ENV_PREFIX):
            raise ConfigError(key, "env. needs a variable name, e.g. env.OMP_NUM_THREADS")
        return
    if not path.startswith("workload."):
        raise ConfigError(
            key,
            f"{path!r} is not a workload key; sweep a workload.* path, an env.NAME switch or "
            f"{REVISION}",
        )
    try:
        node = _get({"workload": workload}, path)
    except KeyError:
        leaves = _leaf_paths({"workload": workload}, "")
        near = difflib.get_close_matches(path, leaves, n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise ConfigError(key, f"{path!r} does not exist in the workload config{hint}") from None
    if isinstance(node, (dict, list)):
        raise ConfigError(
            key,
            f"{path!r} is a whole section; sweep one leaf key, or declare a compound knob "
            "under sweep.knob (field: dotted.path)",
        )


def _check_frozen(key: str, path: str, cfg: Config) -> None:
    for prefix in cfg.invariants.frozen:
        if path == prefix or path.startswith((prefix + ".", prefix + "[")):
            why = cfg.invariants.reasons.get(prefix, "declared invariant")
            raise ConfigError(
                key,
                f"{path!r} is frozen by invariants ({prefix}: {why}); a throughput sweep may not "
                "change it. Pick another variable or choose invariants=NAME that allows it",
            )


def _label(value: Any) -> str:
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def _arm_overrides(sweep: SweepConfig, value: Any, key: str) -> dict[str, Any]:
    paths = _paths(sweep)
    if sweep.knob:
        if not isinstance(value, dict):
            raise ConfigError(
                key, f"{value!r} must be a mapping over the knob fields {sorted(paths)}"
            )
        if set(value) != set(paths):
            raise ConfigError(
                key,
                f"keys {sorted(value)} must be exactly the knob fields {sorted(paths)} "
                "(a sweep changes one knob, all its fields named)",
            )
        return {paths[k]: value[k] for k in paths}
    if isinstance(value, (dict, list)):
        raise ConfigError(
            key,
            f"{value!r} would change more than one knob; a sweep varies one key. Declare a "
            "compound knob under sweep.knob if the fields belong together (e.g. a tile shape)",
        )
    return {sweep.variable: value}


def expand_arms(cfg: Config) -> list[Arm]:
    """Baseline first, then the variants in the sweep's order."""
    sweep = cfg.sweep
    assert sweep is not None
    raw = [sweep.baseline, *sweep.values]
    labels = [sweep.baseline_label or _label(sweep.baseline)]
    labels += list(sweep.labels) if sweep.labels else [_label(v) for v in sweep.values]
    arms = []
    for i, (value, label) in enumerate(zip(raw, labels)):
        key = "sweep.baseline" if i == 0 else f"sweep.values[{i - 1}]"
        overrides: dict[str, Any] = {}
        env: dict[str, str] = {}
        for path, v in {**sweep.fixed, **_arm_overrides(sweep, value, key)}.items():
            if path.startswith(ENV_PREFIX):
                env[path[len(ENV_PREFIX):]] = str(v)
            elif path == REVISION:  # a short commit id YAML read as a number stays its text
                overrides[path] = None if v is None else str(v)
            else:
                overrides[path] = v
        arms.append(Arm(f"a{i}", label, value, i == 0, overrides, env))
    return arms


def apply_overrides(workload: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The workload with an arm's ``workload.*`` overrides applied (a copy); its
    source.revision is the campaign's to apply (orchestrator.campaign.revisions)."""
    out = copy.deepcopy(workload)
    root = {"workload": out}
    for path, value in overrides.items():
        if path.startswith("workload."):
            _set(root, path, value)
    return out


def revision_of(arm: Arm, default: str | None) -> str | None:
    """The code revision ``arm`` runs: its sweep value, else source.revision (``default``)."""
    return arm.overrides[REVISION] if REVISION in arm.overrides else default


def arm_key(arm: Arm) -> str:
    """The sweep entry an arm comes from (for error messages)."""
    return "sweep.baseline" if arm.is_baseline else f"sweep.values[{int(arm.arm_id[1:]) - 1}]"


def resolve_arms(cfg: Config) -> list[ResolvedArm]:
    """The sweep's arms, baseline first, each with its workload resolved: the one place the
    overrides are applied. A workload an arm's overrides make unreadable raises ConfigError
    naming the sweep entry (the sweep's structure is :func:`check_sweep`'s to refuse)."""
    base = to_dict(cfg.workload)
    out = []
    for arm in expand_arms(cfg):
        workload = apply_overrides(base, arm.overrides)
        try:
            config = workload_from_dict(workload)
        except ConfigError as exc:
            raise ConfigError(arm_key(arm), f"arm {arm.label!r} sets {exc.key}: {exc.message}"
                              ) from None
        out.append(ResolvedArm.of(arm, workload, config))
    return out


def like(arm: Arm, resolved: ResolvedArm) -> ResolvedArm:
    """``arm`` (e.g. the A/A control, a copy of the baseline) with ``resolved``'s workload
    (and the code it runs)."""
    assert resolved.workload_config is not None
    return ResolvedArm.of(arm, resolved.workload, resolved.workload_config, resolved.code,
                          resolved.job_overrides)


def _check_workload_kind(cfg: Config) -> None:
    """A sweep about one kind of workload (tp_mode: muon_tp) on a workload of another kind is
    refused by name, before its variable is looked up (which would only say that the path does
    not exist in the workload)."""
    sweep = cfg.sweep
    assert sweep is not None
    need = sweep.workload_kind
    if need is None:
        return
    kinds = workload_kinds()
    if need not in kinds:
        raise ConfigError("sweep.workload_kind", f"{need!r} is not a valid choice; choose one of: "
                          f"{', '.join(kinds)}, or null for any kind")
    w = cfg.workload
    if w.kind != need:
        example = (f" (e.g. workload={sweep.workload_example}, its default)"
                   if sweep.workload_example else "")
        raise ConfigError("workload", f"sweep {sweep.name!r} needs a workload of kind {need!r}"
                          f"{example}; workload={w.name} is of kind {w.kind!r}; drop workload= "
                          f"or choose one of kind {need!r}")


def _check_labels_named(sweep: SweepConfig) -> None:
    """Every arm's label says something: a verdict, a table row and a trial directory are
    named by it, and an empty or blank one prints as ``reject       : reject: ...``. Given
    labels (sweep.baseline_label, sweep.labels) and the ones a value gives (its text) alike."""
    given = [("sweep.baseline_label", sweep.baseline_label)] if sweep.baseline_label is not None \
        else [("sweep.baseline", _label(sweep.baseline))]
    if sweep.labels is not None:
        given += [(f"sweep.labels[{i}]", x) for i, x in enumerate(sweep.labels)]
    else:
        given += [(f"sweep.values[{i}]", _label(v)) for i, v in enumerate(sweep.values)]
    for key, label in given:
        if str(label).strip():
            continue
        if key.startswith(("sweep.baseline_label", "sweep.labels")):
            fix = f"give {key} a name that is not blank"
        elif key == "sweep.baseline":
            fix = "name the baseline with sweep.baseline_label=NAME"
        else:
            fix = "name every value with sweep.labels=[NAME, ...]"
        raise ConfigError(key, f"gives the arm an empty label ({str(label)!r}), and a verdict is "
                          f"named by its label; {fix}")


def check_sweep(cfg: Config) -> None:
    """Reject a sweep that is malformed, touches an invariant, or changes more than one knob.
    (That every arm is still a valid workload is checked by :mod:`orchestrator.campaign.validate`.)"""
    sweep = cfg.sweep
    assert sweep is not None
    _check_workload_kind(cfg)
    workload = to_dict(cfg.workload)
    if not sweep.values:
        raise ConfigError("sweep.values", "needs at least one value to compare with the baseline")
    if sweep.knob is not None and not sweep.knob:
        raise ConfigError("sweep.knob", "is empty; declare field: dotted.path pairs or remove it")
    for name, path in _paths(sweep).items():
        key = f"sweep.knob.{name}" if name else "sweep.variable"
        # frozen first: a frozen key inside a list (workload.buckets.0.micro_batch) is refused
        # for what it is, not as a path the lookup cannot follow
        _check_frozen(key, path, cfg)
        _check_path(key, path, workload)
    swept = set(_paths(sweep).values())
    for path in sweep.fixed:
        _check_path(f"sweep.fixed.{path}", path, workload)
        if path in swept:
            raise ConfigError(
                f"sweep.fixed.{path}", "is also the swept variable; remove it from sweep.fixed"
            )
    if sweep.labels is not None and len(sweep.labels) != len(sweep.values):
        raise ConfigError(
            "sweep.labels", f"has {len(sweep.labels)} entries for {len(sweep.values)} values"
        )
    _check_labels_named(sweep)
    labels = [str(x) for x in (sweep.labels or [])]
    for i, label in enumerate(labels):
        if label in labels[:i] or (sweep.baseline_label and label == sweep.baseline_label):
            raise ConfigError(f"sweep.labels[{i}]", f"{label!r} names another arm too; give "
                              "every arm its own label (each verdict is named by it)")
    seen = [sweep.baseline]
    for i, v in enumerate(sweep.values):
        if v in seen:
            raise ConfigError(f"sweep.values[{i}]", f"{v!r} repeats the baseline or another value")
        seen.append(v)
    for i, name in enumerate(sweep.evidence):
        if name not in EVIDENCE_KINDS:
            near = difflib.get_close_matches(str(name), list(EVIDENCE_KINDS), n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ConfigError(f"sweep.evidence[{i}]", f"{name!r} is not a kind of evidence{hint}; "
                              f"choose from: {', '.join(EVIDENCE_KINDS)}")
    if sweep.buckets is not None:
        names = [b.name for b in cfg.workload.buckets]
        if not sweep.buckets:
            raise ConfigError("sweep.buckets", f"is empty; list the buckets to run (from "
                              f"{names}), or drop the key to run them all")
        for b in sweep.buckets:
            if b not in names:
                raise ConfigError(
                    "sweep.buckets", f"{b!r} is not a workload bucket; choose from {names}"
                )


def selected_buckets(cfg: Config) -> list[Bucket]:
    buckets = cast("list[Bucket]", [to_dict(b) for b in cfg.workload.buckets])
    if cfg.sweep is not None and cfg.sweep.buckets is not None:
        buckets = [b for b in buckets if b["name"] in cfg.sweep.buckets]
    return buckets


# --------------------------------------------------------------------------- pairing


def _diff_paths(a: Any, b: Any, prefix: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [p for k in sorted(set(a) | set(b))
                for p in _diff_paths(a.get(k), b.get(k), f"{prefix}.{k}")]
    return [] if a == b else [prefix]


def differing_settings(base: Arm, arm: Arm) -> set[str]:
    """The settings in which ``arm`` differs from ``base``, as a sweep names them: the
    ``workload.*`` leaf paths where their workloads differ (resolved, for a ResolvedArm; else
    their overrides, as a tree) and ``env.NAME``."""
    if isinstance(base, ResolvedArm) and isinstance(arm, ResolvedArm):
        a, b = base.workload, arm.workload
    else:
        a, b = ({"workload": {}}, {"workload": {}})
        for tree, x in ((a, base), (b, arm)):
            for path, value in x.overrides.items():
                if not path.startswith("workload."):
                    continue
                node = tree
                for part in path.split(".")[:-1]:
                    node = node.setdefault(part, {})
                node[path.rsplit(".", 1)[-1]] = value
        a, b = a["workload"], b["workload"]
    revision = {REVISION} if base.overrides.get(REVISION) != arm.overrides.get(REVISION) else set()
    return set(_diff_paths(a, b, "workload")) | revision | {
        f"{ENV_PREFIX}{k}" for k in {*base.env, *arm.env} if base.env.get(k) != arm.env.get(k)}


# what makes a setting a compile setting: its path names compilation, or it is a variable of
# the compiler stack (their compile times are then part of what the arms compare)
_COMPILE_ENV = ("TORCHINDUCTOR_", "TORCHDYNAMO_", "TRITON_", "TORCH_COMPILE")


def varies_compilation(arms: Sequence[Arm]) -> bool:
    """Whether the arms differ in a compile setting (``protocol.compile_cache=auto`` is then
    cold: each trial pays its own compile, which is part of the comparison)."""
    for arm in arms[1:]:
        for setting in differing_settings(arms[0], arm):
            if "compile" in setting.lower() or setting.removeprefix(ENV_PREFIX).startswith(
                    _COMPILE_ENV):
                return True
    return False


def switch_obstacle(arms: Sequence[Any]) -> str:
    """Why one process cannot switch between the arms, "" when it can: only keys the recipe
    declares switchable (recipes.base.switchable), or a command workload's
    ``workload.switchable`` params (its trainer reads them through orchestrator.client), may
    differ between arms, and no env.* switch (the environment is the process's)."""
    if not arms:
        return ""
    base = arms[0]
    recipe = str(base.workload.get("recipe", ""))
    try:
        allowed = set(switchable_keys(recipe))
    except (KeyError, ImportError, AttributeError) as exc:
        return f"cannot read which keys recipe {recipe!r} switches ({exc})"
    # a command's trainer switches the params it declares (through orchestrator.client)
    allowed |= {f"workload.params.{k}" for k in base.workload.get("switchable") or ()}
    base_rev = (getattr(base, "overrides", None) or {}).get(REVISION)
    for arm in arms[1:]:
        rev = (getattr(arm, "overrides", None) or {}).get(REVISION)
        if rev != base_rev:
            return (f"a code revision cannot be switched between steps (arm {arm.label!r} runs "
                    f"{REVISION}={rev})")
        if arm.env != base.env:
            name = sorted(set(arm.env.items()) ^ set(base.env.items()))[0][0]
            return (f"an environment variable cannot be switched between steps (arm "
                    f"{arm.label!r} sets env {name})")
        for path in _diff_paths(arm.workload, base.workload, "workload"):
            if path not in allowed:
                can = ", ".join(sorted(allowed)) or "none"
                return (f"recipe {recipe!r} cannot switch {path} between steps (arm "
                        f"{arm.label!r}; it switches: {can})")
    return ""


def _own_process(arm: Any) -> bool:
    """Whether an arm's workload runs as a program of its own (a command)."""
    try:
        return bool(workload_from_dict(arm.workload).runs_own_process())
    except Exception:  # noqa: BLE001 (a workload that cannot be read is refused elsewhere)
        return False


def alternates(arms: Sequence[Any]) -> bool:
    """Paired by steps, whether the arms run as processes of their own taking turns block by
    block (orchestrator.worker.pairing.alternation): a command workload whose trainer does not switch
    them itself through orchestrator.client."""
    if not arms or not _own_process(arms[0]):
        return False
    return bool(switch_obstacle(arms)) or not arms[0].workload.get("switchable")


def shared_log_obstacle(arms: Sequence[Any], how: str = "alternated arms run at once") -> str:
    """Why a command's arms cannot run at the same time, "" when they can: each must write its
    own log (``workload.log.file`` templated with ``{trial_dir}``, or none: its output).
    ``how`` says why they run at once (alternated arms stay resident together; a duet's arms
    train side by side)."""
    for arm in arms:
        log_file = ((arm.workload.get("log") or {}).get("file") or "")
        if log_file and "{trial_dir}" not in log_file:
            return (f"workload.log.file {log_file!r} is one file for every arm, and {how}; put "
                    "{trial_dir} in it (e.g. '{trial_dir}/train.log')")
    return ""


def alternation_obstacle(arms: Sequence[Any]) -> str:
    """Why a plain command's arms cannot take turns as processes of their own, "" when they
    can (:func:`shared_log_obstacle`)."""
    return shared_log_obstacle(arms)


def pairing_obstacle(arms: Sequence[Any]) -> str:
    """Why the arms cannot run paired by steps, "" when they can: a command's arms always
    can (its trainer switches them through orchestrator.client, or its arms' processes take
    turns); an embedded recipe's when one process switches between them
    (:func:`switch_obstacle`)."""
    if arms and _own_process(arms[0]):
        return alternation_obstacle(arms) if alternates(arms) else ""
    return switch_obstacle(arms)


def _accelerator(device: str, resolved: str | None = None) -> str:
    """The accelerator kind a campaign's trials would train on ("" for the CPU). ``resolved``:
    the kind ``device=auto`` resolved to where the trials run (plan.json's ``device_resolved``:
    a Slurm compute node's answer, orchestrator.launch.device_probe); without it, ``auto`` is
    asked of this process's device seam."""
    kind = str(device).split(":", 1)[0]
    if kind == "cpu":
        return ""
    if kind != "auto":
        return kind
    if resolved is not None:
        return "" if resolved in ("cpu", "") else resolved
    from orchestrator.platform.device import available_kinds  # start-up cost: torch, only here

    return next((k for k in available_kinds() if k != "cpu"), "")


def choose_pairing(cfg: Config, arms: Sequence[Any],
                   device_kind: str | None = None) -> tuple[Pairing, str]:
    """(process | steps | duet, why): protocol.pairing=auto picks steps when every arm differs
    from the baseline only in keys its recipe switches between steps, or for a command on the
    CPU (its arms' processes take turns: orchestrator.worker.pairing.alternation); else duet where the
    machine's slices are declared (protocol.duet_cpus / duet_devices), else process.
    ``device_kind``: the kind ``device=auto`` resolved to where the trials run (None: asked
    here, on this host)."""
    p = cfg.protocol
    if p.pairing != Pairing.auto:
        return Pairing(p.pairing), "set by protocol.pairing"
    why = pairing_obstacle(arms)
    if not why and alternates(arms):
        accelerator = _accelerator(cfg.device, device_kind)
        if accelerator:
            why = (f"a plain command's arms would take turns as processes of their own, each "
                   f"holding its {accelerator} memory at once (set protocol.pairing=steps "
                   "where they fit)")
        elif p.duet_cpus or p.duet_devices:
            why = "a plain command's arms cannot switch between steps, and slices are declared"
    if why and (p.duet_cpus or p.duet_devices) and cfg.workload.runs_own_process():
        clash = (shared_log_obstacle(arms, "a duet's arms run at the same time")
                 or duet_length_obstacle(p))
        if clash:
            return Pairing.process, f"auto: {why}; no duet: {clash}"
        try:
            slices = duet_slices(p, len(arms), cfg.launcher.cpu_affinity)
        except ConfigError as exc:
            return Pairing.process, f"auto: {why}; no duet: {exc.message}"
        return Pairing.duet, (f"auto: {why}; the arms run at the same time instead, each on its own "
                        f"of {len(slices)} declared slices, the placement rotated every round")
    if why:
        return Pairing.process, f"auto: {why}"
    if alternates(arms):
        return Pairing.steps, ("auto: a plain command cannot switch arms between steps, so each "
                         "round every arm runs as a process of its own, resident together, "
                         "and they take turns on the same cores block by block (stopped and "
                         "resumed by signals); adjacent blocks are paired (a host whose speed "
                         "changes within a second cancels out)")
    return Pairing.steps, ("auto: every arm differs from the baseline only in keys the recipe switches "
                     "between steps, so one fresh process per round and bucket runs them all "
                     "and adjacent blocks are paired (a host whose speed changes within a second "
                     "cancels out; fewer process starts)")
