"""Causal self-attention backends that compute the same function.

- ``eager``: explicit scores, mask, softmax, weighted sum (the reference);
- ``sdpa``: ``F.scaled_dot_product_attention`` with a chosen kernel (math, flash, efficient,
  cudnn) through ``torch.nn.attention.sdpa_kernel``;
- ``tiled``: the FlashAttention-2 algorithm in PyTorch: loop over key/value tiles with an online
  softmax, never materialising the full score matrix, with the FA2 backward (recompute the tile
  probabilities from the saved log-sum-exp) in a custom autograd function;
- ``triton``: the same algorithm as one fused Triton kernel per pass (recipes.gpt.triton_fa2):
  the tile shape, ``num_warps`` and ``num_stages`` are launch settings of real kernels, so a
  tile sweep measures tiling rather than kernel launches. It needs a device with a Triton
  backend (cuda; musa where torch_musa's Triton backend runs it); on the CPU only Triton's
  interpreter runs it (``TRITON_INTERPRET=1``: for numerics, not speed);
- ``fa2``: the FlashAttention-2 tiling with what runs it here: ``triton`` on a GPU, the
  PyTorch ``tiled`` reference on the CPU (what ``+sweep=fa2_tiling`` sweeps);
- ``flash_attn``: the flash-attn package, when it imports and the device and dtype suit it.

All take q, k, v of shape [batch, heads, seq, head_dim] and return the same shape.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F

from orchestrator.core.errors import BackendUnavailable
from orchestrator.core.phases import phase, recording

Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    t = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return probs @ v


_SDPA_KERNELS = {
    "math": "MATH",
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
}


# torch.nn.attention.SDPBackend member -> the name workload.model.attention.sdpa_kernel uses
_SDPA_NAMES = {v: k for k, v in _SDPA_KERNELS.items()} | {"OVERRIDEABLE": "overrideable"}


def sdpa_choice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> str | None:
    """The kernel ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` dispatches to for
    these inputs, under the ``sdpa_kernel`` context in force: torch's own selection
    (``torch._fused_sdp_choice``, what the op itself calls). None where this torch, or this
    device's build of it, does not say (a vendor build without the selector on its device)."""
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None:
        return None
    try:
        from torch.nn.attention import SDPBackend

        return _SDPA_NAMES.get(SDPBackend(int(choose(q, k, v, None, 0.0, True))).name)
    except Exception:  # noqa: BLE001 - no answer is an answer: not described
        return None


class RecordedSdpa:
    """sdpa with one kernel setting (``auto``: torch picks), remembering which kernel torch
    chose for each input shape and dtype it was called with (``chosen``; the selector runs on
    a shape's first call only, so the timed steps pay one dict lookup). Eager mode only: under
    torch.compile the graph decides what runs."""

    def __init__(self, kernel: str) -> None:
        # (shape, dtype, needs a gradient): torch may pick another kernel for inference
        self.chosen: dict[tuple[torch.Size, torch.dtype, bool], str | None] = {}
        self._attend = make_sdpa(kernel)
        self._backend = None if kernel == "auto" else _sdpa_backend(kernel)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        key = (q.shape, q.dtype, torch.is_grad_enabled()
               and (q.requires_grad or k.requires_grad or v.requires_grad))
        if key not in self.chosen:
            if self._backend is None:
                self.chosen[key] = sdpa_choice(q, k, v)
            else:
                from torch.nn.attention import sdpa_kernel

                with sdpa_kernel(self._backend):
                    self.chosen[key] = sdpa_choice(q, k, v)
        return self._attend(q, k, v)

    def describe(self) -> list[str] | None:
        """'2x4x128x16/float32:sdpa-flash' per shape called ('.../no-grad:...' for a call
        without gradients), or None when a shape's kernel is unknown (or nothing was
        called)."""
        if not self.chosen or None in self.chosen.values():
            return None
        return sorted(f"{'x'.join(map(str, shape))}/{str(dtype).removeprefix('torch.')}"
                      f"{'' if grad else '/no-grad'}:sdpa-{kernel}"
                      for (shape, dtype, grad), kernel in self.chosen.items())


def _sdpa_backend(kernel: str) -> Any:
    from torch.nn.attention import SDPBackend

    backend = getattr(SDPBackend, _SDPA_KERNELS[kernel], None)
    if backend is None:
        raise BackendUnavailable(f"this torch has no SDPBackend for sdpa kernel {kernel!r}")
    return backend


def make_sdpa(kernel: str) -> Attention:
    if kernel == "auto":
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    from torch.nn.attention import sdpa_kernel

    backend = _sdpa_backend(kernel)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return attend


def probe_sdpa(kernel: str, device: torch.device, dtype: torch.dtype) -> None:
    """Raise BackendUnavailable unless the kernel runs forward and backward here."""
    attend = make_sdpa(kernel)
    q = torch.randn(1, 2, 16, 16, device=device, dtype=dtype, requires_grad=True)
    try:
        attend(q, q, q).sum().backward()
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BackendUnavailable(
            f"sdpa kernel {kernel!r} cannot run on {device.type} with {dtype}: {first}"
        ) from None


class _TiledAttention(torch.autograd.Function):
    """FlashAttention-2 forward and backward over (block_q x block_k) tiles, causal."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_q: int, block_k: int
    ) -> torch.Tensor:
        t, d = q.shape[-2], q.shape[-1]
        scale = 1.0 / math.sqrt(d)
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
        for qs in range(0, t, block_q):
            qe = min(qs + block_q, t)
            qi = q[..., qs:qe, :]
            m = torch.full(qi.shape[:-1], float("-inf"), dtype=torch.float32, device=q.device)
            l = torch.zeros_like(m)
            acc = torch.zeros(qi.shape, dtype=torch.float32, device=q.device)
            for ks in range(0, qe, block_k):  # causal: tiles right of the diagonal are skipped
                ke = min(ks + block_k, t)
                s = (qi @ k[..., ks:ke, :].transpose(-2, -1)).float() * scale
                if ke > qs + 1:  # tile touches the diagonal: mask keys after the query
                    s = s.masked_fill(_causal_mask(qs, qe, ks, ke, q.device), float("-inf"))
                m_new = torch.maximum(m, s.amax(dim=-1))
                p = torch.exp(s - m_new.unsqueeze(-1))
                alpha = torch.exp(m - m_new)
                l = alpha * l + p.sum(dim=-1)
                acc = alpha.unsqueeze(-1) * acc + p.to(v.dtype) @ v[..., ks:ke, :]
                m = m_new
            out[..., qs:qe, :] = (acc / l.unsqueeze(-1)).to(q.dtype)
            lse[..., qs:qe] = m + torch.log(l)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.blocks = (block_q, block_k)
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        q, k, v, out, lse = ctx.saved_tensors
        dout = dout.contiguous()  # autograd may hand an expanded (stride-0) gradient
        block_q, block_k = ctx.blocks
        t, d = q.shape[-2], q.shape[-1]
        scale = 1.0 / math.sqrt(d)
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        dk = torch.zeros(k.shape, dtype=torch.float32, device=q.device)
        dv = torch.zeros(v.shape, dtype=torch.float32, device=q.device)
        delta = (dout.float() * out.float()).sum(dim=-1)  # rowsum(dO * O)
        for qs in range(0, t, block_q):
            qe = min(qs + block_q, t)
            qi, doi = q[..., qs:qe, :], dout[..., qs:qe, :]
            lse_i, delta_i = lse[..., qs:qe].unsqueeze(-1), delta[..., qs:qe].unsqueeze(-1)
            for ks in range(0, qe, block_k):
                ke = min(ks + block_k, t)
                kj, vj = k[..., ks:ke, :], v[..., ks:ke, :]
                s = (qi @ kj.transpose(-2, -1)).float() * scale
                if ke > qs + 1:
                    s = s.masked_fill(_causal_mask(qs, qe, ks, ke, q.device), float("-inf"))
                p = torch.exp(s - lse_i)
                dv[..., ks:ke, :] += p.transpose(-2, -1) @ doi.float()
                dp = doi.float() @ vj.float().transpose(-2, -1)
                ds = p * (dp - delta_i) * scale
                dq[..., qs:qe, :] += ds @ kj.float()
                dk[..., ks:ke, :] += ds.transpose(-2, -1) @ qi.float()
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None


def _causal_mask(qs: int, qe: int, ks: int, ke: int, device: torch.device) -> torch.Tensor:
    """True where the key comes after the query (masked out)."""
    qpos = torch.arange(qs, qe, device=device).unsqueeze(-1)
    kpos = torch.arange(ks, ke, device=device).unsqueeze(0)
    return kpos > qpos


def make_tiled(block_q: int, block_k: int) -> Attention:
    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # q, k, v already carry the autocast dtype (they come out of autocast linears); keep
        # autocast from re-casting inside: the function accumulates in fp32 itself
        with torch.autocast(q.device.type, enabled=False):
            return _TiledAttention.apply(q, k, v, block_q, block_k)  # type: ignore[no-any-return]

    return attend


def resolve_backend(backend: str, device: torch.device) -> str:
    """The backend that runs: ``fa2`` is ``triton`` on a GPU and ``tiled`` on the CPU."""
    if backend == "fa2":
        return "tiled" if device.type == "cpu" else "triton"
    return backend


# (device, dtype, interpreted) -> None when the Triton kernels ran there, else why not
# (probed once each)
_TRITON_PROBED: dict[tuple[str, torch.dtype, bool], str | None] = {}


def _triton_kernels(device: torch.device) -> Any:
    """The Triton kernel module, or BackendUnavailable saying why it cannot run on ``device``."""
    try:
        # start-up cost: triton (optional, only this backend needs it) takes a second to import
        from recipes.gpt import triton_fa2
    except Exception as exc:  # ImportError, or a triton whose own imports fail
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise BackendUnavailable(f"backend triton: triton is not importable here: {first}") from None
    if device.type == "cpu" and not triton_fa2.INTERPRETED:
        raise BackendUnavailable(
            "backend triton needs a device with a Triton backend (cuda; musa through "
            "torch_musa); on cpu it runs only in Triton's interpreter: set TRITON_INTERPRET=1 "
            "before the run starts (numerics, not speed)")
    if device.type != "cpu" and triton_fa2.INTERPRETED:
        raise BackendUnavailable(f"backend triton: TRITON_INTERPRET=1 is set, so the kernel "
                                 f"would run in the interpreter, not on {device.type}; unset it")
    return triton_fa2


def probe_triton(kernels: Any, device: torch.device, dtype: torch.dtype) -> None:
    """Raise BackendUnavailable unless the smallest kernel configuration runs forward and
    backward on ``device`` in ``dtype`` (once per device and dtype: a switch between arms
    re-makes the attention function every block)."""
    key = (str(device), dtype, kernels.INTERPRETED)
    if key not in _TRITON_PROBED:
        q = torch.randn(1, 1, 16, 16, device=device, dtype=dtype, requires_grad=True)
        try:  # wherever the caller is: gradients on, no autocast
            with torch.enable_grad(), torch.autocast(device.type, enabled=False):
                kernels.FlashAttention2.apply(q, q, q, (16, 16, 4, 1)).sum().backward()
            _TRITON_PROBED[key] = None
        except Exception as exc:  # no Triton backend for this device, or not this dtype
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            _TRITON_PROBED[key] = (f"backend triton cannot run on {device.type} with {dtype}: "
                                   f"{type(exc).__name__}: {first}")
    why = _TRITON_PROBED[key]
    if why is not None:
        raise BackendUnavailable(why)


def make_triton(block_q: int, block_k: int, num_warps: int, num_stages: int,
                device: torch.device, dtype: torch.dtype) -> Attention:
    kernels = _triton_kernels(device)
    probe_triton(kernels, device, dtype)
    settings = (block_q, block_k, num_warps, num_stages)
    too_big = kernels.OutOfResources

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # as for tiled: the kernel takes q, k, v in their (autocast) dtype, accumulates in fp32
        with torch.autocast(q.device.type, enabled=False):
            try:
                return kernels.FlashAttention2.apply(q, k, v, settings)  # type: ignore[no-any-return]
            except too_big as exc:  # a tile that does not fit this device: not a kernel fault
                raise BackendUnavailable(
                    f"workload.model.attention: tile {block_q}x{block_k} with num_stages="
                    f"{num_stages} does not fit this {q.device.type} device: "
                    f"{str(exc).strip().splitlines()[0]}") from None

    return attend


def make_flash_attn(device: torch.device, dtype: torch.dtype) -> Attention:
    try:
        from flash_attn import flash_attn_func  # type: ignore[import-not-found]
    except Exception as exc:  # ImportError, or a build that fails to load its extension
        raise BackendUnavailable(f"flash_attn is not importable here: {exc}") from None
    if device.type != "cuda":
        raise BackendUnavailable(f"flash_attn needs a CUDA device, this trial runs on {device}")
    if dtype not in (torch.float16, torch.bfloat16):
        raise BackendUnavailable(f"flash_attn needs fp16 or bf16, the precision policy is {dtype}")

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # flash_attn wants [batch, seq, heads, head_dim]
        o = flash_attn_func(
            q.transpose(1, 2).to(dtype), k.transpose(1, 2).to(dtype),
            v.transpose(1, 2).to(dtype), causal=True,
        )
        return o.transpose(1, 2)  # type: ignore[no-any-return]

    return attend


def make_attention(
    backend: str,
    *,
    sdpa_kernel: str = "auto",
    block_q: int = 64,
    block_k: int = 64,
    num_warps: int = 4,
    num_stages: int = 2,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    record: bool = False,
) -> Attention:
    """``record``: an sdpa backend remembers the kernel torch chose per shape
    (:class:`RecordedSdpa`; eager mode only)."""
    device = device or torch.device("cpu")
    backend = resolve_backend(backend, device)
    if backend == "eager":
        return eager_attention
    if backend == "sdpa":
        if sdpa_kernel != "auto":
            probe_sdpa(sdpa_kernel, device, dtype)
        return RecordedSdpa(sdpa_kernel) if record else make_sdpa(sdpa_kernel)
    if backend == "tiled":
        return make_tiled(block_q, block_k)
    if backend == "triton":
        return make_triton(block_q, block_k, num_warps, num_stages, device, dtype)
    if backend == "flash_attn":
        return make_flash_attn(device, dtype)
    raise ValueError(f"unknown attention backend {backend!r}")


class _RangeState:
    """The open profiler range of one marked call, shared by its two autograd nodes."""

    __slots__ = ("handle",)

    def __init__(self) -> None:
        self.handle: Any = None


class _CloseRangeInBackward(torch.autograd.Function):
    """Identity on q, k, v; its backward runs after the op's backward and closes the range."""

    @staticmethod
    def forward(ctx: Any, state: _RangeState, q: torch.Tensor, k: torch.Tensor,  # type: ignore[override]
                v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ctx.state = state
        return q.view_as(q), k.view_as(k), v.view_as(v)

    @staticmethod
    def backward(ctx: Any, dq: torch.Tensor, dk: torch.Tensor,  # type: ignore[override]
                 dv: torch.Tensor) -> tuple[Any, ...]:
        if ctx.state.handle is not None:
            torch.ops.profiler._record_function_exit._RecordFunction(ctx.state.handle)
            ctx.state.handle = None
        return None, dq, dk, dv


class _OpenRangeInBackward(torch.autograd.Function):
    """Identity on the op's output; its backward runs first and opens the range."""

    @staticmethod
    def forward(ctx: Any, state: _RangeState, name: str,  # type: ignore[override]
                y: torch.Tensor) -> torch.Tensor:
        ctx.state, ctx.name = state, name
        return y.view_as(y)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        ctx.state.handle = torch.ops.profiler._record_function_enter_new(ctx.name, None)
        return None, None, dy


def marked(attend: Attention, name: str) -> Attention:
    """``attend`` inside a profiler range named ``name``, forward and backward, while a
    profiler records (orchestrator.core.phases.REGIONS); the plain call otherwise. The
    backward range opens when the output's gradient arrives and closes when q, k and v have
    theirs, so it spans the op's backward nodes."""
    def attend_marked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if not recording():
            return attend(q, k, v)
        with phase(name):
            if not torch.is_grad_enabled():
                return attend(q, k, v)
            state = _RangeState()
            q, k, v = _CloseRangeInBackward.apply(state, q, k, v)
            return _OpenRangeInBackward.apply(state, name, attend(q, k, v))  # type: ignore[no-any-return]

    return attend_marked
