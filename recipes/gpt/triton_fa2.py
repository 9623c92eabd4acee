"""Causal FlashAttention-2 in Triton: one fused forward kernel and a fused backward, with the
tile shape (``block_q`` x ``block_k``), ``num_warps`` and ``num_stages`` as launch settings.

- forward: one program per (query tile, batch x head); it walks the key/value tiles up to the
  diagonal with an online softmax (running row maximum and row sum, fp32 accumulator) and saves
  the row log-sum-exp (base 2, of the scaled scores) for the backward;
- backward: ``delta = rowsum(dO * O)`` first, then the two FA2 passes, each recomputing the
  tile probabilities from the saved log-sum-exp: one program per key tile accumulates dK and dV
  over the query tiles at and below the diagonal, one program per query tile accumulates dQ over
  the key tiles up to the diagonal. No atomics, no score matrix in memory.

Tiles strictly below the diagonal run unmasked; only the tiles the diagonal crosses apply the
causal mask. Rows past the sequence end load zeros (their dO and delta are 0, so they add
nothing to dK and dV) and are never stored.

Imported only by ``backend: triton`` (recipes.gpt.attention), and only where triton imports.
Triton decides at decoration time whether a kernel is compiled or interpreted
(``TRITON_INTERPRET=1``: numpy on the CPU), so this module records which it got. The kernels'
parameters carry no type annotations other than ``tl.constexpr``: Triton reads annotations as
its own type specialisations.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch
import triton
import triton.language as tl

try:  # a launch configuration needing more shared memory or registers than the device has
    from triton.runtime.errors import OutOfResources
except ImportError:  # a triton without it: a class nothing raises
    class OutOfResources(Exception):  # type: ignore[no-redef]
        pass

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"
LOG2E = 1.4426950408889634
# Triton 3.9's interpreter multiplies bf16 operands of tl.dot as raw bits (garbage); it gets
# fp32 copies instead. bf16 x bf16 products are exact in fp32, so this is the same arithmetic a
# tensor core does with an fp32 accumulator; the roundings the kernel chooses (P and dS to the
# input dtype before their matmuls) stay.
_UPCAST_DOTS = INTERPRETED


# Row maxima and sums are tl.reduce with triton's own combine functions where this triton has
# them by these names (tl.max and tl.sum do the same), else equivalents of ours; zeros are
# tl.full. Not tl.max / tl.sum / tl.zeros themselves: those are @triton.jit functions of
# triton's library, compiled or interpreted as the environment was when triton was first
# imported, so a process that imported triton before setting TRITON_INTERPRET=1 (a test
# session) could not interpret them. The interpreter reduces with numpy for these two combine
# functions, and element by element for any other.
@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


@triton.jit
def _sum_combine(a, b):
    return a + b


_MAX = getattr(tl.standard, "_elementwise_max", _max_combine)
_SUM = getattr(tl.standard, "_sum_combine", _sum_combine)


@triton.jit
def _dot(a, b, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    if UPCAST:
        c = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        c = tl.dot(a, b, input_precision=PRECISION)
    return c


@triton.jit
def _fwd_tile(acc, m_i, l_i, q, k_base, v_base, stride_kt,
              stride_vt, start_n, offs_m, offs_d, T, qk_scale,
              BLOCK_N: tl.constexpr, MASK: tl.constexpr, PRECISION: tl.constexpr,
              UPCAST: tl.constexpr):
    offs_n = start_n + tl.arange(0, BLOCK_N)
    in_seq = offs_n[:, None] < T
    k = tl.load(k_base + offs_n[:, None] * stride_kt + offs_d[None, :], mask=in_seq, other=0.0)
    v = tl.load(v_base + offs_n[:, None] * stride_vt + offs_d[None, :], mask=in_seq, other=0.0)
    s = _dot(q, tl.trans(k), PRECISION, UPCAST) * qk_scale  # log2 units
    if MASK:
        s = tl.where(offs_m[:, None] >= offs_n[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.reduce(s, 1, _MAX))
    p = tl.math.exp2(s - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.reduce(p, 1, _SUM)
    acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, PRECISION, UPCAST)
    return acc, m_new, l_i


@triton.jit
def _fwd_kernel(Q, K, V, O, LSE,
                sqb, sqh, sqt, skb, skh, skt,
                svb, svh, svt, sob, soh, sot,
                H, T, qk_scale,
                HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    rows = offs_m[:, None] < T
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqt + offs_d[None, :], mask=rows,
                other=0.0)
    k_base = K + b * skb + h * skh
    v_base = V + b * svb + h * svh
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.full([BLOCK_M], 0.0, tl.float32)
    acc = tl.full([BLOCK_M, HEAD_D], 0.0, tl.float32)
    # key tiles that end at or before the first query of this tile: every key visible
    full = start_m // BLOCK_N * BLOCK_N
    for start_n in range(0, full, BLOCK_N):
        acc, m_i, l_i = _fwd_tile(acc, m_i, l_i, q, k_base, v_base, skt, svt, start_n, offs_m,
                                  offs_d, T, qk_scale, BLOCK_N, False, PRECISION, UPCAST)
    # the tiles the diagonal crosses (the first of them holds a visible key for every row)
    end = tl.minimum(start_m + BLOCK_M, T)
    for start_n in range(full, end, BLOCK_N):
        acc, m_i, l_i = _fwd_tile(acc, m_i, l_i, q, k_base, v_base, skt, svt, start_n, offs_m,
                                  offs_d, T, qk_scale, BLOCK_N, True, PRECISION, UPCAST)
    out = acc / l_i[:, None]
    tl.store(O + b * sob + h * soh + offs_m[:, None] * sot + offs_d[None, :],
             out.to(O.dtype.element_ty), mask=rows)
    tl.store(LSE + bh.to(tl.int64) * T + offs_m, m_i + tl.math.log2(l_i), mask=offs_m < T)


@triton.jit
def _delta_kernel(O, DO, DELTA, sob, soh, sot,
                  sdb, sdh, sdt, H, T,
                  HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr):
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    rows = offs_m[:, None] < T
    o = tl.load(O + b * sob + h * soh + offs_m[:, None] * sot + offs_d[None, :], mask=rows,
                other=0.0)
    do = tl.load(DO + b * sdb + h * sdh + offs_m[:, None] * sdt + offs_d[None, :], mask=rows,
                 other=0.0)
    delta = tl.reduce(o.to(tl.float32) * do.to(tl.float32), 1, _SUM)
    tl.store(DELTA + bh.to(tl.int64) * T + offs_m, delta, mask=offs_m < T)


@triton.jit
def _dkdv_tile(dk, dv, k, v, q_base, do_base, lse_base,
               delta_base, stride_qt, stride_dot, start_m, offs_n,
               offs_d, T, qk_scale, BLOCK_M: tl.constexpr, MASK: tl.constexpr,
               PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    offs_m = start_m + tl.arange(0, BLOCK_M)
    rows = offs_m[:, None] < T
    q = tl.load(q_base + offs_m[:, None] * stride_qt + offs_d[None, :], mask=rows, other=0.0)
    do = tl.load(do_base + offs_m[:, None] * stride_dot + offs_d[None, :], mask=rows, other=0.0)
    lse = tl.load(lse_base + offs_m, mask=offs_m < T, other=0.0)
    delta = tl.load(delta_base + offs_m, mask=offs_m < T, other=0.0)
    # transposed tile (keys x queries): dV and dK come out without a transpose of P or dS
    p_t = tl.math.exp2(_dot(k, tl.trans(q), PRECISION, UPCAST) * qk_scale - lse[None, :])
    if MASK:
        p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
    dv += _dot(p_t.to(do.dtype), do, PRECISION, UPCAST)
    dp_t = _dot(v, tl.trans(do), PRECISION, UPCAST)
    ds_t = p_t * (dp_t - delta[None, :])
    dk += _dot(ds_t.to(q.dtype), q, PRECISION, UPCAST)
    return dk, dv


@triton.jit
def _dkdv_kernel(Q, K, V, DO, DK, DV, LSE, DELTA,
                 sqb, sqh, sqt, skb, skh, skt,
                 svb, svh, svt, sdb, sdh, sdt,
                 sgb, sgh, sgt, H, T, qk_scale, sm_scale,
                 HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_D)
    cols = offs_n[:, None] < T
    k = tl.load(K + b * skb + h * skh + offs_n[:, None] * skt + offs_d[None, :], mask=cols,
                other=0.0)
    v = tl.load(V + b * svb + h * svh + offs_n[:, None] * svt + offs_d[None, :], mask=cols,
                other=0.0)
    q_base = Q + b * sqb + h * sqh
    do_base = DO + b * sdb + h * sdh
    lse_base = LSE + bh.to(tl.int64) * T
    delta_base = DELTA + bh.to(tl.int64) * T
    dk = tl.full([BLOCK_N, HEAD_D], 0.0, tl.float32)
    dv = tl.full([BLOCK_N, HEAD_D], 0.0, tl.float32)
    # query tiles the diagonal crosses: from the one holding query start_n to the first that
    # starts at or after this tile's last key + 1
    first = start_n // BLOCK_M * BLOCK_M
    clear = tl.minimum((start_n + BLOCK_N + BLOCK_M - 1) // BLOCK_M * BLOCK_M, T)
    for start_m in range(first, clear, BLOCK_M):
        dk, dv = _dkdv_tile(dk, dv, k, v, q_base, do_base, lse_base, delta_base, sqt, sdt,
                            start_m, offs_n, offs_d, T, qk_scale, BLOCK_M, True, PRECISION,
                            UPCAST)
    for start_m in range(clear, T, BLOCK_M):  # every query after every key of this tile
        dk, dv = _dkdv_tile(dk, dv, k, v, q_base, do_base, lse_base, delta_base, sqt, sdt,
                            start_m, offs_n, offs_d, T, qk_scale, BLOCK_M, False, PRECISION,
                            UPCAST)
    g = b * sgb + h * sgh + offs_n[:, None] * sgt + offs_d[None, :]  # DK and DV: one layout
    tl.store(DK + g, (dk * sm_scale).to(DK.dtype.element_ty), mask=cols)
    tl.store(DV + g, dv.to(DV.dtype.element_ty), mask=cols)


@triton.jit
def _dq_tile(dq, q, do, lse, delta, k_base, v_base,
             stride_kt, stride_vt, start_n, offs_m, offs_d, T,
             qk_scale, BLOCK_N: tl.constexpr, MASK: tl.constexpr,
             PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    offs_n = start_n + tl.arange(0, BLOCK_N)
    in_seq = offs_n[:, None] < T
    k = tl.load(k_base + offs_n[:, None] * stride_kt + offs_d[None, :], mask=in_seq, other=0.0)
    v = tl.load(v_base + offs_n[:, None] * stride_vt + offs_d[None, :], mask=in_seq, other=0.0)
    p = tl.math.exp2(_dot(q, tl.trans(k), PRECISION, UPCAST) * qk_scale - lse[:, None])
    if MASK:
        p = tl.where(offs_m[:, None] >= offs_n[None, :], p, 0.0)
    dp = _dot(do, tl.trans(v), PRECISION, UPCAST)
    ds = p * (dp - delta[:, None])
    dq += _dot(ds.to(k.dtype), k, PRECISION, UPCAST)
    return dq


@triton.jit
def _dq_kernel(Q, K, V, DO, DQ, LSE, DELTA,
               sqb, sqh, sqt, skb, skh, skt,
               svb, svh, svt, sdb, sdh, sdt,
               sgb, sgh, sgt, H, T, qk_scale, sm_scale,
               HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    rows = offs_m[:, None] < T
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqt + offs_d[None, :], mask=rows,
                other=0.0)
    do = tl.load(DO + b * sdb + h * sdh + offs_m[:, None] * sdt + offs_d[None, :], mask=rows,
                 other=0.0)
    lse = tl.load(LSE + bh.to(tl.int64) * T + offs_m, mask=offs_m < T, other=0.0)
    delta = tl.load(DELTA + bh.to(tl.int64) * T + offs_m, mask=offs_m < T, other=0.0)
    k_base = K + b * skb + h * skh
    v_base = V + b * svb + h * svh
    dq = tl.full([BLOCK_M, HEAD_D], 0.0, tl.float32)
    full = start_m // BLOCK_N * BLOCK_N
    for start_n in range(0, full, BLOCK_N):
        dq = _dq_tile(dq, q, do, lse, delta, k_base, v_base, skt, svt, start_n, offs_m, offs_d,
                      T, qk_scale, BLOCK_N, False, PRECISION, UPCAST)
    end = tl.minimum(start_m + BLOCK_M, T)
    for start_n in range(full, end, BLOCK_N):
        dq = _dq_tile(dq, q, do, lse, delta, k_base, v_base, skt, svt, start_n, offs_m, offs_d,
                      T, qk_scale, BLOCK_N, True, PRECISION, UPCAST)
    tl.store(DQ + b * sgb + h * sgh + offs_m[:, None] * sgt + offs_d[None, :],
             (dq * sm_scale).to(DQ.dtype.element_ty), mask=rows)


def _bthd_like(x: torch.Tensor) -> torch.Tensor:
    """An empty [B, H, T, D] tensor stored as [B, T, H, D]: the layout the model's
    ``transpose(1, 2).reshape`` reads without a copy."""
    b, h, t, d = x.shape
    return torch.empty((b, t, h, d), dtype=x.dtype, device=x.device).transpose(1, 2)


def _lastdim_unit(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def _bht(x: torch.Tensor) -> tuple[int, int, int]:
    return x.stride(0), x.stride(1), x.stride(2)


def _precision() -> str:
    """fp32 operands: TF32 tensor cores only where torch's own fp32 matmuls may use them."""
    return "ieee" if torch.get_float32_matmul_precision() == "highest" else "tf32"


