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
from typing import Any

from orchestrator.core.records import Status
from orchestrator.analysis.correctness.compare import (
    TensorDiff,
    Tolerance,
    characterize,
    noise_level_mask,
    relative_series,
    signature_diff,
)

# (probe name, bucket) -> {"outputs", "loss", "grads", "update", "trajectory"}, None if absent
TensorLoader = Callable[[str, str], dict[str, Any] | None]


@dataclass
class ArmGate:
    arm_id: str
    label: str
    status: str  # pass | fail | error
    reasons: list[str] = field(default_factory=list)  # failures first, worst first
    buckets: dict[str, Any] = field(default_factory=dict)
    checkpoint: dict[str, Any] = field(default_factory=dict)
    probe_seconds: float | None = None

    def detail(self, limit: int = 3) -> str:
        if not self.reasons:
            return ""
        more = len(self.reasons) - limit
        return "; ".join(self.reasons[:limit]) + (f" (+{more} more)" if more > 0 else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "arm_id": self.arm_id,
            "label": self.label,
            "status": self.status,
            "reasons": self.reasons,
            "probe_seconds": self.probe_seconds,
            "checkpoint": self.checkpoint,
            "buckets": self.buckets,
        }


def tolerance_key(precision: str, probes: Sequence[Mapping[str, Any]]) -> str:
    """fp32 with TF32 matmuls in any arm is judged as tf32; else the workload's precision."""
    if precision == "fp32" and any(p.get("matmul_precision") == "tf32" for p in probes):
        return "tf32"
    return precision


def _tensor_items(t: Mapping[str, Any]) -> list[tuple[str, Any]]:
    items = [("outputs", t["outputs"]), ("loss", t["loss"])]
    items += [(f"grad/{n}", g) for n, g in t["grads"].items()]
    items += [(f"update/{n}", u) for n, u in t["update"].items()]
    return items


def _stage(name: str) -> int:
    """Computation order: a failure early in it (outputs) explains the later ones (update)."""
    return {"outputs": 0, "loss": 1, "grad": 2, "update": 3}.get(name.split("/")[0], 4)


def _masks(base: Mapping[str, Any], tol: Tolerance) -> dict[str, Any]:
    return {f"update/{n}": noise_level_mask(g, tol) for n, g in base["grads"].items()}


def noise_floor(
    base: Mapping[str, Any],
    repeat: Mapping[str, Any],
    base_rec: Mapping[str, Any],
    rep_rec: Mapping[str, Any],
    tol: Tolerance,
) -> dict[str, Any]:
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


def judge_bucket(
    bucket: str,
    var_rec: Mapping[str, Any],
    base_rec: Mapping[str, Any],
    var_t: Mapping[str, Any] | None,
    base_t: Mapping[str, Any],
    floor: Mapping[str, Any],
    tol: Tolerance,
    data_declared: bool,
) -> tuple[dict[str, Any], list[tuple[float, str]]]:
    """(facts for correctness.json, [(severity, reason)]) for one variant on one bucket."""
    out: dict[str, Any] = {}
    bad: list[tuple[float, str]] = []
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
    out["data"] = {
        "same_batches": same,
        "first_difference_step": first,
        "variant_ids": var_rec.get("batch_ids"),
        "baseline_ids": base_rec.get("batch_ids"),
        "declared_variable": data_declared,
    }
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
    rt = var_rec["round_trip"]
    k = rt["resume_step"]
    rt_rel = relative_series(rt["losses"], list(var_rec["losses"])[k:])
    rt_max = max(rt_rel, default=0.0)
    out["round_trip"] = {
        "resume_step": k,
        "max_rel": _finite(rt_max),
        "threshold": tol.trajectory_rtol,
        "passed": rt_max <= tol.trajectory_rtol,
    }
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
    if not var_rec.get("from_baseline_weights", False):
        out["numerics"] = "not compared: the variant could not load the baseline's initial weights"
        return out, bad
    rep_thr = max(tol.rel_l2, floor["forward_repeat_rel_l2"])
    rep = var_rec.get("forward_repeat_rel_l2", 0.0)
    out["forward_repeat"] = {"rel_l2": _finite(rep), "threshold": rep_thr}
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
    traj = relative_series(list(var_rec["losses"]), list(base_rec["losses"]))
    t_max = max(traj, default=0.0)
    t_thr = max(tol.trajectory_rtol, floor["trajectory_max_rel"])
    out["trajectory"] = {
        "variant": var_rec["losses"],
        "baseline": base_rec["losses"],
        "rel": [_finite(x) for x in traj],
        "max_rel": _finite(t_max),
        "threshold": t_thr,
        "passed": t_max <= t_thr,
        "judged": not data_declared,
    }  # other data, other losses: reported only
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
    diffs: list[TensorDiff] = []
    if var_t is None:
        bad.append((6e6, f"{bucket}: the variant's tensors are missing"))
    else:
        masks = _masks(base_t, tol)
        var = dict(_tensor_items(var_t))
        for name, b in _tensor_items(base_t):
            if name not in var:
                bad.append((6e6, f"{bucket} {name}: missing in the variant"))
                continue
            fl = floor["tensors"].get(name, 0.0)
            judge = _for_update(tol) if name.startswith("update/") else tol
            diffs.append(characterize(name, var[name], b, judge, fl, masks.get(name)))
    nonfinite = [d for d in diffs if d.nonfinite_variant]
    for d in nonfinite:
        bad.append((1e10, f"{bucket} {d.name}: {d.why}"))
    for d in diffs:
        if not d.passed and not d.nonfinite_variant:
            ratio = d.rel_l2 / d.threshold_rel_l2 if d.threshold_rel_l2 else math.inf
            bad.append(
                (1e6 * (5 - _stage(d.name)) + min(ratio, 1e5), f"{bucket} {d.name}: {d.why}")
            )
    worst = max(diffs, key=lambda d: d.rel_l2 / max(d.threshold_rel_l2, 1e-300), default=None)
    out["worst_tensor"] = (
        None
        if worst is None
        else {
            "name": worst.name,
            "rel_l2": _finite(worst.rel_l2),
            "threshold": worst.threshold_rel_l2,
        }
    )
    out["tensors"] = [d.to_dict() for d in diffs]
    return out, bad


