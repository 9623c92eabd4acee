"""The tp_mode cost model (pure) and the per-shape resolver behind ``tp_mode=auto``.

For a global weight [M, N] sharded G ways along ``partition_dim`` and ``steps`` Newton-Schulz
steps, per rank:

* ``duplicated``: one all-gather of the fp32 momentum (M*N*4*(G-1)/G bytes, ring), then the
  full iteration with the Gram on s = min(M, N): per step 2*s^2*l (X X^T; s^2*l with SYRK) +
  2*s^2*l (B X), plus 2*s^3 (A A; s^3 with SYRK) on the steps whose c != 0.
* ``distributed``: the Gram is on the *unsharded* dim u (N for partition_dim 0, M for 1) and
  the long dim is split: per step 2*u^2*(L/G) twice, plus the replicated 2*u^3. One all-reduce
  of the u x u Gram in the NS compute dtype per step (2*u^2*b*(G-1)/G bytes, ring) plus one
  scalar all-reduce for the Frobenius norm: steps + 1 collectives.

Time = FLOPs / matmul rate (of the NS dtype) + GEMM calls * per-GEMM overhead + bytes /
bandwidth + collectives * per-collective latency, with the intra- or inter-domain link. FLOPs
are matmul FLOPs (2 per multiply-add); element-wise work is not counted.

Without a profile the rule is conservative: ``distributed`` only when the group stays inside
one domain and it needs at most half the per-rank FLOPs *and* no more bytes than
``duplicated``; otherwise ``duplicated``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

log = logging.getLogger(__name__)

MODES = ("duplicated", "distributed")
DTYPE_BYTES = {"fp32": 4, "bf16": 2}


@dataclass(frozen=True)
class Link:
    bandwidth_bytes_per_s: float
    latency_s: float


@dataclass(frozen=True)
class CostProfile:
    """What the model needs to know about a machine. ``figure_kind`` says where the numbers
    come from: ``datasheet`` (the hardware registry), ``measured`` (calibrated on the group) or
    ``hybrid`` (registry peaks and bandwidths, per-collective latency measured on the group)."""

    name: str
    figure_kind: str
    matmul_flops_per_s: Mapping[str, float]  # NS compute dtype -> sustained matmul FLOP/s
    intra: Link
    inter: Link
    gemm_overhead_s: float = 0.0  # fixed cost per GEMM call; 0 for datasheet profiles
    # measured on the very group the optimizer runs on: used whatever the domain flag says
    all_gather: Optional[Link] = None
    all_reduce: Optional[Link] = None
    # measured NS compute time against its matmul FLOPs, (flops, seconds) by rising flops:
    # when present it replaces the single rate (a loaded or oversubscribed host runs short
    # operations near full speed and long ones at its share of a core)
    compute_curve: tuple[tuple[float, float], ...] = ()

    def compute_s(self, flops: float, gemms: int, dtype: str) -> float:
        if self.compute_curve:
            return interpolate(self.compute_curve, flops)
        rate = self.matmul_flops_per_s.get(dtype)
        if not rate:
            raise ValueError(f"cost profile {self.name!r} has no matmul rate for {dtype}")
        return flops / rate + gemms * self.gemm_overhead_s

    def link(self, collective: str, crosses_domain: bool) -> Link:
        measured = self.all_gather if collective == "all_gather" else self.all_reduce
        if measured is not None:
            return measured
        return self.inter if crosses_domain else self.intra


def interpolate(points: tuple[tuple[float, float], ...], x: float) -> float:
    """Piecewise-linear through ``points`` (rising x), through the origin below the first
    point, continuing the last segment's slope beyond the last (pure)."""
    x0, t0 = points[0]
    if x <= x0:
        return t0 * x / x0
    for (xa, ta), (xb, tb) in zip(points, points[1:]):
        if x <= xb:
            return ta + (tb - ta) * (x - xa) / (xb - xa)
    xa, ta = points[-2] if len(points) > 1 else (0.0, 0.0)
    xb, tb = points[-1]
    return tb + (tb - ta) / (xb - xa) * (x - xb)


