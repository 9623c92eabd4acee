"""backend: triton, the Triton FlashAttention-2 kernels, run here in Triton's interpreter
(TRITON_INTERPRET=1, numpy on the CPU): forward, loss and every gradient against eager
attention, for several tiles, head dims 64 and 128, a length no tile divides and the causal
mask at tile edges; the correctness gate over the shipped fa2_tiling tiles; and what happens
where the kernel cannot run (one line at start for what it can never run, ``unavailable here``
for a missing triton or device). Shapes are small: the interpreter runs each tile in numpy."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from orchestrator.core.errors import BackendUnavailable, ConfigError
from recipes.gpt.attention import eager_attention, make_attention
from tests.conftest import TINY
from tests.helpers.require import need_module

# max |error| / max |reference| against fp32 eager attention on the same (rounded) inputs
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}
TILES = [(16, 16), (32, 16), (16, 32)]


def _reload_kernels() -> Any:
    """The kernel module as the environment says now: triton decides compiled or interpreted
    when a kernel is decorated, i.e. when the module is imported."""
    name = "recipes.gpt.triton_fa2"
    mod = sys.modules.get(name)
    return importlib.reload(mod) if mod is not None else importlib.import_module(name)


def _kernels_with(interpret: bool) -> Iterator[Any]:
    need_module("triton", "bash scripts/install_test_deps.sh (pip install triton)")
    with pytest.MonkeyPatch.context() as mp:
        if interpret:
            mp.setenv("TRITON_INTERPRET", "1")
        else:
            mp.delenv("TRITON_INTERPRET", raising=False)
        kernels = _reload_kernels()
        assert kernels.INTERPRETED == interpret
        yield kernels
    _reload_kernels()  # as the environment is again


@pytest.fixture
def interpreted() -> Iterator[Any]:
    """The kernels in Triton's interpreter (as TRITON_INTERPRET=1 before the run gives)."""
    yield from _kernels_with(True)


@pytest.fixture
def compiled() -> Iterator[Any]:
    """The kernels as a process without TRITON_INTERPRET gets them (on the CPU: unusable)."""
    yield from _kernels_with(False)


def _qkv(b: int, h: int, t: int, d: int, dtype: torch.dtype, seed: int = 0
         ) -> tuple[torch.Tensor, ...]:
    """q, k, v as the model hands them over: [b, h, t, d] views of one [b, t, 3 * h * d]
    projection (not contiguous), and an output gradient."""
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(b, t, 3 * h * d, generator=g).to(dtype)
    q, k, v = (x.view(b, t, h, d).transpose(1, 2) for x in qkv.split(h * d, dim=-1))
    return q, k, v, torch.randn(b, h, t, d, generator=g).to(dtype)


def _fwd_bwd(fn: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor
             ) -> dict[str, torch.Tensor]:
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    out = fn(q, k, v)
    loss = (out.float() * dout.float()).sum()  # a scalar loss whose gradient is dout
    loss.backward()
    assert q.grad is not None and k.grad is not None and v.grad is not None
    return {"out": out.float(), "loss": loss.detach(), "dq": q.grad.float(),
            "dk": k.grad.float(), "dv": v.grad.float()}


def _check(dtype: torch.dtype, block_q: int, block_k: int, t: int, d: int, b: int = 1,
           h: int = 2) -> None:
    q, k, v, dout = _qkv(b, h, t, d, dtype)
    ref = _fwd_bwd(lambda *x: eager_attention(*(y.float() for y in x)), q, k, v, dout)
    fn = make_attention("triton", block_q=block_q, block_k=block_k, dtype=dtype,
                        device=torch.device("cpu"))
    got = _fwd_bwd(fn, q, k, v, dout)
    assert got["out"].shape == (b, h, t, d)
    for name, want in ref.items():
        err = (got[name] - want).abs().max().item() / max(want.abs().max().item(), 1e-6)
        assert err <= TOL[dtype], (name, err, block_q, block_k, d)


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize(("block_q", "block_k"), TILES)
def test_triton_matches_eager_forward_loss_and_gradients(
        interpreted: Any, block_q: int, block_k: int, head_dim: int) -> None:
    """fp32, 50 tokens: no tile divides it, and every tile shape has tiles the diagonal
    crosses, tiles below it and a ragged last tile."""
    _check(torch.float32, block_q, block_k, 50, head_dim)