def judge_checkpoint(
    arm_id: str,
    var: Mapping[str, Any],
    base: Mapping[str, Any],
    repeat: Mapping[str, Any],
    tol: Tolerance,
) -> tuple[dict[str, Any], list[str]]:
    problems = signature_diff(
        var["checkpoint"].get("signature", {}), base["checkpoint"].get("signature", {})
    )
    err = var["checkpoint"].get("load_baseline_error")
    if err:
        problems.append(f"the baseline's checkpoint does not load into the variant: {err}")
    cross = repeat.get("cross_loads", {}).get(arm_id)
    facts: dict[str, Any] = {"loads_baseline": not err, "baseline_loads_variant": None}
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


def cross_eval_reason(facts: Mapping[str, Any], tol: Tolerance) -> str | None:
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


def evaluate(
    arms: Sequence[Any],
    probes: Mapping[str, Mapping[str, Any]],
    load: TensorLoader,
    tolerances: Mapping[str, Tolerance],
    precision: str,
    data_declared: bool = False,
) -> tuple[dict[str, Any], list[ArmGate]]:
    """(summary: tolerance and noise floor, one gate per variant). ``probes`` maps probe names
    (``a0``, ``a1``, ..., ``a0-repeat``) to their probe.json records."""
    base_arm = arms[0]
    base = probes.get(base_arm.arm_id, {"status": "missing"})
    repeat = probes.get(f"{base_arm.arm_id}-repeat", {"status": "missing"})
    key = tolerance_key(precision, [p for p in probes.values() if p.get("status") == Status.OK])
    tol = tolerances.get(key) or tolerances[precision]
    summary: dict[str, Any] = {"tolerance_key": key, "noise_floor": {}}
    gates = []
    blocked = None
    if base.get("status") != Status.OK:
        blocked = f"the baseline probe {base.get('status')}: {base.get('error', 'no record')}"
    elif repeat.get("status") != Status.OK:
        blocked = (
            f"the baseline's repeat probe (noise floor) {repeat.get('status')}: "
            f"{repeat.get('error', 'no record')}"
        )
    floors = {}
    if blocked is None:
        for bucket, brec in base["buckets"].items():
            bt, rt = load(base_arm.arm_id, bucket), load(f"{base_arm.arm_id}-repeat", bucket)
            if bt is None or rt is None:
                blocked = f"{bucket}: the baseline's tensors are missing"
                break
            floors[bucket] = noise_floor(bt, rt, brec, repeat["buckets"][bucket], tol)
        summary["noise_floor"] = {
            b: {"max_tensor_rel_l2": max(f["tensors"].values(), default=0.0), **f}
            for b, f in floors.items()
        }
    for arm in arms[1:]:
        var = probes.get(arm.arm_id, {"status": "missing", "error": "no probe record"})
        g = ArmGate(arm.arm_id, arm.label, "pass", probe_seconds=var.get("probe_seconds"))
        gates.append(g)
        status = var.get("status")
        if blocked:
            g.status, g.reasons = "error", [blocked]
            continue
        if status == "unsupported":
            g.status, g.reasons = "error", [f"the variant cannot be probed: {var.get('error')}"]
            continue
        if status == Status.UNAVAILABLE:
            g.status, g.reasons = "error", [f"unavailable here: {var.get('error')}"]
            continue
        if status != Status.OK:
            g.status, g.reasons = "fail", [f"the variant's probe {status}: {var.get('error')}"]
            continue
        g.checkpoint, ck_problems = judge_checkpoint(arm.arm_id, var, base, repeat, tol)
        bad: list[tuple[float, str]] = [(1e8, f"checkpoint: {p}") for p in ck_problems]
        cross = cross_eval_reason(g.checkpoint, tol)
        if cross:
            bad.append((0.5, cross))
        for bucket, brec in base["buckets"].items():
            vrec = var["buckets"].get(bucket)
            if vrec is None:
                bad.append((1e6, f"{bucket}: the variant's probe has no record"))
                continue
            base_t = load(base_arm.arm_id, bucket)
            assert base_t is not None
            facts, b_bad = judge_bucket(
                bucket,
                vrec,
                brec,
                load(arm.arm_id, bucket),
                base_t,
                floors[bucket],
                tol,
                data_declared,
            )
            g.buckets[bucket] = facts
            bad += b_bad
        bad.sort(key=lambda x: -x[0])
        g.reasons = [r for _, r in bad]
        g.status = "fail" if bad else "pass"
    return summary, gates
