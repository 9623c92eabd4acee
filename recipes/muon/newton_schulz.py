"""Newton-Schulz orthogonalisation, on one device and over a tensor-parallel group.

``duplicated`` gathers the shards and runs the full iteration on every rank; ``distributed``
keeps the shard, orients the iterate so the sharded dimension is the long one, and all-reduces
the partial Gram once per step (plus one scalar for the Frobenius norm). Both are exact up to
floating-point reduction order: the update is a left multiplication by a polynomial of the
Gram, so column blocks of the oriented iterate evolve independently.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

Coeffs = tuple[float, float, float]

# (a, b, c) per step: X <- a X + b (X X^T) X + c (X X^T)^2 X. A "cycle" set repeats from its
# first tuple; a "repeat_last" set is a per-iteration schedule whose last tuple is the one to keep
# applying (going back to its first, most aggressive tuple would undo the convergence).
COEFFICIENT_SETS: dict[str, list[Coeffs]] = {
    # Keller Jordan's original quintic
    "simple": [(3.4445, -4.7750, 2.0315)],
    # the five-step tuned quintic schedule (Emerging-Optimizers' default)
    "quintic": [
        (4.0848, -6.8946, 2.9270),
        (3.9505, -6.3029, 2.6377),
        (3.7418, -5.5913, 2.3037),
        (2.8769, -3.1427, 1.2046),
        (2.8366, -3.0525, 1.2012),
    ],
    # the classic cubic Newton-Schulz step X <- 1.5 X - 0.5 X X^T X (converges to the polar
    # factor for singular values in (0, sqrt(3)); no A @ A product)
    "cubic": [(1.5, -0.5, 0.0)],
    # Polar Express (Amsel, Persson, Musco, Gower 2025, arXiv:2505.16932): the minimax quintic
    # per iteration. Values as NVIDIA-NeMo/Emerging-Optimizers ships them
    # (emerging_optimizers/orthogonalized_optimizers/muon_utils.py, commit fd77292): the paper's
    # optimal_composition(l=1e-3, num_iters=8, safety_factor_eps=1e-2, cushion=0.02) as listed in
    # NoahAmsel/PolarExpress polar_express/basic.py, with the safety factor 1.01 folded in
    # (a / 1.01, b / 1.01^3, c / 1.01^5, all but the last), to 4 decimals (the first a is
    # Emerging-Optimizers' 8.2051; 8.28721.../1.01 = 8.20516: kept as the peer has it).
    "polar_express": [
        (8.2051, -22.9019, 16.4607),
        (4.0664, -2.8612, 0.5184),
        (3.9096, -2.8234, 0.5250),
        (3.2856, -2.4153, 0.4853),
        (2.2779, -1.6198, 0.3985),
        (1.8726, -1.2307, 0.3585),
        (1.8564, -1.2132, 0.3568),
        (1.8750, -1.2500, 0.3750),
    ],
    # CANS (Grishina et al. 2025, "Accelerating Newton-Schulz Iteration for Orthogonalization via
    # Chebyshev-type Polynomials", arXiv:2506.10935): Remez + adaptive-interval quintics. Values as
    # NVIDIA-NeMo/Emerging-Optimizers ships them (muon_utils.py, commit fd77292), generated with
    # the paper's GrishKate/accelerating_orthogonalization polynomials.py.
    "cans": [
        (8.4703, -25.1081, 18.6293),
        (4.1828, -3.1087, 0.5806),
        (3.9619, -2.9541, 0.5630),
        (3.2866, -2.4647, 0.5074),
        (2.2737, -1.6447, 0.4162),
    ],
}
# per-iteration schedules: past their end the last tuple repeats (as in Emerging-Optimizers)
REPEAT_LAST = frozenset({"polar_express", "cans"})

SCALE_MODES = ("shape_scaling", "spectral", "unit_rms_norm")
TP_MODES = ("duplicated", "distributed")
NS_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# Frobenius normalisation floor, Emerging-Optimizers' default. It only guards the zero matrix: a
# larger floor (1e-7 before) shrinks inputs whose norm is below it, so NS starts from singular
# values far below 1 and ends elsewhere (at norm 1.8e-8: largest singular value 1.124, not 1.032).
# Below ~1e-19 per entry the fp32 squares underflow and the input counts as zero.
DEFAULT_EPS = 1e-15


def coefficients(name: str, steps: int) -> list[Coeffs]:
    """Exactly ``steps`` tuples of the named set: cycling through it, or for a per-iteration
    schedule (:data:`REPEAT_LAST`) repeating its last tuple once it is used up."""
    if name not in COEFFICIENT_SETS:
        raise ValueError(f"unknown coefficient set {name!r}; choose one of {sorted(COEFFICIENT_SETS)}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    sets = COEFFICIENT_SETS[name]
    if name in REPEAT_LAST:
        return [sets[min(i, len(sets) - 1)] for i in range(steps)]
    return [sets[i % len(sets)] for i in range(steps)]


def quadratic_steps(name: str, steps: int) -> int:
    """How many of the steps need the A @ A product (c != 0): the cost model counts them."""
    return sum(1 for _, _, c in coefficients(name, steps) if c != 0.0)


def scale_factor(m: int, n: int, mode: str, extra: float = 1.0) -> float:
    """Update scale from the *global* shape [m, n] (out, in)."""
    if mode == "shape_scaling":
        base = max(1.0, m / n) ** 0.5
    elif mode == "spectral":
        base = float(max(m, n)) ** 0.5
    elif mode == "unit_rms_norm":
        base = (m / n) ** 0.5
    else:
        raise ValueError(f"unknown scale mode {mode!r}; choose one of {SCALE_MODES}")
    return base * extra


def newton_schulz(
    x: torch.Tensor,
    steps: int,
    coefficient_set: str = "quintic",
    *,
    eps: float = DEFAULT_EPS,
    transpose: Optional[bool] = None,
    group: Optional[dist.ProcessGroup] = None,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Approximate orthogonalisation of a 2-D fp32 matrix.

    ``transpose=None`` puts the Gram on the smaller dimension. With ``group`` the input is one
    column block of the oriented iterate: the Frobenius norm and each step's Gram are summed
    over the group, and the result is this rank's block of the full result.
    """
    if x.dim() != 2:
        raise ValueError(f"newton_schulz needs a 2-D matrix, got shape {tuple(x.shape)}")
    if x.dtype != torch.float32:
        raise TypeError(f"newton_schulz needs fp32 input (momentum state), got {x.dtype}")
    if transpose is None:
        transpose = x.size(0) > x.size(1)
    X = x.mT if transpose else x
    if group is None:
        norm = torch.linalg.vector_norm(X)
    else:
        sq = X.square().sum()
        dist.all_reduce(sq, group=group)
        norm = sq.sqrt()
    X = (X / norm.clamp_min(eps)).to(compute_dtype)
    for a, b, c in coefficients(coefficient_set, steps):
        A = X @ X.mT
        if group is not None:
            # in the compute dtype: under bf16 the Gram moves 2 bytes per element
            dist.all_reduce(A, group=group)
        if c != 0.0:
            B = torch.addmm(A, A, A, beta=b, alpha=c)  # b A + c A A
            X = torch.addmm(X, B, X, beta=a)  # a X + B X
        else:
            X = torch.addmm(X, A, X, beta=a, alpha=b)  # a X + b A X
    X = X.to(torch.float32)
    return (X.mT if transpose else X).contiguous()