@pytest.mark.parametrize(("dtype", "block_q", "block_k", "t", "d"), [
    (torch.bfloat16, 32, 16, 80, 128),
    (torch.bfloat16, 16, 32, 37, 64),
    (torch.float16, 16, 16, 45, 64),
    (torch.float32, 64, 64, 20, 16),  # one tile larger than the sequence; gpt_test's head dim
])
def test_triton_matches_eager_in_half_precision(interpreted: Any, dtype: torch.dtype,
                                                block_q: int, block_k: int, t: int,
                                                d: int) -> None:
    _check(dtype, block_q, block_k, t, d, b=2, h=1)


def test_triton_never_sees_future_tokens_at_tile_edges(interpreted: Any) -> None:
    """A change at key 32, the first row of a 16-row tile: rows 0-31 (the tiles before it,
    and the last row of the tile before) keep their outputs exactly, rows from 32 on move;
    the gradient of key 16 (a tile's first row) comes only from queries 16 on."""
    q, k, v, dout = _qkv(1, 1, 48, 64, torch.float32)
    fn = make_attention("triton", block_q=16, block_k=16, device=torch.device("cpu"))
    base = fn(q, k, v)
    v2 = v.clone()
    v2[..., 32, :] += 10.0
    moved = fn(q, k, v2)
    assert torch.equal(base[..., :32, :], moved[..., :32, :])
    assert (moved[..., 32:, :] - base[..., 32:, :]).abs().amax(dim=-1).min() > 0
    kk = k.detach().clone().requires_grad_(True)
    out = fn(q, kk, v)
    (out[..., :16, :] * dout[..., :16, :]).sum().backward()  # queries 0-15 only
    assert kk.grad is not None
    assert kk.grad[..., 16:, :].abs().max() == 0 and kk.grad[..., :16, :].abs().max() > 0


def test_triton_output_and_gradients_are_laid_out_for_the_model(interpreted: Any) -> None:
    """The output is [b, h, t, d] stored as [b, t, h, d], so the model's transpose + reshape
    is a view; gradients go back in the same layout, and contiguous inputs give the same
    numbers as the strided ones the model passes."""
    q, k, v, dout = _qkv(2, 2, 24, 32, torch.float32)
    fn = make_attention("triton", block_q=16, block_k=16, device=torch.device("cpu"))
    strided = _fwd_bwd(fn, q, k, v, dout)
    dense = _fwd_bwd(fn, q.contiguous(), k.contiguous(), v.contiguous(), dout)
    for name in strided:
        assert torch.equal(strided[name], dense[name]), name
    out = fn(q, k, v)
    assert out.transpose(1, 2).is_contiguous()


def test_the_gate_passes_every_shipped_fa2_tiling_tile_with_triton(
        interpreted: Any, compose: Any, run_dir: Path) -> None:
    """The correctness gate over +sweep=fa2_tiling's own tiles (32x32 baseline, 64x64,
    128x64, 128x128) with the Triton kernel instead of the CPU's tiled reference: outputs,
    loss, gradients and the update within the gate's fp32 tolerance, round trip included."""
    from orchestrator.campaign.gate import run_gate
    from orchestrator.launch.inline import InlineLauncher
    from orchestrator.spec.sweep import resolve_arms, selected_buckets

    cfg = compose([*TINY, "+sweep=fa2_tiling", "sweep.buckets=[s64]",
                   "sweep.fixed={workload.model.attention.backend: triton}"])
    doc = run_gate(cfg, run_dir, resolve_arms(cfg), selected_buckets(cfg), InlineLauncher())
    gates = {g["label"]: g for g in doc["arms"].values()}
    assert {k: g["status"] for k, g in gates.items()} == {
        "64x64": "pass", "128x64": "pass", "128x128": "pass"}, [g["reasons"] for g in
                                                               gates.values()]
    worst = max(t["rel_l2"] for g in gates.values() for t in g["buckets"]["s64"]["tensors"])
    assert 0 < worst <= doc["tolerance"]["rel_l2"]  # the tiles really move the numbers


