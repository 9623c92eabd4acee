"""Characterising the difference between a variant's tensor and the baseline's (pure).

Every figure is computed in float64 over the finite elements both tensors share:

- ``max_abs``: max |a - b|; ``max_rel``: max |a - b| / |b| over elements with b != 0;
- ``rms_err``: sqrt(mean((a - b)^2)); ``rel_l2``: ||a - b|| / ||b|| (normwise relative error);
- ``cosine``: <a, b> / (||a|| ||b||) (1.0 when both are zero);
- ``share_beyond``: share of elements with |a - b| > atol + rtol * |b| (characterisation only);
- ``nonfinite_*``: NaN/Inf counts in each tensor.

A tensor passes when it is finite wherever the baseline is, and
``rms_err <= atol + max(rel_l2 tolerance, noise floor) * rms(baseline)``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypedDict

import torch


# ----------------------------------------------------------------- probe.json (worker.probe)
# written by orchestrator.worker.probe, which sits above this layer: declared here, beside the
# comparisons that read it (orchestrator.analysis.correctness.gate)


class CrossLoad(TypedDict, total=False):
    """A variant's final checkpoint loaded into the baseline (probe.json ``cross_loads``)."""

    ok: bool
    error: str
    eval_loss: float


class ProbeCheckpoint(TypedDict, total=False):
    """The checkpoint facts of a probe (probe.json ``checkpoint``)."""

    # state_dict key -> [shape, dtype]: a list of ints and a string
    signature: dict[str, list[Any]]
    load_baseline_error: str
    final: str


class RoundTrip(TypedDict):
    """The resumed trainer's losses from ``resume_step`` on (probe.json bucket ``round_trip``)."""

    resume_step: int
    losses: list[float]


class ProbeBucket(TypedDict, total=False):
    """One bucket's facts in a probe (probe.json ``buckets.<bucket>``)."""

    bucket: str
    from_baseline_weights: bool
    forward_repeat_rel_l2: float
    params_without_grad: list[str]
    batch_hashes: list[str]
    batch_ids: list[Any]  # the batches' ``index`` attribute: whatever the recipe gives, or None
    losses: list[float]
    round_trip: RoundTrip
    final_eval_loss: float
    tensors: str


class ProbeDevice(TypedDict):
    """The device a probe ran on (probe.json ``device``)."""

    kind: str
    name: str


class ProbeRecord(TypedDict, total=False):
    """One probe's record (``correctness/<probe>/probe.json``); a failed probe has few keys."""

    schema_version: int
    name: str
    arm_id: str
    arm_label: str
    role: str
    pid: int
    checkpoint: ProbeCheckpoint
    buckets: dict[str, ProbeBucket]
    cross_loads: dict[str, CrossLoad]
    world_size: int
    device: ProbeDevice
    torch_version: str
    python_version: str
    precision: str
    matmul_precision: str
    status: str
    error: str
    traceback: str
    probe_seconds: float
    process_seconds: float  # the probe process's wall time, added by the launcher
    stderr_tail: str  # the launcher's, where the probe process left no record
    # the launcher's (launch.process, launch.slurm, launch.slurm_alloc)
    returncode: int | None
    start_method: str
    start_method_why: str | None
    launcher: str
    slurm_job_id: str
    slurm_attempt: int
    slurm_node_rank: int
    slurm_state: str
    slurm_allocation: str
    slurm_allocation_id: str
    slurm_step_id: str
    node_id: str
    devices: list[int] | str | None
    startup_measured_from: str
    infra_reason: str
    raw_status: str | None


class StepTensors(TypedDict):
    """One step's outputs, loss, gradients and update, as a probe takes them."""

    outputs: torch.Tensor
    loss: torch.Tensor
    grads: dict[str, torch.Tensor]
    update: dict[str, torch.Tensor]


class ProbeTensors(StepTensors):
    """A probe's tensors for one bucket (``correctness/<probe>/<bucket>.pt``)."""

    trajectory: torch.Tensor


class Tolerance(Protocol):
    rel_l2: float
    atol: float
    rtol: float
    trajectory_rtol: float
    update_rel_l2: float


