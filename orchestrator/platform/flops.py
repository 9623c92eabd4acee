"""Three kinds of FLOPs per step, and the utilization each one gives.

- ``useful``: analytic model FLOPs from the recipe (forward + backward the algorithm needs,
  recompute excluded). Divided by step time and peak it gives **MFU**.
- ``executed``: counted by dispatch (``torch.utils.flop_counter.FlopCounterMode``) over one
  real training step, run after the timed steps; recompute included. Only ops with a FLOP
  formula count (matmuls, convolutions, attention kernels), so the share of op time and of ops
  that had one is reported as its coverage. It gives **HFU**.
- ``profiler-attributed``: from a separate ``torch.profiler`` run with ``with_flops=True``
  (:func:`profiler_attributed_flops`), never inside timed trials; its built-in formulas differ
  (they also count elementwise add/mul), so it gives an explicitly labelled
  "profiler-attributed utilization", never an MFU.

Utilization = FLOPs per device-step / (step time x peak FLOP/s per device). A mixture of shape
buckets is aggregated as total FLOPs over total time, never as a mean of per-bucket ratios.
The pure functions here take plain numbers; the counting functions take a step callable.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict, cast

from orchestrator.platform import device as devmod
from orchestrator.platform import hardware as hw
from orchestrator.core.trial_record import FlopsFacts, UtilizationEntry  # noqa: F401  (moved to core)

log = logging.getLogger(__name__)

USEFUL, EXECUTED, PROFILER = "useful", "executed", "profiler-attributed"
FLOP_KINDS = (USEFUL, EXECUTED, PROFILER)
UTILIZATION_NAMES = {USEFUL: "MFU", EXECUTED: "HFU", PROFILER: "profiler-attributed utilization"}
DEFINITIONS = {
    USEFUL: "analytic model FLOPs of one training step from the recipe (forward + backward the "
            "algorithm needs; activation recompute excluded)",
    EXECUTED: "FLOPs counted by dispatch (torch.utils.flop_counter.FlopCounterMode) over one real "
              "training step run after the timed steps; recompute included; only ops with a FLOP "
              "formula count (matmul, conv, attention kernels; attention counted as the full "
              "score square, causal masking not discounted)",
    PROFILER: "FLOPs torch.profiler(with_flops=True) attributes in a separate profiled run "
              "(its built-in formulas: matmul, conv and elementwise add/mul)",
}
# ops that move no data through arithmetic: left out of the op-count coverage
_NO_COMPUTE = {"aten.detach", "aten._local_scalar_dense", "aten.lift_fresh", "aten.empty",
               "aten.empty_strided", "aten.empty_like", "aten.alias", "aten.set_"}


def utilization_name(kind: str) -> str:
    """MFU only for useful FLOPs, HFU for executed, a labelled name for profiler FLOPs."""
    if kind not in UTILIZATION_NAMES:
        raise ValueError(f"unknown FLOP kind {kind!r}; choose one of: {', '.join(FLOP_KINDS)}")
    return UTILIZATION_NAMES[kind]


def utilization(flops_per_device_step: float, step_time_s: float, peak_tflops_per_device: float) -> float:
    """FLOPs per device-step / (step time x peak): a fraction (0.42 = 42 %)."""
    if step_time_s <= 0:
        raise ValueError(f"step time must be > 0 s, got {step_time_s}")
    if peak_tflops_per_device <= 0:
        raise ValueError(f"peak must be > 0 TFLOP/s, got {peak_tflops_per_device}")
    if flops_per_device_step < 0:
        raise ValueError(f"FLOPs per step must be >= 0, got {flops_per_device_step}")
    return flops_per_device_step / (step_time_s * peak_tflops_per_device * 1e12)


@dataclass(frozen=True)
class BucketWork:
    """One shape bucket of a mixture: FLOPs and time of one step, and how many steps."""

    name: str
    flops_per_device_step: float
    step_time_s: float
    steps: float  # step share or step count; only ratios between buckets matter


def bucket_steps(weight: float | None = None, samples: float | None = None,
                 global_batch: float | None = None) -> float:
    """A bucket's steps: its step weight, or its sample count over the global batch."""
    if weight is not None:
        if samples is not None:
            raise ValueError("give either a step weight or samples + global batch, not both")
        if weight < 0:
            raise ValueError(f"step weight must be >= 0, got {weight}")
        return float(weight)
    if samples is None or not global_batch:
        raise ValueError("each bucket needs a step weight, or samples with a global batch")
    if samples < 0 or global_batch <= 0:
        raise ValueError("samples must be >= 0 and the global batch > 0")
    return float(samples) / float(global_batch)