class FlashAttention2(torch.autograd.Function):
    """Causal attention over [batch, heads, seq, head_dim] with the Triton kernels above;
    settings = (block_q, block_k, num_warps, num_stages)."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,  # type: ignore[override]
                settings: tuple[int, int, int, int]) -> torch.Tensor:
        q, k, v = (_lastdim_unit(x) for x in (q, k, v))
        block_q, block_k, warps, stages = settings
        b, h, t, d = q.shape
        sm_scale = 1.0 / math.sqrt(d)
        out = _bthd_like(q)
        lse = torch.empty((b, h, t), dtype=torch.float32, device=q.device)
        precision = _precision()
        _fwd_kernel[(triton.cdiv(t, block_q), b * h)](
            q, k, v, out, lse, *_bht(q), *_bht(k), *_bht(v), *_bht(out), h, t,
            sm_scale * LOG2E, HEAD_D=d, BLOCK_M=block_q, BLOCK_N=block_k, PRECISION=precision,
            UPCAST=_UPCAST_DOTS, num_warps=warps, num_stages=stages)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings, ctx.precision = settings, precision
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        q, k, v, out, lse = ctx.saved_tensors
        dout = _lastdim_unit(dout)  # autograd may hand an expanded (stride-0) gradient
        block_q, block_k, warps, stages = ctx.settings
        b, h, t, d = q.shape
        sm_scale = 1.0 / math.sqrt(d)
        delta = torch.empty_like(lse)
        _delta_kernel[(triton.cdiv(t, block_q), b * h)](
            out, dout, delta, *_bht(out), *_bht(dout), h, t, HEAD_D=d, BLOCK_M=block_q,
            num_warps=warps, num_stages=stages)
        dq, dk, dv = _bthd_like(q), _bthd_like(k), _bthd_like(v)  # one layout for the three
        strides = (*_bht(q), *_bht(k), *_bht(v), *_bht(dout), *_bht(dq))
        common = {"HEAD_D": d, "BLOCK_M": block_q, "BLOCK_N": block_k,
                  "PRECISION": ctx.precision, "UPCAST": _UPCAST_DOTS, "num_warps": warps,
                  "num_stages": stages}
        qk_scale = sm_scale * LOG2E
        _dkdv_kernel[(triton.cdiv(t, block_k), b * h)](
            q, k, v, dout, dk, dv, lse, delta, *strides, h, t, qk_scale, sm_scale, **common)
        _dq_kernel[(triton.cdiv(t, block_q), b * h)](
            q, k, v, dout, dq, lse, delta, *strides, h, t, qk_scale, sm_scale, **common)
        return dq, dk, dv, None
