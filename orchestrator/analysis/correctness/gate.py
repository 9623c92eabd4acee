"""Judging the probes: noise floor, per-tensor characterisation, checks and the gate per arm.

Pure over probe records and tensors (tensors come through a loader so that a large model's
gradients are read one arm at a time). The gate of a variant is

- ``error`` (verdict ``invalid``) when it could not be evaluated: the baseline probe or its
  repeat failed, or the variant's backend is unavailable here;
- ``fail`` (verdict ``reject``) when the variant's probe crashed, or any check failed: a tensor
  beyond max(tolerance, noise floor), NaN/Inf where the baseline is finite, a stochastic forward,
  a loss trajectory off the baseline's, a checkpoint that does not round-trip, differs in keys,
  shapes or dtypes or does not load across arms, or a different batch sequence (unless the sweep
  declares the data order as its variable);
- ``pass`` otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

import torch

from orchestrator.core.records import Status
from orchestrator.analysis.correctness.compare import (
    ProbeBucket,
    ProbeRecord,
    ProbeTensors,
    TensorDiff,
    Tolerance,
    characterize,
    noise_level_mask,
    relative_series,
    signature_diff,
)


# ----------------------------------------------------------------- correctness.json (the facts)


class NoiseFloor(TypedDict):
    """The baseline against its repeat on one bucket."""

    tensors: dict[str, float]
    trajectory_max_rel: float
    forward_repeat_rel_l2: float


class NoiseFloorSummary(NoiseFloor):
    """A bucket's noise floor as correctness.json shows it (``noise_floor.<bucket>``)."""

    max_tensor_rel_l2: float


class GateSummary(TypedDict, total=False):
    """What :func:`evaluate` found beside the gates: tolerance and noise floor, or the error
    that stopped it (merged into correctness.json)."""

    tolerance_key: str
    noise_floor: dict[str, NoiseFloorSummary]
    evaluation_error: str


class DataFacts(TypedDict):
    """Whether a variant saw the baseline's batches (correctness.json bucket ``data``)."""

    same_batches: bool
    first_difference_step: int | None
    variant_ids: list[Any] | None  # ProbeBucket.batch_ids
    baseline_ids: list[Any] | None
    declared_variable: bool


class RoundTripFacts(TypedDict):
    """The variant's checkpoint round trip (correctness.json bucket ``round_trip``)."""

    resume_step: int
    max_rel: float | str  # a non-finite figure as its string
    threshold: float
    passed: bool


class ForwardRepeatFacts(TypedDict):
    """Two forwards of one batch (correctness.json bucket ``forward_repeat``)."""

    rel_l2: float | str
    threshold: float


class TrajectoryFacts(TypedDict):
    """The variant's losses against the baseline's (correctness.json bucket ``trajectory``)."""

    variant: list[float]
    baseline: list[float]
    rel: list[float | str]
    max_rel: float | str
    threshold: float
    passed: bool
    judged: bool


class WorstTensor(TypedDict):
    """The tensor furthest past its threshold (correctness.json bucket ``worst_tensor``)."""

    name: str
    rel_l2: float | str
    threshold: float


class BucketFacts(TypedDict, total=False):
    """One variant on one bucket (correctness.json ``arms.<arm>.buckets.<bucket>``)."""

    data: DataFacts
    round_trip: RoundTripFacts
    numerics: str
    forward_repeat: ForwardRepeatFacts
    trajectory: TrajectoryFacts
    worst_tensor: WorstTensor | None
    tensors: list[dict[str, float | str]]  # TensorDiff.to_dict per tensor


class CheckpointFacts(TypedDict, total=False):
    """A variant's checkpoint against the baseline's (correctness.json ``arms.<arm>.checkpoint``)."""

    loads_baseline: bool
    baseline_loads_variant: bool | None
    cross_eval_loss_rel: float | str
    problems: list[str]
    passed: bool


