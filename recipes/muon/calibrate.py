"""A ``measured`` cost profile: calibrated on the actual group at start, from the operation
itself.

Every rank runs, at the same moment (so contention between ranks sharing a host is in the
figures), a few small Newton-Schulz probes: local (no group), ``distributed`` and
``duplicated`` on tall weights [l*G, s] split on rows. The per-probe medians are reduced with
MAX over the group, so every rank fits the same numbers and the profile (hence every ``auto``
choice) is identical on all ranks. Fits, each ``time = x * slope + fixed`` by least squares:

* local probes: the NS compute curve (seconds against matmul FLOPs, piecewise linear through
  the probes: a loaded host runs short operations near full speed and long ones at its share
  of a core); a linear fit (FLOP/s plus a per-GEMM cost) is reported alongside;
* bandwidth: back-to-back all-gathers / all-reduces of a large buffer (bytes dominate);
* latency: in the distributed / duplicated probes, what neither the compute fit nor the
  bandwidth explains, per collective (the median over the probes).

Timing collectives inside the iteration (after a matmul, ranks arriving skewed, possibly
rescheduled on a shared host) prices what the optimizer actually meets; back-to-back
collectives report a lower latency than the iteration ever sees.
"""

from __future__ import annotations

import statistics
import time
from functools import partial
from typing import Callable, Optional, Sequence

import torch
import torch.distributed as dist

from orchestrator.platform import device as devmod
from recipes.muon.cost import DTYPE_BYTES, CostProfile, Link, interpolate, mode_costs
from recipes.muon.newton_schulz import NS_DTYPES, newton_schulz, newton_schulz_tp, quadratic_steps

PROBES = ((32, 64), (64, 256), (128, 512), (128, 2048))  # (s, l): local iterate [s, l]
BANDWIDTH_ELEMS = 1 << 20  # 4 MiB fp32: bytes dominate the time


def fit_line(xs: Sequence[float], ts: Sequence[float]) -> tuple[float, float]:
    """(seconds per unit, fixed seconds) of ``t = x * slope + fixed`` (least squares, pure).

    A negative intercept is clamped to 0 (refit through the origin); a non-positive slope,
    which only noise can produce, is replaced by the largest point's average cost."""
    n = len(xs)
    mx, mt = sum(xs) / n, sum(ts) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (t - mt) for x, t in zip(xs, ts)) / sxx if sxx else 0.0
    fixed = mt - slope * mx
    if fixed < 0:
        fixed = 0.0
        slope = sum(x * t for x, t in zip(xs, ts)) / sum(x * x for x in xs)
    if slope <= 0:
        i = max(range(n), key=lambda k: xs[k])
        slope, fixed = ts[i] / xs[i], 0.0
    return slope, fixed