@dataclass
class TensorDiff:
    name: str
    numel: int
    max_abs: float
    max_rel: float
    rms_err: float
    rel_l2: float
    cosine: float
    share_beyond: float
    nonfinite_variant: int
    nonfinite_baseline: int
    threshold_rel_l2: float  # max(tolerance, noise floor) the tensor was judged against
    floor_rel_l2: float  # the baseline-vs-baseline figure (0 when no floor was given)
    excluded: int = 0  # elements left out by a mask (e.g. noise-level gradients)
    passed: bool = True
    why: str = ""

    # the fields by name (numbers, flags, the name and why), a non-finite float as text
    def to_dict(self) -> dict[str, float | str]:
        return {k: _jsonable(v) for k, v in asdict(self).items()}


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def characterize(
    name: str,
    variant: torch.Tensor,
    baseline: torch.Tensor,
    tol: Tolerance,
    floor_rel_l2: float = 0.0,
    mask: torch.Tensor | None = None,
) -> TensorDiff:
    """Compare one tensor of a variant with the baseline's; ``mask`` (True = compare) leaves
    elements out, e.g. those whose value is set by rounding noise alone."""
    threshold = max(tol.rel_l2, floor_rel_l2)
    if tuple(variant.shape) != tuple(baseline.shape):
        return TensorDiff(
            name,
            baseline.numel(),
            math.inf,
            math.inf,
            math.inf,
            math.inf,
            0.0,
            1.0,
            0,
            0,
            threshold,
            floor_rel_l2,
            passed=False,
            why=f"shape {tuple(variant.shape)} != baseline {tuple(baseline.shape)}",
        )
    a = variant.detach().to("cpu", torch.float64).reshape(-1)
    b = baseline.detach().to("cpu", torch.float64).reshape(-1)
    bad_a, bad_b = ~torch.isfinite(a), ~torch.isfinite(b)
    keep = ~(bad_a | bad_b)
    excluded = 0
    if mask is not None:
        m = mask.detach().to("cpu").reshape(-1).bool()
        excluded = int((~m).sum())
        keep &= m
    a, b = a[keep], b[keep]
    diff = (a - b).abs()
    n = max(a.numel(), 1)
    norm_b = float(b.norm())
    norm_a = float(a.norm())
    rms_err = float(diff.norm()) / math.sqrt(n)
    rms_b = norm_b / math.sqrt(n)
    rel_l2 = float(diff.norm()) / norm_b if norm_b > 0 else (0.0 if rms_err == 0 else math.inf)
    if norm_a > 0 and norm_b > 0:
        cosine = float((a @ b) / (norm_a * norm_b))
    else:
        cosine = 1.0 if norm_a == norm_b else 0.0
    nz = b != 0
    max_rel = float((diff[nz] / b[nz].abs()).max()) if bool(nz.any()) else 0.0
    share = float((diff > tol.atol + tol.rtol * b.abs()).double().mean()) if a.numel() else 0.0
    out = TensorDiff(
        name=name,
        numel=int(variant.numel()),
        max_abs=float(diff.max()) if a.numel() else 0.0,
        max_rel=max_rel,
        rms_err=rms_err,
        rel_l2=rel_l2,
        cosine=cosine,
        share_beyond=share,
        nonfinite_variant=int((bad_a & ~bad_b).sum()),
        nonfinite_baseline=int(bad_b.sum()),
        threshold_rel_l2=threshold,
        floor_rel_l2=floor_rel_l2,
        excluded=excluded,
    )
    if out.nonfinite_variant:
        out.passed = False
        out.why = f"{out.nonfinite_variant} NaN/Inf of {out.numel} where the baseline is finite"
    elif rms_err > tol.atol + threshold * rms_b:
        out.passed = False
        out.why = f"rel_l2 {rel_l2:.2e} > {threshold:.1e} (max_abs {out.max_abs:.2e})"
    return out


def noise_level_mask(grad: torch.Tensor, tol: Tolerance) -> torch.Tensor:
    """True where the baseline gradient is above rounding noise at this precision.

    Adam's first step is ~lr * sign(grad): an element whose gradient is mathematically zero (a
    key bias under softmax's shift invariance) gets +-lr from the sign of its rounding noise, so
    it says nothing about the optimizer and is left out of the update comparison."""
    g = grad.detach().to("cpu", torch.float64)
    rms = float(g.norm()) / math.sqrt(max(g.numel(), 1))
    return g.abs() > tol.atol + tol.rel_l2 * rms


def relative_series(variant: list[float], baseline: list[float]) -> list[float]:
    """|v - b| / |b| per step; inf where either is not finite or the lengths differ."""
    out = []
    for i in range(max(len(variant), len(baseline))):
        if i >= len(variant) or i >= len(baseline):
            out.append(math.inf)
            continue
        v, b = variant[i], baseline[i]
        if not (math.isfinite(v) and math.isfinite(b)):
            out.append(math.inf)
        elif b == 0:
            out.append(0.0 if v == 0 else math.inf)
        else:
            out.append(abs(v - b) / abs(b))
    return out


def signature_diff(variant: dict[str, list[Any]], baseline: dict[str, list[Any]]) -> list[str]:
    """Differences between two state_dict signatures ({key: [shape, dtype]}), one line each."""
    only_v = sorted(set(variant) - set(baseline))
    only_b = sorted(set(baseline) - set(variant))
    out = []
    if only_v or only_b:
        out.append(
            f"state_dict keys differ: {len(only_v)} only in the variant"
            + (f" (e.g. {only_v[0]})" if only_v else "")
            + f", {len(only_b)} only in the baseline"
            + (f" (e.g. {only_b[0]})" if only_b else "")
        )
        stripped = {k.removeprefix("_orig_mod.") for k in variant}
        if any(k.startswith("_orig_mod.") for k in only_v) and stripped == set(baseline):
            out.append(
                "the variant saves a torch.compile wrapper (keys gain '_orig_mod.'); "
                "save the underlying module (model._orig_mod.state_dict()) instead"
            )
    for k in sorted(set(variant) & set(baseline)):
        (vs, vd), (bs, bd) = variant[k], baseline[k]
        if list(vs) != list(bs):
            out.append(f"{k}: shape {vs} != baseline {bs}")
        if vd != bd:
            out.append(f"{k}: dtype {vd} != baseline {bd}")
    return out