def newton_schulz_tp(
    x: torch.Tensor,
    steps: int,
    coefficient_set: str = "quintic",
    *,
    group: Optional[dist.ProcessGroup] = None,
    partition_dim: Optional[int] = None,
    mode: str = "duplicated",
    eps: float = DEFAULT_EPS,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Newton-Schulz of a matrix sharded over ``group`` along ``partition_dim``; returns this
    rank's shard of the result (same shape as ``x``).

    ``partition_dim=None`` (or a group of one) is the single-device iteration, bit for bit."""
    if partition_dim is None or group is None or dist.get_world_size(group) == 1:
        return newton_schulz(x, steps, coefficient_set, eps=eps, compute_dtype=compute_dtype)
    if partition_dim not in (0, 1):
        raise ValueError(f"invalid partition_dim {partition_dim!r}; use 0 (rows), 1 (columns) or None")
    if mode == "duplicated":
        size = dist.get_world_size(group)
        parts = [torch.empty_like(x) for _ in range(size)]
        dist.all_gather(parts, x.contiguous(), group=group)
        full = torch.cat(parts, dim=partition_dim)
        out = newton_schulz(full, steps, coefficient_set, eps=eps, compute_dtype=compute_dtype)
        return out.chunk(size, dim=partition_dim)[dist.get_rank(group)].contiguous()
    if mode == "distributed":
        # the sharded dimension must be the iterate's long (column) dimension
        return newton_schulz(
            x, steps, coefficient_set, eps=eps, transpose=partition_dim == 0, group=group,
            compute_dtype=compute_dtype,
        )
    raise ValueError(f"invalid tp_mode {mode!r}; choose one of {TP_MODES} (resolve auto first)")
