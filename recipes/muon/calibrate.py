"""A ``measured`` cost profile: calibrated on the actual group at start.

Every rank times, at the same moment (so contention between ranks on a shared host is in the
figures), square matmuls in the NS dtype and all-gathers / all-reduces of a few sizes. The
per-size medians are reduced with MAX over the group, so every rank fits the same numbers and
the profile (hence every ``auto`` choice) is identical on all ranks. Each series is fitted with
``time = size / rate + fixed`` by least squares: matmul FLOP/s and per-GEMM overhead; link
bandwidth (ring bytes per rank) and per-collective latency.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Optional, Sequence

import torch
import torch.distributed as dist

from orchestrator import device as devmod
from recipes.muon.cost import DTYPE_BYTES, CostProfile, Link
from recipes.muon.newton_schulz import NS_DTYPES

MATMUL_SIZES = (32, 128, 256, 512)
COLLECTIVE_ELEMS = (256, 16_384, 262_144)


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


def _median_time(fn: Callable[[], object], reps: int, dev: Optional[devmod.DeviceInfo]) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        if dev is not None:
            devmod.synchronize(dev)
        t0 = time.perf_counter()
        fn()
        if dev is not None:
            devmod.synchronize(dev)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def calibrate(
    group: Optional[dist.ProcessGroup],
    *,
    ns_dtype: str = "fp32",
    device: str = "cpu",
    dev: Optional[devmod.DeviceInfo] = None,
    reps: int = 5,
) -> CostProfile:
    size = dist.get_world_size(group) if group is not None and dist.is_initialized() else 1
    dtype = NS_DTYPES[ns_dtype]
    g = torch.Generator().manual_seed(0)
    samples: list[float] = []
    for k in MATMUL_SIZES:
        a = torch.randn(k, k, generator=g).to(device=device, dtype=dtype)
        if size > 1:
            dist.barrier(group)
        samples.append(_median_time(lambda: a @ a, reps, dev))
    comm = size > 1
    for elems in COLLECTIVE_ELEMS if comm else ():
        shard = torch.ones(elems // size, device=device)
        parts = [torch.empty_like(shard) for _ in range(size)]
        dist.barrier(group)
        samples.append(_median_time(lambda: dist.all_gather(parts, shard, group=group), reps, dev))
    for elems in COLLECTIVE_ELEMS if comm else ():
        buf = torch.ones(elems, device=device, dtype=dtype)
        dist.barrier(group)
        samples.append(_median_time(lambda: dist.all_reduce(buf, group=group), reps, dev))
    agreed = torch.tensor(samples, dtype=torch.float64)
    if comm:
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=group)
    t = agreed.tolist()
    nm = len(MATMUL_SIZES)
    s_per_flop, gemm_fixed = fit_line([2.0 * k**3 for k in MATMUL_SIZES], t[:nm])
    rho = (size - 1) / size if comm else 1.0
    links: list[Link] = []
    for i, per_elem in enumerate((4 * rho, 2 * DTYPE_BYTES[ns_dtype] * rho) if comm else ()):
        ts = t[nm + i * len(COLLECTIVE_ELEMS): nm + (i + 1) * len(COLLECTIVE_ELEMS)]
        s_per_byte, latency = fit_line([e * per_elem for e in COLLECTIVE_ELEMS], ts)
        links.append(Link(1.0 / s_per_byte, latency))
    none = Link(float("inf"), 0.0)  # a single rank never communicates
    gather, reduce = (links[0], links[1]) if comm else (none, none)
    return CostProfile(
        name=f"measured:{dev.kind if dev else torch.device(device).type}x{size}",
        figure_kind="measured",
        matmul_flops_per_s={ns_dtype: 1.0 / s_per_flop},
        intra=gather,
        inter=gather,
        gemm_overhead_s=gemm_fixed,
        all_gather=gather,
        all_reduce=reduce,
    )


def describe(p: CostProfile) -> str:
    rates = ", ".join(f"{k} {v / 1e9:.1f} GFLOP/s" for k, v in p.matmul_flops_per_s.items())
    out = f"{p.name} ({p.figure_kind}): matmul {rates}, {p.gemm_overhead_s * 1e6:.1f} us/GEMM"
    for name, link in (("all_gather", p.all_gather), ("all_reduce", p.all_reduce)):
        if link is not None and link.bandwidth_bytes_per_s != float("inf"):
            out += (f"; {name} {link.bandwidth_bytes_per_s / 1e9:.2f} GB/s + "
                    f"{link.latency_s * 1e6:.0f} us")
    return out