@dataclass(frozen=True)
class ModeCost:
    flops: float  # matmul FLOPs per rank
    gemms: int
    bytes: float  # bytes each rank sends (ring algorithms)
    collectives: int
    compute_s: Optional[float] = None  # None without a profile
    bandwidth_s: Optional[float] = None
    latency_s: Optional[float] = None

    @property
    def total_s(self) -> Optional[float]:
        if self.compute_s is None or self.bandwidth_s is None or self.latency_s is None:
            return None
        return self.compute_s + self.bandwidth_s + self.latency_s


@dataclass(frozen=True)
class Choice:
    m: int
    n: int
    g: int
    partition_dim: Optional[int]
    mode: str
    basis: str  # which rule decided
    costs: Mapping[str, ModeCost] = field(default_factory=dict)

    def line(self) -> str:
        parts = []
        for mode, c in self.costs.items():
            t = f"{c.total_s * 1e3:.3f} ms" if c.total_s is not None else "n/a"
            parts.append(f"{mode} {t} ({c.flops / 1e6:.1f} MFLOP, {c.bytes / 1e3:.1f} kB, "
                         f"{c.collectives} coll)")
        return (f"tp_mode auto: [{self.m}, {self.n}] G={self.g} dim={self.partition_dim} -> "
                f"{self.mode} [{self.basis}]" + (": " + "; ".join(parts) if parts else ""))


def _ns_flops(s: int, long: float, steps: int, quad_steps: int, syrk: bool) -> tuple[float, int]:
    k = 1 if syrk else 2
    per_step = k * s * s * long + 2 * s * s * long
    return steps * per_step + quad_steps * k * s**3, 2 * steps + quad_steps


def mode_costs(
    m: int,
    n: int,
    g: int,
    steps: int,
    *,
    quad_steps: Optional[int] = None,
    partition_dim: int = 0,
    syrk: bool = False,
    state_dtype: str = "fp32",
    ns_dtype: str = "fp32",
    crosses_domain: bool = False,
    profile: Optional[CostProfile] = None,
) -> dict[str, ModeCost]:
    """Per-rank cost of each mode for one weight (pure)."""
    if partition_dim not in (0, 1):
        raise ValueError(f"partition_dim must be 0 or 1, got {partition_dim!r}")
    quad = steps if quad_steps is None else quad_steps
    rho = (g - 1) / g
    s, long = min(m, n), max(m, n)
    dup_flops, dup_gemms = _ns_flops(s, long, steps, quad, syrk)
    unsharded, sharded = (n, m) if partition_dim == 0 else (m, n)
    dist_flops, dist_gemms = _ns_flops(unsharded, sharded / g, steps, quad, syrk)
    ns_b = DTYPE_BYTES[ns_dtype]
    raw = {
        "duplicated": (dup_flops, dup_gemms, m * n * DTYPE_BYTES[state_dtype] * rho, 1),
        # per step a u x u Gram all-reduce, plus the fp32 scalar of the Frobenius norm
        "distributed": (dist_flops, dist_gemms,
                        steps * 2 * unsharded**2 * ns_b * rho + 2 * 4 * rho, steps + 1),
    }
    out = {}
    for mode, (flops, gemms, nbytes, colls) in raw.items():
        if profile is None:
            out[mode] = ModeCost(flops, gemms, nbytes, colls)
            continue
        link = profile.link("all_gather" if mode == "duplicated" else "all_reduce", crosses_domain)
        out[mode] = ModeCost(
            flops, gemms, nbytes, colls,
            compute_s=profile.compute_s(flops, gemms, ns_dtype),
            bandwidth_s=nbytes / link.bandwidth_bytes_per_s,
            latency_s=colls * link.latency_s,
        )
    return out


def choose(
    m: int,
    n: int,
    g: int,
    steps: int,
    *,
    partition_dim: Optional[int] = 0,
    **kw: Any,
) -> Choice:
    """The mode auto picks for this weight; ties go to ``duplicated`` (the fixed baseline)."""
    if partition_dim is None or g == 1:
        return Choice(m, n, g, partition_dim, "duplicated", "not sharded")
    costs = mode_costs(m, n, g, steps, partition_dim=partition_dim, **kw)
    dup, dis = costs["duplicated"], costs["distributed"]
    profile: Optional[CostProfile] = kw.get("profile")
    if profile is not None:
        assert dup.total_s is not None and dis.total_s is not None
        mode = "distributed" if dis.total_s < dup.total_s else "duplicated"
        basis = f"{profile.figure_kind} profile {profile.name}"
    else:
        ok = (not kw.get("crosses_domain", False) and dis.flops <= 0.5 * dup.flops
              and dis.bytes <= dup.bytes)
        mode = "distributed" if ok else "duplicated"
        basis = "no profile: conservative rule"
    return Choice(m, n, g, partition_dim, mode, basis, costs)