def test_a_triton_arm_runs_under_the_interpreter_and_says_what_it_ran(
        interpreted: Any, compose: Any, run_dir: Path) -> None:
    """+sweep=fa2 with a triton arm, pairing by steps, on the CPU under the interpreter: the
    arm is measured, and its trials name the kernel and its launch settings."""
    from orchestrator.campaign.run import run_campaign

    cfg = compose([*TINY, "+sweep=fa2", "sweep.buckets=[s32]", "protocol.pairing=steps",
                   "protocol.paired_min_s=0", "protocol.correctness.mode=off",
                   "protocol.interference_retries=0",  # a busy machine: no re-runs
                   "sweep.values=[{backend:triton,sdpa_kernel:auto}]", "sweep.labels=[triton]",
                   "workload.model.attention.num_warps=8"])
    result = run_campaign(cfg, run_dir)
    recs = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")]
    triton_recs = [r for r in recs if r["arm_label"] == "triton"]
    assert triton_recs and all(r["status"] == "ok" for r in triton_recs)
    assert triton_recs[0]["executes"] == {"attention": ["2x32:triton-64x64-w8s2"]}
    assert result.verdicts[0].verdict != "invalid"
    md = (run_dir / "decisions.md").read_text()
    assert "- ran (each arm's trials, as the recipe describes its step): `sdpa-math`: " in md
    assert "`triton`: 2x32:triton-64x64-w8s2" in md


# ------------------------------------------------------------------ where it cannot run


def test_without_the_interpreter_a_cpu_triton_arm_is_unavailable_here(
        compiled: Any, compose: Any, run_dir: Path) -> None:
    """On the CPU without TRITON_INTERPRET=1 (what a CPU run is): the arm is recorded
    ``unavailable`` with the reason in every round, the baseline it shares a paired process
    with is still measured, and the verdict is invalid, leading with 'unavailable here'."""
    from orchestrator.campaign.run import run_campaign

    cfg = compose([*TINY, "+sweep=fa2", "sweep.buckets=[s32]", "protocol.pairing=steps",
                   "protocol.paired_min_s=0",
                   "sweep.values=[{backend:triton,sdpa_kernel:auto}]", "sweep.labels=[triton]"])
    result = run_campaign(cfg, run_dir)
    recs = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")]
    by = {(r["arm_label"], r["round"]): r for r in recs}
    assert {by[("triton", r)]["status"] for r in (0, 1)} == {"unavailable"}
    assert "set TRITON_INTERPRET=1" in by[("triton", 0)]["error"]
    assert {by[("sdpa-math", r)]["status"] for r in (0, 1)} == {"ok"}
    (v,) = result.verdicts
    assert v.verdict == "invalid" and v.reasons[0].startswith("s32: unavailable here: backend "
                                                              "triton needs a device")


def test_a_missing_triton_is_unavailable_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    import recipes.gpt

    monkeypatch.setitem(sys.modules, "triton", None)  # import triton raises ImportError
    monkeypatch.delitem(sys.modules, "recipes.gpt.triton_fa2", raising=False)
    monkeypatch.delattr(recipes.gpt, "triton_fa2", raising=False)
    with pytest.raises(BackendUnavailable, match="backend triton: triton is not importable here"):
        make_attention("triton", device=torch.device("cpu"))


@pytest.mark.parametrize(("overrides", "match"), [
    (["workload.model.attention.block_q=48"],
     r"workload\.model\.attention\.block_q: backend triton tiles are powers of two from 16 to "
     r"256, got 48; e\.g\. workload\.model\.attention\.block_q=64"),
    (["workload.model.attention.block_k=8"], r"attention\.block_k: backend triton tiles"),
    (["workload.model.n_head=4"],  # d_model 32 / 4 = 8
     r"workload\.model\.n_head: backend triton needs a head dim \(d_model / n_head\) of 16, 32, "
     r"64, 128, got 8 \(d_model=32, n_head=4\); change n_head, or use backend sdpa or tiled"),
    (["workload.model.attention.num_warps=3"],
     r"workload\.model\.attention\.num_warps: 3 is not a valid choice; choose one of: 1, 2, 4, "
     r"8, 16"),
    (["workload.model.attention.num_stages=9"],
     r"workload\.model\.attention\.num_stages: must be from 1 to 8, got 9"),
])
def test_what_the_kernel_can_never_run_is_refused_at_start(compose: Any, overrides: list[str],
                                                           match: str) -> None:
    from orchestrator.campaign.validate import validate, validate_workload

    for backend in ("triton", "fa2"):  # fa2 runs the kernel on a GPU: refused on any device
        with pytest.raises(ConfigError, match=match.replace("triton", backend)):
            validate_workload(compose(["workload=gpt_test", "+sweep=compile",
                                       f"workload.model.attention.backend={backend}",
                                       *overrides]).workload)
    # the sweep's arms are checked before any work too
    with pytest.raises(ConfigError, match=r"workload\.model\.attention\.block_q: backend fa2"):
        validate(compose(["workload=gpt_test", "+sweep=fa2_tiling",
                          "sweep.values=[{block_q:24,block_k:32}]", "sweep.labels=null"]))