class ArmGateDict(TypedDict):
    """One variant's gate (correctness.json ``arms.<arm>``)."""

    arm_id: str
    label: str
    status: str
    reasons: list[str]
    probe_seconds: float | None
    checkpoint: CheckpointFacts
    buckets: dict[str, BucketFacts]


# (probe name, bucket) -> {"outputs", "loss", "grads", "update", "trajectory"}, None if absent
TensorLoader = Callable[[str, str], ProbeTensors | None]
# [(severity, reason)]: the gate lists its reasons worst first
Reasons = list[tuple[float, str]]


@dataclass
class ArmGate:
    arm_id: str
    label: str
    status: str  # pass | fail | error
    reasons: list[str] = field(default_factory=list)  # failures first, worst first
    buckets: dict[str, BucketFacts] = field(default_factory=dict)
    # an empty CheckpointFacts (all its keys are optional): dict, typed as its factory
    checkpoint: CheckpointFacts = field(
        default_factory=cast("Callable[[], CheckpointFacts]", dict)
    )
    probe_seconds: float | None = None

    def detail(self, limit: int = 3) -> str:
        if not self.reasons:
            return ""
        more = len(self.reasons) - limit
        return "; ".join(self.reasons[:limit]) + (f" (+{more} more)" if more > 0 else "")

    def to_dict(self) -> ArmGateDict:
        return {
            "arm_id": self.arm_id,
            "label": self.label,
            "status": self.status,
            "reasons": self.reasons,
            "probe_seconds": self.probe_seconds,
            "checkpoint": self.checkpoint,
            "buckets": self.buckets,
        }


def tolerance_key(precision: str, probes: Sequence[ProbeRecord]) -> str:
    """fp32 with TF32 matmuls in any arm is judged as tf32; else the workload's precision."""
    if precision == "fp32" and any(p.get("matmul_precision") == "tf32" for p in probes):
        return "tf32"
    return precision


def _tensor_items(t: ProbeTensors) -> list[tuple[str, torch.Tensor]]:
    items = [("outputs", t["outputs"]), ("loss", t["loss"])]
    items += [(f"grad/{n}", g) for n, g in t["grads"].items()]
    items += [(f"update/{n}", u) for n, u in t["update"].items()]
    return items


def _stage(name: str) -> int:
    """Computation order: a failure early in it (outputs) explains the later ones (update)."""
    return {"outputs": 0, "loss": 1, "grad": 2, "update": 3}.get(name.split("/")[0], 4)


def _masks(base: ProbeTensors, tol: Tolerance) -> dict[str, torch.Tensor]:
    return {f"update/{n}": noise_level_mask(g, tol) for n, g in base["grads"].items()}


def noise_floor(
    base: ProbeTensors,
    repeat: ProbeTensors,
    base_rec: ProbeBucket,
    rep_rec: ProbeBucket,
    tol: Tolerance,
) -> NoiseFloor:
    """Baseline vs its own repeat: how far apart two runs of the same code land on this device."""
    zero = _Zero(0.0, tol.atol, tol.rtol, tol.trajectory_rtol, 0.0)
    masks = _masks(base, tol)
    rep = dict(_tensor_items(repeat))
    tensors = {}
    for name, b in _tensor_items(base):
        if name in rep:
            tensors[name] = characterize(name, rep[name], b, zero, 0.0, masks.get(name)).rel_l2
    traj = relative_series(rep_rec["losses"], base_rec["losses"])
    return {
        "tensors": tensors,
        "trajectory_max_rel": max(traj, default=0.0),
        "forward_repeat_rel_l2": max(
            base_rec.get("forward_repeat_rel_l2", 0.0), rep_rec.get("forward_repeat_rel_l2", 0.0)
        ),
    }


@dataclass
class _Zero:
    """A tolerance built here: rel_l2 = 0 to measure the floor, or the update's scale."""

    rel_l2: float
    atol: float
    rtol: float
    trajectory_rtol: float
    update_rel_l2: float


def _for_update(tol: Tolerance) -> Tolerance:
    return _Zero(tol.update_rel_l2, tol.atol, tol.rtol, tol.trajectory_rtol, tol.update_rel_l2)


