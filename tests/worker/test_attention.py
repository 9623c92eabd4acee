"""All attention backends compute the same function as the eager reference."""

from __future__ import annotations

import pytest
import torch

from orchestrator.core.errors import BackendUnavailable
from recipes.gpt.attention import eager_attention, make_attention

TOL = {torch.float32: 2e-5, torch.bfloat16: 3e-2}


def _qkv(t: int, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(2, 3, t, 16, generator=g).to(dtype).requires_grad_(True) for _ in range(3)
    )


def _fwd_bwd(fn, q, k, v):  # type: ignore[no-untyped-def]
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    out = fn(q, k, v)
    g = torch.Generator().manual_seed(1)
    dout = torch.randn(out.shape, generator=g).to(out.dtype)
    out.backward(dout)
    return out.float(), q.grad.float(), k.grad.float(), v.grad.float()


CASES = [
    ("sdpa", {"sdpa_kernel": "auto"}),
    ("sdpa", {"sdpa_kernel": "math"}),
    ("sdpa", {"sdpa_kernel": "flash"}),
    ("tiled", {"block_q": 16, "block_k": 16}),
    ("tiled", {"block_q": 32, "block_k": 8}),
    ("tiled", {"block_q": 7, "block_k": 24}),  # tiles that do not divide the sequence
    ("tiled", {"block_q": 128, "block_k": 128}),  # one tile larger than the sequence
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("backend", "kw"), CASES)
def test_backends_agree_with_eager(backend: str, kw: dict, dtype: torch.dtype) -> None:
    q, k, v = _qkv(50, dtype)
    fn = make_attention(backend, dtype=dtype, **kw)
    ref = _fwd_bwd(eager_attention, q, k, v)
    got = _fwd_bwd(fn, q, k, v)
    for name, a, b in zip(("out", "dq", "dk", "dv"), ref, got):
        err = (a - b).abs().max().item()
        assert err <= TOL[dtype] * max(1.0, a.abs().max().item()), (name, err)


def test_tiled_never_sees_future_tokens() -> None:
    q, k, v = _qkv(40, torch.float32)
    fn = make_attention("tiled", block_q=16, block_k=16)
    base = fn(q, k, v)
    v2 = v.detach().clone()
    v2[..., 30:, :] += 100.0  # change only the future of positions < 30
    changed = fn(q, k, v2)
    assert torch.allclose(base[..., :30, :], changed[..., :30, :], atol=1e-6)
    assert not torch.allclose(base[..., 30:, :], changed[..., 30:, :])


def test_unavailable_backends_say_why() -> None:
    with pytest.raises(BackendUnavailable, match="flash_attn"):
        make_attention("flash_attn", device=torch.device("cpu"), dtype=torch.bfloat16)
    with pytest.raises(BackendUnavailable, match="sdpa kernel 'efficient' cannot run on cpu"):
        make_attention("sdpa", sdpa_kernel="efficient", device=torch.device("cpu"))


def test_recorded_sdpa_says_which_kernel_torch_picked_per_shape() -> None:
    """auto on CPU: torch's own selector picks flash for causal fp32 and bf16 attention (this
    torch's CPU flash kernel takes both); forcing math is recorded as math. The output is the
    unrecorded op's, bit for bit."""
    from recipes.gpt.attention import RecordedSdpa, make_sdpa, sdpa_choice

    q, k, v = _qkv(32, torch.float32)
    assert sdpa_choice(q, k, v) == "flash"
    auto = make_attention("sdpa", sdpa_kernel="auto", record=True)
    assert isinstance(auto, RecordedSdpa) and auto.describe() is None  # nothing called yet
    assert torch.equal(auto(q, k, v), make_sdpa("auto")(q, k, v))
    auto(*_qkv(32, torch.bfloat16))
    auto(*_qkv(32, torch.float32, seed=3))  # a shape seen before: no second entry
    assert auto.describe() == ["2x3x32x16/bfloat16:sdpa-flash", "2x3x32x16/float32:sdpa-flash"]
    with torch.no_grad():  # inference is selected (and described) apart
        auto(*_qkv(32, torch.float32))
    assert "2x3x32x16/float32/no-grad:sdpa-flash" in auto.describe()
    math = make_attention("sdpa", sdpa_kernel="math", record=True)
    math(q, k, v)
    assert math.describe() == ["2x3x32x16/float32:sdpa-math"]
    flash = make_attention("sdpa", sdpa_kernel="flash", record=True)
    flash(q, k, v)
    assert flash.describe() == ["2x3x32x16/float32:sdpa-flash"]  # auto's own step
    # unrecorded (the default, and under torch.compile): the plain function
    assert not isinstance(make_attention("sdpa", sdpa_kernel="auto"), RecordedSdpa)


def test_a_torch_that_does_not_say_leaves_the_kernel_unknown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from recipes.gpt.attention import RecordedSdpa, sdpa_choice

    q, k, v = _qkv(16, torch.float32)
    monkeypatch.delattr(torch, "_fused_sdp_choice")
    assert sdpa_choice(q, k, v) is None
    auto = RecordedSdpa("auto")
    auto(q, k, v)
    assert auto.describe() is None