def mixture_utilization(buckets: Sequence[BucketWork], peak_tflops_per_device: float) -> tuple[float, float, float]:
    """(total FLOPs, total time in s, utilization) of a mixture: total work over total time."""
    if not buckets:
        raise ValueError("a mixture needs at least one bucket")
    total_flops = sum(b.steps * b.flops_per_device_step for b in buckets)
    total_time = sum(b.steps * b.step_time_s for b in buckets)
    if total_time <= 0:
        raise ValueError("the mixture's total time must be > 0")
    return total_flops, total_time, utilization(total_flops, total_time, peak_tflops_per_device)


# --------------------------------------------------------------------------- executed FLOPs


def extra_flop_formulas() -> dict[Any, Callable[..., int]]:
    """Formulas torch lacks that this project supplies: the CPU flash SDPA kernel (torch
    counts the CUDA ones only). Same convention as torch's: full square, recompute counted."""
    import torch
    from torch.utils import flop_counter as fc

    out: dict[Any, Callable[..., int]] = {}
    fwd = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    bwd = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    if fwd is not None and fwd not in fc.flop_registry:
        out[fwd] = lambda q, k, v, *a, out_shape=None, **kw: fc.sdpa_flop_count(q, k, v)
    if bwd is not None and bwd not in fc.flop_registry:
        out[bwd] = lambda g, q, k, v, *a, out_shape=None, **kw: fc.sdpa_backward_flop_count(g, q, k, v)
    return out


class ExecutedFlopsDict(TypedDict):
    """An :class:`ExecutedFlops` as plain data."""

    flops: int
    by_op: dict[str, int]  # op -> FLOPs
    coverage_time: float
    coverage_ops: float
    uncovered_top: list[tuple[str, float]]  # (op, share of op time)
    uncovered_ops: list[str]
    definition: str


@dataclass
class ExecutedFlops:
    flops: int
    by_op: dict[str, int]
    coverage_time: float  # share of op time spent in ops with a FLOP formula
    coverage_ops: float  # share of compute ops (views and metadata left out) with a formula
    uncovered_top: list[tuple[str, float]]  # the five slowest ops without a formula, by share of op time
    uncovered_ops: list[str] = field(default_factory=list)  # every compute op without a formula
    definition: str = DEFINITIONS[EXECUTED]

    def to_dict(self) -> ExecutedFlopsDict:
        return cast("ExecutedFlopsDict", asdict(self))