def _finite(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def _judge_data(
    bucket: str, var_rec: ProbeBucket, base_rec: ProbeBucket, data_declared: bool
) -> tuple[DataFacts, Reasons]:
    """Whether the variant saw the baseline's batches in the baseline's order."""
    same = list(var_rec["batch_hashes"]) == list(base_rec["batch_hashes"])
    first = next(
        (
            i
            for i, (a, b) in enumerate(
                zip(var_rec["batch_hashes"], base_rec["batch_hashes"], strict=False)
            )
            if a != b
        ),
        None,
    )
    facts: DataFacts = {
        "same_batches": same,
        "first_difference_step": first,
        "variant_ids": var_rec.get("batch_ids"),
        "baseline_ids": base_rec.get("batch_ids"),
        "declared_variable": data_declared,
    }
    bad: Reasons = []
    if not same and not data_declared:
        bad.append(
            (
                2e9,
                (
                    f"{bucket} data: the batch sequence differs from the baseline's from "
                    f"step {first} (batch ids {var_rec.get('batch_ids')} vs "
                    f"{base_rec.get('batch_ids')}); data order is not the swept variable"
                ),
            )
        )
    return facts, bad


def _judge_round_trip(
    bucket: str, var_rec: ProbeBucket, tol: Tolerance
) -> tuple[RoundTripFacts, Reasons]:
    """Whether resuming from the variant's checkpoint continues its own loss trajectory."""
    rt = var_rec["round_trip"]
    k = rt["resume_step"]
    rt_rel = relative_series(rt["losses"], list(var_rec["losses"])[k:])
    rt_max = max(rt_rel, default=0.0)
    facts: RoundTripFacts = {
        "resume_step": k,
        "max_rel": _finite(rt_max),
        "threshold": tol.trajectory_rtol,
        "passed": rt_max <= tol.trajectory_rtol,
    }
    bad: Reasons = []
    if rt_max > tol.trajectory_rtol:
        bad.append(
            (
                1e9,
                (
                    f"{bucket} checkpoint round trip: resuming at step {k} changes the "
                    f"loss by {rt_max:.2e} relative (> {tol.trajectory_rtol:.0e})"
                ),
            )
        )
    return facts, bad


def _judge_forward_repeat(
    bucket: str, var_rec: ProbeBucket, floor: NoiseFloor, tol: Tolerance
) -> tuple[ForwardRepeatFacts, Reasons]:
    """Whether two forwards of the same batch agree (no dropout or other random op)."""
    rep_thr = max(tol.rel_l2, floor["forward_repeat_rel_l2"])
    rep = var_rec.get("forward_repeat_rel_l2", 0.0)
    facts: ForwardRepeatFacts = {"rel_l2": _finite(rep), "threshold": rep_thr}
    bad: Reasons = []
    if not rep <= rep_thr:
        bad.append(
            (
                1e7,
                (
                    f"{bucket} forward is stochastic: two forwards of the same batch differ "
                    f"by rel_l2 {rep:.2e} (> {rep_thr:.1e}; dropout or another random op "
                    "active?)"
                ),
            )
        )
    return facts, bad


def _judge_trajectory(
    bucket: str,
    var_rec: ProbeBucket,
    base_rec: ProbeBucket,
    floor: NoiseFloor,
    tol: Tolerance,
    data_declared: bool,
) -> tuple[TrajectoryFacts, Reasons]:
    """The variant's losses against the baseline's, step by step; judged only on the same data
    (other data, other losses: reported only)."""
    traj = relative_series(list(var_rec["losses"]), list(base_rec["losses"]))
    t_max = max(traj, default=0.0)
    t_thr = max(tol.trajectory_rtol, floor["trajectory_max_rel"])
    facts: TrajectoryFacts = {
        "variant": var_rec["losses"],
        "baseline": base_rec["losses"],
        "rel": [_finite(x) for x in traj],
        "max_rel": _finite(t_max),
        "threshold": t_thr,
        "passed": t_max <= t_thr,
        "judged": not data_declared,
    }
    bad: Reasons = []
    if not t_max <= t_thr and not data_declared:
        step = traj.index(t_max)
        bad.append(
            (
                min(t_max / t_thr, 1e5),
                (
                    f"{bucket} loss trajectory: step {step} "
                    f"differs by {t_max:.2e} relative (> {t_thr:.1e})"
                ),
            )
        )
    return facts, bad


def _compare_tensors(
    bucket: str,
    var_t: ProbeTensors | None,
    base_t: ProbeTensors,
    floor: NoiseFloor,
    tol: Tolerance,
) -> tuple[list[TensorDiff], Reasons]:
    """(one characterisation per tensor both arms have, a reason per tensor the variant lacks);
    the optimizer update is judged on its own scale."""
    diffs: list[TensorDiff] = []
    bad: Reasons = []
    if var_t is None:
        bad.append((6e6, f"{bucket}: the variant's tensors are missing"))
        return diffs, bad
    masks = _masks(base_t, tol)
    var = dict(_tensor_items(var_t))
    for name, b in _tensor_items(base_t):
        if name not in var:
            bad.append((6e6, f"{bucket} {name}: missing in the variant"))
            continue
        fl = floor["tensors"].get(name, 0.0)
        judge = _for_update(tol) if name.startswith("update/") else tol
        diffs.append(characterize(name, var[name], b, judge, fl, masks.get(name)))
    return diffs, bad


def _tensor_reasons(bucket: str, diffs: Sequence[TensorDiff]) -> Reasons:
    """NaN/Inf first, then the failing tensors, the earliest in computation order worst."""
    bad: Reasons = []
    nonfinite = [d for d in diffs if d.nonfinite_variant]
    for d in nonfinite:
        bad.append((1e10, f"{bucket} {d.name}: {d.why}"))
    for d in diffs:
        if not d.passed and not d.nonfinite_variant:
            ratio = d.rel_l2 / d.threshold_rel_l2 if d.threshold_rel_l2 else math.inf
            bad.append(
                (1e6 * (5 - _stage(d.name)) + min(ratio, 1e5), f"{bucket} {d.name}: {d.why}")
            )
    return bad


def _worst_tensor(diffs: Sequence[TensorDiff]) -> WorstTensor | None:
    """The tensor furthest past its threshold, None when none was compared."""
    worst = max(diffs, key=lambda d: d.rel_l2 / max(d.threshold_rel_l2, 1e-300), default=None)
    if worst is None:
        return None
    return {
        "name": worst.name,
        "rel_l2": _finite(worst.rel_l2),
        "threshold": worst.threshold_rel_l2,
    }


def judge_bucket(
    bucket: str,
    var_rec: ProbeBucket,
    base_rec: ProbeBucket,
    var_t: ProbeTensors | None,
    base_t: ProbeTensors,
    floor: NoiseFloor,
    tol: Tolerance,
    data_declared: bool,
) -> tuple[BucketFacts, Reasons]:
    """(facts for correctness.json, [(severity, reason)]) for one variant on one bucket."""
    out: BucketFacts = {}
    out["data"], bad = _judge_data(bucket, var_rec, base_rec, data_declared)
    out["round_trip"], rt_bad = _judge_round_trip(bucket, var_rec, tol)
    bad += rt_bad
    if not var_rec.get("from_baseline_weights", False):
        out["numerics"] = "not compared: the variant could not load the baseline's initial weights"
        return out, bad
    out["forward_repeat"], rep_bad = _judge_forward_repeat(bucket, var_rec, floor, tol)
    out["trajectory"], traj_bad = _judge_trajectory(
        bucket, var_rec, base_rec, floor, tol, data_declared
    )
    diffs, missing = _compare_tensors(bucket, var_t, base_t, floor, tol)
    bad += rep_bad + traj_bad + missing + _tensor_reasons(bucket, diffs)
    out["worst_tensor"] = _worst_tensor(diffs)
    out["tensors"] = [d.to_dict() for d in diffs]
    return out, bad


def judge_checkpoint(
    arm_id: str,
    var: ProbeRecord,
    base: ProbeRecord,
    repeat: ProbeRecord,
    tol: Tolerance,
) -> tuple[CheckpointFacts, list[str]]:
    problems = signature_diff(
        var["checkpoint"].get("signature", {}), base["checkpoint"].get("signature", {})
    )
    err = var["checkpoint"].get("load_baseline_error")
    if err:
        problems.append(f"the baseline's checkpoint does not load into the variant: {err}")
    cross = repeat.get("cross_loads", {}).get(arm_id)
    facts: CheckpointFacts = {"loads_baseline": not err, "baseline_loads_variant": None}
    if cross is None:
        problems.append("the baseline did not try the variant's checkpoint")
    elif not cross["ok"]:
        facts["baseline_loads_variant"] = False
        problems.append(
            f"the variant's checkpoint does not load into the baseline: {cross['error']}"
        )
    else:
        facts["baseline_loads_variant"] = True
        first = next(iter(var["buckets"].values()))
        rel = relative_series([cross["eval_loss"]], [first["final_eval_loss"]])[0]
        facts["cross_eval_loss_rel"] = _finite(rel)
    facts["problems"] = problems
    facts["passed"] = not problems
    return facts, problems


def cross_eval_reason(facts: CheckpointFacts, tol: Tolerance) -> str | None:
    """The variant's final weights, evaluated by the baseline's code, should give the loss the
    variant's own code gives: else the two compute different functions of the same weights."""
    rel = facts.get("cross_eval_loss_rel")
    if isinstance(rel, str) or (rel is not None and rel > tol.trajectory_rtol):
        shown = rel if isinstance(rel, str) else f"{rel:.2e}"
        return (
            f"final weights: the baseline's code gives a loss {shown} relative off the "
            f"variant's own (> {tol.trajectory_rtol:.0e})"
        )
    return None


@dataclass(frozen=True)
class _Baseline:
    """What every variant is judged against: the baseline's probe records and its noise floor
    per bucket, the tolerance, the tensor loader and whether data order is the swept variable."""

    arm_id: str
    probe: ProbeRecord
    repeat: ProbeRecord
    floors: Mapping[str, NoiseFloor]
    tol: Tolerance
    load: TensorLoader
    data_declared: bool


def _baseline_blocked(base: ProbeRecord, repeat: ProbeRecord) -> str | None:
    """Why no variant can be judged when the baseline probe or its repeat did not end ok."""
    if base.get("status") != Status.OK:
        return f"the baseline probe {base.get('status')}: {base.get('error', 'no record')}"
    if repeat.get("status") != Status.OK:
        return (
            f"the baseline's repeat probe (noise floor) {repeat.get('status')}: "
            f"{repeat.get('error', 'no record')}"
        )
    return None


def _noise_floors(
    base_id: str,
    base: ProbeRecord,
    repeat: ProbeRecord,
    load: TensorLoader,
    tol: Tolerance,
) -> tuple[dict[str, NoiseFloor], str | None]:
    """(noise floor per bucket, why no variant can be judged): the floors up to the first
    bucket whose baseline tensors are missing, which blocks the gate."""
    floors: dict[str, NoiseFloor] = {}
    for bucket, brec in base["buckets"].items():
        bt, rt = load(base_id, bucket), load(f"{base_id}-repeat", bucket)
        if bt is None or rt is None:
            return floors, f"{bucket}: the baseline's tensors are missing"
        floors[bucket] = noise_floor(bt, rt, brec, repeat["buckets"][bucket], tol)
    return floors, None


def _unjudged(var: ProbeRecord, blocked: str | None) -> tuple[str, str] | None:
    """(gate status, reason) when the variant's numerics cannot be compared: the gate is
    blocked, or the variant's probe did not end ok; None when they can."""
    status = var.get("status")
    if blocked:
        return "error", blocked
    if status == "unsupported":
        return "error", f"the variant cannot be probed: {var.get('error')}"
    if status == Status.UNAVAILABLE:
        return "error", f"unavailable here: {var.get('error')}"
    if status != Status.OK:
        return "fail", f"the variant's probe {status}: {var.get('error')}"
    return None


def _judge_buckets(
    arm_id: str, var: ProbeRecord, ref: _Baseline
) -> tuple[dict[str, BucketFacts], Reasons]:
    """(facts per bucket, [(severity, reason)]) for one variant over the baseline's buckets."""
    buckets: dict[str, BucketFacts] = {}
    bad: Reasons = []
    for bucket, brec in ref.probe["buckets"].items():
        vrec = var["buckets"].get(bucket)
        if vrec is None:
            bad.append((1e6, f"{bucket}: the variant's probe has no record"))
            continue
        base_t = ref.load(ref.arm_id, bucket)
        assert base_t is not None
        facts, b_bad = judge_bucket(
            bucket,
            vrec,
            brec,
            ref.load(arm_id, bucket),
            base_t,
            ref.floors[bucket],
            ref.tol,
            ref.data_declared,
        )
        buckets[bucket] = facts
        bad += b_bad
    return buckets, bad


def _gate_arm(arm: Any, var: ProbeRecord, ref: _Baseline, blocked: str | None) -> ArmGate:
    """One variant's gate: its checkpoint, then its numerics bucket by bucket."""
    g = ArmGate(arm.arm_id, arm.label, "pass", probe_seconds=var.get("probe_seconds"))
    unjudged = _unjudged(var, blocked)
    if unjudged is not None:
        g.status, reason = unjudged
        g.reasons = [reason]
        return g
    g.checkpoint, ck_problems = judge_checkpoint(arm.arm_id, var, ref.probe, ref.repeat, ref.tol)
    bad: Reasons = [(1e8, f"checkpoint: {p}") for p in ck_problems]
    cross = cross_eval_reason(g.checkpoint, ref.tol)
    if cross:
        bad.append((0.5, cross))
    g.buckets, b_bad = _judge_buckets(arm.arm_id, var, ref)
    bad += b_bad
    bad.sort(key=lambda x: -x[0])
    g.reasons = [r for _, r in bad]
    g.status = "fail" if bad else "pass"
    return g


def evaluate(
    arms: Sequence[Any],
    probes: Mapping[str, ProbeRecord],
    load: TensorLoader,
    tolerances: Mapping[str, Tolerance],
    precision: str,
    data_declared: bool = False,
) -> tuple[GateSummary, list[ArmGate]]:
    """(summary: tolerance and noise floor, one gate per variant). ``probes`` maps probe names
    (``a0``, ``a1``, ..., ``a0-repeat``) to their probe.json records."""
    base_arm = arms[0]
    base = probes.get(base_arm.arm_id, {"status": "missing"})
    repeat = probes.get(f"{base_arm.arm_id}-repeat", {"status": "missing"})
    key = tolerance_key(precision, [p for p in probes.values() if p.get("status") == Status.OK])
    tol = tolerances.get(key) or tolerances[precision]
    summary: GateSummary = {"tolerance_key": key, "noise_floor": {}}
    blocked = _baseline_blocked(base, repeat)
    floors: dict[str, NoiseFloor] = {}
    if blocked is None:
        floors, blocked = _noise_floors(base_arm.arm_id, base, repeat, load, tol)
        summary["noise_floor"] = {
            b: {"max_tensor_rel_l2": max(f["tensors"].values(), default=0.0), **f}
            for b, f in floors.items()
        }
    ref = _Baseline(base_arm.arm_id, base, repeat, floors, tol, load, data_declared)
    gates = []
    for arm in arms[1:]:
        var = probes.get(arm.arm_id, {"status": "missing", "error": "no probe record"})
        gates.append(_gate_arm(arm, var, ref, blocked))
    return summary, gates