# --------------------------------------------------------------------------- registry adapter


def _field(entry: Mapping[str, Any], key: str) -> float:
    value = entry.get(key)
    if value is None:
        raise ValueError(f"hardware entry {entry.get('name', '?')!r}: {key} is missing; "
                         "the cost model does not guess it")
    return float(value)


def profile_from_registry(entry: Mapping[str, Any], latency_s: Optional[float] = None,
                          latency_source: str = "") -> CostProfile:
    """A CostProfile from a hardware-registry entry (a plain dict with the registry's field
    names). Bandwidths are GB/s (1e9 bytes/s) per GPU and direction; latency in microseconds;
    peaks in dense TFLOP/s. A missing field is an error, never a default.

    ``latency_s``: a per-collective latency measured on the group (no datasheet states one),
    used when the entry's ``collective_latency_us`` is null. The profile is then ``hybrid``:
    datasheet peaks and link bandwidths, measured latency (``latency_source`` says how)."""
    peaks = entry.get("peak_tflops") or {}
    rates = {k: float(v) * 1e12 for k, v in peaks.items() if k in DTYPE_BYTES and v is not None}
    if not rates:
        raise ValueError(f"hardware entry {entry.get('name', '?')!r}: peak_tflops has no fp32 or "
                         "bf16 figure")
    kind = str(entry.get("figure_kind") or "datasheet")
    name = str(entry.get("name", "?"))
    if entry.get("collective_latency_us") is None and latency_s is not None:
        lat = float(latency_s)
        kind = "hybrid"
        name = (f"{name} (peaks and bandwidths: registry, {kind_of_figures(entry)}; collective "
                f"latency {lat * 1e6:.1f} us: measured{', ' + latency_source if latency_source else ''})")
    else:
        lat = _field(entry, "collective_latency_us") / 1e6
    return CostProfile(
        name=name,
        figure_kind=kind,
        matmul_flops_per_s=rates,
        intra=Link(_field(entry, "intra_domain_bandwidth_gbps") * 1e9, lat),
        inter=Link(_field(entry, "inter_domain_bandwidth_gbps") * 1e9, lat),
    )


def kind_of_figures(entry: Mapping[str, Any]) -> str:
    kind = entry.get("figure_kind") or "datasheet"
    return str(kind.get("default", "datasheet")) if isinstance(kind, Mapping) else str(kind)


# --------------------------------------------------------------------------- resolver


class ModeResolver:
    """Resolves ``auto`` once per distinct (shape, G, partition_dim) and logs each new shape on
    rank 0. Every input is identical on every rank (global shape, group size, settings, the
    all-gathered domain flag, an agreed profile), so all ranks choose the same mode without
    talking."""

    def __init__(
        self,
        *,
        steps: int,
        quad_steps: int,
        ns_dtype: str,
        crosses_domain: bool,
        profile: Optional[CostProfile],
        syrk: bool = False,
        rank: int = 0,
    ) -> None:
        self.kw: dict[str, Any] = dict(quad_steps=quad_steps, ns_dtype=ns_dtype, syrk=syrk,
                                       crosses_domain=crosses_domain, profile=profile)
        self.steps = steps
        self.rank = rank
        self.cache: dict[tuple[int, int, int, Optional[int]], Choice] = {}

    def resolve(self, m: int, n: int, g: int, partition_dim: Optional[int]) -> Choice:
        key = (m, n, g, partition_dim)
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = choose(m, n, g, self.steps, partition_dim=partition_dim,
                                           **self.kw)
            if self.rank == 0 and partition_dim is not None and g > 1:
                log.info("%s", hit.line())
        return hit