def count_executed_flops(step: Callable[[], Any], sync: Callable[[], None] | None = None) -> ExecutedFlops:
    """Run ``step`` once under FlopCounterMode and an op timer; never call it in a timed step.

    ``sync`` waits for the device around every op so that per-op time (for the coverage) is
    the op's execution, not its launch."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    formulas = extra_flop_formulas()
    counter = FlopCounterMode(display=False, custom_mapping=formulas)
    covered = set(counter.flop_registry)
    op_time: dict[Any, float] = defaultdict(float)
    op_count: Counter[Any] = Counter()
    views: set[Any] = set()

    class _OpTimer(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if sync is not None:
                sync()
            t0 = time.perf_counter()
            out = func(*args, **(kwargs or {}))
            if sync is not None:
                sync()
            packet = func._overloadpacket
            op_time[packet] += time.perf_counter() - t0
            op_count[packet] += 1
            if getattr(func, "is_view", False):
                views.add(packet)
            return out

    with _OpTimer(), counter:  # the timer is outer: it sees the ops the counter executes
        step()
    total_time = sum(op_time.values()) or 1.0
    covered_time = sum(t for op, t in op_time.items() if op in covered)
    compute_ops = [op for op in op_count if op not in views and str(op) not in _NO_COMPUTE
                   and not str(op).startswith("profiler.")]
    n_compute = sum(op_count[op] for op in compute_ops) or 1
    n_covered = sum(op_count[op] for op in compute_ops if op in covered)
    uncovered = sorted(((str(op), t / total_time) for op, t in op_time.items() if op not in covered),
                       key=lambda x: -x[1])[:5]
    by_op = {str(k): int(v) for k, v in counter.get_flop_counts().get("Global", {}).items()}
    uncovered_ops = sorted(str(op) for op in compute_ops if op not in covered)
    return ExecutedFlops(int(counter.get_total_flops()), by_op, covered_time / total_time,
                         n_covered / n_compute, uncovered, uncovered_ops)


# --------------------------------------------------------------------------- profiler FLOPs


class ProfiledFlopsDict(TypedDict):
    """A :class:`ProfiledFlops` as plain data (a profiled trial's ``flops``)."""

    flops_per_step: float
    steps: int
    by_op: dict[str, int]  # op -> FLOPs
    coverage_time: float
    time_basis: str
    definition: str


@dataclass
class ProfiledFlops:
    flops_per_step: float
    steps: int
    by_op: dict[str, int]
    coverage_time: float  # share of aten op self time in ops the profiler gave FLOPs
    time_basis: str  # "device" (kernel time) or "cpu" (op self time on the host)
    definition: str = DEFINITIONS[PROFILER]

    def to_dict(self) -> ProfiledFlopsDict:
        return cast("ProfiledFlopsDict", asdict(self))


def profiler_attributed_flops(
    step: Callable[[], Any],
    *,
    steps: int = 2,
    warmup: int = 1,
    sync: Callable[[], None] | None = None,
    device_kind: str = "cpu",
) -> ProfiledFlops:
    """Profile ``steps`` calls of ``step`` (after ``warmup`` unprofiled ones) with
    ``torch.profiler(with_flops=True)``. For a separate profiled run only: never time it."""
    from torch.profiler import profile

    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    for _ in range(warmup):
        step()
    if sync is not None:
        sync()
    # the device's events only where this build records them (the device seam decides)
    activities = devmod.profiler_activities_for(device_kind, required=False)
    with profile(activities=activities, with_flops=True) as prof:
        for _ in range(steps):
            step()
        if sync is not None:
            sync()
    events = [e for e in prof.key_averages() if e.key.startswith("aten::")]
    flops = {e.key: int(e.flops) for e in events if e.flops}
    device_total = sum(float(getattr(e, "self_device_time_total", 0.0)) for e in events)
    basis = "device" if device_kind != "cpu" and device_total > 0 else "cpu"

    def t(e: Any) -> float:
        return float(e.self_device_time_total if basis == "device" else e.self_cpu_time_total)

    total = sum(t(e) for e in events) or 1.0
    cov = sum(t(e) for e in events if e.flops) / total
    return ProfiledFlops(sum(flops.values()) / steps, steps, flops, cov, basis)


def profile_trainer_flops(trainer: Any, dev: Any, *, steps: int = 2, warmup: int = 1) -> ProfiledFlops:
    """Profiler-attributed FLOPs per step of a recipe's trainer on ``dev`` (a DeviceInfo)."""
    batches = trainer.batches()
    return profiler_attributed_flops(
        lambda: trainer.train_step(next(batches)), steps=steps, warmup=warmup,
        sync=lambda: devmod.synchronize(dev), device_kind=dev.kind,
    )


# --------------------------------------------------------------------------- in a trial


class PeaksAndUtilization(TypedDict):
    """The trial.json keys of :func:`peaks_and_utilization`."""

    matmul_dtype: str | None  # None: a host-only recipe (no torch)
    matmul_dtype_why: str
    peaks: list[hw.PeakRefDict]
    utilization: list[UtilizationEntry]


class TrialFlops(PeaksAndUtilization):
    """The trial.json keys of :func:`trial_flops`."""

    flops: FlopsFacts


def utilization_entry(peak: hw.PeakRefDict, useful: float | None, executed: float | None,
                      step_time_s: float | None) -> UtilizationEntry:
    """MFU and HFU against one peak, with the reason when either cannot be given."""
    p = peak.get("peak_tflops")
    reasons = [cast(str, peak["reason"])] if peak.get("reason") else []
    ok_time = step_time_s is not None and step_time_s > 0
    mfu = utilization(useful, step_time_s, p) if (p and useful is not None and ok_time) else None  # type: ignore[arg-type]
    hfu = utilization(executed, step_time_s, p) if (p and executed is not None and ok_time) else None  # type: ignore[arg-type]
    if useful is None:
        reasons.append("the recipe gives no useful (analytic) FLOP count")
    return {"peak": peak["label"], "peak_kind": peak["kind"], "peak_tflops": p,
            "dtype": peak["dtype"], "mfu": mfu, "hfu": hfu, "note": "; ".join(reasons) or None}


def trial_flops(trainer: Any, batches: Iterable[Any], dev: Any, hardware: dict[str, Any],
                precision: str, step_time_s: float) -> TrialFlops:
    """FLOPs, peaks and utilization of a trial, measured after its timed steps. ``trainer``
    has the recipe hooks (recipes.base.TrainerHooks: useful_flops_per_step and its definition).

    Runs one extra, untimed step under the FLOP counter (unless
    ``hardware.count_executed_flops`` is false) and the peak calibration where asked. A
    failure of either becomes a stated reason in the record, never a failed trial."""
    useful = trainer.useful_flops_per_step()
    flops: FlopsFacts = {
        "useful_per_step": useful,
        "useful_definition": trainer.useful_flops_definition
        or (DEFINITIONS[USEFUL] + " (the recipe states no formula)"),
        "executed_per_step": None,
        "executed_definition": DEFINITIONS[EXECUTED],
    }
    if hardware.get("count_executed_flops", True):
        try:
            batch = next(iter(batches))
            ex = count_executed_flops(lambda: trainer.train_step(batch),
                                      None if dev.kind == "cpu" else lambda: devmod.synchronize(dev))
            # mypy checks no TypedDict.update(**kw)
            cast("dict[str, int | float | dict[str, int] | list[tuple[str, float]]]", flops).update(
                executed_per_step=ex.flops, executed_by_op=ex.by_op,
                executed_coverage_time=ex.coverage_time,
                executed_coverage_ops=ex.coverage_ops,
                executed_uncovered_top=ex.uncovered_top)
        except Exception as exc:  # noqa: BLE001 - a failed count is a stated reason, not a failed trial
            flops["executed_note"] = f"not counted: {type(exc).__name__}: {exc}"
    else:
        flops["executed_note"] = "not counted (hardware.count_executed_flops=false)"
    return {"flops": flops, **peaks_and_utilization(dev, hardware, precision, useful,
                                                     flops["executed_per_step"], step_time_s)}


def peaks_and_utilization(dev: Any, hardware: dict[str, Any], precision: str,
                          useful: float | None, executed: float | None,
                          step_time_s: float | None) -> PeaksAndUtilization:
    """The peaks of ``dev`` (a DeviceInfo) at the workload's precision, and MFU/HFU against
    each: registry entry, ``hardware=`` SKU, or a calibration run here (see
    :func:`orchestrator.platform.hardware.resolve_peaks`)."""
    dtype, why = hw.matmul_dtype(precision, dev.kind)
    peaks = [p.to_dict() for p in hw.resolve_peaks(
        hardware or {"name": "auto"}, dev.kind, dev.name, dtype,
        lambda: hw.calibrate_peak(dev, dtype, int(hardware.get("calibration_size") or 0),
                                  float(hardware.get("calibration_min_s") or 0.1)),
    )]
    util = [utilization_entry(p, useful, executed, step_time_s) for p in peaks]
    return {"matmul_dtype": dtype, "matmul_dtype_why": why, "peaks": peaks, "utilization": util}