def _interleaved_medians(fns: Sequence[Callable[[], object]], reps: int,
                         dev: Optional[devmod.DeviceInfo],
                         group: Optional[dist.ProcessGroup]) -> list[float]:
    """Median time of each probe, the probes interleaved (order reversed every other round) so
    a shared host's changing load falls on all of them alike, as in the campaign's own plan."""
    for fn in fns:  # warm-up
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for r in range(reps):
        order = range(len(fns)) if r % 2 == 0 else range(len(fns) - 1, -1, -1)
        for i in order:
            if group is not None:
                dist.barrier(group)
            if dev is not None:
                devmod.synchronize(dev)
            t0 = time.perf_counter()
            fns[i]()
            if dev is not None:
                devmod.synchronize(dev)
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def calibrate(
    group: Optional[dist.ProcessGroup],
    *,
    ns_dtype: str = "fp32",
    steps: int = 5,
    coefficient_set: str = "quintic",
    device: str = "cpu",
    dev: Optional[devmod.DeviceInfo] = None,
    reps: int = 9,
) -> CostProfile:
    size = dist.get_world_size(group) if group is not None and dist.is_initialized() else 1
    comm = size > 1
    grp = group if comm else None
    dtype = NS_DTYPES[ns_dtype]
    quad = quadratic_steps(coefficient_set, steps)
    gen = torch.Generator().manual_seed(0)
    fns: list[Callable[[], object]] = []
    shards = [torch.randn(l, s, generator=gen).to(device) for s, l in PROBES]  # rows of [l*G, s]
    for shard in shards:
        fns.append(partial(newton_schulz, shard, steps, coefficient_set, compute_dtype=dtype))
    for mode in ("distributed", "duplicated") if comm else ():
        for shard in shards:
            fns.append(partial(newton_schulz_tp, shard, steps, coefficient_set, group=grp,
                               partition_dim=0, mode=mode, compute_dtype=dtype))
    if comm:
        buf = torch.ones(BANDWIDTH_ELEMS, device=device, dtype=dtype)
        fns.append(partial(dist.all_reduce, buf, group=grp))
        parts = [torch.empty(BANDWIDTH_ELEMS // size, device=device) for _ in range(size)]
        fns.append(partial(dist.all_gather, parts, parts[0].clone(), group=grp))
    samples = _interleaved_medians(fns, reps, dev, grp)
    agreed = torch.tensor(samples, dtype=torch.float64)
    if comm:
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=group)
    t = agreed.tolist()
    n = len(PROBES)
    local = [mode_costs(s, l, 1, steps, quad_steps=quad, ns_dtype=ns_dtype, partition_dim=1)
             ["duplicated"] for s, l in PROBES]
    s_per_flop, fixed = fit_line([c.flops for c in local], t[:n])
    gemm_overhead = fixed / local[0].gemms
    curve, slowest = [], 0.0
    for c, tm in sorted(zip(local, t[:n]), key=lambda ct: ct[0].flops):
        slowest = max(slowest, tm)  # more work never takes less time
        curve.append((c.flops, slowest))

    def compute_s(flops: float, gemms: int) -> float:
        return interpolate(tuple(curve), flops)

    links: dict[str, Link] = {}
    for i, mode in enumerate(("distributed", "duplicated") if comm else ()):
        costs = [mode_costs(l * size, s, size, steps, quad_steps=quad, ns_dtype=ns_dtype)[mode]
                 for s, l in PROBES]
        rho = (size - 1) / size
        ring_bytes = BANDWIDTH_ELEMS * rho * (4 if mode == "duplicated" else
                                              2 * DTYPE_BYTES[ns_dtype])
        bandwidth = ring_bytes / t[3 * n + i]
        latency = statistics.median(
            max(tm - compute_s(c.flops, c.gemms) - c.bytes / bandwidth, 0.0) / c.collectives
            for tm, c in zip(t[n * (i + 1): n * (i + 2)], costs))
        links[mode] = Link(bandwidth, latency)
    none = Link(float("inf"), 0.0)  # a single rank never communicates
    gather, reduce = links.get("duplicated", none), links.get("distributed", none)
    kind = dev.kind if dev is not None else torch.device(device).type
    return CostProfile(
        name=f"measured:{kind}x{size}",
        figure_kind="measured",
        matmul_flops_per_s={ns_dtype: 1.0 / s_per_flop},
        intra=gather,
        inter=gather,
        gemm_overhead_s=gemm_overhead,
        all_gather=gather,
        all_reduce=reduce,
        compute_curve=tuple(curve),
    )


def measure_latency(group: dist.ProcessGroup, *, device: str = "cpu",
                    dev: Optional[devmod.DeviceInfo] = None, reps: int = 15) -> float:
    """Per-collective latency on ``group`` (seconds): the median time of a one-element
    all-reduce (bytes negligible), each after a barrier, reduced with MAX over the group so
    every rank uses the same figure. Back-to-back small collectives see the link's latency,
    not the skew a real iteration adds, so this is a lower bound of what the optimizer meets."""
    buf = torch.zeros(1, device=device)
    (t,) = _interleaved_medians([partial(dist.all_reduce, buf, group=group)], reps, dev, group)
    agreed = torch.tensor([t], dtype=torch.float64, device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=group)
    return float(agreed.item())


def describe(p: CostProfile) -> str:
    rates = ", ".join(f"{k} {v / 1e9:.1f} GFLOP/s" for k, v in p.matmul_flops_per_s.items())
    out = f"{p.name} ({p.figure_kind}): NS matmul {rates} + {p.gemm_overhead_s * 1e6:.1f} us/GEMM"
    if p.compute_curve:
        out += f" (linear fit; the model uses the {len(p.compute_curve)}-probe compute curve)"
    for name, link in (("all_gather", p.all_gather), ("all_reduce", p.all_reduce)):
        if link is not None and link.bandwidth_bytes_per_s != float("inf"):
            out += (f"; {name} {link.bandwidth_bytes_per_s / 1e9:.2f} GB/s + "
                    f"{link.latency_s * 1e6:.0f} us")
    return out
